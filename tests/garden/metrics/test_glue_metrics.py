"""GLUE metrics on generated predictions against hand-computed values: F1 of the positive
class "1" (not of class 0, not macro), MCC, Pearson and Spearman reported separately."""

from __future__ import annotations

import math

import numpy as np
import pytest

from garden.metrics import classification


def _confusion(labels, predictions, positive):
    tp = sum(1 for y, p in zip(labels, predictions) if y == positive and p == positive)
    fp = sum(1 for y, p in zip(labels, predictions) if y != positive and p == positive)
    fn = sum(1 for y, p in zip(labels, predictions) if y == positive and p != positive)
    tn = len(labels) - tp - fp - fn
    return tp, fp, fn, tn


@pytest.fixture
def binary():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 200)
    # Half copied, the rest 1: biased towards 1 so that F1 of class 1 and of class 0 differ.
    predictions = np.where(rng.random(200) < 0.5, labels, 1)
    return labels, predictions


@pytest.mark.parametrize("task", ["mrpc", "qqp"])
def test_f1_is_of_the_positive_class_one(binary, task):
    labels, predictions = binary
    tp, fp, fn, tn = _confusion(labels, predictions, 1)
    expected_f1 = 2 * tp / (2 * tp + fp + fn)
    tp0, fp0, fn0, _ = _confusion(labels, predictions, 0)
    assert abs(expected_f1 - 2 * tp0 / (2 * tp0 + fp0 + fn0)) > 0.05  # the check can tell
    out = classification.glue_metrics(task, predictions, labels, ["0", "1"])
    assert out["f1"] == pytest.approx(expected_f1)
    assert out["accuracy"] == pytest.approx((tp + tn) / len(labels))
    # A model whose class order is ["1", "0"]: ids flipped, the same F1 of class "1".
    flipped = classification.glue_metrics(task, 1 - predictions, 1 - labels, ["1", "0"])
    assert flipped["f1"] == pytest.approx(expected_f1)


def test_cola_mcc(binary):
    labels, predictions = binary
    tp, fp, fn, tn = _confusion(labels, predictions, 1)
    mcc = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert classification.glue_metrics("cola", predictions, labels)["mcc"] == pytest.approx(mcc)


def test_stsb_pearson_and_spearman_separately():
    gold = np.array([0.0, 1.0, 2.5, 4.0, 5.0])
    scores = np.array([0.5, 0.8, 3.0, 2.9, 4.9])  # ranks 1 2 4 3 5: Spearman 0.9
    out = classification.glue_metrics("stsb", scores, gold)
    assert out["spearman"] == pytest.approx(0.9)
    assert out["pearson"] == pytest.approx(np.corrcoef(scores, gold)[0, 1])
    assert set(out) == {"pearson", "spearman"}


def test_mnli_and_accuracy_tasks():
    out = classification.mnli_metrics([0, 1, 2, 2], [0, 1, 2, 0], [1, 1], [1, 0])
    assert out == {"accuracy_matched": 0.75, "accuracy_mismatched": 0.5}
    assert classification.glue_metrics("rte", [0, 1, 1], [0, 1, 0]) == {"accuracy": pytest.approx(2 / 3)}
    assert classification.swag_accuracy([3, 1, 0, 2], [3, 1, 2, 2]) == {"accuracy": 0.75}
    with pytest.raises(ValueError, match="predictions for"):
        classification.glue_metrics("sst2", [0, 1], [0])
