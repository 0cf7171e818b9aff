"""Import pretrained weights into garden models: Hugging Face, original TF1 and Model Garden.

    python -m garden.convert --source=huggingface --model=bert --input=HF_DIR --output=OUT
    python -m garden.convert --source=tf1 --model=bert --input=bert_model.ckpt \
        --config=bert_config.json --output=OUT
    python -m garden.convert --source=model_garden --model=bert --input=CKPT_PREFIX \
        --config=encoder_config.json --output=OUT

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
do_lower_case; TF1 and Model Garden WordPiece checkpoints: --lower_case / --nolower_case, by
default inferred from an "uncased_" / "cased_" directory name (as google-research/bert's
validate_case_matches_checkpoint does), else an error asking for the flag. The Python API returns the
same models: `load_huggingface`, `load_tf1`, `load_model_garden`, each
`{"backbone": keras.Model, "pretrainer": keras.Model or None}`.

Every family implements `garden/models/<family>/conversion.py::from_huggingface(config,
weights)` (and `from_tf1` where original TF1 checkpoints exist); the table below is the only
dispatch. torch, transformers and tf-models-official are optional: torch is imported only
to read pytorch_model.bin, official only to read a Model Garden checkpoint.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import sys
from typing import Dict, Optional, Tuple

import numpy as np

FAMILIES = {
    "bert": "garden.models.bert.conversion",
    "roberta": "garden.models.roberta.conversion",
    "albert": "garden.models.albert.conversion",
    "electra": "garden.models.electra.conversion",
    "distilbert": "garden.models.distilbert.conversion",
    "gpt": "garden.models.gpt.conversion",
    "bart": "garden.models.bart.conversion",
    "gpt2": "garden.models.gpt2.conversion",
    "xlnet": "garden.models.xlnet.conversion",
    "t5": "garden.models.t5.conversion",
}

# config.json "model_type" values each family accepts: a BERT checkpoint passed as
# --model=roberta fails here with a clear message instead of deep inside a mapping table.
HF_MODEL_TYPES = {
    "bert": ("bert",),
    "roberta": ("roberta",),
    "albert": ("albert",),
    "electra": ("electra",),
    "distilbert": ("distilbert",),
    "gpt": ("openai-gpt",),
    "bart": ("bart",),
    "gpt2": ("gpt2",),
    "xlnet": ("xlnet",),
    "t5": ("t5",),
}

SOURCES = ("huggingface", "tf1", "model_garden")

# Generative families whose Hugging Face checkpoint directories carry a tokenizer garden reads:
# family -> (data_pipelines.tokenizers kind, the vocabulary file in the directory). With it,
# garden.convert also writes OUT/generate/, a garden.generate model directory (the LM, its
# vocabulary and ids), which garden.generate, garden.fewshot and the generation export load.
# (openai-gpt's BPE is character-level with </w> markers, not byte-level: not readable here.)
GENERATE_TOKENIZERS = {
    "gpt2": ("bpe", "vocab.json"),
    "bart": ("bpe", "vocab.json"),
    "t5": ("sentencepiece", "spiece.model"),
}
GENERATE_DIR = "generate"

# The families whose pretrainer is a GenerativeLM (checkpointed as `model` too).
GENERATIVE = ("gpt", "gpt2", "t5", "bart")
# family -> (tokenizer kind, Hugging Face file names); the kind's text layout is
# garden.serving.text.DEFAULT_LAYOUT's.
HF_TOKENIZER_FILES = {
    "bert": ("wordpiece", ("vocab.txt",)), "electra": ("wordpiece", ("vocab.txt",)),
    "distilbert": ("wordpiece", ("vocab.txt",)),
    "albert": ("sentencepiece", ("spiece.model",)), "xlnet": ("sentencepiece", ("spiece.model",)),
    "t5": ("sentencepiece", ("spiece.model",)),
    "roberta": ("bpe", ("vocab.json", "merges.txt")), "gpt2": ("bpe", ("vocab.json", "merges.txt")),
    "bart": ("bpe", ("vocab.json", "merges.txt")),
}
TEXT_LAYOUTS = {"wordpiece": "bert", "sentencepiece": "bert", "bpe": "roberta"}
# Families that do not pack in their tokenizer kind's layout (garden.serving.text): OpenAI's
# GPT-2 BPE has no <s> </s> <pad>, only <|endoftext|>; XLNet packs A <sep> B <sep> <cls>.
FAMILY_LAYOUTS = {"gpt2": "gpt2", "xlnet": "xlnet"}
# The casing of a family's Hugging Face tokenizer when tokenizer_config.json does not say
# (BertTokenizer, ElectraTokenizer, DistilBertTokenizer and AlbertTokenizer lower-case).
LOWER_CASE_DEFAULT = {"bert": True, "electra": True, "distilbert": True, "albert": True}


def family_module(family: str):
    """The conversion module of `family`, with a clear error when it is unknown or unwritten."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; choose one of {sorted(FAMILIES)}")
    name = FAMILIES[family]
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is not None and name.startswith(e.name):
            raise NotImplementedError(
                f"no converter for {family!r} yet: {name.replace('.', '/')}.py does not "
                "exist") from e
        raise


