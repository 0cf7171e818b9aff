"""RoBERTa's pretraining (docs/objectives.md section 3): the `RECORD` garden.Pretraining reads
for `garden.Pretraining.family = 'roberta'`.

Data: make_pretrain --objective=roberta (full-sentence blocks of byte-level BPE, unmasked).
Model: RobertaPretrainer on the backbone factory's RobertaBackbone, whose padding_idx must be
the vocabulary's <pad> id (its positions count from it; the record passes it as the factory's
default_padding_idx). Loss: masked LM over the global count of real masked slots. Options:
dynamic_masking (True: masks drawn per batch in the input pipeline, keyed by (seed, batch
index), text/dynamic.py; False: the data must hold static masks), mask_prob (0.15) and
max_predictions_per_seq (None: no cap). Checkpoint objects: "model" and "backbone".
"""

from __future__ import annotations

import tensorflow as tf

from garden.models.roberta.pretrainer import roberta_pretrain_loss
from garden.tasks import shared
from garden.tasks.pretraining import (MLM_FEATURES, PretrainingRecord, mlm_weights,
                                      pretrainer_on_backbone, weight_share)


def _build(task, backbone):
    pad_id = task.vocabulary.special("pad", task.name)
    if backbone.get_config()["padding_idx"] != pad_id:
        raise ValueError(f"the backbone's padding_idx {backbone.get_config()['padding_idx']} is "
                         f"not the vocabulary's <pad> id {pad_id} ({task.vocab}): RoBERTa's "
                         f"positions count from it; unbind backbone.padding_idx")
    return pretrainer_on_backbone(task, backbone)


def _masks(task, ds, seed, input_context, skip_batches):
    if not task.options["dynamic_masking"]:
        return ds
    from text import dynamic

    v = task.vocabulary
    mask = dynamic.make_batch_masker(
        vocab_size=v.size, mask_id=v.special("mask", task.name), special_ids=v.special_ids,
        mask_prob=task.options["mask_prob"],
        max_predictions_per_seq=task.options["max_predictions_per_seq"])
    return shared.batch_index(ds, input_context, skip_batches).map(
        lambda index, batch: mask(batch, seed, index), num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True)


def _inputs(task, batch):
    real = tf.cast(batch["input_mask"], tf.int32)
    # The pipeline pads with id 0 (<s> in a BPE vocabulary); RoBERTa finds padding (and
    # offsets its positions) by the <pad> id, so padding gets that id.
    pad_id = task.vocabulary.specials["pad"]
    token_ids = tf.where(real > 0, tf.cast(batch["input_ids"], tf.int32), pad_id)
    return {"token_ids": token_ids, "padding_mask": real,
            "masked_lm_positions": tf.cast(batch["masked_lm_positions"], tf.int32)}


def _metrics(task, model, batch, training, weight_shares):
    outputs = model(task.model_inputs(batch), training=training)
    metrics = roberta_pretrain_loss(
        outputs, batch["masked_lm_ids"], batch["masked_lm_weights"],
        mlm_denominator=weight_share(weight_shares, "masked_lm_weights"))
    metrics["tokens"] = shared.real_tokens(batch)
    return metrics


RECORD = PretrainingRecord(
    # Dynamic masks are drawn per batch; static ones must be in the data.
    required_features=lambda o: ("input_ids", "input_mask") + (
        () if o["dynamic_masking"] else MLM_FEATURES),
    inputs=_inputs, build=_build, loss_weights=mlm_weights, metrics=_metrics, per_batch=_masks,
    backbone_args=lambda task: {"default_padding_idx": task.vocabulary.special("pad", task.name)},
    options={"dynamic_masking": True, "max_predictions_per_seq": None, "mask_prob": 0.15})
