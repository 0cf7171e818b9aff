"""ELECTRA's pretraining (docs/objectives.md section 6): the `RECORD` garden.Pretraining reads
for `garden.Pretraining.family = 'electra'`.

Data: make_pretrain --objective=electra (unmasked [CLS] A [SEP] B [SEP] blocks: input_ids,
input_mask, segment_ids). Model: ElectraPretrainer on the two towers of the backbone factory
(garden.models.factory.electra_towers), which masks and samples in the graph from one [2]
seed per batch that the input pipeline adds, keyed by (seed, batch index). Loss: the
generator's masked LM + disc_weight x the discriminator's replaced-token detection, each over
its global count. Options: mask_prob (0.15), temperature (1.0, the generator's sampling) and
disc_weight (50.0). Checkpoint objects: "model", "generator" and "discriminator" (what
fine-tuning restores).
"""

from __future__ import annotations

import tensorflow as tf

from garden.models.electra.pretrainer import electra_mask, electra_pretrain_loss
from garden.tasks import shared
from garden.tasks.pretraining import PretrainingRecord, weight_share


def _build(task, towers):
    o = task.options
    model = task.spec.pretrainer_class()(
        towers["generator"], towers["discriminator"],
        mask_token_id=task.vocabulary.special("mask", task.name),
        # Every control token ([CLS], [SEP], [PAD], ...): padding is excluded by the mask too.
        unmaskable_token_ids=sorted(task.vocabulary.special_ids), mask_prob=o["mask_prob"],
        temperature=o["temperature"], disc_weight=o["disc_weight"])
    return model, {"model": model, "generator": towers["generator"],
                   "discriminator": towers["discriminator"]}


def _summary(spec, towers):
    # The [MASK] id changes no weight: any id prints the same model.
    return spec.pretrainer_class()(towers["generator"], towers["discriminator"], mask_token_id=0)


def _seeds(task, ds, seed, input_context, skip_batches):
    # ElectraPretrainer draws masks and samples in the graph from one [2] seed per batch.
    def add_seed(index, batch):
        batch = dict(batch)
        batch["seed"] = tf.stack([tf.constant(seed % (2 ** 31), tf.int32),
                                  tf.cast(index, tf.int32)])
        return batch

    return shared.batch_index(ds, input_context, skip_batches).map(add_seed)


def _weights(task, batch):
    """The masked slots (their count is the masking formula's, which does not depend on the
    seed) and the real tokens the discriminator scores."""
    masked = electra_mask(batch["input_ids"], batch["input_mask"], tf.constant([0, 0]),
                          task.vocabulary.specials.get("mask", 0),
                          sorted(task.vocabulary.special_ids), task.options["mask_prob"])
    return {"masked_lm_weights": tf.reduce_sum(masked["masked_lm_weights"]),
            "disc_weights": shared.real_tokens(batch)}


def _inputs(task, batch):
    return {"token_ids": tf.cast(batch["input_ids"], tf.int32),
            "segment_ids": tf.cast(batch["segment_ids"], tf.int32),
            "padding_mask": tf.cast(batch["input_mask"], tf.int32),
            "seed": tf.cast(batch["seed"], tf.int32)}


def _metrics(task, model, batch, training, weight_shares):
    outputs = model(task.model_inputs(batch), training=training)
    metrics = electra_pretrain_loss(
        outputs, task.options["disc_weight"],
        mlm_denominator=weight_share(weight_shares, "masked_lm_weights", 1e-6),
        disc_denominator=weight_share(weight_shares, "disc_weights", 1e-6))
    metrics["tokens"] = shared.real_tokens(batch)
    return metrics


RECORD = PretrainingRecord(
    required_features=("input_ids", "input_mask", "segment_ids"), inputs=_inputs,
    build=_build, summary=_summary, loss_weights=_weights, metrics=_metrics, per_batch=_seeds,
    options={"mask_prob": 0.15, "temperature": 1.0, "disc_weight": 50.0})
