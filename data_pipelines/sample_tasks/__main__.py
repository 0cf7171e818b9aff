"""`python -m data_pipelines.sample_tasks --output=DIR [--kinds=single,pair,...]`: one small
learnable fine-tuning task per kind, in its official format, from the sample corpus (no
downloads; docs/tasks.md "Sample tasks").

Kinds (KINDS: kind -> its generator):
    single      GLUE SST-2 TSV        reference-vs-library sentences
    pair        GLUE MRPC TSV         is #2 the next sentence of #1?
    similarity  GLUE STS-B TSV        5 x word-overlap score in [0, 5]
    swag        SWAG CSV              four-way next-sentence choice
    squad       SQuAD v2.0 JSON       extractive QA with unanswerable questions
    conll       CoNLL-2003            tagging of code names / modules / keywords
    seq2seq     JSONL source/target   two consecutive sentences -> the second (ROUGE)
    freeform    JSONL question/answer "complete: <4 words>" -> the next word (exact match)
Each generator is called as write(documents, <output>/<kind>/) with the topic documents then
the module documents of data_pipelines.sample_corpus and returns a JSON-serialisable summary
with "files", "counts" and "baseline" (the trivial baseline on the dev split). The summaries go
to <output>/README.json and a table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Callable, Dict, List, Optional

from data_pipelines import sample_corpus
from data_pipelines.sample_tasks import classification, conll, freeform, seq2seq, squad, swag

KINDS: Dict[str, Callable[[classification.Documents, str], dict]] = {
    "single": classification.write_single,
    "pair": classification.write_pair,
    "similarity": classification.write_similarity,
    "swag": swag.write,
    "squad": squad.write,
    "conll": conll.write,
    "seq2seq": seq2seq.write,
    "freeform": freeform.write,
}


def generator(kind: str) -> Callable[[classification.Documents, str], dict]:
    """The write function of a kind."""
    return KINDS[kind]


def documents() -> list:
    return sample_corpus.topic_documents() + sample_corpus.module_documents()


def _baseline(summary: dict) -> str:
    b = summary.get("baseline") or {}
    value = b.get("value")
    return f"{b.get('metric', '?')} {value:.3f} ({b.get('name', '?')})" if isinstance(
        value, (int, float)) else str(b)


def table(results: Dict[str, dict]) -> str:
    lines = [f"{'kind':<11} {'files':<28} {'train/dev examples':<20} baseline"]
    for kind, summary in results.items():
        counts = summary.get("counts", {})
        sizes = "/".join(str(c.get("examples", c) if isinstance(c, dict) else c)
                         for c in counts.values())
        lines.append(f"{kind:<11} {', '.join(summary.get('files', [])):<28} {sizes:<20} "
                     f"{_baseline(summary)}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m data_pipelines.sample_tasks",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, help="directory; one folder per kind")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"comma-separated subset of {','.join(KINDS)} (default: all)")
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        parser.error(f"--kinds: unknown {unknown}; choose from {','.join(KINDS)}")
    try:  # an unusable --output fails here, in one line, before any kind is generated
        os.makedirs(args.output, exist_ok=True)
        tempfile.TemporaryFile(dir=args.output).close()
    except OSError as e:
        print(f"error: --output={args.output}: cannot write there ({e.strerror})", file=sys.stderr)
        return 1
    docs = documents()
    results = {kind: KINDS[kind](docs, os.path.join(args.output, kind)) for kind in kinds}
    with open(os.path.join(args.output, "README.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2, sort_keys=True)
        f.write("\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
