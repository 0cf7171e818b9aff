"""XLNet pretraining (permutation LM, docs/objectives.md section 7): the `garden.Pretraining`
record of `garden.Pretraining.family = 'xlnet'` (XLNet's FamilySpec names it; the model is
its pretrainer, XLNetPretrainer), on make_pretrain --objective=xlnet data.

A batch of that data holds input_k, input_q (0/1: the targets), seg_id, perm_rank [B, T] and
target, target_mask [B, P]. Every instance is exactly max_seq_length tokens (reuse half,
A <sep> B <sep> <cls>), so there is no padding. The model's inputs (`_inputs`, in the step) expand
the two matrices the records do not hold, with a few vectorized ops per batch:
  perm_mask [B, T, T] float, 1 = i cannot attend to j: perm_rank[i] + 1 - input_q[i] <= perm_rank[j]
    (`perm_mask_from_rank`; data_pipelines/objectives/xlnet.py explains the ranks and keeps the
    original construction, reference_perm_mask, which it equals);
  target_mapping [B, P, T] float: row k one-hot at the k-th target position in increasing
    position (the order of `target`), zero rows after the last target (`target_mapping_from`).
They are made where the step runs (on the accelerator), so only [B, T] vectors cross from the
input pipeline: a float [T, T] mask is 1 MiB per sequence at T = 512. The model
(garden.models.xlnet.XLNetPretrainer) runs both streams under perm_mask and scores the query
stream at the targets; loss = sum(target_mask * nll) / sum(target_mask) over the global batch.

Options (gin: garden.Pretraining.<option>):
  bi_data   forward relative positions in the first half of each batch, backward in the
            second (the original's bi_data; needs an even per-replica batch). Default False.
  mem_len   Transformer-XL memory kept per layer. Training with memory needs batches laid out
            as the original's input function lays them (batch slot b of step s+1 continues
            slot b of step s) and a step that carries each layer's memory to the next; the
            shuffled reader here gives neither, so only 0 is accepted: mem_len > 0 is a
            ConfigError before the model is built, and so is a backbone built with memory by
            a binding of its own (backbone.mem_len = 384), which the pretrainer would never
            feed. Memory is for inference on a converted or trained backbone built with it
            (XLNetBackbone.streams(mems=...)).
  reuse_len tokens of each segment cached as memory (the data's reuse half; 0: all); without
            memory it changes nothing.
"""

from __future__ import annotations

import tensorflow as tf

from garden.tasks.base import ConfigError
from garden.tasks.pretraining import PretrainingRecord, pretrainer_on_backbone, weight_share

FEATURES = ("input_k", "input_q", "seg_id", "perm_rank", "target", "target_mask")


def perm_mask_from_rank(perm_rank, input_q):
    """float32 [B, T, T], 1 where i cannot attend to j, of perm_rank and input_q [B, T]."""
    rank = tf.cast(perm_rank, tf.int32)
    self_rank = rank + 1 - tf.cast(tf.cast(input_q, tf.float32) > 0, tf.int32)
    return tf.cast(self_rank[:, :, None] <= rank[:, None, :], tf.float32)


def target_mapping_from(input_q, num_predict):
    """float32 [B, P, T]: row k one-hot at the k-th target (input_q > 0) in increasing position;
    rows past the last target are zero (so are targets past the P-th, which the data never has)."""
    is_target = tf.cast(input_q, tf.float32) > 0
    k = tf.cumsum(tf.cast(is_target, tf.int32), axis=1) - 1
    k = tf.where(is_target, k, -1)  # one_hot of -1 is a zero row
    return tf.transpose(tf.one_hot(k, num_predict, dtype=tf.float32), [0, 2, 1])


def _inputs(task, batch):
    token_ids = tf.cast(batch["input_k"], tf.int32)
    return {"token_ids": token_ids, "segment_ids": tf.cast(batch["seg_id"], tf.int32),
            "padding_mask": tf.ones_like(token_ids),
            "perm_mask": perm_mask_from_rank(batch["perm_rank"], batch["input_q"]),
            "target_mapping": target_mapping_from(batch["input_q"], batch["target"].shape[1]
                                                  or tf.shape(batch["target"])[1])}


def _weights(task, batch):
    return {"target_mask": tf.reduce_sum(tf.cast(batch["target_mask"], tf.float32))}


def _metrics(task, model, batch, training, weight_shares):
    from garden.models.xlnet.pretrainer import xlnet_pretrain_loss

    outputs = model(task.model_inputs(batch), training=training)
    metrics = xlnet_pretrain_loss(outputs, batch["target"], tf.cast(batch["target_mask"], tf.float32),
                                  lm_denominator=weight_share(weight_shares, "target_mask"))
    metrics["tokens"] = tf.cast(tf.size(batch["input_k"]), tf.float32)
    return metrics


def _memory_refused(switch: str) -> ConfigError:
    return ConfigError(f"{switch}: training with Transformer-XL memory needs stream-ordered "
                       "batches (slot b of each step continuing slot b of the last), which the "
                       "shuffled TFRecord reader does not give; use mem_len = 0 (memory is for "
                       "inference: XLNetBackbone.streams(mems=...))")


def _backbone_args(task):
    o = task.options
    if int(o["mem_len"]) > 0:
        raise _memory_refused(f"garden.Pretraining.mem_len={o['mem_len']}")
    # Only options set on the task are passed: a passed argument silently wins over a backbone
    # binding (backbone.bi_data = True), which otherwise stands. mem_len is never passed;
    # _build refuses a backbone bound with memory.
    defaults = RECORD_OPTIONS
    return {name: cast(o[name]) for name, cast in (("bi_data", bool), ("reuse_len", int))
            if cast(o[name]) != defaults[name]}


def _build(task, backbone):
    mem_len = int(backbone.get_config().get("mem_len") or 0)
    if mem_len > 0:  # the pretrainer calls streams() without mems: the memory would do nothing
        raise _memory_refused(f"the XLNet backbone has mem_len={mem_len} (a backbone binding, "
                              f"e.g. backbone.mem_len = {mem_len})")
    return pretrainer_on_backbone(task, backbone)


RECORD_OPTIONS = {"bi_data": False, "mem_len": 0, "reuse_len": 0}
RECORD = PretrainingRecord(required_features=FEATURES, inputs=_inputs, loss_weights=_weights,
                           metrics=_metrics, build=_build, backbone_args=_backbone_args,
                           options=RECORD_OPTIONS)
