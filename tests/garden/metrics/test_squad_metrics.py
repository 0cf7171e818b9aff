"""garden.metrics.question_answering against the official SQuAD evaluation scripts (Model Garden's
copies, official/nlp/tools/squad_evaluate_v1_1.py and squad_evaluate_v2_0.py) on generated
predictions: normalisation traps (articles inside words, punctuation, unicode, whitespace), several
gold answers, empty and missing predictions, unanswerable questions and the na_prob threshold
sweep."""

from __future__ import annotations

import random

import pytest

from garden.metrics.question_answering import (exact_match, f1_score, gold_from_dataset,
                                               normalize_answer, squad_v1, squad_v2)

official_v1 = pytest.importorskip("official.nlp.tools.squad_evaluate_v1_1")
official_v2 = pytest.importorskip("official.nlp.tools.squad_evaluate_v2_0")

# Answers that differ only in what normalisation removes, and near misses that it keeps.
TRICKY = ["The Eiffel Tower", "eiffel tower", "Eiffel-Tower", "the  eiffel\ttower.", "an Eiffel",
          "Theatre", "theatre a", "A", "a an the", "", "  ", "...", "Café au lait", "CAFÉ AU LAIT",
          "café, au lait!", "1,000", "1000", "U.S.", "US", "anthem", "Athens", "the the tower",
          "tower tower", "tower", "Ωmega", "ωmega", "(b) the answer", "b answer"]
WORDS = ["tower", "eiffel", "paris", "the", "a", "an", "café", "1,000", "U.S.", "river", "seine"]


def _dataset(rng, n, unanswerable_rate):
    data, predictions, na_probs = [], {}, {}
    for i in range(n):
        qid = f"q{i}"
        if rng.random() < unanswerable_rate:
            answers = []
        else:
            answers = [{"text": rng.choice(TRICKY + [" ".join(rng.choices(WORDS, k=3))]),
                        "answer_start": 0} for _ in range(rng.randint(1, 3))]
        data.append({"title": "t", "paragraphs": [{"context": "c", "qas": [
            {"id": qid, "question": "?", "answers": answers}]}]})
        r = rng.random()
        if r < 0.2:
            predictions[qid] = ""
        elif r < 0.6 and answers:
            predictions[qid] = rng.choice(TRICKY + [answers[0]["text"]])
        else:
            predictions[qid] = " ".join(rng.choices(WORDS, k=rng.randint(1, 4)))
        # Coarse values: many ties, as null score differences of a real model rarely have.
        na_probs[qid] = rng.choice([-3.0, -1.0, 0.0, 0.5, 0.5, 2.0, 7.5])
    return data, predictions, na_probs


def test_normalisation_matches_the_official_on_traps():
    for text in TRICKY:
        assert normalize_answer(text) == official_v1._normalize_answer(text), text
        assert normalize_answer(text) == official_v2._normalize_answer(text), text
    for pred in TRICKY:
        for gold in TRICKY:
            assert f1_score(pred, gold, "1.1") == pytest.approx(
                official_v1._f1_score(pred, gold), abs=1e-12), (pred, gold)
            assert f1_score(pred, gold, "2.0") == pytest.approx(
                official_v2._compute_f1(gold, pred), abs=1e-12), (pred, gold)
            assert exact_match(pred, gold) == official_v2._compute_exact(gold, pred)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_v1_equals_the_official_script(seed):
    rng = random.Random(seed)
    data, predictions, _ = _dataset(rng, 300, unanswerable_rate=0.0)
    # Some questions without a prediction: the official script counts them as 0.
    for qid in rng.sample(sorted(predictions), 15):
        del predictions[qid]
    ours = squad_v1(gold_from_dataset(data), predictions)
    theirs = official_v1.evaluate(data, predictions)  # fractions, not x100
    assert ours["exact_match"] == pytest.approx(100 * theirs["exact_match"], abs=1e-9)
    assert ours["f1"] == pytest.approx(100 * theirs["final_f1"], abs=1e-9)
    assert ours["missing"] == 15 and ours["total"] == 300


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_v2_equals_the_official_script_with_thresholds(seed):
    rng = random.Random(seed)
    data, predictions, na_probs = _dataset(rng, 400, unanswerable_rate=0.35)
    gold = gold_from_dataset(data)
    theirs = official_v2.evaluate(data, predictions, na_probs)
    ours = squad_v2(gold, predictions, na_probs)
    for key in ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1"):
        assert ours[key] == pytest.approx(theirs[key], abs=1e-9), key
    assert (ours["total"], ours["HasAns_total"], ours["NoAns_total"]) == (
        theirs["total"], theirs["HasAns_total"], theirs["NoAns_total"])
    # Model Garden names the official best_* "final_*".
    for ours_key, theirs_key in (("best_exact", "final_exact"), ("best_f1", "final_f1"),
                                 ("best_exact_thresh", "final_exact_thresh"),
                                 ("best_f1_thresh", "final_f1_thresh")):
        assert ours[ours_key] == pytest.approx(theirs[theirs_key], abs=1e-9), ours_key
    # Without na_probs the predictions are scored as they are (na_prob 0 everywhere).
    plain = squad_v2(gold, predictions)
    assert plain["f1"] == pytest.approx(official_v2.evaluate(data, predictions)["f1"], abs=1e-9)
    assert "best_f1" not in plain


def test_v2_distinguishes_empty_answers_from_v1():
    gold = {"q": ["the"]}  # normalises to "": v2 drops it and expects no answer
    assert squad_v2(gold, {"q": ""})["f1"] == 100.0
    assert squad_v1(gold, {"q": ""})["f1"] == 0.0
    with pytest.raises(ValueError, match=r"1 of 1 questions have no prediction \(first: 'q'\)"):
        squad_v2(gold, {})


def test_threshold_sweep_keeps_the_first_threshold_of_a_plateau():
    # Answering q2 (right) gains 1; answering q1 (a correct "") or q3 (wrong) gains nothing:
    # the best threshold is q2's na_prob, not that of a later question on the same plateau.
    data = [{"paragraphs": [{"qas": [{"id": q, "answers": a}]}]} for q, a in
            (("q1", []), ("q2", [{"text": "paris"}]), ("q3", [{"text": "seine"}]))]
    predictions = {"q1": "", "q2": "Paris", "q3": "tower"}
    na_probs = {"q1": -1.0, "q2": 0.5, "q3": 2.0}
    ours = squad_v2(gold_from_dataset(data), predictions, na_probs)
    theirs = official_v2.evaluate(data, predictions, na_probs)
    assert ours["best_f1_thresh"] == theirs["final_f1_thresh"] == 0.5
    assert ours["best_f1"] == pytest.approx(theirs["final_f1"]) == pytest.approx(200 / 3)