def _converter(family: str, function: str):
    module = family_module(family)
    if not hasattr(module, function):
        raise NotImplementedError(f"{FAMILIES[family]} has no {function}(config, weights)")
    return getattr(module, function)


# --- Hugging Face -----------------------------------------------------------------------------

def _hf_directory(path_or_dir: str) -> str:
    if not os.path.exists(path_or_dir):
        raise FileNotFoundError(f"{path_or_dir} does not exist: give a Hugging Face checkpoint "
                                f"directory (config.json next to its weights)")
    return path_or_dir if os.path.isdir(path_or_dir) else os.path.dirname(path_or_dir)


def read_huggingface_config(path_or_dir: str) -> Dict:
    """The parsed config.json of a Hugging Face checkpoint directory (or of a file in one)."""
    config_path = os.path.join(_hf_directory(path_or_dir), "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"{config_path} not found: a Hugging Face checkpoint directory "
                                "holds config.json next to its weights")
    with open(config_path) as f:
        return json.load(f)


def read_huggingface_dir(path_or_dir: str) -> Tuple[Dict, Dict[str, np.ndarray]]:
    """(config, weights) of a Hugging Face checkpoint directory (or a weights file in one).

    Reads config.json and, in this order, model.safetensors, model.safetensors.index.json
    (sharded), pytorch_model.bin. Weights come back as numpy arrays under their state-dict
    names; nothing is downloaded.
    """
    directory = _hf_directory(path_or_dir)
    config = read_huggingface_config(directory)
    candidates = ([path_or_dir] if os.path.isfile(path_or_dir) else
                  [os.path.join(directory, n) for n in
                   ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")])
    for path in candidates:
        if not os.path.exists(path):
            continue
        if path.endswith(".safetensors"):
            from safetensors.numpy import load_file
            return config, load_file(path)
        if path.endswith(".safetensors.index.json"):
            from safetensors.numpy import load_file
            with open(path) as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            weights = {}
            for shard in shards:
                weights.update(load_file(os.path.join(directory, shard)))
            return config, weights
        if path.endswith(".bin"):
            import torch  # optional dependency: only pytorch_model.bin needs it

            state = torch.load(path, map_location="cpu", weights_only=True)
            return config, {k: v.detach().float().numpy() if v.is_floating_point()
                            else v.numpy() for k, v in state.items()}
        raise ValueError(f"{path}: expected a .safetensors or pytorch_model.bin file")
    raise FileNotFoundError(f"no model.safetensors or pytorch_model.bin in {directory}")


def load_huggingface(path_or_dir: str, family: str) -> Dict:
    """Garden models from a local Hugging Face checkpoint directory.

    Example:
        models = load_huggingface("/ckpt/bert-base-uncased", "bert")
        models["backbone"], models["pretrainer"]  # pretrainer is None without heads
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; choose one of {sorted(FAMILIES)}")
    config, weights = read_huggingface_dir(path_or_dir)
    model_type = config.get("model_type")
    if model_type is not None and model_type not in HF_MODEL_TYPES[family]:
        raise ValueError(f"{path_or_dir} holds a {model_type!r} checkpoint (config.json "
                         f"model_type), not {family!r}; pass the matching --model")
    return _converter(family, "from_huggingface")(config, weights)


# --- original TF1 checkpoints -----------------------------------------------------------------

def _read_json(config) -> Dict:
    if isinstance(config, (str, os.PathLike)):
        with open(config) as f:
            return json.load(f)
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

    convert = _converter(family, "from_tf1")
    reader = tf.train.load_checkpoint(checkpoint_prefix)
    weights = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    return convert(_read_json(config), weights)


# --- tf-models-official (Model Garden) encoders -----------------------------------------------

def _gelu_exact(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _check_activation(encoder, allow_approximate_gelu: bool) -> None:
    """Probes the encoder's feed-forward activation numerically: its config stores only a
    name, and Model Garden's default ("gelu" through tf_utils, or BertEncoder's own default)
    is the tanh approximation while the garden backbone computes the exact GELU."""
    block = encoder.transformer_layers[0]
    activation = block._inner_activation  # the callable the block applies
    if isinstance(activation, str):
        import tf_keras

        activation = tf_keras.activations.get(activation)
    x = np.linspace(-5.0, 5.0, 201).astype(np.float32)
    y = np.asarray(activation(x), np.float64)
    if np.max(np.abs(y - _gelu_exact(x))) < 1e-5:
        return
    if np.max(np.abs(y - _gelu_tanh(x))) < 1e-5:
        gap = float(np.max(np.abs(_gelu_tanh(x) - _gelu_exact(x))))
        if allow_approximate_gelu:
            print(f"garden.convert: the encoder uses the tanh-approximate GELU; the garden "
                  f"backbone uses the exact one (pointwise difference up to {gap:.1e})",
                  file=sys.stderr)
            return
        raise ValueError(
            "the Model Garden encoder uses the tanh-approximate GELU (its default) but the "
            f"garden BertBackbone computes the exact GELU (they differ by up to {gap:.1e} "
            "pointwise, so outputs will not match to 1e-4); pass allow_approximate_gelu=True "
            "(--allow_approximate_gelu) to convert anyway")
    raise ValueError("the Model Garden encoder's feed-forward activation is not GELU; the "
                     "garden BertBackbone cannot represent it")


def model_garden_encoder_kwargs(config: Dict) -> Dict:
    """BertEncoder constructor arguments from either `BertEncoder.get_config()` or Model
    Garden's `BertEncoderConfig` (the `encoder.bert` block of its YAML experiment configs)."""
    from official.modeling import tf_utils

    config = dict(config)
    if "inner_dim" in config:  # BertEncoder.get_config()
        kwargs = {k: config[k] for k in (
            "vocab_size", "hidden_size", "num_layers", "num_attention_heads",
            "max_sequence_length", "type_vocab_size", "inner_dim", "output_dropout",
            "attention_dropout", "embedding_width", "norm_first") if k in config}
        if "inner_activation" in config:
            import tf_keras

            kwargs["inner_activation"] = tf_keras.activations.get(config["inner_activation"])
        return kwargs
    # BertEncoderConfig: its hidden_activation goes through tf_utils.get_activation, where
    # "gelu" is the tanh approximation.
    return dict(
        vocab_size=config["vocab_size"], hidden_size=config.get("hidden_size", 768),
        num_layers=config.get("num_layers", 12),
        num_attention_heads=config.get("num_attention_heads", 12),
        max_sequence_length=config.get("max_position_embeddings", 512),
        type_vocab_size=config.get("type_vocab_size", 2),
        inner_dim=config.get("intermediate_size", 3072),
        inner_activation=tf_utils.get_activation(config.get("hidden_activation", "gelu")),
        output_dropout=config.get("dropout_rate", 0.1),
        attention_dropout=config.get("attention_dropout_rate", 0.1),
        embedding_width=config.get("embedding_size"),
        norm_first=config.get("norm_first", False))


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
    convert = _converter(family, "from_model_garden")
    if isinstance(checkpoint_or_encoder, (str, os.PathLike)):
        import tensorflow as tf
        from official.nlp.modeling.networks import BertEncoder

        if config is None:
            raise ValueError("a Model Garden checkpoint needs --config (the encoder config)")
        encoder = BertEncoder(**model_garden_encoder_kwargs(_read_json(config)))
        status = tf.train.Checkpoint(**{checkpoint_key: encoder}).read(str(checkpoint_or_encoder))
        # Every encoder variable must come from the checkpoint: no silent partial restore.
        status.expect_partial()  # optimizer slots etc. may be in the checkpoint too
        try:
            status.assert_existing_objects_matched()
        except AssertionError as e:
            # TF's message prints whole arrays; keep the variable names (first 10 of them).
            names = re.findall(r"<tf\.Variable '([^']+)'", str(e)) or [str(e)[:300]]
            raise ValueError(f"{checkpoint_or_encoder} does not hold every variable of a "
                             f"BertEncoder built from this config under {checkpoint_key!r} "
                             f"(check the config): missing e.g. {names}") from None
    else:
        encoder = checkpoint_or_encoder
    _check_activation(encoder, allow_approximate_gelu)
    weights = {v.name: v.numpy() for v in encoder.weights}
    return convert(encoder.get_config(), weights)


# --- command line -----------------------------------------------------------------------------

def convert(source: str, family: str, input_path: str, config_path: Optional[str] = None,
            allow_approximate_gelu: bool = False) -> Tuple[Dict, Dict]:
    """(models, config used) for one source; the CLI's work without the writing."""
    if source == "huggingface":
        if config_path is not None:
            raise ValueError("--source=huggingface reads config.json from --input; drop --config")
        return load_huggingface(input_path, family), read_huggingface_config(input_path)
    if source == "tf1":
        if config_path is None:
            raise ValueError("--source=tf1 needs --config=<the release's config JSON> "
                             "(bert_config.json / albert_config.json / ELECTRA's config)")
        config = _read_json(config_path)
        return load_tf1(input_path, family, config), config
    if source == "model_garden":
        config = None if config_path is None else _read_json(config_path)
        models = load_model_garden(input_path, family, config,
                                   allow_approximate_gelu=allow_approximate_gelu)
        return models, config
    raise ValueError(f"unknown --source {source!r}; choose one of {SOURCES}")


def generate_ids(family: str, config: Dict) -> Dict:
    """The ids a garden.generate model directory records, from a Hugging Face config.json:
    EOS and pad (GPT-2 has no pad: EOS), and how prompts are framed (T5: the encoder input
    ends with </s>, decoding starts from pad = 0; BART: <s> x </s>, decoding from </s> <s>)."""
    eos = int(config["eos_token_id"])
    pad = config.get("pad_token_id")
    ids = {"eos_id": eos, "pad_id": eos if pad is None else int(pad)}
    if family == "t5":
        ids.update(encoder_suffix_ids=[eos],
                   decoder_start_ids=[int(config.get("decoder_start_token_id", 0) or 0)])
    elif family == "bart":
        bos = int(config.get("bos_token_id", 0))
        ids.update(encoder_prefix_ids=[bos], encoder_suffix_ids=[eos],
                   decoder_start_ids=[int(config.get("decoder_start_token_id", 2)), bos])
    return ids


def _write_generate_dir(args, models: Dict, config: Dict) -> Optional[str]:
    """OUT/generate/ when the checkpoint directory has a tokenizer garden reads (see
    GENERATE_TOKENIZERS); None, with a note, when it has none."""
    if args.source != "huggingface" or args.model not in GENERATE_TOKENIZERS:
        return None
    from data_pipelines import tokenizers
    from garden.generate import save_model_dir

    kind, name = GENERATE_TOKENIZERS[args.model]
    vocab = os.path.join(_hf_directory(args.input), name)
    needed = tokenizers.bpe_files(vocab) if kind == "bpe" else (vocab,)
    missing = [f for f in needed if not os.path.exists(f)]
    if missing:
        print(f"  note: no {', '.join(os.path.basename(f) for f in missing)} in {args.input}: "
              f"no {GENERATE_DIR}/ model directory written (garden.generate needs the "
              f"tokenizer)")
        return None
    return save_model_dir(os.path.join(args.output, GENERATE_DIR), models["pretrainer"],
                          tokenizer_kind=kind, vocab=vocab, **generate_ids(args.model, config))


# --- the tokenizer -----------------------------------------------------------------------------

def _checkpoint_dir(source: str, input_path: str) -> str:
    if source == "huggingface":
        return _hf_directory(input_path)
    return os.path.dirname(os.path.abspath(input_path))


def find_tokenizer(source: str, family: str, input_path: str,
                   vocab: Optional[str] = None) -> Optional[Tuple[str, Dict[str, str]]]:
    """(kind, {file name in OUT: source path}) of the source's tokenizer, or None.

    Hugging Face: the family's files in the checkpoint directory; TF1: vocab.txt or the
    SentencePiece *.model next to the checkpoint (GPT-2: encoder.json + vocab.bpe, copied as
    vocab.json + merges.txt); Model Garden: vocab.txt next to the checkpoint or in its assets/
    or parent folder. `vocab` (--vocab) names the file instead."""
    from data_pipelines import tokenizers

    if vocab is not None:
        if not os.path.exists(vocab):
            raise FileNotFoundError(f"--vocab={vocab} does not exist")
        kind = tokenizers.detect_kind(vocab)
        if kind == "bpe":
            vocab_json, merges = tokenizers.bpe_files(vocab)
            return kind, {"vocab.json": vocab_json, "merges.txt": merges}
        return kind, {os.path.basename(vocab): vocab}
    folder = _checkpoint_dir(source, input_path)
    if source == "huggingface":
        if family not in HF_TOKENIZER_FILES:
            return None
        kind, names = HF_TOKENIZER_FILES[family]
        files = {n: os.path.join(folder, n) for n in names}
        if kind == "sentencepiece" and not os.path.exists(files[names[0]]):
            models = sorted(n for n in os.listdir(folder) if n.endswith(".model"))
            files = {models[0]: os.path.join(folder, models[0])} if models else files
        return (kind, files) if all(os.path.exists(p) for p in files.values()) else None
    if family == "gpt2":
        files = {"vocab.json": os.path.join(folder, "encoder.json"),
                 "merges.txt": os.path.join(folder, "vocab.bpe")}
        return ("bpe", files) if all(os.path.exists(p) for p in files.values()) else None
    for where in (folder, os.path.join(folder, "assets"), os.path.dirname(folder)):
        if os.path.exists(os.path.join(where, "vocab.txt")):
            return "wordpiece", {"vocab.txt": os.path.join(where, "vocab.txt")}
        models = sorted(n for n in os.listdir(where) if n.endswith(".model")) \
            if os.path.isdir(where) else []
        if models:
            return "sentencepiece", {models[0]: os.path.join(where, models[0])}
        if source == "tf1":
            break  # the release's files sit next to the checkpoint
    return None


def infer_lower_case(source: str, family: str, input_path: str, kind: Optional[str],
                     flag: Optional[bool]) -> Optional[bool]:
    """The casing of the source's tokenizer: --lower_case / --nolower_case when given; Hugging
    Face: tokenizer_config.json's do_lower_case; else an "uncased" / "cased" directory name
    (google-research/bert's validate_case_matches_checkpoint); else the family's default
    (Hugging Face, ALBERT, byte-level BPE); a WordPiece TF1 / Model Garden checkpoint without
    a hint is an error asking for the flag."""
    if flag is not None:
        return flag
    if source == "huggingface":
        config_path = os.path.join(_hf_directory(input_path), "tokenizer_config.json")
        if os.path.exists(config_path):
            with open(config_path) as f:
                value = json.load(f).get("do_lower_case")
            if value is not None:
                return bool(value)
    names = [p.lower() for p in os.path.abspath(input_path).split(os.sep)]
    if any(p.startswith("uncased") or "_uncased" in p or "-uncased" in p for p in names):
        return True
    if any(p.startswith("cased") or "_cased" in p or "-cased" in p for p in names):
        return False
    if kind == "bpe" or family in ("gpt", "gpt2", "t5", "bart", "roberta", "xlnet"):
        return False
    if source == "huggingface" or kind == "sentencepiece":
        return LOWER_CASE_DEFAULT.get(family, False)
    if kind is None:
        return None
    raise ValueError(f"cannot tell whether {input_path} is a cased or an uncased model (its "
                     f"directory is named neither uncased_... nor cased_...): pass --lower_case "
                     f"(an uncased model, e.g. uncased_L-12_H-768_A-12) or --nolower_case (cased)")


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
    return copy_tokenizer(args.output, args.model, kind, files, lower_case)


def copy_tokenizer(output: str, family: str, kind: str, files: Dict[str, str],
                   lower_case: Optional[bool]) -> Dict:
    """Copies a tokenizer's files ({name in `output`: source path}, find_tokenizer's) into
    `output`; returns their convert_info.json record (also written for pruned models,
    garden.bertology.prune)."""
    import shutil

    for name, path in files.items():
        shutil.copyfile(path, os.path.join(output, name))
    vocab = "vocab.json" if kind == "bpe" else next(iter(files))
    return {"vocab": vocab, "files": sorted(files), "tokenizer": kind,
            "layout": FAMILY_LAYOUTS.get(family, TEXT_LAYOUTS[kind]),
            "lower_case": lower_case,
            "sources": {n: os.path.abspath(p) for n, p in files.items()}}


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m garden.convert", allow_abbrev=False,
        description="Convert a pretrained checkpoint into garden Keras models.")
    parser.add_argument("--source", required=True, choices=SOURCES)
    parser.add_argument("--model", required=True, choices=sorted(FAMILIES),
                        help="model family of the checkpoint")
    parser.add_argument("--input", required=True,
                        help="huggingface: checkpoint directory; tf1 / model_garden: "
                             "checkpoint prefix")
    parser.add_argument("--output", required=True, help="directory to write the models to")
    parser.add_argument("--config", default=None,
                        help="tf1: the release's config JSON (bert_config.json, albert_config.json, "
                        "ELECTRA's); model_garden: encoder config JSON")
    parser.add_argument("--vocab", default=None,
                        help="the tokenizer file to copy into --output (vocab.txt, *.model, "
                             "vocab.json with merges.txt beside it) when it is not next to the "
                             "checkpoint")
    parser.add_argument("--lower_case", dest="lower_case", action="store_const", const=True,
                        default=None, help="the model is uncased (its text is lower-cased)")
    parser.add_argument("--nolower_case", "--no_lower_case", dest="lower_case",
                        action="store_const", const=False,
                        help="the model is cased (default: inferred, see the module docstring)")
    parser.add_argument("--allow_approximate_gelu", action="store_true",
                        help="model_garden: accept the tanh-approximate GELU of Model "
                             "Garden's default encoder (the garden uses the exact GELU)")
    args = parser.parse_args(argv)

    if args.source == "huggingface" and args.model in GENERATE_TOKENIZERS and \
            os.path.exists(os.path.join(args.output, GENERATE_DIR)):
        print(f"error: {os.path.join(args.output, GENERATE_DIR)} exists: give a new --output "
              f"(the generate/ model directory is never overwritten)", file=sys.stderr)
        return 2
    try:
        found = find_tokenizer(args.source, args.model, args.input, args.vocab)
        infer_lower_case(args.source, args.model, args.input, found[0] if found else None,
                         args.lower_case)  # a missing casing flag is reported before the work
        models, config = convert(args.source, args.model, args.input, args.config,
                                 args.allow_approximate_gelu)
    except (FileNotFoundError, ValueError) as e:  # a wrong path or a checkpoint that does not fit
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - TensorFlow's reader: not a checkpoint (prefix)
        import tensorflow as tf

        if not isinstance(e, tf.errors.OpError):
            raise
        print(f"error: --input={args.input} cannot be read as a --source={args.source} checkpoint: "
              f"{type(e).__name__}: {e.message.splitlines()[0]}", file=sys.stderr)
        return 2
    os.makedirs(args.output, exist_ok=True)
    written = {}
    for key in ("backbone", "pretrainer"):
        model = models.get(key)
        if model is None:
            continue
        path = os.path.join(args.output, f"{key}.keras")
        model.save(path)
        written[key] = {"path": path, "parameters": int(model.count_params())}
    generate_dir = _write_generate_dir(args, models, config)
    from garden import pretrained

    lm = models.get("lm") or (models.get("pretrainer") if args.model in GENERATIVE else None)
    tokenizer = _copy_tokenizer(args, args.lower_case)
    checkpoint = pretrained.write_checkpoint(args.output, args.model, models["backbone"], lm)
    info = {"source": args.source, "family": args.model, "input": os.path.abspath(args.input),
            "config": config, "models": written, "generate_dir": generate_dir,
            "architecture": pretrained.architecture_of(args.model, models["backbone"], lm),
            "checkpoint": checkpoint, "tokenizer": tokenizer}
    with open(os.path.join(args.output, "convert_info.json"), "w") as f:
        json.dump(info, f, indent=2, sort_keys=True)
    print(f"converted {args.source} {args.model} checkpoint {args.input}")
    for key, entry in written.items():
        print(f"  {key}: {entry['parameters']:,} parameters -> {entry['path']}")
    if generate_dir:
        print(f"  generate: {generate_dir} (python -m garden.generate --model_dir=...)")
    print(f"  checkpoint: {os.path.join(args.output, checkpoint)} (fine-tune with "
          f"--gin_param=\"INIT_CHECKPOINT='{args.output}'\")")
    if tokenizer.get("vocab"):
        print(f"  tokenizer: {tokenizer['tokenizer']} {', '.join(tokenizer['files'])}, "
              f"lower_case={tokenizer['lower_case']}")
    print(f"  info: {os.path.join(args.output, 'convert_info.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
