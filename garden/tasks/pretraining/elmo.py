"""ELMo's biLM pretraining (docs/objectives.md section 13): the `RECORD` garden.Pretraining reads
for `garden.Pretraining.family = 'elmo'` with `objective = 'bilm'`.

Data: make_pretrain --objective=bilm --characters (input_ids, input_mask, char_ids: each
piece's max_characters ELMo character ids, flattened). Model: ElmoBiLM on the backbone
factory's ElmoBackbone, its softmax over the data's vocabulary. Objective: the forward LM's
next-token and the backward LM's previous-token cross-entropy where both positions are real,
loss = their sum (Peters et al. 2018, eq. 1: the joint log likelihood of both directions).
Option sampled_softmax = N > 0 (`garden.Pretraining.sampled_softmax`): in training each
direction's loss is tf.nn.sampled_softmax_loss with N sampled words (bilm-tf: 8,192 of its
793,471), which never forms the [B, T, V] logits' gradient; the logged accuracies and the
evaluation use the full softmax.
Metrics: loss, forward_loss, backward_loss, their accuracies, tokens. Checkpoint objects:
"model" (the biLM) and "backbone" (for features and tasks).
"""

from __future__ import annotations

import tensorflow as tf

from garden import losses
from garden.models.elmo.bilm import ElmoBiLM
from garden.tasks import shared
from garden.tasks.pretraining import PretrainingRecord, next_token_weights, weight_share


def _inputs(task, batch):
    ids = batch["input_ids"]
    chars = tf.reshape(tf.cast(batch["char_ids"], tf.int32),
                       [tf.shape(ids)[0], tf.shape(ids)[1], -1])
    return {"char_ids": chars, "padding_mask": tf.cast(batch["input_mask"], tf.int32)}


def _loss_weights(task, batch):
    return {"lm_weights": tf.reduce_sum(next_token_weights(batch["input_mask"]))}


def bilm_metrics(outputs, token_ids, padding_mask, denominator=None):
    """{"loss", "forward_loss", "backward_loss", accuracies} of ElmoBiLM's outputs."""
    ids = tf.cast(token_ids, tf.int32)
    weights = next_token_weights(padding_mask)
    metrics = {**losses.masked_lm_metrics(outputs["forward_logits"][:, :-1], ids[:, 1:],
                                          weights, denominator, prefix="forward"),
               **losses.masked_lm_metrics(outputs["backward_logits"][:, 1:], ids[:, :-1],
                                          weights, denominator, prefix="backward")}
    return losses.with_total_loss(metrics, forward=1.0, backward=1.0)


def sampled_losses(model, outputs, token_ids, padding_mask, num_sampled: int, denominator):
    """{"forward_loss", "backward_loss"}: sampled-softmax cross-entropy of each direction over
    the positions with a real neighbour, divided by `denominator` (their global count)."""
    ids = tf.cast(token_ids, tf.int64)
    weights = next_token_weights(padding_mask)
    kernel = tf.transpose(tf.cast(model.softmax.kernel, tf.float32))  # [V, D]
    bias = tf.cast(model.softmax.bias, tf.float32)
    out = {}
    for direction, hidden, labels in (
            ("forward", outputs["forward_hidden"][:, :-1], ids[:, 1:]),
            ("backward", outputs["backward_hidden"][:, 1:], ids[:, :-1])):
        keep = weights > 0
        loss = tf.nn.sampled_softmax_loss(
            kernel, bias, tf.boolean_mask(labels, keep)[:, None],
            tf.cast(tf.boolean_mask(hidden, keep), tf.float32), num_sampled, model.vocab_size)
        out[f"{direction}_loss"] = tf.reduce_sum(loss) / denominator
    return out


def _metrics(task, model, batch, training, weight_shares):
    inputs = task.model_inputs(batch)
    denominator = weight_share(weight_shares, "lm_weights")
    outputs = model(inputs, training=training)
    metrics = bilm_metrics(outputs, batch["input_ids"], inputs["padding_mask"], denominator)
    num_sampled = int(task.options["sampled_softmax"])
    if training and num_sampled:
        total = (tf.reduce_sum(next_token_weights(inputs["padding_mask"])) + 1e-5
                 if denominator is None else denominator)
        sampled = sampled_losses(model, outputs, batch["input_ids"], inputs["padding_mask"],
                                 num_sampled, total)
        metrics.update(sampled, loss=sampled["forward_loss"] + sampled["backward_loss"])
    metrics["tokens"] = shared.real_tokens(batch)
    return metrics


def _build(task, backbone):
    model = ElmoBiLM(backbone, task.vocab_size)
    return model, {"model": model, "backbone": backbone}


RECORD = PretrainingRecord(
    required_features=("input_ids", "input_mask", "char_ids"), inputs=_inputs,
    build=_build, summary=lambda spec, backbone: ElmoBiLM(backbone, 1000),
    loss_weights=_loss_weights, metrics=_metrics, options={"sampled_softmax": 0})
