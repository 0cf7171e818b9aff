"""SpanBERT's pretraining (docs/objectives.md section 4): the `RECORD` garden.Pretraining reads
for `garden.Pretraining.family = 'spanbert'`.

Data: make_pretrain --objective=spanbert (masked spans plus the span boundary objective's
targets, text/features.py spanbert_pretrain_spec). Model: SpanBertPretrainer (BERT's backbone
with the SBO head). Loss: masked LM + sbo_loss_weight x SBO, each over its global count of real
targets. Options: sbo_loss_weight (1.0), max_targets (15) and position_embedding_size (200),
the SBO head's. Checkpoint objects: "model" and "backbone".
"""

from __future__ import annotations

import tensorflow as tf

from garden.models.spanbert.pretrainer import SBO_INPUTS, spanbert_pretrain_loss
from garden.tasks import shared
from garden.tasks.pretraining import (MLM_FEATURES, PretrainingRecord, mlm_weights,
                                      weight_share)


def _build(task, backbone):
    model = task.spec.pretrainer_class()(
        backbone, max_targets=int(task.options["max_targets"]),
        position_embedding_size=int(task.options["position_embedding_size"]))
    return model, {"model": model, "backbone": backbone}


def _weights(task, batch):
    return {**mlm_weights(task, batch),
            "sbo_weights": tf.reduce_sum(tf.cast(batch["sbo_weights"], tf.float32))}


def _inputs(task, batch):
    inputs = shared.to_model_inputs(batch)
    inputs.update({k: tf.cast(batch[k], tf.int32) for k in SBO_INPUTS})
    return inputs


def _metrics(task, model, batch, training, weight_shares):
    outputs = model(task.model_inputs(batch), training=training)
    metrics = spanbert_pretrain_loss(
        outputs, batch["masked_lm_ids"], batch["masked_lm_weights"], batch["sbo_weights"],
        sbo_loss_weight=float(task.options["sbo_loss_weight"]),
        mlm_denominator=weight_share(weight_shares, "masked_lm_weights"),
        sbo_denominator=weight_share(weight_shares, "sbo_weights"))
    metrics["tokens"] = shared.real_tokens(batch)
    return metrics


RECORD = PretrainingRecord(
    required_features=("input_ids", "input_mask", "segment_ids", "sbo_weights", *SBO_INPUTS)
    + MLM_FEATURES,
    inputs=_inputs, build=_build, loss_weights=_weights, metrics=_metrics,
    options={"sbo_loss_weight": 1.0, "max_targets": 15, "position_embedding_size": 200})
