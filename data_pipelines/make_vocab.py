"""Vocabularies: `python -m data_pipelines.make_vocab --tokenizer=KIND --input=GLOB --output=PATH`.

Input: the corpus format (one sentence per line, blank lines between documents; ``.gz`` files
are decompressed), local or gs://. Lines are streamed to the learners, never read whole.
``--lower_case`` lower-cases the training text exactly as the tokenizer will
(``data_pipelines.tokenizers``); it must match the ``--do_lower_case`` of the pipelines.

* ``--tokenizer=wordpiece`` (default): tensorflow-text's learner (``bert_vocab_from_dataset``:
  BERT basic tokenization, word counts, then WordPiece learning) over a tf.data dataset of the
  lines; output a one-token-per-line ``vocab.txt`` with [PAD] [UNK] [CLS] [SEP] [MASK] first
  (ids 0..4). --vocab_size is a maximum: on a small corpus the learner returns fewer tokens.
* ``--tokenizer=sentencepiece``: the SentencePiece unigram trainer (Kudo 2018), as ALBERT/T5:
  <pad>=0 </s>=1 <unk>=2 (no <s>), then the control symbols [CLS] [SEP] [MASK] <eod> (3..6).
  --output must end in ``.model``; the ``.vocab`` (piece<TAB>log-probability) is written
  beside it. --vocab_size is a maximum (``hard_vocab_limit=false``); SentencePiece keeps
  --sp_input_sentence_size sentences sampled from the stream in memory.
* ``--tokenizer=bpe``: Hugging Face ``tokenizers``' byte-level BPE trainer (GPT-2 style: all
  256 bytes in the alphabet, so no unknown token is ever needed) with the special tokens
  <s> <pad> </s> <unk> <mask> <|endoftext|> (ids 0..5). --output is either a ``vocab.json``
  path (``merges.txt`` is written beside it; ``X-vocab.json`` pairs with ``X-merges.txt``) or
  a folder (``vocab.json`` and ``merges.txt`` inside). The pipelines' ``--vocab`` is the
  vocab.json path (or the folder).
"""

from __future__ import annotations

import argparse
import gzip
import io
import logging
import os
import sys
import tempfile
from typing import Iterator, List, Optional, Sequence

from data_pipelines import tokenizers

_LOG = logging.getLogger("data_pipelines.make_vocab")

# Ids the learner must leave room for, per kind (bpe: its specials plus the 256 bytes).
MIN_VOCAB_SIZE = {
    "wordpiece": len(tokenizers.RESERVED_TOKENS) + 1,
    "sentencepiece": 3 + len(tokenizers.SP_CONTROL) + 1,
    "bpe": len(tokenizers.BPE_SPECIALS) + 256,
}


class InputError(ValueError):
    """The input glob matches nothing or holds no text, or the learner cannot work with it."""


def match_files(pattern: str) -> List[str]:
    import tensorflow as tf

    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise InputError(f"--input={pattern} matches no files; check the path/glob")
    return files


def iter_lines(files: Sequence[str]) -> Iterator[str]:
    """The non-blank lines of ``files`` (stripped), streamed file by file; lines that are not
    valid UTF-8 are skipped with a warning (make_pretrain skips them too)."""
    import tensorflow as tf

    for path in files:
        with tf.io.gfile.GFile(path, "rb") as raw:
            f = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw
            for n, line in enumerate(f, 1):
                try:
                    text = line.decode("utf-8").strip()
                except UnicodeDecodeError:
                    _LOG.warning("skipping line %d of %s: not valid UTF-8", n, path)
                    continue
                if text:
                    yield text


def lowered(lines: Iterator[str], lower_case: bool, batch: int = 1024) -> Iterator[str]:
    """``lines``, lower-cased in batches by the TF op the tokenizers use (tf.strings.lower,
    UTF-8), so that the learner sees exactly the text the tokenizer will see."""
    if not lower_case:
        yield from lines
        return
    import tensorflow as tf

    buf: List[str] = []
    for line in lines:
        buf.append(line)
        if len(buf) == batch:
            yield from (b.decode("utf-8") for b in tf.strings.lower(buf, encoding="utf-8").numpy())
            buf = []
    if buf:
        yield from (b.decode("utf-8") for b in tf.strings.lower(buf, encoding="utf-8").numpy())


def _nonempty(lines: Iterator[str], files: Sequence[str]) -> Iterator[str]:
    """``lines``, or InputError if there is none (checked before the learner starts)."""
    first = next(lines, None)
    if first is None:
        raise InputError(f"input files hold no text: {list(files)[:5]}")

    def chain():
        yield first
        yield from lines

    return chain()


