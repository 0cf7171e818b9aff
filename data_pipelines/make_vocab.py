"""WordPiece vocabularies: `python -m data_pipelines.make_vocab --input=GLOB --output=vocab.txt`.

Learns the vocabulary with tensorflow-text's learner (``bert_vocab_from_dataset``: BERT basic
tokenization, word counts, then WordPiece learning) over a tf.data dataset of the input lines,
with the reserved tokens [PAD] [UNK] [CLS] [SEP] [MASK] first (ids 0..4, [PAD] = 0).
``--lower_case`` must match the ``--do_lower_case`` of the pipelines that use the vocabulary.
The learner treats --vocab_size as a maximum: on a small corpus it returns fewer tokens.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import List, Optional, Sequence

from data_pipelines import tokenizers

_LOG = logging.getLogger("data_pipelines.make_vocab")


class InputError(ValueError):
    """The input glob matches nothing or holds no text."""


def match_files(pattern: str) -> List[str]:
    import tensorflow as tf

    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise InputError(f"--input={pattern} matches no files; check the path/glob")
    return files


def learn_vocab(files: Sequence[str], vocab_size: int, lower_case: bool,
                learn_params: Optional[dict] = None) -> List[str]:
    """The WordPiece vocabulary of the non-blank lines of ``files`` (reserved tokens first)."""
    import tensorflow as tf
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as bvd

    lines = (tf.data.TextLineDataset(list(files))
             .filter(lambda line: tf.strings.length(tf.strings.strip(line)) > 0))
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
    import tensorflow as tf

    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    if parent and not tf.io.gfile.exists(parent):
        tf.io.gfile.makedirs(parent)
    with tf.io.gfile.GFile(path, "w") as f:
        f.write("".join(t + "\n" for t in vocab))


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    p = argparse.ArgumentParser(prog="python -m data_pipelines.make_vocab", description=__doc__.split("\n\n")[0])
    p.add_argument("--input", required=True, help="glob of text files (local or gs://), one sentence per line")
    p.add_argument("--output", required=True, help="vocabulary file to write (one token per line)")
    p.add_argument("--vocab_size", type=int, required=True, help="maximum vocabulary size, reserved tokens included")
    p.add_argument("--lower_case", action="store_true", help="lower-case and strip accents first (uncased model)")
    p.add_argument("--lower_thresh", type=int, default=None,
                   help="lowest word-piece count the learner's threshold search may go down to "
                   "(tensorflow-text default 10); lower it to get closer to --vocab_size on a small corpus")
    args = p.parse_args(argv)
    if args.vocab_size <= len(tokenizers.RESERVED_TOKENS):
        p.error(f"--vocab_size must exceed the {len(tokenizers.RESERVED_TOKENS)} reserved tokens")
    try:
        files = match_files(args.input)
        print(f"learning a WordPiece vocabulary (max {args.vocab_size}, lower_case={args.lower_case}) "
              f"from {len(files)} files", flush=True)
        learn_params = {} if args.lower_thresh is None else {"lower_thresh": args.lower_thresh}
        vocab = learn_vocab(files, args.vocab_size, args.lower_case, learn_params)
    except InputError as e:
        raise SystemExit(f"error: {e}") from e
    write_vocab(vocab, args.output)
    print(f"wrote {args.output}: vocab_size={len(vocab)}")


if __name__ == "__main__":
    main(sys.argv[1:])
