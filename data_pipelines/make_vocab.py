"""Vocabularies: `python -m data_pipelines.make_vocab --tokenizer=KIND --input=GLOB --output=PATH`.

Input: the corpus format (one sentence per line, blank lines between documents; ``.gz`` files
are decompressed), local or gs://, read by ``data_pipelines.sources`` with make_pretrain's rules:
lines that are not UTF-8, hold a NUL byte or are longer than --max_line_bytes are skipped and
counted (the first few named with file and line). Lines are streamed to the learners, never
read whole.
``--lower_case`` lower-cases the training text exactly as the tokenizer will
(``text.tokenizers``); it must match the ``--lower_case`` of the pipelines.

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
import io
import logging
import os
import tempfile
from typing import TYPE_CHECKING, Iterator, List, Optional, Sequence

from text import flags, vocab_files
from data_pipelines import gcs

# data_pipelines.sources (lines are read through Beam's file systems) is imported where files
# are read, not here: --help and usage errors answer before Beam loads (3.4 s -> 0.2 s).
if TYPE_CHECKING:
    from data_pipelines.sources import SkipLog

_LOG = logging.getLogger("data_pipelines.make_vocab")

# Ids the learner must leave room for, per kind (bpe: its specials plus the 256 bytes).
MIN_VOCAB_SIZE = {
    "wordpiece": len(vocab_files.RESERVED_TOKENS) + 1,
    "sentencepiece": 3 + len(vocab_files.SP_CONTROL) + 1,
    "bpe": len(vocab_files.BPE_SPECIALS) + 256,
}


def match_files(pattern: str) -> List[str]:
    """The files of ``pattern``; sources.InputError (the input matches nothing) otherwise."""
    from data_pipelines import sources

    return sources.match_files(pattern)


def iter_lines(files: Sequence[str], skips: Optional[SkipLog] = None,
               max_line_bytes: Optional[int] = None, progress_seconds: float = 0) -> Iterator[str]:
    """The sentences (non-blank lines, stripped) of ``files``, streamed file by file; bad lines
    are skipped and counted in ``skips`` (a sources.SkipLog: counts by reason, names the first
    few of each; make_pretrain's rules and report) and lines longer than ``max_line_bytes``
    (None: sources.DEFAULT_MAX_LINE_BYTES) too. ``progress_seconds`` > 0: a progress line with
    an ETA (reading_progress) every that many seconds."""
    from data_pipelines import sources

    lines = sources.iter_sentences(files, skips if skips is not None else sources.SkipLog(),
                                   max_line_bytes or sources.DEFAULT_MAX_LINE_BYTES)
    return reading_progress(lines, files, progress_seconds) if progress_seconds > 0 else lines


def reading_progress(lines: Iterator[str], files: Sequence[str], seconds: float) -> Iterator[str]:
    """``lines`` unchanged, with a line every ``seconds`` on stderr while the learner reads them:
    "[make_vocab] reading the corpus: 12.3/40.1 MB (31%) | 2.10 MB/s | ETA 0:00:13". The
    amount of work is the files' size; a line counts its UTF-8 bytes and newline (blank lines
    and stripped spaces are not seen, so the count ends a little under 100%). The reading is
    the bulk of a large corpus's learning; what the learner does after it is not counted."""
    import tensorflow as tf

    from text.progress import Eta

    total = sum(tf.io.gfile.stat(f).length for f in files)
    eta = Eta("[make_vocab] reading the corpus", total, unit="MB", seconds=seconds)
    return eta.wrap(lines, lambda line: len(line.encode("utf-8")) + 1)


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
    from data_pipelines.sources import InputError

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
                learn_params: Optional[dict] = None, skips: Optional[SkipLog] = None,
                max_line_bytes: Optional[int] = None, progress_seconds: float = 0) -> List[str]:
    """The WordPiece vocabulary of the sentences of ``files`` (reserved tokens first)."""
    import tensorflow as tf
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as bvd

    from data_pipelines.sources import InputError, SkipLog

    skips = skips if skips is not None else SkipLog()
    # An empty corpus would make the learner return only the reserved tokens: say so instead.
    # (A throw-away count: the learner's own pass below counts the skips.)
    if next(iter_lines(files, SkipLog(), max_line_bytes), None) is None:
        raise InputError(f"input files hold no text: {list(files)[:5]}")

    def sentences():
        skips.counts.clear()  # one count per pass over the files
        yield from iter_lines(files, skips, max_line_bytes, progress_seconds)

    # The lines go through the shared reader (not tf.data.TextLineDataset), so an invalid
    # UTF-8 line is skipped and counted instead of failing the learner.
    lines = tf.data.Dataset.from_generator(sentences, output_signature=tf.TensorSpec((), tf.string))
    vocab = bvd.bert_vocab_from_dataset(
        lines.batch(1024).prefetch(2),
        vocab_size=vocab_size,
        reserved_tokens=list(vocab_files.RESERVED_TOKENS),
        bert_tokenizer_params={"lower_case": lower_case},
        learn_params=learn_params or {},
    )
    if vocab[:len(vocab_files.RESERVED_TOKENS)] != vocab_files.RESERVED_TOKENS:
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
                        character_coverage: float = 0.9995, input_sentence_size: int = 10_000_000,
                        skips: Optional[SkipLog] = None,
                        max_line_bytes: Optional[int] = None, progress_seconds: float = 0) -> bytes:
    """A SentencePiece unigram model (serialized ModelProto) of the lines of ``files``."""
    import sentencepiece as spm

    lines = _nonempty(lowered(iter_lines(files, skips, max_line_bytes, progress_seconds), lower_case), files)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=lines, model_writer=model, model_type="unigram",
            vocab_size=vocab_size, hard_vocab_limit=False, character_coverage=character_coverage,
            pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
            pad_piece=vocab_files.SP_PAD, eos_piece=vocab_files.SP_EOS, unk_piece=vocab_files.SP_UNK,
            control_symbols=list(vocab_files.SP_CONTROL),
            # SentencePiece holds its training sentences in memory: sample at most this many.
            input_sentence_size=input_sentence_size, shuffle_input_sentence=True,
            num_threads=os.cpu_count() or 1, minloglevel=2)
    except RuntimeError as e:
        from data_pipelines.sources import InputError

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


