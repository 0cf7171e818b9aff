"""Generate text from a saved GenerativeLM, streaming tokens as they are produced.

    python -m garden.generate --model_dir=DIR --prompt="Once upon a time" [--prompt=...] \
        [--max_new_tokens=32] [--method=greedy|sample|beam] [--temperature=1.0] [--top_k=0] \
        [--top_p=1.0] [--num_beams=4] [--length_penalty=0.0] [--length_penalty_kind=gnmt] \
        [--min_new_tokens=0] [--no_repeat_ngram_size=0] [--seed=0] [--no_jit] \
        [--intra_op_threads=1] [--inter_op_threads=0]

For each prompt it prints the prompt, then each new token's text the moment it is decoded
(flushed), then a newline; beam search prints its best hypothesis when the search ends (a
beam's best is known only then). Several prompts are decoded one after another, all
left-padded to the longest one, so the decode loop is compiled once for all of them. The
decoding flags are garden.generation.GenerationConfig's fields.

Threads: by default TensorFlow's intra-op pool has one thread, and a decode step's large
products are split into parts that run side by side on the inter-op threads
(garden/layers/row_products.py): GPT-2 small on 2 cores, 32-token prompts, greedy, 31.7-38.8
tokens/s at batch 1 in four runs against 24.1-30.6 with TensorFlow's default pools in the same
runs, and within 0.95x-1.09x of them at batch 8 (benchmarks/README.md `generation`). A long
prompt's first pass is about 1.2x slower so (512 tokens); `--intra_op_threads=0` restores
TensorFlow's default.

The model directory (what `save_model_dir` writes and `load_model_dir` reads):
    DIR/lm.keras         the GenerativeLM, saved with model.save (Keras format)
    DIR/generation.json  {"format": "garden.generate/1",
                          "model_module": module to import first (registers the class),
                          "model_class": the class name,
                          "tokenizer": "bpe" | "sentencepiece" | "wordpiece",
                          "vocab": the vocabulary file, relative to DIR (vocab.json with
                                   merges.txt beside it, a SentencePiece .model, vocab.txt),
                          "lower_case": bool,
                          "eos_id", "pad_id": ints,
                          "prompt_prefix_ids": ids before a decoder-only prompt (e.g. BOS),
                          "encoder_suffix_ids": ids after an encoder prompt (T5 / BART: EOS),
                          "encoder_prefix_ids": ids before it (BART: <s>),
                          "decoder_start_ids": an encoder-decoder's decoder start
                                               (T5 [0], BART [2, 0])}
    the vocabulary file(s), copied in by save_model_dir.
garden.convert and the LM tasks write it with `save_model_dir`; garden.fewshot and the
generation export read it with `load_model_dir`.

Text out: each id's bytes (byte-level BPE: its bytes; SentencePiece: the piece with U+2581 as a
space and <0xNN> byte pieces as bytes; WordPiece: "##" pieces glued, others after a space;
special tokens: nothing) go through an incremental UTF-8 decoder, so a character split over
two tokens prints once whole.
"""

from __future__ import annotations

import argparse
import codecs
import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

import numpy as np

FORMAT = "garden.generate/1"
MODEL_FILE, CONFIG_FILE = "lm.keras", "generation.json"


@dataclasses.dataclass
class GenerationModel:
    """A loaded model directory: the model, its tokenizer and the ids decoding needs."""

    model: object
    tokenizer: object  # data_pipelines.tokenizers.TextTokenizer
    eos_id: int
    pad_id: int
    prompt_prefix_ids: List[int]
    encoder_prefix_ids: List[int]
    encoder_suffix_ids: List[int]
    decoder_start_ids: List[int]

    def encode(self, texts: Sequence[str], width: Optional[int] = None) -> Dict[str, np.ndarray]:
        """The GenerativeLM prompt dict for `texts`, left-padded to `width` (default: the
        longest)."""
        ids = self.tokenizer.tokenize(list(texts))
        if self.model.is_encoder_decoder:
            encoder = [self.encoder_prefix_ids + list(r) + self.encoder_suffix_ids for r in ids]
            enc_ids, enc_mask = left_pad(encoder, width)
            dec_ids, dec_mask = left_pad([self.decoder_start_ids] * len(texts))
            return {"encoder_token_ids": enc_ids, "encoder_padding_mask": enc_mask,
                    "decoder_token_ids": dec_ids, "decoder_padding_mask": dec_mask}
        rows = [self.prompt_prefix_ids + list(r) for r in ids]
        empty = [texts[i] for i, r in enumerate(rows) if not r]
        if empty:
            raise ValueError(f"prompt {empty[0]!r} has no tokens: a decoder-only model needs at "
                             f"least one (give text, or set prompt_prefix_ids in {CONFIG_FILE})")
        token_ids, mask = left_pad(rows, width)
        return {"token_ids": token_ids, "padding_mask": mask}

    def prompt_length(self, texts: Sequence[str]) -> int:
        """The width encode() pads to for these texts."""
        prompt = self.encode(texts)
        return next(iter(prompt.values())).shape[1]


