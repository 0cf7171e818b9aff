"""text/rouge.py against ROUGE values computed by hand (rouge-score's tokenizer:
lower-case, [a-z0-9] runs; F = 2PR / (P + R)), and the trivial baselines of the LM tasks."""

from __future__ import annotations

import math

import pytest

from text import rouge


def test_hand_computed_scores():
    rows = rouge.per_example(["the cat sat on the mat", "Mat, the!", ""],
                             ["the cat is on the mat", "the mat", "the mat"])
    # 1: unigrams the x2, cat, on, mat shared of 6 and 6 -> 5/6; bigrams "the cat", "on the",
    # "the mat" of 5 and 5 -> 3/5; LCS "the cat on the mat" = 5 -> 5/6.
    assert rows[0] == pytest.approx({"rouge1": 5 / 6, "rouge2": 3 / 5, "rougeL": 5 / 6})
    # 2: punctuation and case dropped -> [mat, the] vs [the, mat]: all unigrams, no bigram, LCS 1.
    assert rows[1] == pytest.approx({"rouge1": 1.0, "rouge2": 0.0, "rougeL": 0.5})
    assert rows[2] == {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}  # empty prediction
    corpus = rouge.corpus_rouge(["the cat sat on the mat", "Mat, the!", ""],
                                ["the cat is on the mat", "the mat", "the mat"])
    values = [5 / 6, 1.0, 0.0]
    mean = sum(values) / 3
    se = math.sqrt(sum((v - mean) ** 2 for v in values) / 2) / math.sqrt(3)
    assert corpus["rouge1"] == pytest.approx(mean) and corpus["rouge1_se"] == pytest.approx(se)
    assert corpus["rougeL"] == pytest.approx((5 / 6 + 0.5) / 3)


def test_stemmer_is_optional_and_off_by_default():
    assert rouge.per_example(["running dogs"], ["run dog"])[0]["rouge1"] == 0.0
    # Porter stemmer on tokens longer than 3 characters: running -> run, dogs -> dog.
    assert rouge.per_example(["running dogs"], ["run dog"], use_stemmer=True)[0]["rouge1"] == 1.0


def test_bad_input():
    with pytest.raises(ValueError, match="one prediction per reference; got 1 predictions and 2"):
        rouge.corpus_rouge(["a"], ["a", "b"])
    with pytest.raises(TypeError, match="example 1: .* got NoneType and str"):
        rouge.per_example(["a", None], ["a", "b"])


def test_trivial_baselines():
    # Train target lengths 3, 4, 2 -> N = 3; most frequent words a (3), b (2), then c (first
    # of the ties) -> "a b c".
    out = rouge.trivial_baselines(["a b c", "a d e f", "a b"], ["x y z w a b"], ["a b"])
    assert out["words"] == 3 and out["constant_prediction"] == "a b c"
    assert out["lead"]["rouge1"] == 0.0  # "x y z"
    assert out["tail"]["rouge1"] == pytest.approx(0.8)  # "w a b": P 2/3, R 1
    assert out["constant"]["rouge1"] == pytest.approx(0.8)
    assert out["empty"]["rougeL"] == 0.0