def learn_bpe(files: Sequence[str], vocab_size: int, lower_case: bool, *, min_frequency: int = 2,
              skips: Optional[SkipLog] = None, max_line_bytes: Optional[int] = None,
              progress_seconds: float = 0):
    """A trained Hugging Face ByteLevelBPETokenizer (GPT-2 style) of the lines of ``files``."""
    from tokenizers import ByteLevelBPETokenizer

    lines = _nonempty(lowered(iter_lines(files, skips, max_line_bytes, progress_seconds), lower_case), files)
    # add_prefix_space=False as GPT-2/RoBERTa; the trainer's initial alphabet is all 256 bytes.
    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(lines, vocab_size=vocab_size, min_frequency=min_frequency,
                            special_tokens=list(vocab_files.BPE_SPECIALS), show_progress=False)
    return bpe


def write_bpe(bpe, output: str) -> tuple:
    """Writes vocab.json and merges.txt for ``output`` (see the module docstring); returns
    their paths."""
    vocab_path, merges_path = vocab_files.bpe_files(output if output.endswith(".json")
                                                   else vocab_files.join_path(output, "vocab.json"))
    with tempfile.TemporaryDirectory() as tmp:  # the library writes local files only
        saved_vocab, saved_merges = bpe.save_model(tmp)
        for src, dst in ((saved_vocab, vocab_path), (saved_merges, merges_path)):
            with open(src, "rb") as f:
                _write(dst, f.read())
    return vocab_path, merges_path


# ---------------------------------------------------------------------------------------------


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m data_pipelines.make_vocab", description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", choices=vocab_files.KINDS, default="wordpiece",
                   help="wordpiece (BERT; tensorflow-text learner), sentencepiece (ALBERT/XLNet/T5; "
                   "unigram), bpe (RoBERTa/GPT-2; byte-level BPE). Default wordpiece")
    p.add_argument("--input", required=True, help="glob of text files (local or gs://; .gz ok), one sentence per line")
    p.add_argument("--output", required=True,
                   help="wordpiece: vocab.txt; sentencepiece: X.model (+ X.vocab); bpe: vocab.json "
                   "(+ merges.txt beside it) or a folder")
    p.add_argument("--vocab_size", type=int, required=True, help="maximum vocabulary size, special tokens included")
    flags.add_bool(p, "lower_case", False,
                   "lower-case first (uncased model; wordpiece also strips accents)",
                   retired=["do_lower_case"])
    p.add_argument("--lower_thresh", type=int, default=None,
                   help="wordpiece: lowest word-piece count the learner's threshold search may go down to "
                   "(tensorflow-text default 10); lower it to get closer to --vocab_size on a small corpus")
    p.add_argument("--character_coverage", type=float, default=0.9995,
                   help="sentencepiece: share of characters covered (rarer ones become <unk>); "
                   "SentencePiece's default 0.9995, 1.0 for small alphabets")
    p.add_argument("--sp_input_sentence_size", type=int, default=10_000_000,
                   help="sentencepiece: at most this many sentences, sampled from the input, are kept in memory")
    p.add_argument("--min_frequency", type=int, default=2, help="bpe: least count of a merged pair (default 2)")
    p.add_argument("--max_line_bytes", type=int, default=None,
                   help="longer input lines are skipped and counted as line_too_long, as in make_pretrain "
                   "(default: data_pipelines.sources.DEFAULT_MAX_LINE_BYTES, 1 MiB)")
    p.add_argument("--progress_seconds", type=float, default=10.0,
                   help="a progress line with an ETA (from the input's size) on stderr every this many "
                   "seconds while the corpus is read; 0: none (default 10)")
    return p


