"""SQuAD v1.1 and v2.0 exact match and F1, equal to the official evaluation scripts.

Sources: the official `evaluate-v1.1.py` (CodaLab bundle 0xbcd57bee) and `evaluate-v2.0.py`
(SQuAD 2.0 site), as copied into Model Garden (official/nlp/tools/squad_evaluate_v1_1.py,
squad_evaluate_v2_0.py; tests/garden/test_squad_metrics.py compares against those copies).

    normalize_answer(s)   lower-case, drop string.punctuation, drop the articles
                          \\b(a|an|the)\\b, collapse whitespace
    EM                    1 when the normalised strings are equal
    F1                    bag-of-tokens overlap of the normalised strings
Each is the max over the gold answers of a question, averaged over questions, x100 (the
official scale; Model Garden's v1.1 copy returns fractions and names F1 "final_f1").

The two versions differ in the details that decide empty answers:
- v1.1: every gold answer counts; F1 of an empty prediction is 0 (even against an empty gold);
  a question without a prediction scores 0 and still counts.
- v2.0: gold answers that normalise to "" are dropped, and a question left without gold (an
  unanswerable one) has the single gold "" ; F1 is 1 when prediction and gold are both empty.
  Scores are split into HasAns_* / NoAns_*. With `na_probs` (qid -> how likely "no answer",
  here the null score difference of the decoder) it also sweeps the threshold: best_exact /
  best_f1 and best_exact_thresh / best_f1_thresh are the best scores reachable by predicting
  "" whenever na_prob > thresh, and the threshold that reaches them (the official script's
  find_all_best_thresh, ties broken in the same order). As in the official script,
  exact / f1 themselves treat na_prob > na_prob_thresh (1.0) as a "" prediction; call without
  na_probs to score the predictions as they are.

Inputs: `gold` maps question id -> list of gold answer texts, in dataset order
(`gold_from_dataset(json["data"])` or `gold_from_examples(read_examples(path))`);
`predictions` maps question id -> predicted text ("" for no answer).
"""

from __future__ import annotations

import collections
import re
import string
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """The official normalisation: lower, no punctuation, no articles, single spaces."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", s).split())


def exact_match(prediction: str, gold: str) -> int:
    return int(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str, version: str = "2.0") -> float:
    """Token-overlap F1 of one prediction against one gold answer (see the module docstring
    for how v1.1 and v2.0 treat empty answers)."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if version == "2.0" and (not pred_tokens or not gold_tokens):
        return float(pred_tokens == gold_tokens)
    same = sum((collections.Counter(pred_tokens) & collections.Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def gold_from_dataset(data: Iterable[dict]) -> Dict[str, List[str]]:
    """qid -> gold texts from the official JSON's "data" list (articles)."""
    return {qa["id"]: [a["text"] for a in qa["answers"]]
            for article in data for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]}


def gold_from_examples(examples: Sequence) -> Dict[str, List[str]]:
    """qid -> gold texts from text.finetune.question_answering_sources.read_examples (an unanswerable
    question has none, as in the official v2.0 files)."""
    return {e.qas_id: [text for text, _ in e.answers] for e in examples}


def squad_v1(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str]) -> dict:
    """The official v1.1 scores: exact_match, f1 (x100), total, and missing (questions without
    a prediction; they score 0, as the official script logs and counts them)."""
    em = f1 = 0.0
    missing = 0
    for qid, answers in gold.items():
        if qid not in predictions:
            missing += 1
            continue
        if not answers:
            raise ValueError(f"question {qid!r} has no gold answer; a v1.1 question always has "
                             f"one (score an unanswerable set with squad_v2)")
        pred = predictions[qid]
        em += max(exact_match(pred, a) for a in answers)
        f1 += max(f1_score(pred, a, version="1.1") for a in answers)
    total = len(gold)
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total, "total": total,
            "missing": missing}


def _v2_gold(answers: Sequence[str]) -> List[str]:
    kept = [a for a in answers if normalize_answer(a)]
    return kept or [""]


def _mean(scores: Mapping[str, float], qids: Sequence[str]) -> float:
    return 100.0 * sum(scores[q] for q in qids) / len(qids)


def _best_threshold(predictions, scores, na_probs, has_answer):
    """The official find_best_thresh: start from "" everywhere, answer the questions in
    increasing na_prob order, keep the best running score (strictly better only)."""
    current = best = sum(1 for q in has_answer if not has_answer[q])
    threshold = 0.0
    for qid in sorted(na_probs, key=lambda q: na_probs[q]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            current += scores[qid]
        else:
            current += -1 if predictions[qid] else 0
        if current > best:
            best, threshold = current, na_probs[qid]
    return 100.0 * best / len(scores), threshold


def squad_v2(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
             na_probs: Optional[Mapping[str, float]] = None,
             na_prob_thresh: float = 1.0) -> dict:
    """The official v2.0 scores: exact, f1, total, HasAns_* / NoAns_* (when present), and with
    na_probs best_exact(_thresh), best_f1(_thresh). Every question needs a prediction (the
    official script fails on a missing one in its HasAns/NoAns split): a missing one raises
    ValueError naming how many and the first."""
    missing = [q for q in gold if q not in predictions]
    if missing:
        raise ValueError(f"{len(missing)} of {len(gold)} questions have no prediction "
                         f"(first: {missing[0]!r}); predict '' for no answer")
    has_answer = {q: bool(answers) for q, answers in gold.items()}
    exact_raw, f1_raw = {}, {}
    for qid, answers in gold.items():
        pred, kept = predictions[qid], _v2_gold(answers)
        exact_raw[qid] = max(exact_match(pred, a) for a in kept)
        f1_raw[qid] = max(f1_score(pred, a, version="2.0") for a in kept)
    probs = na_probs if na_probs is not None else {q: 0.0 for q in predictions}

    def thresholded(raw):
        return {q: float(not has_answer[q]) if probs[q] > na_prob_thresh else s
                for q, s in raw.items()}

    exact, f1 = thresholded(exact_raw), thresholded(f1_raw)
    qids = list(gold)
    out = {"exact": _mean(exact, qids), "f1": _mean(f1, qids), "total": len(qids)}
    for prefix, subset in (("HasAns", [q for q in qids if has_answer[q]]),
                           ("NoAns", [q for q in qids if not has_answer[q]])):
        if subset:
            out.update({f"{prefix}_exact": _mean(exact, subset),
                        f"{prefix}_f1": _mean(f1, subset), f"{prefix}_total": len(subset)})
    if na_probs is not None:
        # The official script sweeps over its na_probs in their own (file) order.
        ordered = {q: na_probs[q] for q in na_probs if q in gold}
        out["best_exact"], out["best_exact_thresh"] = _best_threshold(
            predictions, exact_raw, ordered, has_answer)
        out["best_f1"], out["best_f1_thresh"] = _best_threshold(
            predictions, f1_raw, ordered, has_answer)
    return out
