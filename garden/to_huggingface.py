"""Write a garden model out in the Hugging Face layout, so that transformers loads it.

    python -m garden.to_huggingface --model_dir=runs/bert_pretrain --output=hf_bert
    python -m garden.to_huggingface --model_dir=converted/t5 --output=hf_t5

--model_dir is anything garden.runs opens that has a backbone: a garden.train run directory
(its newest checkpoint) or a garden.convert output directory. DIR (--output, created; an
existing model.safetensors there is never overwritten) receives

    model.safetensors   the weights under Hugging Face's names and layouts (safetensors.numpy)
    config.json         the family's Hugging Face config: model_type, architectures, sizes,
                        epsilon, vocabulary size, tying, special token ids
    the tokenizer       the run's vocabulary under the names the family's Hugging Face
                        tokenizer reads (FamilySpec.hf_tokenizer_files): vocab.txt (WordPiece),
                        vocab.json + merges.txt (byte-level BPE), spiece.model (SentencePiece),
                        and tokenizer_config.json (its class, do_lower_case)

so that `transformers.AutoModel.from_pretrained(DIR)` and `AutoTokenizer.from_pretrained(DIR)`
load it offline and give the garden backbone's outputs on the same ids. Families (WRITERS):

    bert   BertModel; BertForPreTraining when the run's model is a BertPretrainer (a BERT
           pretraining run): its MLM decoder is the tied word table and is not written
    gpt2   GPT2LMHeadModel: lm_head is the tied token table and is not written
    t5     T5ForConditionalGeneration: v1.0 ties lm_head to `shared` (not written); v1.1's
           lm_head (the T5Seq2SeqLM's) is written for transformers 4, which reads it, when it
           equals `shared`: transformers 5 ties it to `shared` whatever the config says, so a
           v1.1 whose lm_head differs (trained untied) is refused

Each family's writer (`to_huggingface` at the end of garden/models/<family>/conversion.py)
inverts the name table its from_huggingface reads with (garden.models.conversion.
invert_weights: the transforms are reshapes and transposes, run backwards on the indices), so
a checkpoint converted in and written out comes back with the same arrays. Another family is
refused with one line naming these.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Dict, Optional, Sequence

from text import vocab_files

# family -> "module:function"(backbone config, {weight path: array}, tokens) -> (config.json
# dict, {Hugging Face name: array}); resolved on use (garden.models.family.resolve).
WRITERS = {"bert": "garden.models.bert.conversion:to_huggingface",
           "gpt2": "garden.models.gpt2.conversion:to_huggingface",
           "t5": "garden.models.t5.conversion:to_huggingface"}
WEIGHTS_FILE = "model.safetensors"
# The Hugging Face tokenizer class of each tokenizer kind (tokenizer_config.json).
TOKENIZER_CLASSES = {"wordpiece": "BertTokenizer", "bpe": "GPT2Tokenizer",
                     "sentencepiece": "T5Tokenizer"}
MAX_SENTINELS = 100  # T5Tokenizer's extra_ids default: <extra_id_0..99> above the pieces


def build_parser():
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m garden.to_huggingface", allow_abbrev=False,
        description="Write a garden model (a garden.train run or a garden.convert output) as "
                    "a Hugging Face model directory that transformers loads.")
    parser.add_argument("--model_dir", required=True,
                        help="a garden.train run directory or a garden.convert output directory")
    parser.add_argument("--output", required=True,
                        help="the Hugging Face model directory to write (created)")
    return parser


def garden_weights(run, backbone) -> Dict:
    """{weight path: array} of the model around the run's backbone that its family writes:
    a garden.convert directory's LM (T5 v1.1's lm_head is the LM's); the task model of the
    family's pretraining run or of a generative fine-tuning run (BERT's heads, the LM); else the
    backbone (a classifier's head has no place in the family's Hugging Face class). Only a
    pretraining or generative run's model is built, so no other task's files are read."""
    from garden import models, runs
    from garden.tasks.generation import GenerativeFinetuning
    from garden.tasks.pretraining import Pretraining

    model = backbone
    if run.kind == runs.CONVERTED and models.spec(run.family).lm is not None:
        model = run.lm()
    elif run.kind == runs.MODEL_DIR and (
            isinstance(run.task, GenerativeFinetuning) or
            # the family's own pretraining (SpanBERT's heads on a BERT backbone are not BERT's)
            isinstance(run.task, Pretraining) and run.task.spec.name == run.family):
        model = run.task_model()
    return {v.path: v.numpy() for v in model.weights}


def _tokenizer_config(kind: str, lower_case: bool, max_length: Optional[int]) -> Dict:
    config = {"tokenizer_class": TOKENIZER_CLASSES[kind]}
    if kind == "wordpiece":
        config["do_lower_case"] = bool(lower_case)
    if max_length:
        config["model_max_length"] = int(max_length)
    return config


def tokenizer_files(run, spec) -> Dict[str, str]:
    """{name the family's Hugging Face tokenizer reads: the run's file}; ValueError naming the
    run or its vocabulary when it records none or one of another kind."""
    if not run.vocab:
        raise ValueError(f"{run.path} records no vocabulary: its tokenizer cannot be written")
    kind, files = vocab_files.tokenizer_files(run.vocab)
    if kind != spec.tokenizer:
        raise ValueError(f"{run.vocab} is a {kind} vocabulary, but Hugging Face's {spec.name} "
                         f"tokenizer reads {spec.tokenizer}")
    return dict(zip(spec.hf_tokenizer_files, files.values()))


def write_tokenizer(run, spec, output: str, files: Dict[str, str], pieces: int,
                    vocab_size: int, max_length: Optional[int]) -> Dict:
    """Copies `files` (tokenizer_files) into `output` and writes its tokenizer_config.json;
    `pieces` is the vocabulary's size, `vocab_size` the model's. Returns `files`."""
    import shutil

    for name, path in files.items():
        shutil.copyfile(path, os.path.join(output, name))
    config = _tokenizer_config(spec.tokenizer, run.lower_case, max_length)
    if spec.tokenizer == "sentencepiece":  # the sentinels the model's vocabulary has room for
        config["extra_ids"] = max(0, min(MAX_SENTINELS, vocab_size - pieces))
    with open(os.path.join(output, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    return files


def write(run, output: str) -> Dict:
    """Writes DIR (module docstring) for an opened run; returns what was written."""
    from safetensors.numpy import save_file

    from garden import models
    from garden.models.family import resolve

    backbone = run.backbone()  # a garden.train run knows its family once it is built
    if run.family not in WRITERS:
        what = f"a {run.family} model" if run.family else "a model of no known family"
        raise ValueError(f"{run.path} holds {what}: garden.to_huggingface writes the "
                         f"families {', '.join(sorted(WRITERS))}")
    spec = models.spec(run.family)
    files = tokenizer_files(run, spec)  # checked before anything is written
    backbone_config = backbone.get_config()
    tokens = run.tokens()
    try:
        config, state = resolve(WRITERS[run.family])(backbone_config,
                                                     garden_weights(run, backbone), tokens)
    except ValueError as e:  # a setting Hugging Face's family cannot express
        raise ValueError(f"{run.path}: {e}") from None
    os.makedirs(output, exist_ok=True)
    with open(os.path.join(output, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    tokenizer = write_tokenizer(run, spec, output, files, len(tokens),
                                int(backbone_config["vocab_size"]),
                                backbone_config.get("max_sequence_length"))
    # Last: a directory with model.safetensors is complete (main() never writes over one).
    save_file({name: value.astype("float32") for name, value in state.items()},
              os.path.join(output, WEIGHTS_FILE), metadata={"format": "pt"})
    return {"family": run.family, "architectures": config["architectures"],
            "tensors": len(state), "tokenizer": sorted(tokenizer)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    weights = os.path.join(args.output, WEIGHTS_FILE)
    if os.path.exists(weights):
        print(f"error: {weights} exists: give a new --output (a model is never overwritten)",
              file=sys.stderr)
        return 2
    # After parsing: --help and usage errors answer before TensorFlow loads.
    from garden import runs

    try:
        run = runs.open(args.model_dir, [runs.MODEL_DIR, runs.CONVERTED],
                        who="garden.to_huggingface")
        written = write(run, args.output)
    except (ValueError, OSError) as e:  # RunError, a family it cannot write, a missing file
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(f"wrote {written['family']} ({', '.join(written['architectures'])}, "
          f"{written['tensors']} tensors) from {args.model_dir} to {args.output}: "
          f"config.json, {WEIGHTS_FILE}, {', '.join(written['tokenizer'])}, "
          f"tokenizer_config.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