# ---------------------------------------------------------------------------------------------
# WordPiece


def learn_vocab(files: Sequence[str], vocab_size: int, lower_case: bool,
                learn_params: Optional[dict] = None) -> List[str]:
    """The WordPiece vocabulary of the non-blank lines of ``files`` (reserved tokens first)."""
    import tensorflow as tf
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as bvd

    plain = [f for f in files if not f.endswith(".gz")]
    packed = [f for f in files if f.endswith(".gz")]
    parts = ([tf.data.TextLineDataset(plain)] if plain else []) + (
        [tf.data.TextLineDataset(packed, compression_type="GZIP")] if packed else [])
    lines = parts[0]
    for more in parts[1:]:
        lines = lines.concatenate(more)
    lines = lines.filter(lambda line: tf.strings.length(tf.strings.strip(line)) > 0)
    # An empty corpus would make the learner return only the reserved tokens: say so instead.
    if next(iter(lines.take(1)), None) is None:
        raise InputError(f"input files hold no text: {list(files)[:5]}")
    vocab = bvd.bert_vocab_from_dataset(
        lines.batch(1024).prefetch(2),
        vocab_size=vocab_size,
        reserved_tokens=list(tokenizers.RESERVED_TOKENS),
        bert_tokenizer_params={"lower_case": lower_case},
        learn_params=learn_params or {},
    )
    if vocab[:len(tokenizers.RESERVED_TOKENS)] != tokenizers.RESERVED_TOKENS:
        raise AssertionError(f"learner did not put the reserved tokens first: {vocab[:8]}")
    return vocab


def write_vocab(vocab: Sequence[str], path: str) -> None:
    _write(path, "".join(t + "\n" for t in vocab).encode("utf-8"))


def _write(path: str, data: bytes) -> None:
    import tensorflow as tf

    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    if parent and not tf.io.gfile.exists(parent):
        tf.io.gfile.makedirs(parent)
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------------------------------------
# SentencePiece


def learn_sentencepiece(files: Sequence[str], vocab_size: int, lower_case: bool, *,
                        character_coverage: float = 0.9995,
                        input_sentence_size: int = 10_000_000) -> bytes:
    """A SentencePiece unigram model (serialized ModelProto) of the lines of ``files``."""
    import sentencepiece as spm

    lines = _nonempty(lowered(iter_lines(files), lower_case), files)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=lines, model_writer=model, model_type="unigram",
            vocab_size=vocab_size, hard_vocab_limit=False, character_coverage=character_coverage,
            pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
            pad_piece=tokenizers.SP_PAD, eos_piece=tokenizers.SP_EOS, unk_piece=tokenizers.SP_UNK,
            control_symbols=list(tokenizers.SP_CONTROL),
            # SentencePiece holds its training sentences in memory: sample at most this many.
            input_sentence_size=input_sentence_size, shuffle_input_sentence=True,
            num_threads=os.cpu_count() or 1, minloglevel=2)
    except RuntimeError as e:
        raise InputError(f"SentencePiece could not learn a {vocab_size}-piece model from "
                         f"{list(files)[:5]}: {str(e).splitlines()[0]}") from None
    return model.getvalue()


def write_sentencepiece(model: bytes, path: str) -> str:
    """Writes ``path`` (.model) and its .vocab beside it; returns the .vocab path."""
    import sentencepiece as spm

    _write(path, model)
    sp = spm.SentencePieceProcessor(model_proto=model)
    vocab_path = path[:-len(".model")] + ".vocab"
    _write(vocab_path, "".join(f"{sp.IdToPiece(i)}\t{sp.GetScore(i):g}\n"
                               for i in range(sp.GetPieceSize())).encode("utf-8"))
    return vocab_path


# ---------------------------------------------------------------------------------------------
# Byte-level BPE


def learn_bpe(files: Sequence[str], vocab_size: int, lower_case: bool, *, min_frequency: int = 2):
    """A trained Hugging Face ByteLevelBPETokenizer (GPT-2 style) of the lines of ``files``."""
    from tokenizers import ByteLevelBPETokenizer

    lines = _nonempty(lowered(iter_lines(files), lower_case), files)
    # add_prefix_space=False as GPT-2/RoBERTa; the trainer's initial alphabet is all 256 bytes.
    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(lines, vocab_size=vocab_size, min_frequency=min_frequency,
                            special_tokens=list(tokenizers.BPE_SPECIALS), show_progress=False)
    return bpe


