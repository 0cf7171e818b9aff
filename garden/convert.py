"""Import pretrained weights into garden models: Hugging Face, original TF1, Model Garden,
AllenNLP and keras-hub.

    python -m garden.convert --source=huggingface --model=bert --input=HF_DIR --output=OUT
    python -m garden.convert --source=huggingface --model=bert \
        --input=google-bert/bert-base-uncased [--revision=main] [--cache_dir=DIR] --output=OUT
    python -m garden.convert --source=keras_hub --model=bert --input=PRESET_DIR --output=OUT
    python -m garden.convert --source=tf1 --model=bert --input=bert_model.ckpt \
        --config=bert_config.json --output=OUT
    python -m garden.convert --source=model_garden --model=bert --input=CKPT_PREFIX \
        --config=encoder_config.json --output=OUT

Checkpoints as users hold them. A Hugging Face --input that is not a path but a model id
("org/name") is looked up, offline, in the Hugging Face hub cache (--cache_dir, else
$HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub), where `hf download ID`,
transformers' from_pretrained or huggingface_hub.snapshot_download left it:
models--{org}--{name}/refs/{revision} names the commit whose snapshots/<commit>/ is read as a
checkpoint directory; --revision (default main) is a branch, a tag or a commit hash. Nothing
is downloaded: a model the cache lacks is one error line naming the folder and the command
that brings it. A keras-hub preset directory (`save_to_preset`'s config.json, model.weights.h5,
tokenizer.json and assets/tokenizer/) is --source=keras_hub (BERT and GPT-2; a family without a
keras_hub converter is refused by name): the weights are read by name with h5py; BERT's
vocabulary.txt is copied as vocab.txt (tokenizer.json's lowercase gives the casing), GPT-2's
vocabulary.json + merges.txt as vocab.json + merges.txt.

GPT-2's original release (openai/gpt-2: models/<size>/model.ckpt + hparams.json) is the tf1
source: `--source=tf1 --model=gpt2 --input=models/124M/model.ckpt --config=models/124M/hparams.json`
(garden/models/gpt2/conversion.py maps OpenAI's model/h0/attn/c_attn/w ... names).

OUT receives backbone.keras, pretrainer.keras when the checkpoint has pretraining heads (for
the generative families, GPT, GPT-2, T5 and BART: the GenerativeLM of
garden/models/generative.py, which garden.generate and the LM tasks load), and
convert_info.json (source, family, input, config, parameter counts).

OUT is also a complete starting point for fine-tuning (garden/pretrained.py): every fine-tuning
config takes `--gin_param=INIT_CHECKPOINT='OUT'`. For that OUT holds
    checkpoints/ckpt-0   tf.train.Checkpoint(backbone=...) (ELECTRA: also `discriminator`, the
                         same tower; GPT/GPT-2/T5/BART: also `model`, the GenerativeLM)
    the tokenizer        copied from the source: vocab.txt (BERT, ELECTRA, DistilBERT), the
                         SentencePiece model (ALBERT, XLNet, T5), vocab.json + merges.txt
                         (RoBERTa, GPT-2 (from the TF1 release's encoder.json + vocab.bpe), BART);
                         --vocab names it when it is not next to the checkpoint
and convert_info.json records the architecture (backbone class + get_config()), the checkpoint
and the tokenizer (file, kind, text layout, casing). Casing: Hugging Face's tokenizer_config.json
do_lower_case; TF1 and Model Garden WordPiece checkpoints: --lower_case / --no-lower_case, by
default inferred from an "uncased_" / "cased_" directory name (as google-research/bert's
validate_case_matches_checkpoint does), else an error asking for the flag. The Python API returns the
same models: `load_huggingface` (a directory or a cached model id), `load_tf1`,
`load_model_garden`, `load_keras_hub`, each
`{"backbone": keras.Model, "pretrainer": keras.Model or None}`.

Every family's FamilySpec (garden/models/<family>/__init__.py) names its converters per source
(`garden/models/<family>/conversion.py::from_huggingface(config, weights)`, `from_tf1` where
original TF1 checkpoints exist), the Hugging Face model types and tokenizer files it accepts,
its text layout, default casing and prompt framing: this module holds no family table.
torch, transformers and tf-models-official are optional: torch is imported only to read
pytorch_model.bin, official only to read a Model Garden checkpoint
(garden/models/bert/model_garden.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Dict, Optional, Tuple

from garden import models, pretrained
from garden.models.checkpoint_files import (cached_huggingface_dir, find_tokenizer,
                                           huggingface_directory, infer_lower_case,
                                           is_model_id, read_hdf5, read_huggingface_config,
                                           read_huggingface_dir, read_json_object,
                                           read_keras_hub_preset)
from garden.models.family import SOURCES

GENERATE_DIR = "generate"


def convertible() -> list:
    """The names of the families garden.convert converts (a FamilySpec with converters)."""
    return sorted(s.name for s in models.families() if s.converters)


# --- Hugging Face -----------------------------------------------------------------------------

def resolve_input(source: str, input_path: str, cache_dir: Optional[str] = None,
                  revision: Optional[str] = None) -> Tuple[str, Optional[Dict]]:
    """(the checkpoint's path, the hub record or None): a Hugging Face model id (not an
    existing path) becomes its snapshot directory in the hub cache (module docstring) and the
    record {"model_id", "revision", "commit"}; any other --input is its own path. --cache_dir
    and --revision belong to a model id: with anything else they are an error."""
    if source == "huggingface" and not os.path.exists(input_path) and is_model_id(input_path):
        directory = cached_huggingface_dir(input_path, cache_dir, revision)
        return directory, {"model_id": input_path, "revision": revision or "main",
                           "commit": os.path.basename(directory)}
    given = [f for f, v in (("--cache_dir", cache_dir), ("--revision", revision)) if v is not None]
    if given:
        what = "a path" if source == "huggingface" else f"a --source={source} checkpoint"
        raise ValueError(f"{' and '.join(given)} apply to a Hugging Face model id in the hub "
                         f"cache, but --input={input_path} is {what}: drop them")
    return input_path, None


def load_huggingface(path_or_dir: str, family: str, cache_dir: Optional[str] = None,
                     revision: Optional[str] = None) -> Dict:
    """Garden models from a local Hugging Face checkpoint directory, or from a model id in the
    hub cache (resolve_input; nothing is downloaded).

    Example:
        models = load_huggingface("/ckpt/bert-base-uncased", "bert")
        models = load_huggingface("google-bert/bert-base-uncased", "bert")  # from the cache
        models["backbone"], models["pretrainer"]  # pretrainer is None without heads
    """
    path_or_dir = resolve_input("huggingface", path_or_dir, cache_dir, revision)[0]
    spec = models.spec(family)
    config, weights = read_huggingface_dir(path_or_dir)
    model_type = config.get("model_type")
    if model_type is not None and model_type not in spec.hf_model_types:
        raise ValueError(f"{path_or_dir} holds a {model_type!r} checkpoint (config.json "
                         f"model_type), not {family!r}; pass the matching --model")
    with _config_keys(os.path.join(huggingface_directory(path_or_dir), "config.json"), family, config):
        return spec.converter("huggingface")(config, weights)


@contextlib.contextmanager
def _config_keys(config_path: str, family: str, config: Dict):
    """A converter's KeyError on a setting its config lacks, as a ValueError naming the file
    (a config of another kind); a missing weight (its name holds "." or "/") stays a KeyError."""
    try:
        yield
    except KeyError as e:
        key = e.args[0] if e.args else None
        if not isinstance(key, str) or key in config or "." in key or "/" in key:
            raise
        raise ValueError(f"{config_path} has no {key!r} (is it a --model={family} "
                         f"config?)") from None


# --- keras-hub presets ------------------------------------------------------------------------

def load_keras_hub(preset_dir: str, family: str) -> Dict:
    """Garden models from a keras-hub preset directory (`Backbone.save_to_preset`'s, or a
    downloaded preset's): {"backbone": ..., "pretrainer": None}.

    Example:
        models = load_keras_hub("presets/bert_tiny_en_uncased", "bert")
    """
    convert = models.spec(family).converter("keras_hub")  # refuses a family without one
    config, weights = read_keras_hub_preset(preset_dir)
    config_path = os.path.join(preset_dir, "config.json")
    with _config_keys(config_path, family, config["config"]):
        return convert(config, weights, where=config_path)


# --- original TF1 checkpoints -----------------------------------------------------------------

def _read_json(config) -> Dict:
    if isinstance(config, (str, os.PathLike)):
        return read_json_object(os.fspath(config))
    return dict(config)


def load_tf1(checkpoint_prefix: str, family: str, config) -> Dict:
    """Garden models from an original name-based TF1 checkpoint (google-research/bert style).

    Args:
        checkpoint_prefix: e.g. ".../uncased_L-12_H-768_A-12/bert_model.ckpt".
        family: "bert", "albert" or "electra" (the families with original Google TF1 releases).
        config: the release's config JSON dict (or its path): bert_config.json,
            albert_config.json, or ELECTRA's discriminator config.
    """
    import tensorflow as tf

    convert = models.spec(family).converter("tf1")
    reader = tf.train.load_checkpoint(checkpoint_prefix)
    weights = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    settings = _read_json(config)
    where = os.fspath(config) if isinstance(config, (str, os.PathLike)) else "the config"
    with _config_keys(where, family, settings):
        return convert(settings, weights)


def load_allennlp(weights_path: str, family: str, options) -> Dict:
    """Garden models from an AllenNLP release: the HDF5 weight file (its datasets read by name)
    and the options JSON (ELMo), a dict or its path (which the converter's errors then name)."""
    if not os.path.exists(weights_path):
        raise FileNotFoundError(f"--input={weights_path} does not exist: give the release's "
                                f"HDF5 weight file")
    try:
        arrays = read_hdf5(weights_path)
    except ValueError as e:
        raise ValueError(f"--input={e}: give the release's HDF5 weight file") from None
    options_path = os.fspath(options) if isinstance(options, (str, os.PathLike)) else "<options>"
    return models.spec(family).converter("allennlp")(_read_json(options), arrays, weights_path,
                                                     options_path=options_path)


# --- tf-models-official (Model Garden) encoders -----------------------------------------------

def load_model_garden(checkpoint_or_encoder, family: str = "bert", config=None,
                      checkpoint_key: str = "encoder",
                      allow_approximate_gelu: bool = False) -> Dict:
    """Garden backbone from a tf-models-official `BertEncoder` or a checkpoint of one.

    Args:
        checkpoint_or_encoder: a built `official.nlp.modeling.networks.BertEncoder` (tf_keras),
            or the prefix of an object-based checkpoint holding one under `checkpoint_key`
            (as `tf.train.Checkpoint(encoder=encoder).save(prefix)` writes, which is how Model
            Garden publishes its BERT encoders).
        family: "bert".
        config: for a checkpoint, the encoder's config (dict or JSON path): either
            `BertEncoder.get_config()` or a Model Garden `BertEncoderConfig` dict.
        checkpoint_key: the checkpoint's attribute that holds the encoder.
        allow_approximate_gelu: accept an encoder with the tanh-approximate GELU (Model
            Garden's default) although the garden computes the exact one.

    Returns:
        {"backbone": BertBackbone, "pretrainer": None}.
    """
    if isinstance(checkpoint_or_encoder, (str, os.PathLike)) and config is not None:
        config = _read_json(config)
    return models.spec(family).converter("model_garden")(
        checkpoint_or_encoder, config, checkpoint_key=checkpoint_key,
        allow_approximate_gelu=allow_approximate_gelu)


# --- command line -----------------------------------------------------------------------------

# Packages that only some sources read with, each in the bench extra (setup.cfg): the module a
# reader imports -> the package to install.
OPTIONAL_READERS = {"torch": "torch (pytorch_model.bin weights)",
                    "official": "tf-models-official (Model Garden checkpoints)",
                    "tf_keras": "tf-models-official's tf_keras (Model Garden checkpoints)"}

# Sources whose --config is required: (loader, what --config names, for the error).
RELEASE_CONFIGS = {
    "tf1": (load_tf1, "<the release's config JSON> (bert_config.json / albert_config.json / "
                      "ELECTRA's config)"),
    "allennlp": (load_allennlp, "<the release's options JSON> (--input is its HDF5 weight "
                                "file)"),
}


def _read_config(path: str) -> Dict:
    """--config's JSON object; its errors name the flag and the file."""
    try:
        return read_json_object(path)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"--config={e}") from None
    except ValueError as e:
        raise ValueError(f"--config={e}") from None


def convert(source: str, family: str, input_path: str, config_path: Optional[str] = None,
            allow_approximate_gelu: bool = False) -> Tuple[Dict, Dict]:
    """(models, config used) for one source; the CLI's work without the writing."""
    if source == "huggingface":
        if config_path is not None:
            raise ValueError("--source=huggingface reads config.json from --input; drop --config")
        return load_huggingface(input_path, family), read_huggingface_config(input_path)
    if source in RELEASE_CONFIGS:  # an original release: its weights and its config JSON
        loader, needed = RELEASE_CONFIGS[source]
        if config_path is None:
            raise ValueError(f"--source={source} needs --config={needed}")
        config = _read_config(config_path)
        return loader(input_path, family, config_path), config  # the loader's errors name it
    if source == "keras_hub":
        if config_path is not None:
            raise ValueError("--source=keras_hub reads config.json from --input; drop --config")
        return load_keras_hub(input_path, family), read_json_object(
            os.path.join(input_path, "config.json"))
    if source == "model_garden":
        config = None if config_path is None else _read_config(config_path)
        return load_model_garden(input_path, family, config,
                                 allow_approximate_gelu=allow_approximate_gelu), config
    raise ValueError(f"unknown --source {source!r}; choose one of {SOURCES}")


def _write_generate_dir(args, converted: Dict, config: Dict) -> Optional[str]:
    """OUT/generate/, a garden.generate model directory (the LM, its vocabulary, and the ids
    of the family's prompt framing, garden/models/framing.py, from config.json), when the
    family generates and its checkpoint directory has the tokenizer garden reads; None, with
    a note, when it has none."""
    spec = models.spec(args.model)
    if args.source != "huggingface" or not spec.generates_from_huggingface:
        return None
    from text import vocab_files
    from garden.generate_dir import save_model_dir
    from garden.models import framing

    vocab = os.path.join(huggingface_directory(args.input), spec.hf_tokenizer_files[0])
    needed = vocab_files.bpe_files(vocab) if spec.tokenizer == "bpe" else (vocab,)
    missing = [f for f in needed if not os.path.exists(f)]
    if missing:
        print(f"  note: no {', '.join(os.path.basename(f) for f in missing)} in {args.input}: "
              f"no {GENERATE_DIR}/ model directory written (garden.generate needs the "
              f"tokenizer)")
        return None
    ids = framing.frame(spec.framing, framing.config_roles(config), f"{args.input} config.json")
    return save_model_dir(os.path.join(args.output, GENERATE_DIR), converted["pretrainer"],
                          tokenizer_kind=spec.tokenizer, vocab=vocab, **ids.ids())


def _copy_tokenizer(args, lower_case_flag: Optional[bool]) -> Dict:
    """Copies the source's tokenizer into OUT; its convert_info.json record."""
    found = find_tokenizer(args.source, args.model, args.input, args.vocab)
    lower_case = infer_lower_case(args.source, args.model, args.input,
                                  found[0] if found else None, lower_case_flag)
    if found is None:
        print(f"  note: no tokenizer files found next to {args.input} (pass --vocab=...): "
              f"fine-tuning from {args.output} needs VOCAB bound")
        return {"vocab": None, "lower_case": lower_case}
    kind, files = found
    return pretrained.copy_tokenizer(args.output, args.model, kind, files, lower_case)


def build_parser():
    import argparse

    from text.flags import add_bool

    parser = argparse.ArgumentParser(
        prog="python -m garden.convert", allow_abbrev=False,
        description="Convert a pretrained checkpoint into garden Keras models.")
    parser.add_argument("--source", required=True, choices=SOURCES)
    # No choices= here: listing the families imports them (and so Keras and TensorFlow), which
    # --help must not wait for; main() checks the name against convertible().
    parser.add_argument("--model", required=True,
                        help="model family of the checkpoint (a family with converters: an "
                             "unknown name is answered with the list)")
    parser.add_argument("--input", required=True,
                        help="huggingface: checkpoint directory, or a model id (org/name) in "
                             "the Hugging Face hub cache; keras_hub: preset directory; tf1 / "
                             "model_garden: checkpoint prefix; allennlp: the HDF5 weight file")
    parser.add_argument("--cache_dir", default=None,
                        help="huggingface with a model id: the hub cache to look in (default: "
                             "$HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub)")
    parser.add_argument("--revision", default=None,
                        help="huggingface with a model id: the branch, tag or commit hash of "
                             "the cached snapshot (default: main)")
    parser.add_argument("--output", required=True, help="directory to write the models to")
    parser.add_argument("--config", default=None,
                        help="tf1: the release's config JSON (bert_config.json, albert_config.json, "
                        "ELECTRA's); model_garden: encoder config JSON; allennlp: the options JSON")
    parser.add_argument("--vocab", default=None,
                        help="the tokenizer file to copy into --output (vocab.txt, *.model, "
                             "vocab.json with merges.txt beside it) when it is not next to the "
                             "checkpoint")
    add_bool(parser, "lower_case", None,
             "--lower_case: the model is uncased (its text is lower-cased); --no-lower_case: "
             "cased (default: inferred, see the module docstring)", retired=["do_lower_case"])
    add_bool(parser, "allow_approximate_gelu", False,
             "model_garden: accept the tanh-approximate GELU of Model Garden's default encoder "
             "(the garden uses the exact GELU)")
    return parser


def _write_output(args, converted: Dict, config: Dict) -> Dict:
    """Writes OUT (module docstring); returns its convert_info.json record."""
    os.makedirs(args.output, exist_ok=True)
    written = {}
    for key in ("backbone", "pretrainer"):
        model = converted.get(key)
        if model is None:
            continue
        path = os.path.join(args.output, f"{key}.keras")
        model.save(path)
        written[key] = {"path": path, "parameters": int(model.count_params())}
    generate_dir = _write_generate_dir(args, converted, config)
    # A generative family's pretrainer is its GenerativeLM (checkpointed as `model` too).
    lm = converted.get("lm") or (converted.get("pretrainer") if models.spec(args.model).lm
                                 else None)
    tokenizer = _copy_tokenizer(args, args.lower_case)
    checkpoint = pretrained.write_checkpoint(args.output, args.model, converted["backbone"], lm)
    info = {"source": args.source, "family": args.model, "input": os.path.abspath(args.input),
            "config": config, "models": written, "generate_dir": generate_dir,
            "architecture": pretrained.architecture_of(args.model, converted["backbone"], lm),
            "checkpoint": checkpoint, "tokenizer": tokenizer, "hub": args.hub}
    with open(os.path.join(args.output, "convert_info.json"), "w") as f:
        json.dump(info, f, indent=2, sort_keys=True)
    return info


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.model not in convertible():
        parser.error(f"argument --model: invalid choice: {args.model!r} (choose from "
                     f"{', '.join(map(repr, convertible()))})")
    generate_dir = os.path.join(args.output, GENERATE_DIR)
    if args.source == "huggingface" and models.spec(args.model).generates_from_huggingface \
            and os.path.exists(generate_dir):
        print(f"error: {generate_dir} exists: give a new --output (the generate/ model "
              f"directory is never overwritten)", file=sys.stderr)
        return 2
    try:
        models.spec(args.model).converter(args.source)  # a source it lacks: refused by name
        args.model_input = args.input
        args.input, args.hub = resolve_input(args.source, args.input, args.cache_dir,
                                             args.revision)
        found = find_tokenizer(args.source, args.model, args.input, args.vocab)
        infer_lower_case(args.source, args.model, args.input, found[0] if found else None,
                         args.lower_case)  # a missing casing flag is reported before the work
        converted, config = convert(args.source, args.model, args.input, args.config,
                                    args.allow_approximate_gelu)
    except (FileNotFoundError, ValueError, NotImplementedError) as e:
        # a wrong path, a checkpoint that does not fit, a source the family has no converter for
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        # torch reads pytorch_model.bin, tf-models-official (and its tf_keras) a Model Garden
        # checkpoint: packages of the bench extra, absent from the runtime install.
        package = OPTIONAL_READERS.get((e.name or "").split(".")[0])
        if package is None:
            raise
        print(f"error: --source={args.source} reading {args.input} needs {package}, which this "
              f"install lacks (module {e.name!r}): pip install -c constraints.txt '.[bench]'",
              file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - TensorFlow's reader: not a checkpoint (prefix)
        import tensorflow as tf

        if not isinstance(e, tf.errors.OpError):
            raise
        print(f"error: --input={args.input} cannot be read as a --source={args.source} checkpoint: "
              f"{type(e).__name__}: {e.message.splitlines()[0]}", file=sys.stderr)
        return 2
    info = _write_output(args, converted, config)
    hub = info["hub"]
    print(f"converted {args.source} {args.model} checkpoint {args.model_input}"
          + (f" (revision {hub['revision']}, commit {hub['commit']}: {args.input})" if hub else ""))
    for key, entry in info["models"].items():
        print(f"  {key}: {entry['parameters']:,} parameters -> {entry['path']}")
    if info["generate_dir"]:
        print(f"  generate: {info['generate_dir']} (python -m garden.generate --model_dir=...)")
    print(f"  checkpoint: {os.path.join(args.output, info['checkpoint'])} (fine-tune with "
          f"--gin_param=\"INIT_CHECKPOINT='{args.output}'\")")
    tokenizer = info["tokenizer"]
    if tokenizer.get("vocab"):
        print(f"  tokenizer: {tokenizer['tokenizer']} {', '.join(tokenizer['files'])}, "
              f"lower_case={tokenizer['lower_case']}")
    print(f"  info: {os.path.join(args.output, 'convert_info.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
