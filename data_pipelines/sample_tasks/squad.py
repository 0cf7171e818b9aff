"""The extractive QA sample task: SQuAD v2.0 JSON made from the sample corpus.

``write(documents, output_dir)`` writes ``train-v2.0.json`` and ``dev-v2.0.json`` (the official
layout, data_pipelines/finetune/squad.py reads them) and returns {"files", "counts",
"baseline"}. documents: (name, [sentence, ...]) as data_pipelines.sample_corpus gives them.

How it is made (deterministic: sha256 of names, never hash() or set order):

* Paragraphs: each document's sentences, in order, in groups of PARAGRAPH_SENTENCES (a last
  group of fewer than 2 sentences is dropped), joined by one space; the title is the document
  name. A document goes to dev when sha256(name) % 10 == 0, else to train.
* Answerable questions (cloze, the learnable rule): from QUESTIONS_PER_PARAGRAPH sentences of
  the paragraph, one word of 4+ letters (not the sentence's first word) is the answer; the
  question is the up to CLOZE_WORDS words on each side of it with the word replaced by "what",
  plus "?". E.g. "Return a copy of the string with leading whitespace removed." ->
  "copy of the string with what whitespace removed ?", answer "leading" at its character
  offset in the paragraph. A model answers it by finding the words around the blank in the
  context and pointing at the word between them.
* Unanswerable questions (v2.0 is_impossible): a cloze question made the same way from a
  sentence of ANOTHER paragraph (the next paragraph of the split, cyclically), asked against
  this one; it is kept only when neither the words left of the blank nor the words right of
  it occur in this paragraph, so no span of it answers the question. One per paragraph.

So a third of the questions are unanswerable. The trivial baseline is the always-null answer:
exact match = F1 = 100 * unanswerable / all on dev (the official v2.0 script gives a null
prediction 1 on an unanswerable question and 0 on an answerable one).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

PARAGRAPH_SENTENCES = 2
QUESTIONS_PER_PARAGRAPH = 2
CLOZE_WORDS = 3
MAX_PARAGRAPHS = {"train": 1000, "dev": 250}
FILES = {"train": "train-v2.0.json", "dev": "dev-v2.0.json"}

_WORD = re.compile(r"\S+")
_ANSWER = re.compile(r"^[A-Za-z]{4,}$")


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
            if len(group) >= 2:
                out[split].append((f"{name}#{k // sentences_per_paragraph}", group))
    return out


def content_words(text: str) -> set:
    """The lower-cased letter runs of 4+ letters in ``text`` (its key words)."""
    return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 4}


def cloze(sentence: str, key) -> Optional[Tuple[str, str, int, str]]:
    """(question, answer, answer's character offset in the sentence, stretch) for one word
    chosen by ``key`` among the sentence's words of 4+ letters that have CLOZE_WORDS words
    before them in the sentence; the stretch (those words, verbatim) must hold a key word and
    not the word "what". The question is the stretch + " what ?". None when no word fits."""
    words = list(_WORD.finditer(sentence))
    candidates = [i for i in range(CLOZE_WORDS, len(words)) if _ANSWER.match(words[i].group())]
    for i in sorted(candidates, key=lambda i: _hash("answer", key, i)):
        stretch = " ".join(w.group() for w in words[i - CLOZE_WORDS:i])
        if "what" in stretch.lower().split() or not content_words(stretch):
            continue  # the blank must be the question's only "what"; a stretch of key words
        return stretch + " what ?", words[i].group(), words[i].start(), stretch
    return None


def _questions(pid: str, sentences: List[str], other: List[str], other_id: str, answerable: int,
               unanswerable: bool) -> List[dict]:
    context = " ".join(sentences)
    starts = [0]
    for s in sentences[:-1]:
        starts.append(starts[-1] + len(s) + 1)
    order = sorted(range(len(sentences)), key=lambda k: _hash("sentence", pid, k))
    qas = []
    for k in order[:answerable]:
        made = cloze(sentences[k], (pid, k))
        if made is None:
            continue
        question, answer, at, stretch = made
        start = starts[k] + at
        assert context[start:start + len(answer)] == answer
        if context.count(stretch + " ") != 1:
            continue  # the stretch must point at one place of the paragraph
        qas.append({"id": f"{pid}/{k}", "question": question, "is_impossible": False,
                    "answers": [{"text": answer, "answer_start": start}]})
    words = content_words(context)
    for k in sorted(range(len(other)) if unanswerable else [], key=lambda k: _hash("unanswerable", pid, k)):
        made = cloze(other[k], (other_id, k))
        if made is None or content_words(made[3]) & words:
            continue  # unanswerable: none of the question's key words is in the paragraph
        qas.append({"id": f"{pid}/none", "question": made[0], "is_impossible": True,
                    "answers": [], "plausible_answers": []})
        break
    return qas


def build(documents, *, sentences_per_paragraph: int = PARAGRAPH_SENTENCES,
          answerable: int = QUESTIONS_PER_PARAGRAPH, unanswerable: bool = True,
          max_paragraphs: Optional[Dict[str, int]] = None, shift: int = 0) -> Dict[str, dict]:
    """The two SQuAD documents {"train": {...}, "dev": {...}} (v2.0; v1.1 without
    unanswerable questions). The keywords change the sizes for benchmarks; write() uses the
    documented defaults."""
    limits = MAX_PARAGRAPHS if max_paragraphs is None else max_paragraphs
    out = {}
    for split, paras in paragraphs(documents, sentences_per_paragraph, shift).items():
        paras = sorted(paras, key=lambda p: _hash("order", shift, p[0]))[:limits.get(split)]
        articles: Dict[str, dict] = {}
        for j, (pid, sentences) in enumerate(paras):
            other_id, other = paras[(j + 1) % len(paras)]
            qas = _questions(pid, sentences, other, other_id, answerable, unanswerable)
            if not qas:
                continue
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
