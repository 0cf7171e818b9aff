"""The pretraining and fine-tuning losses, once: weighted masked-LM cross-entropy, sentence-level
cross-entropy, weighted binary cross-entropy (ELECTRA's replaced-token detection), accuracies.

Plain TF ops and no Keras metric objects, so they run inside `strategy.run`; the values are
per-replica, and a trainer that splits a global batch passes `denominator` (this batch's share of
the global weight sum, over replicas and accumulation steps) so that the averaged loss is the
global weighted mean however the batch is split.

Epsilons. Without `denominator` a weighted mean divides by sum(w) + epsilon, so that a batch
without any prediction gives 0 instead of NaN. The families keep the value of their reference
code, because changing it changes every loss value (and so the frozen BERT run of
tests/test_frozen_outputs.py): BERT_EPSILON = 1e-5 (google-research/bert run_pretraining.py;
BERT, RoBERTa, ALBERT and SpanBERT use it) and ELECTRA_EPSILON = 1e-6
(google-research/electra pretrain_helpers / run_pretraining.py).
"""

from __future__ import annotations

from typing import Optional, Tuple

import tensorflow as tf

BERT_EPSILON = 1e-5
ELECTRA_EPSILON = 1e-6


def _weighted_mean(values, weights, denominator, epsilon: float):
    """sum(w * values) / (sum(w) + epsilon), or / denominator when given; and sum(w)."""
    weight_sum = tf.reduce_sum(weights)
    denominator = (weight_sum + epsilon if denominator is None
                   else tf.cast(denominator, tf.float32))
    return tf.reduce_sum(weights * values) / denominator, weight_sum


def weighted_sparse_cross_entropy(logits, labels, weights, denominator=None,
                                  epsilon: float = BERT_EPSILON) -> Tuple[tf.Tensor, tf.Tensor]:
    """The masked-LM loss: weighted mean of the softmax cross-entropy over [B, P] predictions,
    and the weighted accuracy (argmax == label).

    Args:
        logits: float [B, P, V] (any float dtype; computed in float32).
        labels: int [B, P], the original ids at the masked positions.
        weights: float [B, P], 1.0 for real predictions, 0.0 for padding slots.
        denominator: optional float scalar replacing sum(weights) + epsilon (see module doc).
        epsilon: float, see the module docstring (BERT_EPSILON or ELECTRA_EPSILON).

    Returns:
        (loss, accuracy), float32 scalars; accuracy is 0 when no weight is set.
    """
    logits = tf.cast(logits, tf.float32)
    vocab_size = tf.shape(logits)[-1]
    labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
    weights = tf.reshape(tf.cast(weights, tf.float32), [-1])
    logits = tf.reshape(logits, [-1, vocab_size])
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    loss, weight_sum = _weighted_mean(nll, weights, denominator, epsilon)
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
    return loss, tf.math.divide_no_nan(tf.reduce_sum(weights * correct), weight_sum)


def sentence_cross_entropy(logits, labels) -> Tuple[tf.Tensor, tf.Tensor]:
    """A sentence-level classification loss (NSP, SOP): mean softmax cross-entropy over the
    batch, and the accuracy.

    Args:
        logits: float [B, C]; labels: int [B] or [B, 1].
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    accuracy = tf.reduce_mean(tf.cast(
        tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32))
    return loss, accuracy


def weighted_sigmoid_cross_entropy(logits, labels, weights, denominator=None,
                                   epsilon: float = ELECTRA_EPSILON
                                   ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Per-token binary loss (ELECTRA's replaced-token detection): weighted mean of the sigmoid
    cross-entropy, the weighted accuracy (logit > 0 == label) and the weighted label rate.

    Args:
        logits: float [B, T]; labels: 0/1 [B, T]; weights: float [B, T] (0 = padding).
        denominator, epsilon: as weighted_sparse_cross_entropy.
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.float32)
    weights = tf.cast(weights, tf.float32)
    xent = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
    loss, weight_sum = _weighted_mean(xent, weights, denominator, epsilon)
    correct = tf.cast(tf.equal(tf.cast(logits > 0, tf.float32), labels), tf.float32)
    return (loss, tf.math.divide_no_nan(tf.reduce_sum(weights * correct), weight_sum),
            tf.math.divide_no_nan(tf.reduce_sum(weights * labels), weight_sum))


def masked_lm_metrics(logits, labels, weights, denominator: Optional[tf.Tensor] = None,
                      epsilon: float = BERT_EPSILON, prefix: str = "mlm"):
    """{"{prefix}_loss", "{prefix}_accuracy"} of weighted_sparse_cross_entropy."""
    loss, accuracy = weighted_sparse_cross_entropy(logits, labels, weights, denominator, epsilon)
    return {f"{prefix}_loss": loss, f"{prefix}_accuracy": accuracy}


def sentence_metrics(logits, labels, prefix: str):
    """{"{prefix}_loss", "{prefix}_accuracy"} of sentence_cross_entropy (prefix "nsp", "sop")."""
    loss, accuracy = sentence_cross_entropy(logits, labels)
    return {f"{prefix}_loss": loss, f"{prefix}_accuracy": accuracy}


def with_total_loss(metrics, **term_weights: float):
    """`metrics` led by "loss" = sum of weight * metrics["{term}_loss"], in the order logged:
    loss, each term's loss, each term's accuracy, then anything else (e.g. ELECTRA's
    replaced_fraction). A weight of 1.0 adds the term as is (x * 1.0 == x exactly).

    Example: with_total_loss({**mlm, **nsp}, mlm=1.0, nsp=1.0)
    """
    loss = None
    for term, weight in term_weights.items():
        value = metrics[f"{term}_loss"] if weight == 1.0 else weight * metrics[f"{term}_loss"]
        loss = value if loss is None else loss + value
    ordered = {"loss": loss}
    for kind in ("loss", "accuracy"):
        ordered.update({f"{t}_{kind}": metrics[f"{t}_{kind}"] for t in term_weights})
    ordered.update({k: v for k, v in metrics.items() if k not in ordered})
    return ordered
