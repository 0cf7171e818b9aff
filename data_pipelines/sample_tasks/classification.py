"""Sample GLUE-format tasks from the sample corpus: single-sentence and pair classification and
a [0, 5] similarity regression (`python -m data_pipelines.sample_tasks`, docs/tasks.md).

Each writer takes documents [(name, [sentence, ...])] as data_pipelines.sample_corpus returns
them (names "topic:..." for the pydoc language-reference topics, "module:..." for module
docstrings) and writes train.tsv / dev.tsv into its folder, in a GLUE layout that
text.finetune.classification reads:

    single      SST-2 layout (sentence, label): label 1 for a sentence of a language-reference
                topic, 0 for a sentence of a module docstring (sample_corpus.task_rows: balanced,
                sentences in both sources dropped, dev = sha256(sentence) % 10 == 0).
                Baseline: the train set's majority class on dev.
    pair        MRPC layout (Quality, #1 ID, #2 ID, #1 String, #2 String): "1" when #2 String is
                the sentence that follows #1 String in its document, "0" when it is a sentence
                of another document (half each). Documents go to dev when sha256(name) % 5 == 0,
                so no document is in both splits. Baseline: the majority class.
    similarity  STS-B layout (index .. sentence1, sentence2, score): sentence2 keeps a random
                share of sentence1's words (in order) and fills up with words of a sentence of
                another document; score = 5 x Jaccard(lower-cased word sets of the two), two
                decimals. Baseline: the train mean as every prediction (Pearson / Spearman 0
                by definition; its MSE is reported).

Randomness is random.Random keyed by sha256 of (kind, document name, index), so the output
depends only on the documents (not on set/dict order, hash() or the process).
"""

from __future__ import annotations

import collections
import hashlib
import os
import random
import re
from typing import Dict, List, Sequence, Tuple

import numpy as np

from data_pipelines import sample_corpus

Documents = Sequence[Tuple[str, Sequence[str]]]
MAX_PAIRS_PER_SPLIT = {"train": 1600, "dev": 400}
MAX_SIMILARITY_PER_SPLIT = {"train": 1600, "dev": 400}
_WORD = re.compile(r"\S+")


