"""The tagging sample task: code names, module names and keywords in the sample corpus's
sentences, written as CoNLL-2003 files (IOB1, like the original).

Words: each sentence is cut into words by one regular expression (identifiers, dotted names
such as os.path, numbers, and every other non-space character alone, so punctuation is a
word as in CoNLL-2003). Tags, one rule per type, tried in this order:
    KW    a Python keyword that is not also an everyday English word, case-sensitive:
          False None True async await def elif lambda nonlocal
    MOD   a standard-library module name (sys.stdlib_module_names) of 4+ characters that is
          not an everyday English word (a fixed list below), or a dotted name whose first
          part is one (os.path, asyncio.base_events)
    CODE  an identifier that looks like code: CamelCase with two or more humps (ValueError),
          a name holding "_" (base_events, __init__), or another dotted name whose parts are
          not all single letters (obj.method; e.g and i.e are not code)
    O     everything else
Each entity is one word; two adjacent entities of one type give the second B- (IOB1).
The POS and chunk columns are written as -X- (no tagger is run).

Sentences: those with at least one entity, and one in four of the others (by sha256 of the
sentence), so that O-only sentences stay in the data; documents go to dev when
sha256(document name) % 10 == 0 (so dev holds unseen modules and identifiers), to train
otherwise; at most MAX_TRAIN / MAX_DEV sentences, in document order.

Files: train.txt, dev.txt. Baselines on dev (seqeval entity F1, lenient, per sentence):
"all_O_f1" (0: no entity predicted) and "lookup_f1" (each dev word gets its most frequent
train tag, O when unseen).
"""

from __future__ import annotations

import collections
import hashlib
import keyword
import os
import re
import sys
from typing import Dict, List, Sequence, Tuple

from text.finetune.tagging import ConllSentence, format_sentences, iob1_to_iob2

MAX_TRAIN, MAX_DEV = 3000, 500
LABELS = ("O", "B-CODE", "I-CODE", "B-KW", "I-KW", "B-MOD", "I-MOD")

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*|\d+(?:\.\d+)*|[^\w\s]")
_KEYWORDS = tuple(k for k in sorted(keyword.kwlist) if k in (
    "False", "None", "True", "async", "await", "def", "elif", "lambda", "nonlocal"))
# Module names that are everyday English words: tagged O when they stand alone.
_ENGLISH_MODULES = frozenset((
    "array", "calendar", "code", "copy", "locale", "mailbox", "numbers", "operator", "parser",
    "platform", "profile", "queue", "random", "resource", "secrets", "select", "shelve",
    "signal", "site", "string", "symbol", "this", "time", "token", "trace", "types", "wave",
    "test", "tests", "keyword", "glob", "math", "struct", "email", "html", "json", "errno",
    "base", "site", "sched", "stat", "uuid", "zipfile"))
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+$")
_CAMEL = re.compile(r"^_*[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+$")


def _modules() -> Tuple[str, ...]:
    return tuple(sorted(m for m in sys.stdlib_module_names if not m.startswith("_")))


def words_of(sentence: str) -> List[str]:
    return _WORD.findall(sentence)


def tag_word(word: str, modules) -> str:
    """The type of one word (KW, MOD, CODE) or "O" (module docstring)."""
    if word in _KEYWORDS:
        return "KW"
    first = word.split(".")[0]
    if first in modules and len(first) >= 4 and ("." in word or word not in _ENGLISH_MODULES):
        return "MOD"
    if _CAMEL.match(word) or ("_" in word and re.search(r"[A-Za-z]", word)):
        return "CODE"
    if _DOTTED.match(word) and not all(len(p) == 1 for p in word.split(".")):
        return "CODE"
    return "O"


def iob1(types: Sequence[str]) -> List[str]:
    """One-word entities in IOB1: I-X, or B-X right after another X entity."""
    out = []
    for i, t in enumerate(types):
        if t == "O":
            out.append("O")
        else:
            out.append(("B-" if i and types[i - 1] == t else "I-") + t)
    return out


def _hash(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest(), 16)


def make_sentences(documents) -> Dict[str, List[ConllSentence]]:
    """{"train": [...], "dev": [...]} from (name, [sentence, ...]) documents."""
    modules = frozenset(_modules())
    splits: Dict[str, List[ConllSentence]] = {"train": [], "dev": []}
    limits = {"train": MAX_TRAIN, "dev": MAX_DEV}
    for d, (name, sentences) in enumerate(documents):
        split = "dev" if _hash(name) % 10 == 0 else "train"
        for text in sentences:
            if len(splits[split]) >= limits[split]:
                break
            words = words_of(text)
            if not words:
                continue
            tags = iob1([tag_word(w, modules) for w in words])
            if all(t == "O" for t in tags) and _hash(text) % 4:
                continue
            splits[split].append(ConllSentence(tuple(words), tuple(tags), document_index=d))
    return splits


def _entity_f1(gold: List[List[str]], pred: List[List[str]]) -> float:
    from seqeval.metrics import f1_score

    return float(f1_score([iob1_to_iob2(s) for s in gold], [iob1_to_iob2(s) for s in pred],
                          zero_division=0))


def baselines(train: Sequence[ConllSentence], dev: Sequence[ConllSentence]) -> Dict[str, float]:
    counts: Dict[str, collections.Counter] = {}
    for s in train:
        for w, t in zip(s.words, s.tags):
            counts.setdefault(w, collections.Counter())[t[2:] if t != "O" else "O"] += 1
    lookup = {w: c.most_common(1)[0][0] for w, c in counts.items()}
    gold = [list(s.tags) for s in dev]
    pred = [iob1([lookup.get(w, "O") for w in s.words]) for s in dev]
    return {"all_O_f1": _entity_f1(gold, [["O"] * len(g) for g in gold]),
            "lookup_f1": _entity_f1(gold, pred)}


def write(documents, output_dir: str) -> dict:
    """Writes train.txt and dev.txt (CoNLL-2003, IOB1) into output_dir; returns files,
    counts (sentences, words, entities per type) and the dev baselines."""
    os.makedirs(output_dir, exist_ok=True)
    splits = make_sentences(documents)
    files, counts = [], {}
    for split, sentences in splits.items():
        name = f"{split}.txt"
        with open(os.path.join(output_dir, name), "w", encoding="utf-8", newline="\n") as f:
            f.write(format_sentences(sentences))
        files.append(name)
        entities = collections.Counter(t[2:] for s in sentences for t in s.tags if t != "O")
        counts[split] = {"sentences": len(sentences),
                         "words": sum(len(s.words) for s in sentences),
                         "entities": dict(sorted(entities.items()))}
    return {"files": files, "counts": counts, "labels": list(LABELS), "scheme": "iob1",
            "baseline": baselines(splits["train"], splits["dev"])}