def left_pad(rows: Sequence[Sequence[int]], width: Optional[int] = None, pad: int = 0):
    """int32 ids and mask [len(rows), width], each row right-aligned (left padding)."""
    width = max([width or 0] + [len(r) for r in rows])
    ids = np.full((len(rows), width), pad, np.int32)
    mask = np.zeros((len(rows), width), np.int32)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row):] = row
            mask[i, width - len(row):] = 1
    return ids, mask


def token_bytes(tokenizer) -> List[bytes]:
    """The bytes each id prints as (module docstring); special ids print nothing."""
    from data_pipelines.tokenizers import BPE_WORD_START, SP_WORD_START, bytes_to_unicode

    vocab = tokenizer.vocab
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    out = []
    for i, piece in enumerate(vocab.tokens):
        if i in vocab.special_ids:
            out.append(b"")
        elif tokenizer.kind == "bpe":
            out.append(bytes(byte_of[c] for c in piece) if all(c in byte_of for c in piece)
                       else piece.replace(BPE_WORD_START, " ").encode("utf-8"))
        elif tokenizer.kind == "sentencepiece":
            byte = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", piece)
            out.append(bytes([int(byte.group(1), 16)]) if byte
                       else piece.replace(SP_WORD_START, " ").encode("utf-8"))
        else:
            out.append(piece[2:].encode("utf-8") if piece.startswith("##")
                       else b" " + piece.encode("utf-8"))
    return out


class TextStream:
    """Feeds token ids, returns the text they complete (an incremental UTF-8 decoder)."""

    def __init__(self, table: List[bytes]):
        self.table = table
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token_id: int) -> str:
        return self.decoder.decode(self.table[token_id] if 0 <= token_id < len(self.table)
                                   else b"")

    def flush(self) -> str:
        return self.decoder.decode(b"", final=True)


# --- the model directory -----------------------------------------------------------------------