def rng(*key) -> random.Random:
    """A random.Random seeded by sha256 of the key (deterministic across processes)."""
    digest = hashlib.sha256("\x1f".join(map(str, key)).encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def clean(text: str) -> str:
    """One line of TSV-safe text (no tabs or newlines)."""
    return sample_corpus.one_line(text)


def split_of(name: str) -> str:
    """dev for one document in five (sha256 of its name), train otherwise."""
    return "dev" if int(hashlib.sha256(name.encode("utf-8")).hexdigest(), 16) % 5 == 0 else "train"


def _write_tsv(path: str, header: List[str], rows: List[List[str]]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("\t".join(header) + "\n")
        for row in rows:
            f.write("\t".join(row) + "\n")


def _majority(train_labels: List[str], dev_labels: List[str]) -> dict:
    label = collections.Counter(train_labels).most_common(1)[0][0]
    return {"name": "majority class", "label": label, "metric": "accuracy",
            "value": float(np.mean([y == label for y in dev_labels]))}


def _counts(rows: Dict[str, list], label_index: int) -> dict:
    return {split: {"examples": len(r), "labels": dict(sorted(collections.Counter(
        row[label_index] for row in r).items()))} for split, r in rows.items()}


def write_single(documents: Documents, output_dir: str) -> dict:
    """SST-2-layout reference-vs-library sentences (see the module docstring)."""
    topics = [d for d in documents if d[0].startswith("topic:")]
    modules = [d for d in documents if not d[0].startswith("topic:")]
    task = sample_corpus.task_rows(topics, modules, max_train_per_label=1000,
                                   max_dev_per_label=200)
    label = {"reference": "1", "library": "0"}
    rows = {split: [[text, label[name]] for text, name in task[split]] for split in ("train",
                                                                                    "dev")}
    os.makedirs(output_dir, exist_ok=True)
    for split in rows:
        _write_tsv(os.path.join(output_dir, f"{split}.tsv"), ["sentence", "label"], rows[split])
    return {"files": ["train.tsv", "dev.tsv"], "format": "GLUE SST-2 (glue_task='sst2')",
            "labels": {"1": "language-reference topic", "0": "module docstring"},
            "counts": _counts(rows, 1),
            "baseline": _majority([r[1] for r in rows["train"]], [r[1] for r in rows["dev"]])}


def by_split(documents: Documents):
    """{"train": [(name, sentences)], "dev": [...]} by split_of, sentences cleaned; a document
    left with no sentence is dropped. The pair, similarity, swag and freeform tasks share it,
    so a document is in the same split in every sample task."""
    splits = {"train": [], "dev": []}
    for name, sentences in documents:
        sentences = [clean(s) for s in sentences if clean(s)]
        if sentences:
            splits[split_of(name)].append((name, sentences))
    return splits


def write_pair(documents: Documents, output_dir: str) -> dict:
    """MRPC-layout next-sentence pairs (see the module docstring)."""
    rows = {}
    for split, docs in by_split(documents).items():
        candidates = [(name, i) for name, sentences in docs for i in range(len(sentences) - 1)]
        r = rng("pair-order", split)
        r.shuffle(candidates)
        out = []
        for k, (name, i) in enumerate(candidates[:MAX_PAIRS_PER_SPLIT[split]]):
            sentences = dict(docs)[name]
            pick = rng("pair", name, i)
            if k % 2 == 0:
                second, label, second_id = sentences[i + 1], "1", f"{name}#{i + 1}"
            else:
                other_name, other = docs[pick.randrange(len(docs))]
                while other_name == name:
                    other_name, other = docs[pick.randrange(len(docs))]
                j = pick.randrange(len(other))
                second, label, second_id = other[j], "0", f"{other_name}#{j}"
            out.append([label, f"{name}#{i}", second_id, sentences[i], second])
        rows[split] = out
    os.makedirs(output_dir, exist_ok=True)
    header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    for split in rows:
        _write_tsv(os.path.join(output_dir, f"{split}.tsv"), header, rows[split])
    return {"files": ["train.tsv", "dev.tsv"], "format": "GLUE MRPC (glue_task='mrpc')",
            "labels": {"1": "#2 follows #1 in its document", "0": "#2 is from another document"},
            "counts": _counts(rows, 0),
            "baseline": _majority([r[0] for r in rows["train"]], [r[0] for r in rows["dev"]])}


def similarity_score(a: str, b: str) -> float:
    """5 x Jaccard overlap of the lower-cased word sets, rounded to two decimals."""
    x, y = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
    return round(5.0 * len(x & y) / len(x | y), 2) if x | y else 0.0


def write_similarity(documents: Documents, output_dir: str) -> dict:
    """STS-B-layout pairs scored by word overlap (see the module docstring)."""
    rows = {}
    for split, docs in by_split(documents).items():
        sentences = [(name, i, s) for name, ss in docs for i, s in enumerate(ss)
                     if len(_WORD.findall(s)) >= 4]
        order = rng("similarity-order", split)
        order.shuffle(sentences)
        out = []
        for k, (name, i, first) in enumerate(sentences[:MAX_SIMILARITY_PER_SPLIT[split]]):
            pick = rng("similarity", name, i)
            words = _WORD.findall(first)
            keep = pick.random()
            kept = [w for w in words if pick.random() < keep]
            other_name, _, other = sentences[pick.randrange(len(sentences))]
            filler = [w for w in _WORD.findall(other)]
            second = " ".join(kept + filler[:max(0, len(words) - len(kept))]) or filler[0]
            score = similarity_score(first, second)
            out.append([str(k), "sample", f"{name}", "2026", f"{i:04d}", "none", "none", first,
                        second, f"{score:.2f}"])
        rows[split] = out
    os.makedirs(output_dir, exist_ok=True)
    header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
              "sentence1", "sentence2", "score"]
    for split in rows:
        _write_tsv(os.path.join(output_dir, f"{split}.tsv"), header, rows[split])
    train = np.array([float(r[-1]) for r in rows["train"]])
    dev = np.array([float(r[-1]) for r in rows["dev"]])
    return {"files": ["train.tsv", "dev.tsv"], "format": "GLUE STS-B (glue_task='stsb')",
            "score": "5 x Jaccard(lower-cased word sets)",
            "counts": {s: {"examples": len(r)} for s, r in rows.items()},
            "baseline": {"name": "train mean for every pair", "metric": "pearson", "value": 0.0,
                         "mse": float(np.mean((dev - train.mean()) ** 2)),
                         "dev_score_std": float(dev.std())}}
