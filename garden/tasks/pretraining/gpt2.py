"""GPT-2 pretraining (docs/objectives.md section 11): the `RECORD` garden.Pretraining reads
for `garden.Pretraining.family = 'gpt2'` (GPT-2's FamilySpec names it).

Data: make_pretrain --objective=gpt2 (byte-level BPE documents joined by <|endoftext|>, cut
into full blocks: input_ids, input_mask). Model: GPT2CausalLM on the backbone factory's
GPT2Backbone (configs/runs/pretrain_gpt2.gin binds `backbone.preset = 'gpt2_small'` etc.).
Objective: next-token cross-entropy, labels = the inputs shifted by one; position t scores
token t + 1 wherever both are real (weights input_mask[:, 1:] * input_mask[:, :-1], so the
last position of a block, which has no label, and any padding count nothing). Metrics: loss
(= lm_loss, the weighted mean over the global batch), lm_loss, lm_accuracy (argmax == next
token), tokens (real tokens, for throughput and MFU). Checkpoint objects: "model" (the LM)
and "backbone". No per-batch randomness.
"""

from __future__ import annotations

from typing import Dict, Optional

import tensorflow as tf

from garden import losses
from garden.tasks import shared
from garden.tasks.pretraining import (PretrainingRecord, lm_on_backbone, lm_summary,
                                      next_token_weights, weight_share)


def causal_lm_metrics(logits, token_ids, padding_mask,
                      denominator: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
    """{"loss", "lm_loss", "lm_accuracy"} of logits [B, T, V] against the inputs shifted.

    denominator: this batch's share of the global label count (the trainer's weight_shares),
    so that the loss is the global weighted mean however the batch is split."""
    metrics = losses.masked_lm_metrics(logits[:, :-1], tf.cast(token_ids, tf.int32)[:, 1:],
                                       next_token_weights(padding_mask), denominator,
                                       prefix="lm")
    return losses.with_total_loss(metrics, lm=1.0)


def _inputs(task, batch):
    return {"token_ids": tf.cast(batch["input_ids"], tf.int32),
            "padding_mask": tf.cast(batch["input_mask"], tf.int32)}


def _loss_weights(task, batch):
    return {"lm_weights": tf.reduce_sum(next_token_weights(batch["input_mask"]))}


def _metrics(task, model, batch, training, weight_shares):
    inputs = task.model_inputs(batch)
    logits = model(inputs, training=training)["logits"]
    metrics = causal_lm_metrics(logits, inputs["token_ids"], inputs["padding_mask"],
                                weight_share(weight_shares, "lm_weights"))
    metrics["tokens"] = shared.real_tokens(batch)
    return metrics


RECORD = PretrainingRecord(required_features=("input_ids", "input_mask"), inputs=_inputs,
                           build=lm_on_backbone, summary=lm_summary,
                           loss_weights=_loss_weights, metrics=_metrics)