def write_bpe(bpe, output: str) -> tuple:
    """Writes vocab.json and merges.txt for ``output`` (see the module docstring); returns
    their paths."""
    vocab_path, merges_path = tokenizers.bpe_files(output if output.endswith(".json")
                                                   else tokenizers._join(output, "vocab.json"))
    with tempfile.TemporaryDirectory() as tmp:  # the library writes local files only
        saved_vocab, saved_merges = bpe.save_model(tmp)
        for src, dst in ((saved_vocab, vocab_path), (saved_merges, merges_path)):
            with open(src, "rb") as f:
                _write(dst, f.read())
    return vocab_path, merges_path


# ---------------------------------------------------------------------------------------------


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    p = argparse.ArgumentParser(prog="python -m data_pipelines.make_vocab", description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", choices=tokenizers.KINDS, default="wordpiece",
                   help="wordpiece (BERT; tensorflow-text learner), sentencepiece (ALBERT/XLNet/T5; "
                   "unigram), bpe (RoBERTa/GPT-2; byte-level BPE). Default wordpiece")
    p.add_argument("--input", required=True, help="glob of text files (local or gs://; .gz ok), one sentence per line")
    p.add_argument("--output", required=True,
                   help="wordpiece: vocab.txt; sentencepiece: X.model (+ X.vocab); bpe: vocab.json "
                   "(+ merges.txt beside it) or a folder")
    p.add_argument("--vocab_size", type=int, required=True, help="maximum vocabulary size, special tokens included")
    p.add_argument("--lower_case", action="store_true",
                   help="lower-case first (uncased model; wordpiece also strips accents)")
    p.add_argument("--lower_thresh", type=int, default=None,
                   help="wordpiece: lowest word-piece count the learner's threshold search may go down to "
                   "(tensorflow-text default 10); lower it to get closer to --vocab_size on a small corpus")
    p.add_argument("--character_coverage", type=float, default=0.9995,
                   help="sentencepiece: share of characters covered (rarer ones become <unk>); "
                   "SentencePiece's default 0.9995, 1.0 for small alphabets")
    p.add_argument("--sp_input_sentence_size", type=int, default=10_000_000,
                   help="sentencepiece: at most this many sentences, sampled from the input, are kept in memory")
    p.add_argument("--min_frequency", type=int, default=2, help="bpe: least count of a merged pair (default 2)")
    args = p.parse_args(argv)
    least = MIN_VOCAB_SIZE[args.tokenizer]
    if args.vocab_size < least:
        p.error(f"--vocab_size={args.vocab_size} is too small for --tokenizer={args.tokenizer}: "
                f"it needs at least {least} (special tokens" + (" and the 256 bytes)" if args.tokenizer == "bpe" else ")"))
    if args.tokenizer == "sentencepiece" and not args.output.endswith(".model"):
        p.error(f"--output={args.output}: a SentencePiece model path must end in .model")
    try:
        files = match_files(args.input)
        print(f"learning a {args.tokenizer} vocabulary (max {args.vocab_size}, lower_case={args.lower_case}) "
              f"from {len(files)} files", flush=True)
        if args.tokenizer == "wordpiece":
            learn_params = {} if args.lower_thresh is None else {"lower_thresh": args.lower_thresh}
            vocab = learn_vocab(files, args.vocab_size, args.lower_case, learn_params)
            write_vocab(vocab, args.output)
            size, vocab_arg = len(vocab), args.output
        elif args.tokenizer == "sentencepiece":
            model = learn_sentencepiece(files, args.vocab_size, args.lower_case,
                                        character_coverage=args.character_coverage,
                                        input_sentence_size=args.sp_input_sentence_size)
            vocab_file = write_sentencepiece(model, args.output)
            import sentencepiece as spm

            size, vocab_arg = spm.SentencePieceProcessor(model_proto=model).GetPieceSize(), args.output
            print(f"wrote {vocab_file}")
        else:
            bpe = learn_bpe(files, args.vocab_size, args.lower_case, min_frequency=args.min_frequency)
            vocab_arg, merges_path = write_bpe(bpe, args.output)
            size = bpe.get_vocab_size()
            print(f"wrote {merges_path}")
    except InputError as e:
        raise SystemExit(f"error: {e}") from e
    print(f"wrote {vocab_arg}: vocab_size={size} (pipelines: --vocab={vocab_arg})")


if __name__ == "__main__":
    main(sys.argv[1:])
