"""BART denoising pretraining (docs/objectives.md section 9): the `RECORD` garden.Pretraining
reads for `garden.Pretraining.family = 'bart'`.

Data: make_pretrain --objective=bart (text/features.py bart_pretrain_spec):
input_ids / input_mask (the noised block, the encoder's input), labels (the clean block
<s> ... </s>), decoder_input_ids (labels shifted right behind </s>) and decoder_input_mask
(the real positions of both; zero is a real id, <s>, in a byte-level BPE vocabulary, so the
masks, not the ids, say what is padding).

Model: `garden.Pretraining.backbone = @backbone` with a BART preset (`backbone.preset =
'bart_base'`); the record wraps the BartBackbone in BartSeq2SeqLM (or takes a BartSeq2SeqLM
as is, e.g. from `@generative_lm`). Checkpoint objects: "model" (the LM) and "backbone".

Loss: the mean cross-entropy of the decoder's logits against labels over every real target
position (the reconstruction of the whole block, as fairseq's BART criterion), its global
denominator the real target count (all-reduced by the trainer). Logged: loss, lm_loss,
lm_accuracy (argmax == label over the real targets), tokens (real encoder tokens).
"""

from __future__ import annotations

import tensorflow as tf

from garden.losses import masked_lm_metrics, with_total_loss
from garden.tasks import shared
from garden.tasks.pretraining import PretrainingRecord, lm_on_backbone, lm_summary, weight_share

FEATURES = ("input_ids", "input_mask", "labels", "decoder_input_ids", "decoder_input_mask")


def _inputs(task, batch):
    return {"encoder_token_ids": tf.cast(batch["input_ids"], tf.int32),
            "encoder_padding_mask": tf.cast(batch["input_mask"], tf.int32),
            "decoder_token_ids": tf.cast(batch["decoder_input_ids"], tf.int32),
            "decoder_padding_mask": tf.cast(batch["decoder_input_mask"], tf.int32)}


def _weights(task, batch):
    return {"target_tokens": shared.real_tokens(batch, "decoder_input_mask")}


def _metrics(task, model, batch, training, weight_shares):
    logits = model(task.model_inputs(batch), training=training)["logits"]
    metrics = with_total_loss(masked_lm_metrics(
        logits, batch["labels"], tf.cast(batch["decoder_input_mask"], tf.float32),
        denominator=weight_share(weight_shares, "target_tokens"), prefix="lm"), lm=1.0)
    metrics["tokens"] = shared.real_tokens(batch)
    return metrics


RECORD = PretrainingRecord(required_features=FEATURES, inputs=_inputs, build=lm_on_backbone,
                           summary=lm_summary, loss_weights=_weights, metrics=_metrics)
