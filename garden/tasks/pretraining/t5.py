"""T5 span-corruption pretraining (docs/objectives.md section 8): the `RECORD` garden.Pretraining
reads for `garden.Pretraining.family = 't5'`, on `data_pipelines.make_pretrain --objective=t5`
output.

Data: `inputs` (kept pieces, one sentinel per noise span, EOS) and `targets` (sentinel + noise
run per span, EOS), zero-padded (0 = SentencePiece <pad>, which T5 also uses as the decoder
start token). A batch becomes the encoder-decoder inputs of garden/models/generative.py:
    encoder_token_ids = inputs, encoder_padding_mask = inputs != 0
    decoder_token_ids = [0] + targets[:-1] (targets shifted right behind the start token 0)
    decoder_padding_mask = targets != 0 (slot t is real when it predicts a real target)
Loss: cross-entropy over the real target positions (sentinels and EOS included, as T5 trains),
summed over the batch and divided by the global count of real targets the trainer all-reduces.
Logged: target_loss / target_accuracy (every real target) and noise_accuracy, over the
targets that are corrupted text only (no sentinel, no EOS): the sentinels follow a fixed
order (<extra_id_0>, then after each span the next one) and are cheap to guess, so noise
accuracy is what shows the model reads the context.

Vocabulary: the sentinels sit above the SentencePiece pieces (<extra_id_i> = size + n - 1 - i,
n = the data's num_sentinels, 100 by default), so the model is built with vocab_size = pieces
+ n (backbone_args binds it, read from the data's info.json); the LM is checkpointed as
"model" (its backbone inside it), since its vocabulary is not the tokenizer's size that
garden.Pretraining checks for objects named otherwise.

Gin: `garden.Pretraining.family = 't5'`, `garden.Pretraining.backbone = @generative_lm`,
`generative_lm.preset = 't5_small'` (configs/runs/pretrain_t5.gin, configs/t5_*.gin).
"""

from __future__ import annotations

from typing import Dict

import tensorflow as tf

from garden import losses
from garden.tasks.pretraining import PretrainingRecord, weight_share

EOS_ID = 1  # T5's SentencePiece layout (make_vocab: pad 0, eos 1, unk 2)


def num_sentinels(task) -> int:
    """The sentinel count the data was made with (every phase must agree)."""
    counts = {int(d.info["options"]["num_sentinels"]) for d in task.data_dirs}
    if len(counts) != 1:
        raise ValueError(f"{task.name}: the phases' data were made with different "
                         f"--num_sentinels {sorted(counts)}; remake them with one value")
    return counts.pop()


def model_inputs(task, batch) -> Dict[str, tf.Tensor]:
    inputs = tf.cast(batch["inputs"], tf.int32)
    targets = tf.cast(batch["targets"], tf.int32)
    start = tf.zeros_like(targets[:, :1])
    return {"encoder_token_ids": inputs,
            "encoder_padding_mask": tf.cast(inputs != 0, tf.int32),
            "decoder_token_ids": tf.concat([start, targets[:, :-1]], axis=1),
            "decoder_padding_mask": tf.cast(targets != 0, tf.int32)}


def noise_targets(task, targets) -> tf.Tensor:
    """float [B, T]: 1 where the target is a corrupted text piece (not pad, EOS or sentinel)."""
    targets = tf.cast(targets, tf.int32)
    return tf.cast((targets != 0) & (targets != EOS_ID) & (targets < task.vocab_size), tf.float32)


def _build(task, lm):
    expected = task.vocab_size + num_sentinels(task)
    if lm.backbone.vocab_size != expected:
        raise ValueError(f"the T5 model has vocab_size {lm.backbone.vocab_size}; data made with "
                         f"{task.vocab} ({task.vocab_size} pieces) and {num_sentinels(task)} "
                         f"sentinels needs {expected}: unbind generative_lm.vocab_size")
    return lm, {"model": lm}


def _loss_weights(task, batch) -> Dict[str, tf.Tensor]:
    return {"target_tokens": tf.reduce_sum(tf.cast(batch["targets"] != 0, tf.float32))}


def _metrics(task, model, batch, training, weight_shares) -> Dict[str, tf.Tensor]:
    inputs = task.model_inputs(batch)
    logits = model(inputs, training=training)["logits"]
    targets = tf.cast(batch["targets"], tf.int32)
    real = tf.cast(inputs["decoder_padding_mask"], tf.float32)
    out = losses.masked_lm_metrics(logits, targets, real,
                                   weight_share(weight_shares, "target_tokens"), prefix="target")
    noise = noise_targets(task, targets)
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), targets), tf.float32)
    out["noise_accuracy"] = tf.math.divide_no_nan(tf.reduce_sum(noise * correct),
                                                  tf.reduce_sum(noise))
    out = losses.with_total_loss(out, target=1.0)
    out["tokens"] = tf.reduce_sum(tf.cast(inputs["encoder_padding_mask"], tf.float32)) + \
        tf.reduce_sum(real)
    return out


RECORD = PretrainingRecord(
    required_features=("inputs", "targets"), inputs=model_inputs, build=_build,
    summary=lambda spec, lm: lm, loss_weights=_loss_weights, metrics=_metrics,
    backbone_args=lambda task: {"vocab_size": task.vocab_size + num_sentinels(task)})