def check_output(output: str, tokenizer: str) -> None:
    """Before any learning: a local --output must be a writable place for the vocabulary
    (its folder is made); InputError naming it otherwise. (gs:// is checked when written.)"""
    from data_pipelines.sources import InputError

    if "://" in output:
        return
    folder = output if tokenizer == "bpe" and not output.endswith(".json") else os.path.dirname(output)
    if folder != output and os.path.isdir(output):
        raise InputError(f"--output={output} is a directory; give the path of the file to write")
    try:
        os.makedirs(folder or ".", exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder or ".", prefix=".make_vocab-probe-"):
            pass
    except OSError as e:
        raise InputError(f"--output={output} cannot be written ({e.strerror}: {e.filename}); "
                         f"choose a writable path") from None


def run(argv: Optional[Sequence[str]] = None) -> None:
    """Learns the --tokenizer's vocabulary from --input and writes it to --output. Usage errors
    exit with status 2; input without text, an unwritable --output or missing gs://
    credentials end it with SystemExit("error: ...")."""
    p = make_parser()
    args = p.parse_args(argv)
    least = MIN_VOCAB_SIZE[args.tokenizer]
    if args.vocab_size < least:
        p.error(f"--vocab_size={args.vocab_size} is too small for --tokenizer={args.tokenizer}: "
                f"it needs at least {least} (special tokens" + (" and the 256 bytes)" if args.tokenizer == "bpe" else ")"))
    if args.tokenizer == "sentencepiece" and not args.output.endswith(".model"):
        p.error(f"--output={args.output}: a SentencePiece model path must end in .model")
    if args.max_line_bytes is not None and args.max_line_bytes < 1:
        p.error(f"--max_line_bytes must be >= 1, got {args.max_line_bytes}")
    if not args.progress_seconds >= 0:
        p.error(f"--progress_seconds must be >= 0 (0: no progress lines), got {args.progress_seconds}")
    from data_pipelines.sources import InputError, SkipLog

    skips = SkipLog()
    try:
        gcs.check_credentials({"--input": args.input, "--output": args.output})
        check_output(args.output, args.tokenizer)
        files = match_files(args.input)
        print(f"learning a {args.tokenizer} vocabulary (max {args.vocab_size}, lower_case={args.lower_case}) "
              f"from {len(files)} files", flush=True)
        if args.tokenizer == "wordpiece":
            learn_params = {} if args.lower_thresh is None else {"lower_thresh": args.lower_thresh}
            vocab = learn_vocab(files, args.vocab_size, args.lower_case, learn_params, skips, args.max_line_bytes,
                                progress_seconds=args.progress_seconds)
            write_vocab(vocab, args.output)
            size, vocab_arg = len(vocab), args.output
        elif args.tokenizer == "sentencepiece":
            import sentencepiece as spm

            model = learn_sentencepiece(files, args.vocab_size, args.lower_case,
                                        character_coverage=args.character_coverage,
                                        input_sentence_size=args.sp_input_sentence_size, skips=skips,
                                        max_line_bytes=args.max_line_bytes,
                                        progress_seconds=args.progress_seconds)
            print(f"wrote {write_sentencepiece(model, args.output)}")
            size, vocab_arg = spm.SentencePieceProcessor(model_proto=model).GetPieceSize(), args.output
        else:
            bpe = learn_bpe(files, args.vocab_size, args.lower_case, min_frequency=args.min_frequency,
                            skips=skips, max_line_bytes=args.max_line_bytes,
                            progress_seconds=args.progress_seconds)
            vocab_arg, merges_path = write_bpe(bpe, args.output)
            print(f"wrote {merges_path}")
            size = bpe.get_vocab_size()
    except (InputError, gcs.CredentialsError) as e:
        raise SystemExit(f"error: {e}") from e
    print(f"read {len(files)} files, {skips.summary()}")
    # The pipelines must tokenize as the learner saw the text: say which --lower_case goes
    # with this vocabulary (make_pretrain warns when they disagree).
    print(f"wrote {vocab_arg}: vocab_size={size} (pipelines: --vocab={vocab_arg} "
          f"{'--lower_case' if args.lower_case else '--no-lower_case'})")


def main(argv: Optional[Sequence[str]] = None) -> None:
    """The command line: run(argv) with log lines (skipped input lines) on stderr."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    run(argv)


if __name__ == "__main__":
    main()
