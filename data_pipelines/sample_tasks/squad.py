"""The extractive QA sample task: SQuAD v2.0 JSON made from the sample corpus.

``write(documents, output_dir)`` writes ``train-v2.0.json`` and ``dev-v2.0.json`` (the official
layout, text/finetune/question_answering.py reads them) and returns {"files", "counts",
"baseline"}. documents: (name, [sentence, ...]) as data_pipelines.sample_corpus gives them.

How it is made (deterministic: sha256 of names, never hash() or set order):

* Paragraphs: each document's sentences, in order, in groups of PARAGRAPH_SENTENCES (1: short
  contexts are what BERT-tiny learns in a few hundred steps; with larger groups a last group
  of one sentence is dropped), joined by one space; the title is the document name. A
  document goes to dev when sha256(name) % 10 == 0, else to train (less any paragraph whose
  text is also a dev paragraph: pydoc repeats sentences). Paragraphs are taken in sha256 order
  and only those with a question count, up to MAX_PARAGRAPHS per split.
* Answerable questions (relations, the learnable rule): for a kind word of KINDS ("object",
  "value", "function", "module"; plural allowed, any case) that stands EXACTLY ONCE in the
  paragraph, right after a name (a word of 3+ letters, optionally in double quotes, not in
  STOP), the question is "which <kind> ?" and the answer is that name at its character
  offset. E.g. 'Import the "json" module first.' -> "which module ?", answer "json". Up to
  QUESTIONS_PER_PARAGRAPH per paragraph (chosen by sha256). A model answers it by finding the
  asked kind word in the context and pointing at the word before it.
* Unanswerable questions (v2.0 is_impossible): one per paragraph that has an answerable one,
  "which <kind> ?" for a kind whose word (or a word starting with it) does not occur in the
  paragraph at all, so no span answers it.

So about half the questions are unanswerable. The trivial baseline is the always-null answer:
exact match = F1 = 100 * unanswerable / all on dev (the official v2.0 script gives a null
prediction 1 on an unanswerable question and 0 on an answerable one).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

PARAGRAPH_SENTENCES = 1
QUESTIONS_PER_PARAGRAPH = 1
MAX_PARAGRAPHS = {"train": 1000, "dev": 300}
FILES = {"train": "train-v2.0.json", "dev": "dev-v2.0.json"}

KINDS = ("object", "value", "function", "module")
STOP = {"the", "and", "for", "this", "that", "each", "its", "new", "same", "other", "any", "one",
        "which", "given", "such", "not", "into", "from", "with", "all", "are", "has", "have",
        "was", "can", "see", "built", "first", "second", "current", "base", "called", "special",
        "whose", "their", "every", "another", "some", "per", "only", "own", "named", "then"}
CLOZE_WORDS = 5  # rule="cloze" (benchmarks)
_WORD = re.compile(r"\S+")
_CLOZE_ANSWER = re.compile(r"^[A-Za-z]{4,}$")
# The name right before a kind word: "the json module", 'the "global" statement'.
_NAME = re.compile(r"\b([A-Za-z]{3,})\"? $")


def _hash(*parts) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()[:8], "big")


def paragraphs(documents: Sequence[Tuple[str, Sequence[str]]], sentences_per_paragraph: int = PARAGRAPH_SENTENCES,
               shift: int = 0) -> Dict[str, List[Tuple[str, List[str]]]]:
    """{"train": [(paragraph id, sentences)], "dev": [...]}: consecutive sentence groups
    (``shift`` drops a document's first sentences, for other groupings of the same text)."""
    out = {"train": [], "dev": []}
    for name, sentences in documents:
        split = "dev" if _hash("split", name) % 10 == 0 else "train"
        sentences = list(sentences)[shift:]
        for k in range(0, len(sentences), sentences_per_paragraph):
            group = [" ".join(s.split()) for s in sentences[k:k + sentences_per_paragraph]]
            if len(group) >= min(2, sentences_per_paragraph):
                out[split].append((f"{name}#{k // sentences_per_paragraph}", group))
    return out


def relations(context: str) -> Dict[str, Tuple[str, int]]:
    """{kind: (answer, its character offset)} for each KINDS word that stands exactly once in
    ``context`` right after a name (a word of 3+ letters, quotes allowed, not in STOP)."""
    found: Dict[str, List[Tuple[str, int]]] = {}
    for kind in KINDS:
        hits = list(re.finditer(rf"\b{kind}s?\b", context, flags=re.IGNORECASE))
        if len(hits) != 1:
            continue  # absent, or ambiguous
        m = _NAME.search(context[:hits[0].start()])
        if m and m.group(1).lower() not in STOP:
            found[kind] = (m.group(1), m.start(1))
    return found


def _questions(pid: str, sentences: List[str], answerable: int, unanswerable: bool) -> List[dict]:
    context = " ".join(sentences)
    found = relations(context)
    qas = []
    for kind in sorted(found, key=lambda k: _hash("kind", pid, k))[:answerable]:
        answer, start = found[kind]
        assert context[start:start + len(answer)] == answer
        qas.append({"id": f"{pid}/{kind}", "question": f"which {kind} ?", "is_impossible": False,
                    "answers": [{"text": answer, "answer_start": start}]})
    absent = [k for k in KINDS if not re.search(rf"\b{k}", context, flags=re.IGNORECASE)]
    if unanswerable and qas and absent:
        kind = sorted(absent, key=lambda k: _hash("unanswerable", pid, k))[0]
        qas.append({"id": f"{pid}/none", "question": f"which {kind} ?", "is_impossible": True,
                    "answers": [], "plausible_answers": []})
    return qas


def cloze_questions(pid: str, sentences: List[str], answerable: int) -> List[dict]:
    """The benchmarks' dense answerable questions (build(rule="cloze")): in up to
    ``answerable`` sentences, one word of 4+ letters (not the first) is the answer and the
    question is the up to CLOZE_WORDS words on each side of it with the word replaced by
    "what", plus "?" (the sample task's earlier rule; tiny models did not learn it)."""
    context = " ".join(sentences)
    starts = [0]
    for s in sentences[:-1]:
        starts.append(starts[-1] + len(s) + 1)
    qas = []
    for k in sorted(range(len(sentences)), key=lambda k: _hash("sentence", pid, k))[:answerable]:
        words = list(_WORD.finditer(sentences[k]))
        candidates = [i for i in range(1, len(words)) if _CLOZE_ANSWER.match(words[i].group())]
        for i in sorted(candidates, key=lambda i: _hash("answer", (pid, k), i)):
            left = " ".join(w.group() for w in words[max(0, i - CLOZE_WORDS):i])
            right = " ".join(w.group() for w in words[i + 1:i + 1 + CLOZE_WORDS]).rstrip(".!?:;,")
            if "what" in (left + " " + right).lower().split():
                continue  # the blank must be the question's only "what"
            start = starts[k] + words[i].start()
            qas.append({"id": f"{pid}/{k}", "is_impossible": False,
                        "question": " ".join(p for p in (left, "what", right) if p) + " ?",
                        "answers": [{"text": words[i].group(), "answer_start": start}]})
            break
    return qas


def build(documents, *, sentences_per_paragraph: int = PARAGRAPH_SENTENCES,
          answerable: int = QUESTIONS_PER_PARAGRAPH, unanswerable: bool = True,
          max_paragraphs: Optional[Dict[str, int]] = None, shift: int = 0,
          rule: str = "relation") -> Dict[str, dict]:
    """The two SQuAD documents {"train": {...}, "dev": {...}} (v2.0; v1.1 without
    unanswerable questions). The keywords change the sizes for benchmarks (rule="cloze":
    cloze_questions, v1.1 only); write() uses the documented defaults."""
    if rule not in ("relation", "cloze") or (rule == "cloze" and unanswerable):
        raise ValueError(f"rule={rule!r}: 'relation', or 'cloze' with unanswerable=False")
    limits = MAX_PARAGRAPHS if max_paragraphs is None else max_paragraphs
    out = {}
    split_paras = paragraphs(documents, sentences_per_paragraph, shift)
    dev_contexts = {" ".join(sentences) for _, sentences in split_paras["dev"]}
    for split in ("train", "dev"):
        paras = sorted(split_paras[split], key=lambda p: _hash("order", shift, p[0]))
        if split == "train":  # a sentence repeated in a dev document is not trained on
            paras = [p for p in paras if " ".join(p[1]) not in dev_contexts]
        articles: Dict[str, dict] = {}
        kept, limit = 0, limits.get(split)
        for pid, sentences in paras:
            qas = (_questions(pid, sentences, answerable, unanswerable) if rule == "relation"
                   else cloze_questions(pid, sentences, answerable))
            if not qas:
                continue
            if limit is not None and kept >= limit:
                break
            kept += 1
            title = pid.split("#")[0]
            article = articles.setdefault(title, {"title": title, "paragraphs": []})
            article["paragraphs"].append({"context": " ".join(sentences), "qas": qas})
        out[split] = {"version": "v2.0" if unanswerable else "1.1",
                      "data": [articles[t] for t in sorted(articles)]}
    return out


def _counts(doc: dict) -> Dict[str, int]:
    qas = [qa for a in doc["data"] for p in a["paragraphs"] for qa in p["qas"]]
    impossible = sum(qa["is_impossible"] for qa in qas)
    return {"articles": len(doc["data"]), "paragraphs": sum(len(a["paragraphs"]) for a in doc["data"]),
            "questions": len(qas), "answerable": len(qas) - impossible, "unanswerable": impossible}


def write(documents, output_dir: str) -> dict:
    """Writes train-v2.0.json and dev-v2.0.json to output_dir; returns files, counts and the
    always-null baseline on dev (exact and F1 on the official 0..100 scale)."""
    os.makedirs(output_dir, exist_ok=True)
    docs = build(documents)
    counts = {}
    for split, doc in docs.items():
        with open(os.path.join(output_dir, FILES[split]), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1, sort_keys=True)
            f.write("\n")
        counts[split] = _counts(doc)
    null = round(100.0 * counts["dev"]["unanswerable"] / max(1, counts["dev"]["questions"]), 2)
    return {"files": [FILES["train"], FILES["dev"]], "counts": counts,
            "baseline": {"always_null": {"split": "dev", "exact": null, "f1": null}}}