def save_model_dir(model_dir: str, model, *, tokenizer_kind: str, vocab: str, eos_id: int,
                   pad_id: int, lower_case: bool = False, prompt_prefix_ids: Sequence[int] = (),
                   encoder_prefix_ids: Sequence[int] = (), encoder_suffix_ids: Sequence[int] = (),
                   decoder_start_ids: Sequence[int] = ()) -> str:
    """Write `model` and its vocabulary as a model directory (module docstring). The directory
    appears whole or not at all (written beside it, then renamed into place); an existing one
    is refused."""
    from data_pipelines.tokenizers import bpe_files, load_tokenizer

    if os.path.exists(model_dir):
        raise FileExistsError(f"{model_dir} exists: give a new directory for the model")
    if model.is_encoder_decoder and not decoder_start_ids:
        raise ValueError("an encoder-decoder model needs decoder_start_ids (T5 [0], BART [2, 0])")
    load_tokenizer(tokenizer_kind, vocab, lower_case=lower_case)  # refuse a bad vocabulary now
    files = list(bpe_files(vocab)) if tokenizer_kind == "bpe" else [vocab]
    parent = os.path.dirname(os.path.abspath(model_dir))
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".generate-", dir=parent)
    try:
        for path in files:
            shutil.copyfile(path, os.path.join(work, os.path.basename(path)))
        model.save(os.path.join(work, MODEL_FILE))
        config = {"format": FORMAT, "model_module": type(model).__module__,
                  "model_class": type(model).__name__, "tokenizer": tokenizer_kind,
                  "vocab": os.path.basename(files[0]), "lower_case": bool(lower_case),
                  "eos_id": int(eos_id), "pad_id": int(pad_id),
                  "prompt_prefix_ids": [int(i) for i in prompt_prefix_ids],
                  "encoder_prefix_ids": [int(i) for i in encoder_prefix_ids],
                  "encoder_suffix_ids": [int(i) for i in encoder_suffix_ids],
                  "decoder_start_ids": [int(i) for i in decoder_start_ids]}
        with open(os.path.join(work, CONFIG_FILE), "w") as f:
            json.dump(config, f, indent=2)
        os.rename(work, model_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return model_dir


def load_model_dir(model_dir: str) -> GenerationModel:
    """Read a model directory (module docstring), with errors that name the file at fault
    (garden.runs opens it, as every tool opens a model)."""
    from garden import runs

    return runs.open(model_dir, [runs.GENERATE], who="garden.generate").generation()


# --- the command line --------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from garden.generation import LENGTH_PENALTY_KINDS, METHODS, GenerationConfig

    defaults = GenerationConfig()
    p = argparse.ArgumentParser(prog="python -m garden.generate",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--model_dir", required=True, help="a directory written by save_model_dir")
    p.add_argument("--prompt", action="append", required=True,
                   help="a prompt (repeat the flag for several)")
    p.add_argument("--max_new_tokens", type=int, default=defaults.max_new_tokens)
    p.add_argument("--method", choices=METHODS, default=defaults.method)
    p.add_argument("--temperature", type=float, default=defaults.temperature)
    p.add_argument("--top_k", type=int, default=defaults.top_k)
    p.add_argument("--top_p", type=float, default=defaults.top_p)
    p.add_argument("--num_beams", type=int, default=defaults.num_beams)
    p.add_argument("--length_penalty", type=float, default=defaults.length_penalty)
    p.add_argument("--length_penalty_kind", choices=LENGTH_PENALTY_KINDS,
                   default=defaults.length_penalty_kind)
    p.add_argument("--min_new_tokens", type=int, default=defaults.min_new_tokens)
    p.add_argument("--no_repeat_ngram_size", type=int, default=defaults.no_repeat_ngram_size)
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--no_jit", action="store_true",
                   help="decode without XLA (compiles faster, runs slower)")
    p.add_argument("--intra_op_threads", type=int, default=1,
                   help="threads one TensorFlow op may use; 1 (default): decode steps split "
                        "their large products over the inter-op threads instead; 0: "
                        "TensorFlow's default")
    p.add_argument("--inter_op_threads", type=int, default=0,
                   help="TensorFlow ops run side by side (0: TensorFlow's default, a thread "
                        "per core)")
    return p


def set_threads(intra_op: int, inter_op: int) -> None:
    """TensorFlow's thread pools for this process. They can be set only before TensorFlow runs
    its first op: when main() is called in a process that already has (a test, a notebook),
    the pools are left as they are, with a note on stderr."""
    import tensorflow as tf

    for flag, value in (("intra_op", intra_op), ("inter_op", inter_op)):
        if value < 0:
            raise ValueError(f"--{flag}_threads must be >= 0 (0: TensorFlow's default), "
                             f"got {value}")
    try:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op)
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    except RuntimeError as e:
        print(f"note: TensorFlow's thread pools left as they are: {e}", file=sys.stderr)


def main(argv: Optional[Sequence[str]] = None, out=None) -> int:
    from garden.generation import GenerationConfig, Generator

    args = build_parser().parse_args(argv)
    out = out or sys.stdout
    fields = {f.name for f in dataclasses.fields(GenerationConfig)}
    try:
        set_threads(args.intra_op_threads, args.inter_op_threads)
        config = GenerationConfig(**{k: v for k, v in vars(args).items() if k in fields})
        loaded = load_model_dir(args.model_dir)
        width = loaded.prompt_length(args.prompt)
        prompts = [loaded.encode([text], width) for text in args.prompt]
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    generator = Generator(loaded.model, eos_id=loaded.eos_id, pad_id=loaded.pad_id,
                          jit_compile=False if args.no_jit else None)
    table = token_bytes(loaded.tokenizer)
    for text, prompt in zip(args.prompt, prompts):
        out.write(text)
        out.flush()
        stream = TextStream(table)
        if config.method == "beam":
            result = generator.generate(prompt, config)
            steps = result["token_ids"][0, :result["lengths"][0]]
        else:
            steps = (tokens[0] for tokens in generator.stream(prompt, config))
        for token in steps:
            if int(token) == loaded.eos_id:
                break
            out.write(stream.feed(int(token)))
            out.flush()
        out.write(stream.flush() + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
