"""garden.losses against NumPy statements of the formulas, and the family pretrain losses built
on it (their values and their epsilons)."""

from __future__ import annotations

import numpy as np
import pytest

from garden import losses
from garden.models.albert.pretrainer import albert_pretrain_loss
from garden.models.bert.pretrainer import bert_pretrain_loss
from garden.models.electra.pretrainer import electra_pretrain_loss


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 4, 11)).astype("float32") * 3
    labels = rng.integers(0, 11, size=(3, 4)).astype("int32")
    weights = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], "float32")
    return logits, labels, weights


def _numpy_mlm(logits, labels, weights, epsilon):
    nll = -np.take_along_axis(_log_softmax(logits.astype(np.float64)), labels[..., None], -1)[..., 0]
    correct = logits.argmax(-1) == labels
    return (weights * nll).sum() / (weights.sum() + epsilon), (weights * correct).sum() / weights.sum()


@pytest.mark.parametrize("epsilon", [losses.BERT_EPSILON, losses.ELECTRA_EPSILON])
def test_weighted_sparse_cross_entropy_is_the_weighted_mean(batch, epsilon):
    logits, labels, weights = batch
    loss, accuracy = losses.weighted_sparse_cross_entropy(logits, labels, weights,
                                                          epsilon=epsilon)
    want_loss, want_accuracy = _numpy_mlm(logits, labels, weights, epsilon)
    np.testing.assert_allclose(float(loss), want_loss, rtol=1e-6)
    np.testing.assert_allclose(float(accuracy), want_accuracy, rtol=1e-6)
    # Padding slots count nothing: changing their logits changes nothing.
    logits2 = logits.copy()
    logits2[weights == 0] += 100.0
    assert float(losses.weighted_sparse_cross_entropy(logits2, labels, weights,
                                                      epsilon=epsilon)[0]) == float(loss)


def test_epsilon_and_denominator(batch):
    logits, labels, weights = batch
    # No prediction at all: 0, not NaN, thanks to the epsilon.
    empty = losses.weighted_sparse_cross_entropy(logits, labels, 0 * weights)
    assert float(empty[0]) == 0.0 and float(empty[1]) == 0.0
    # The two epsilons are different losses (why each family keeps its own): 8 weights.
    assert weights.sum() == 8
    bert = float(losses.weighted_sparse_cross_entropy(logits, labels, weights)[0])
    electra = float(losses.weighted_sparse_cross_entropy(
        logits, labels, weights, epsilon=losses.ELECTRA_EPSILON)[0])
    np.testing.assert_allclose(bert / electra, (8 + 1e-6) / (8 + 1e-5), rtol=2e-7)
    assert bert < electra  # 1 - ratio = 1.1e-6, well above float32 rounding
    # A given denominator replaces sum(w) + epsilon.
    shared = float(losses.weighted_sparse_cross_entropy(logits, labels, weights, 18.0)[0])
    np.testing.assert_allclose(shared, bert * (8 + 1e-5) / 18.0, rtol=1e-6)


def test_sentence_and_sigmoid_cross_entropy():
    logits = np.array([[2.0, -1.0], [0.5, 1.5], [0.0, 0.0]], "float32")
    labels = np.array([[0], [0], [1]], "int32")
    loss, accuracy = losses.sentence_cross_entropy(logits, labels)
    nll = -np.take_along_axis(_log_softmax(logits.astype(np.float64)), labels, -1)
    np.testing.assert_allclose(float(loss), nll.mean(), rtol=1e-6)
    assert float(accuracy) == pytest.approx(1 / 3)  # argmax of a tie is class 0

    x = np.array([[3.0, -2.0, 0.5]], "float32")
    y = np.array([[1, 1, 0]], "float32")
    w = np.array([[1, 1, 0]], "float32")
    loss, accuracy, rate = losses.weighted_sigmoid_cross_entropy(x, y, w)
    xent = np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0) - x * y
    np.testing.assert_allclose(float(loss), (w * xent).sum() / (2 + 1e-6), rtol=1e-6)
    assert (float(accuracy), float(rate)) == (0.5, 1.0)


def test_with_total_loss_orders_and_weights_the_terms():
    metrics = {"b_accuracy": 0.5, "extra": 7.0, "a_loss": 1.0, "b_loss": 2.0, "a_accuracy": 0.25}
    out = losses.with_total_loss(metrics, a=1.0, b=50.0)
    assert list(out) == ["loss", "a_loss", "b_loss", "a_accuracy", "b_accuracy", "extra"]
    assert out["loss"] == 101.0


def test_family_losses_are_the_shared_terms(batch):
    logits, labels, weights = batch
    sentence = np.array([[1.0, 2.0], [0.3, -0.2], [0.0, 1.0]], "float32")
    next_labels = np.array([1, 0, 0], "int32")
    bert = bert_pretrain_loss({"mlm_logits": logits, "nsp_logits": sentence}, labels, weights,
                              next_labels)
    mlm, _ = _numpy_mlm(logits, labels, weights, 1e-5)
    nsp = float(losses.sentence_cross_entropy(sentence, next_labels)[0])
    assert list(bert) == ["loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy"]
    np.testing.assert_allclose(float(bert["loss"]), mlm + nsp, rtol=1e-6)
    albert = albert_pretrain_loss({"mlm_logits": logits, "sop_logits": sentence}, labels,
                                  weights, next_labels)
    assert float(albert["sop_loss"]) == float(bert["nsp_loss"])
    assert float(albert["loss"]) == float(bert["loss"])

    disc = {"disc_logits": np.array([[2.0, -1.0]], "float32"),
            "disc_labels": np.array([[1, 0]], "int32"),
            "disc_weights": np.array([[1, 1]], "float32")}
    electra = electra_pretrain_loss({"mlm_logits": logits, "masked_lm_ids": labels,
                                     "masked_lm_weights": weights, **disc}, disc_weight=50.0)
    mlm_electra, _ = _numpy_mlm(logits, labels, weights, 1e-6)  # ELECTRA's own epsilon
    np.testing.assert_allclose(float(electra["mlm_loss"]), mlm_electra, rtol=1e-6)
    np.testing.assert_allclose(float(electra["loss"]),
                               mlm_electra + 50.0 * float(electra["disc_loss"]), rtol=1e-6)
    assert list(electra)[-1] == "replaced_fraction"
