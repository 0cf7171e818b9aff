"""Generate text from a saved GenerativeLM, streaming tokens as they are produced.

    python -m garden.generate --model_dir=DIR --prompt="Once upon a time" [--prompt=...] \
        [--max_new_tokens=32] [--method=greedy|sample|beam] [--temperature=1.0] [--top_k=0] \
        [--top_p=1.0] [--num_beams=4] [--length_penalty=0.0] [--length_penalty_kind=gnmt] \
        [--min_new_tokens=0] [--no_repeat_ngram_size=0] [--seed=0] [--no-jit] \
        [--intra_op_threads=1] [--inter_op_threads=0]

For each prompt it prints the prompt, then each new token's text the moment it is decoded
(flushed), then a newline; beam search prints its best hypothesis when the search ends (a
beam's best is known only then). Several prompts are decoded one after another, all
left-padded to the longest one, so the decode loop is compiled once for all of them. The
decoding flags are garden.models.decoding.GenerationConfig's fields.

Threads: by default TensorFlow's intra-op pool has one thread, and a decode step's large
products are split into parts that run side by side on the inter-op threads
(garden/layers/row_products.py): GPT-2 small on 2 cores, 32-token prompts, greedy, 31.7-38.8
tokens/s at batch 1 in four runs against 24.1-30.6 with TensorFlow's default pools in the same
runs, and within 0.95x-1.09x of them at batch 8 (benchmarks/README.md `generation`). A long
prompt's first pass is about 1.2x slower so (512 tokens); `--intra_op_threads=0` restores
TensorFlow's default.

--model_dir is opened by garden.runs.open_generation, one of:
  * a garden.train run directory of an LM task (operative_config.gin + checkpoints/, e.g.
    `garden.train --config=configs/gpt2_tiny.gin ... --model_dir=runs/gpt2`): GPT, GPT-2,
    GPT-3, T5 or BART pretraining, causal LM or text-to-text fine-tuning. The task is rebuilt
    from operative_config.gin (it reads its vocabulary and data files as training did) and its
    newest checkpoint restored; the prompt is laid out as training laid out a text (the
    family's framing, or a fine-tuning task's prefix, separator and decoder start). A run of
    another task (an encoder, XLNet, ELMo, ULMFiT, a classifier) is refused in one line;
  * a garden.convert output directory, through its generate/ model directory;
  * a garden.generate model directory (garden/generate_dir.py: lm.keras, generation.json and
    the vocabulary), which garden.convert writes as OUT/generate/ (training writes none).

Text out: each id's bytes (byte-level BPE: its bytes; SentencePiece: the piece with U+2581 as a
space and <0xNN> byte pieces as bytes; WordPiece: "##" pieces glued, others after a space;
special tokens: nothing) go through an incremental UTF-8 decoder, so a character split over
two tokens prints once whole.
"""

from __future__ import annotations

import argparse
import codecs
import dataclasses
import re
import sys
from typing import List, Optional, Sequence

from garden.generate_dir import GenerationModel


def token_bytes(tokenizer) -> List[bytes]:
    """The bytes each id prints as (module docstring); special ids print nothing."""
    from text.vocab_files import BPE_WORD_START, SP_WORD_START
    from text.bpe import bytes_to_unicode

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


def load_model_dir(model_dir: str) -> GenerationModel:
    """The model of --model_dir (module docstring), with errors that name the path at fault
    (garden.runs.open_generation, the loader garden.fewshot shares)."""
    from garden import runs

    return runs.open_generation(model_dir, who="garden.generate")


# --- the command line --------------------------------------------------------------------------

# The flags of garden.models.decoding.GenerationConfig's fields, with their types. They are
# left out of the parsed arguments unless given (argparse.SUPPRESS), so the dataclass holds
# their defaults and checks (a bad --method is its ValueError): the parser imports no
# TensorFlow, and --help answers before TensorFlow loads.
DECODING_FLAGS = (("max_new_tokens", int), ("method", str), ("temperature", float),
                  ("top_k", int), ("top_p", float), ("num_beams", int),
                  ("length_penalty", float), ("length_penalty_kind", str),
                  ("min_new_tokens", int), ("no_repeat_ngram_size", int), ("seed", int))


def build_parser() -> argparse.ArgumentParser:
    from text.flags import add_bool

    p = argparse.ArgumentParser(prog="python -m garden.generate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", required=True,
                   help="a garden.train run of an LM task, a garden.convert directory or a "
                        "garden.generate model directory (see above)")
    p.add_argument("--prompt", action="append", required=True,
                   help="a prompt (repeat the flag for several)")
    for name, kind in DECODING_FLAGS:
        p.add_argument(f"--{name}", type=kind, default=argparse.SUPPRESS,
                       help="GenerationConfig's field (its default: the usage above)")
    add_bool(p, "jit", True, "decode with XLA; --no-jit: without (compiles faster, runs "
             "slower)")
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
    args = build_parser().parse_args(argv)
    # After parsing: --help and usage errors answer before TensorFlow loads.
    from garden.models.decoding import GenerationConfig, Generator

    out = out or sys.stdout
    fields = {f.name for f in dataclasses.fields(GenerationConfig)}
    try:
        set_threads(args.intra_op_threads, args.inter_op_threads)
        config = GenerationConfig(**{k: v for k, v in vars(args).items() if k in fields})
        loaded = load_model_dir(args.model_dir)
        width = loaded.prompt_length(args.prompt)
        prompts = [loaded.encode([text], width) for text in args.prompt]
    except (ValueError, OSError) as e:  # RunError, a task's data error, a missing file
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    generator = Generator(loaded.model, eos_id=loaded.eos_id, pad_id=loaded.pad_id,
                          jit_compile=None if args.jit else False)
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
