"""Sample text-to-text task from the sample corpus: two consecutive sentences -> the second.

For each pair of consecutive sentences (i, i + 1) of a document, both of MIN_WORDS..MAX_WORDS
words, the source is "sentence i sentence i+1" and the target is sentence i + 1 (extractive: a
model learns to find where the second sentence starts and copy it, which a tiny model picks up
in a short CPU run; the paragraph -> first sentence variant makes the lead-N baseline nearly
perfect). Documents are split by sha256(name) % 10: 0 -> dev, 5 -> test, train otherwise (the
dev and test documents are exactly classification.split_of's dev documents), so no document
is in two splits. Files: train.jsonl, dev.jsonl, test.jsonl with one JSON object per line,
{"source": ..., "target": ...} (what garden.tasks.generation reads; it reads the same
fields from a TSV with a header).

Trivial baselines on dev, ROUGE-1/2/L F (rouge-score: its default tokenizer, no stemmer; the
mean over the examples and its standard error, the numbers text.rouge's
trivial_baselines gives, which garden.tasks.generation reports beside its scores), in the
summary:
    lead     the source's first N words, N = the median word count of the train targets
             (what a summariser's lead-N rule would say; here it returns mostly sentence i);
    constant the N most frequent words of the train targets, in frequency order, for every
             example;
    empty    the empty prediction (ROUGE 0 by definition).
and, for reference, not a trivial baseline, the extractive rule that solves the task:
    tail     the source's last N words.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from data_pipelines.sample_tasks.classification import Documents, clean, rng
from text import rouge

MIN_WORDS, MAX_WORDS = 3, 12
MAX_PER_SPLIT = {"train": 2000, "dev": 200, "test": 200}
_WORD = re.compile(r"\S+")


def split_of(name: str) -> str:
    """dev / test for one document in ten each (sha256 of its name), train otherwise."""
    rest = int(hashlib.sha256(name.encode("utf-8")).hexdigest(), 16) % 10
    return {0: "dev", 5: "test"}.get(rest, "train")


def pairs(documents: Documents) -> dict:
    """split -> [{"source", "target", "document", "index"}] in a keyed shuffled order."""
    out = {split: [] for split in MAX_PER_SPLIT}
    for name, sentences in documents:
        sentences = [clean(s) for s in sentences]
        for i in range(len(sentences) - 1):
            first, second = sentences[i], sentences[i + 1]
            if all(MIN_WORDS <= len(_WORD.findall(s)) <= MAX_WORDS for s in (first, second)):
                out[split_of(name)].append({"source": f"{first} {second}", "target": second,
                                            "document": name, "index": i})
    for split, rows in out.items():
        rng("seq2seq-order", split).shuffle(rows)
        del rows[MAX_PER_SPLIT[split]:]
    return out


def write_jsonl(output_dir: str, rows: dict) -> None:
    """<output_dir>/<split>.jsonl for split -> [record], one JSON object per line (UTF-8)."""
    for split, examples in rows.items():
        with open(os.path.join(output_dir, f"{split}.jsonl"), "w", encoding="utf-8") as f:
            for e in examples:
                f.write(json.dumps(e, ensure_ascii=False) + "\n")


def write(documents: Documents, output_dir: str) -> dict:
    """train/dev/test.jsonl and the summary (see the module docstring)."""
    os.makedirs(output_dir, exist_ok=True)
    rows = pairs(documents)
    write_jsonl(output_dir, {split: [{"source": e["source"], "target": e["target"]} for e in r]
                             for split, r in rows.items()})
    dev = rows["dev"]
    scores = rouge.trivial_baselines([e["target"] for e in rows["train"]],
                                     [e["source"] for e in dev], [e["target"] for e in dev])
    return {"files": ["train.jsonl", "dev.jsonl", "test.jsonl"],
            "format": 'JSONL {"source", "target"}',
            "counts": {split: {"examples": len(r)} for split, r in rows.items()},
            "baseline": {"name": "lead-N words of the source", "metric": "rougeL",
                         "value": scores["lead"]["rougeL"]},
            "baselines": scores}
