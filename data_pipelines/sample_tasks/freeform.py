"""Sample free-form task (for garden.fewshot's scoring by generation): complete a sentence
start with its next word.

For a sentence of at least PROMPT_WORDS + 1 words whose word number PROMPT_WORDS + 1 is
alphabetic (letters only, so exact match is not about punctuation), the question is
"complete: <its first PROMPT_WORDS words>" and the answer that next word. Two questions per
document at most (sentences drawn by a keyed random.Random), documents split by
sha256(name) % 5 as classification.split_of (dev when 0), at most 300 train (the pool of
demonstrations) and 100 dev questions. Files: train.jsonl, dev.jsonl with one JSON object per
line, {"question": ..., "answer": ...}.

Trivial baseline (exact match on dev): the train set's most frequent answer for every question.
"""

from __future__ import annotations

import collections
import os
import re

from data_pipelines.sample_tasks.classification import Documents, by_split, rng
from data_pipelines.sample_tasks.seq2seq import write_jsonl

PROMPT_WORDS = 4
PER_DOCUMENT = 2
MAX_PER_SPLIT = {"train": 300, "dev": 100}
_WORD = re.compile(r"\S+")
_ALPHA = re.compile(r"^[A-Za-z]+$")


def questions(documents: Documents) -> dict:
    """split -> [{"question", "answer"}] (see the module docstring)."""
    out = {}
    for split, docs in by_split(documents).items():
        rows = []
        for name, sentences in docs:
            usable = [s for s in sentences if len(_WORD.findall(s)) > PROMPT_WORDS
                      and _ALPHA.match(_WORD.findall(s)[PROMPT_WORDS])]
            for sentence in rng("freeform", name).sample(usable, min(len(usable),
                                                                     PER_DOCUMENT)):
                words = _WORD.findall(sentence)
                rows.append({"question": "complete: " + " ".join(words[:PROMPT_WORDS]),
                             "answer": words[PROMPT_WORDS]})
        rng("freeform-order", split).shuffle(rows)
        out[split] = rows[:MAX_PER_SPLIT[split]]
    return out


def write(documents: Documents, output_dir: str) -> dict:
    """train.jsonl, dev.jsonl and the summary (see the module docstring)."""
    os.makedirs(output_dir, exist_ok=True)
    rows = questions(documents)
    write_jsonl(output_dir, rows)
    answer = collections.Counter(e["answer"] for e in rows["train"]).most_common(1)[0][0]
    value = sum(e["answer"] == answer for e in rows["dev"]) / len(rows["dev"])
    return {"files": ["train.jsonl", "dev.jsonl"], "format": 'JSONL {"question", "answer"}',
            "counts": {split: {"examples": len(r)} for split, r in rows.items()},
            "baseline": {"name": "most frequent train answer", "answer": answer,
                         "metric": "exact match", "value": value}}
