"""XLNet pretraining (permutation LM, docs/objectives.md section 7): the `garden.Pretraining`
family record of `garden.Pretraining.family = 'xlnet'`, on make_pretrain --objective=xlnet data.

A batch of that data holds input_k, seg_id [B, T], perm_mask [B, T*T] and target_mapping
[B, P*T] (0/1 int64, row-major), target, target_mask [B, P]. Every instance is exactly
max_seq_length tokens (reuse half, A <sep> B <sep> <cls>), so there is no padding. The model
(garden.models.xlnet.XLNetPretrainer) runs both streams under perm_mask and scores the query
stream at the targets; loss = sum(target_mask * nll) / sum(target_mask) over the global batch.

Options (gin: garden.Pretraining.<option>):
  bi_data   forward relative positions in the first half of each batch, backward in the
            second (the original's bi_data; needs an even per-replica batch). Default False.
  mem_len   Transformer-XL memory kept per layer. Training with memory needs batches laid out
            as the original's input function lays them (batch slot b of step s+1 continues
            slot b of step s); the shuffled reader here does not, so only 0 is accepted.
            The backbone records it (with reuse_len) for uses of memory outside training.
  reuse_len tokens of each segment cached as memory (the data's reuse half; 0: all).
"""

from __future__ import annotations

import tensorflow as tf

from garden.tasks.pretraining import Family, _share, _with_backbone

FEATURES = ("input_k", "seg_id", "perm_mask", "target_mapping", "target", "target_mask")


def _inputs(task, batch):
    token_ids = tf.cast(batch["input_k"], tf.int32)
    seq_len = tf.shape(token_ids)[1]
    perm = tf.reshape(tf.cast(batch["perm_mask"], tf.float32), [-1, seq_len, seq_len])
    mapping = tf.reshape(tf.cast(batch["target_mapping"], tf.float32), [-1, tf.shape(batch["target"])[1], seq_len])
    return {"token_ids": token_ids, "segment_ids": tf.cast(batch["seg_id"], tf.int32),
            "padding_mask": tf.ones_like(token_ids), "perm_mask": perm, "target_mapping": mapping}


def _weights(task, batch):
    return {"target_mask": tf.reduce_sum(tf.cast(batch["target_mask"], tf.float32))}


def _metrics(task, model, batch, training, weight_shares):
    from garden.models.xlnet.pretrainer import xlnet_pretrain_loss

    outputs = model(task.model_inputs(batch), training=training)
    metrics = xlnet_pretrain_loss(outputs, batch["target"], tf.cast(batch["target_mask"], tf.float32),
                                  lm_denominator=_share(weight_shares, "target_mask"))
    metrics["tokens"] = tf.cast(tf.size(batch["input_k"]), tf.float32)
    return metrics


def _backbone_args(task):
    o = task.options
    if int(o["mem_len"]) > 0:
        raise ValueError(f"garden.Pretraining.mem_len={o['mem_len']}: training with Transformer-XL "
                         "memory needs stream-ordered batches (slot b of each step continuing slot b "
                         "of the last), which the shuffled TFRecord reader does not give; use "
                         "mem_len=0 (memory at inference: XLNetBackbone.streams(mems=...))")
    return {"bi_data": bool(o["bi_data"]), "mem_len": int(o["mem_len"]), "reuse_len": int(o["reuse_len"])}


def _family() -> Family:
    from garden.models.xlnet.pretrainer import XLNetPretrainer

    return Family(objective="xlnet", tokenizer="sentencepiece", required_features=FEATURES,
                  inputs=_inputs, build=_with_backbone(XLNetPretrainer), summary=XLNetPretrainer,
                  loss_weights=_weights, metrics=_metrics, backbone_args=_backbone_args,
                  options={"bi_data": False, "mem_len": 0, "reuse_len": 0})


FAMILY = _family()
