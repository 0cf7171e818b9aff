"""A sample sentence-pair task for CoVe's translation pretraining, made from a text corpus.

SYNTHETIC: the garden ships no parallel corpus, so the "translation" of a sentence is the same
sentence with its words in reverse order (a deterministic word-level transformation: learning
it needs the encoder to carry every word and its position to the decoder, as translation
does, but it is not translation). It exists for tests and smoke runs of garden.CovePretraining;
a real run reads WMT-style pairs (source \t target) in the same TSV layout.

Output: <output>/train.tsv and <output>/dev.tsv with a header "source\ttarget", one pair a line;
every `eval_every`-th sentence goes to dev.tsv.

Example:
    python -m data_pipelines.sample_corpus --output=/tmp/sample
    python -m garden.models.cove.sample_pairs --input=/tmp/sample/part-0.txt --output=/tmp/pairs
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Iterable, List, Tuple


def reversed_pair(sentence: str) -> Tuple[str, str]:
    """(source, target): the sentence with its whitespace-separated words, and the same words
    in reverse order."""
    words = sentence.split()
    return " ".join(words), " ".join(reversed(words))


def sentence_lines(text: str, max_words: int) -> List[str]:
    """The corpus's non-empty lines (one sentence each) of at most max_words words."""
    return [line.strip() for line in text.splitlines()
            if line.strip() and len(line.split()) <= max_words]


def write_pair_task(sentences: Iterable[str], output: str, eval_every: int = 10) -> Tuple[int, int]:
    """Writes train.tsv and dev.tsv of reversed_pair(sentence) under `output`; returns the
    (train, dev) pair counts. A tab in a sentence is a space in its pair."""
    os.makedirs(output, exist_ok=True)
    rows = {"train": [], "dev": []}
    for i, sentence in enumerate(sentences):
        source, target = reversed_pair(sentence.replace("\t", " "))
        if source:
            rows["dev" if (i + 1) % eval_every == 0 else "train"].append(f"{source}\t{target}")
    for split, lines in rows.items():
        with open(os.path.join(output, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("source\ttarget\n" + "".join(line + "\n" for line in lines))
    return len(rows["train"]), len(rows["dev"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="a text file, one sentence a line")
    parser.add_argument("--output", required=True, help="directory for train.tsv and dev.tsv")
    parser.add_argument("--max_words", type=int, default=20)
    parser.add_argument("--max_sentences", type=int, default=2000)
    parser.add_argument("--eval_every", type=int, default=10)
    args = parser.parse_args(argv)
    if not os.path.isfile(args.input):
        print(f"error: --input={args.input} is not a file", file=sys.stderr)
        return 2
    with open(args.input, encoding="utf-8") as f:
        sentences = sentence_lines(f.read(), args.max_words)[:args.max_sentences]
    if not sentences:
        print(f"error: --input={args.input} holds no non-empty line of at most "
              f"{args.max_words} words",
              file=sys.stderr)
        return 2
    train, dev = write_pair_task(sentences, args.output, args.eval_every)
    print(f"[sample_pairs] {train} train and {dev} dev pairs (synthetic: reversed word order) "
          f"in {args.output}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
