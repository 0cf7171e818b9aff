"""`python -m data_pipelines.sample_tasks --output=DIR [--kinds=single,pair,...]`: one small
learnable fine-tuning task per kind, in its official format, from the sample corpus (no
downloads; docs/tasks.md "Sample tasks").

Kinds (KINDS: kind -> "module:function", imported only when that kind is asked for):
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
to <output>/README.json and a table is printed. A generator module that is not there (not yet
merged) is reported by name and the exit status is 1; the other kinds are still written.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
from typing import Dict, List, Optional

KINDS: Dict[str, str] = {
    "single": "data_pipelines.sample_tasks.classification:write_single",
    "pair": "data_pipelines.sample_tasks.classification:write_pair",
    "similarity": "data_pipelines.sample_tasks.classification:write_similarity",
    "swag": "data_pipelines.sample_tasks.swag:write",
    "squad": "data_pipelines.sample_tasks.squad:write",
    "conll": "data_pipelines.sample_tasks.conll:write",
    "seq2seq": "data_pipelines.sample_tasks.seq2seq:write",
    "freeform": "data_pipelines.sample_tasks.freeform:write",
}


class MissingGenerator(RuntimeError):
    """A kind's generator module is not installed (e.g. not merged yet)."""


def generator(kind: str):
    """The write function of a kind, imported now."""
    module, function = KINDS[kind].split(":")
    try:
        return getattr(importlib.import_module(module), function)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):
            raise MissingGenerator(f"kind {kind!r}: generator module {module} is missing") from e
        raise


def documents() -> list:
    from data_pipelines import sample_corpus

    return sample_corpus.topic_documents() + sample_corpus.module_documents()


def _baseline(summary: dict) -> str:
    b = summary.get("baseline") or {}
    value = b.get("value")
    return f"{b.get('metric', '?')} {value:.3f} ({b.get('name', '?')})" if isinstance(
        value, (int, float)) else str(b)


def table(results: Dict[str, dict]) -> str:
    lines = [f"{'kind':<11} {'files':<28} {'train/dev examples':<20} baseline"]
    for kind, summary in results.items():
        if "error" in summary:
            lines.append(f"{kind:<11} MISSING: {summary['error']}")
            continue
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
    results, missing = {}, []
    for kind in kinds:
        try:
            write = generator(kind)
        except MissingGenerator as e:
            print(f"error: {e}", file=sys.stderr)
            results[kind] = {"error": str(e)}
            missing.append(kind)
            continue
        results[kind] = write(docs, os.path.join(args.output, kind))
    with open(os.path.join(args.output, "README.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2, sort_keys=True)
        f.write("\n")
    print(table(results))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
