"""Task-specific distillation of a fine-tuned classifier into a smaller one: the losses, the
layer maps and the model that holds student, frozen teacher and learned projections
(garden.tasks.task_distillation trains it; docs/tasks.md "Task-specific distillation").

Three objectives, each as its paper states it (z: logits, T: temperature, y: gold labels):
  pkd         BERT-PKD (Sun et al., 2019): (1 - alpha) CE(z_s, y)
              + alpha T^2 SCE(z_s / T, z_t / T)
              + beta sum_j mean_b || h_s / ||h_s|| - h_t / ||h_t|| ||^2  over the [CLS] states
              of the mapped intermediate layers (student layers 1 .. M-1; widths must match).
  tinybert    TinyBERT (Jiao et al., 2020): sum over mapped layers of the attention-score MSE
              (scores before the softmax, per head: equal head counts) and the hidden-state
              MSE(H_s W_m, H_t), the embedding MSE(E_s W_0, E_t), then the prediction loss
              SCE(z_s / T, z_t / T) (T = 1).
  logits_mse  Tang et al. (2019): alpha CE(z_s, y) + (1 - alpha) mean_b ||z_s - z_t||^2.
SCE(a, b) = -sum softmax(b) log_softmax(a), the soft cross-entropy of both papers (KL plus the
teacher's entropy: the same gradient, and at its minimum when z_s = z_t, not 0).

Means run over real positions only (padding_mask): the attention MSE over real (query, key)
pairs and heads, the hidden MSE over real tokens and the width. TinyBERT's code averages over
the padded positions too (they are equal, so add 0, but count in the mean).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

import keras
import tensorflow as tf

from garden import losses
from garden.layers.transformer_encoder import TransformerEncoderBlock

LOSSES = ("pkd", "tinybert", "logits_mse")
LAYER_MAPS = ("uniform", "last")


# ------------------------------------------------------------------------------------------
# Losses: plain functions of tensors
# ------------------------------------------------------------------------------------------


def soft_cross_entropy(student_logits, teacher_logits, temperature: float = 1.0):
    """mean_b -sum_c softmax(z_t / T) log_softmax(z_s / T): [B, C] x2 -> scalar."""
    t = tf.nn.softmax(tf.cast(teacher_logits, tf.float32) / temperature, axis=-1)
    s = tf.nn.log_softmax(tf.cast(student_logits, tf.float32) / temperature, axis=-1)
    return tf.reduce_mean(-tf.reduce_sum(t * s, axis=-1))


def gold_cross_entropy(logits, labels):
    """Softmax cross-entropy with the gold labels, mean over the batch."""
    return losses.sentence_cross_entropy(logits, labels)[0]


def patient_loss(student_cls, teacher_cls):
    """PKD's L_PT: sum over layers of mean_b ||s/||s|| - t/||t|| ||^2; [K, B, H] x2 -> scalar."""
    s = tf.math.l2_normalize(tf.cast(student_cls, tf.float32), axis=-1)
    t = tf.math.l2_normalize(tf.cast(teacher_cls, tf.float32), axis=-1)
    return tf.reduce_sum(tf.reduce_mean(tf.reduce_sum(tf.square(s - t), axis=-1), axis=-1))


def pkd_loss(student_logits, teacher_logits, labels, student_cls, teacher_cls,
             alpha: float, temperature: float, beta: float) -> Dict[str, tf.Tensor]:
    """BERT-PKD's loss and its parts (module docstring)."""
    ce = gold_cross_entropy(student_logits, labels)
    kd = soft_cross_entropy(student_logits, teacher_logits, temperature)
    pt = patient_loss(student_cls, teacher_cls)
    loss = (1 - alpha) * ce + alpha * temperature ** 2 * kd + beta * pt
    return {"loss": loss, "gold_ce": ce, "soft_ce": kd, "patient": pt}


def _real_mean(squares, weights):
    return tf.reduce_sum(squares * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)


def attention_score_loss(student_scores, teacher_scores, padding_mask):
    """Sum over K layers of the MSE of scores [K, B, A, T, T] over real (query, key) pairs."""
    real = tf.cast(padding_mask, tf.float32)
    pairs = real[:, None, :, None] * real[:, None, None, :]  # [B, 1, T, T]
    heads = tf.cast(tf.shape(student_scores)[2], tf.float32)
    diff = tf.square(tf.cast(student_scores, tf.float32) - tf.cast(teacher_scores, tf.float32))
    per_layer = tf.map_fn(lambda d: _real_mean(d, pairs) / heads, diff)
    return tf.reduce_sum(per_layer)


def hidden_state_loss(projected_student, teacher_states, padding_mask):
    """Sum over K layers of MSE(H_s W, H_t) [K, B, T, H_t] over real tokens and the width."""
    real = tf.cast(padding_mask, tf.float32)[:, :, None]
    width = tf.cast(tf.shape(teacher_states)[-1], tf.float32)
    diff = tf.square(tf.cast(projected_student, tf.float32) - tf.cast(teacher_states, tf.float32))
    per_layer = tf.map_fn(lambda d: _real_mean(d, real) / width, diff)
    return tf.reduce_sum(per_layer)


def tinybert_loss(student_logits, teacher_logits, student_scores, teacher_scores,
                  projected_student, teacher_states, padding_mask, intermediate,
                  temperature: float = 1.0) -> Dict[str, tf.Tensor]:
    """TinyBERT's losses. projected_student / teacher_states: [K + 1, B, T, H_t], entry 0 the
    embeddings. `intermediate` w weighs the two stages of the paper: the loss is
    w (embedding + hidden + attention) + (1 - w) prediction (1: intermediate-layer
    distillation, 0: prediction-layer distillation, 0.5: one equally weighted sum)."""
    embedding = hidden_state_loss(projected_student[:1], teacher_states[:1], padding_mask)
    hidden = hidden_state_loss(projected_student[1:], teacher_states[1:], padding_mask)
    attention = attention_score_loss(student_scores, teacher_scores, padding_mask)
    prediction = soft_cross_entropy(student_logits, teacher_logits, temperature)
    layers = embedding + hidden + attention
    loss = intermediate * layers + (1 - intermediate) * prediction
    return {"loss": loss, "embedding": embedding, "hidden": hidden, "attention": attention,
            "prediction": prediction}


def logits_mse_loss(student_logits, teacher_logits, labels, alpha: float) -> Dict[str, tf.Tensor]:
    """Tang et al.'s loss: alpha CE(gold) + (1 - alpha) mean_b ||z_s - z_t||^2."""
    ce = gold_cross_entropy(student_logits, labels)
    mse = tf.reduce_mean(tf.reduce_sum(tf.square(
        tf.cast(student_logits, tf.float32) - tf.cast(teacher_logits, tf.float32)), axis=-1))
    return {"loss": alpha * ce + (1 - alpha) * mse, "gold_ce": ce, "logits_mse": mse}


# ------------------------------------------------------------------------------------------
# Layer maps
# ------------------------------------------------------------------------------------------


def layer_map(how: Union[str, Sequence[int]], student_layers: int, teacher_layers: int,
              mapped: int) -> List[int]:
    """The teacher layer (1-based) of each of student layers 1 .. `mapped`.

    "uniform": g(m) = floor(m N / M) (TinyBERT's g(m) = m N / M; PKD-Skip: 2, 4, 6, 8, 10 for
    M = 6 of N = 12); "last": N - M + m (PKD-Last: 7 .. 11); a list: those layers.
    ValueError naming what does not fit.
    """
    m, n = int(student_layers), int(teacher_layers)
    if m > n:
        raise ValueError(f"a student of {m} layers is deeper than its teacher of {n}: no layer "
                         f"map fits")
    if isinstance(how, str):
        if how not in LAYER_MAPS:
            raise ValueError(f"layer_map {how!r}: choose one of {LAYER_MAPS} or a list of "
                             f"teacher layers")
        return [(j * n) // m if how == "uniform" else n - m + j for j in range(1, mapped + 1)]
    layers = [int(i) for i in how]
    if len(layers) != mapped or not all(1 <= i <= n for i in layers):
        raise ValueError(f"layer_map {layers}: give {mapped} teacher layers in 1..{n}, one for "
                         f"each of student layers 1..{mapped}")
    return layers


def model_inputs(model, inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """The entries of `inputs` a functional model takes (a packer may give more, e.g. the
    segment_ids a BiLSTM does not read; Keras would pair extra keys by position)."""
    names = getattr(model, "input", None)
    return {k: inputs[k] for k in names} if isinstance(names, dict) else inputs


# ------------------------------------------------------------------------------------------
# Reading a classifier: logits and backbone outputs in one pass, attention scores
# ------------------------------------------------------------------------------------------


def classifier_forward(classifier, inputs, training: bool = False
                       ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
    """(logits float32 [B, C], the backbone's output dict) of a SequenceClassifier in one pass:
    its backbone, then its head (pooled output, or DistilBERT's pre-classifier on the first
    token) -> dropout -> dense. Equal to classifier(inputs)["logits"]; the backbone's outputs
    (hidden_states when it was built with output_hidden_states) come with them."""
    backbone = classifier.backbone
    outputs = backbone(model_inputs(backbone, inputs), training=training)
    if classifier.pre_classifier is None:
        pooled = outputs["pooled_output"]
    else:
        pooled = classifier.pre_classifier(outputs["sequence_output"][:, 0, :])
    logits = classifier.classifier_dense(classifier.classifier_dropout(pooled, training=training))
    return tf.cast(logits, tf.float32), outputs


def encoder_blocks(backbone) -> Optional[List[TransformerEncoderBlock]]:
    """The backbone's one TransformerEncoderBlock per layer, or None when it has no such list
    (then attention scores cannot be read from it)."""
    blocks = getattr(backbone, "encoder_blocks", None)
    if not blocks or not all(isinstance(b, TransformerEncoderBlock) for b in blocks):
        return None
    if len(blocks) != backbone.get_config().get("num_layers", len(blocks)):
        return None  # shared blocks (ALBERT): one block stands for several layers
    return list(blocks)


def attention_scores(block: TransformerEncoderBlock, x):
    """The unnormalised scores q k^T / sqrt(d) [B, A, T, T] that `block` computes on its input
    x [B, T, H] (before the padding mask and the softmax): softmax of them over the real keys
    gives the block's attention probabilities."""
    attention = block.attention
    keys = block.attention_layer_norm(x) if block.normalize_first else x
    q = attention.query_dense(keys)  # [B, T, A, d]
    k = attention.key_dense(keys)
    scores = tf.einsum("bqad,bkad->baqk", q, k)
    if attention.scale_queries:
        scores = scores * (1.0 / math.sqrt(attention.key_dim))
    return scores


# ------------------------------------------------------------------------------------------
# The model the trainer trains
# ------------------------------------------------------------------------------------------


class Projections(keras.layers.Layer):
    """TinyBERT's learned maps W_0 (embeddings), W_1 .. W_K (mapped layers) from the student's
    width to the teacher's: one [H_s, H_t] matrix each, no bias (H_s W as the paper writes it;
    its code shares one W_h over the layers, here each layer has its own)."""

    def __init__(self, count: int, teacher_width: int, **kwargs):
        super().__init__(**kwargs)
        self.count, self.teacher_width = int(count), int(teacher_width)
        self.maps = [keras.layers.Dense(self.teacher_width, use_bias=False, name=f"w_{i}")
                     for i in range(self.count)]

    def call(self, states):
        """[K + 1, B, T, H_s] -> [K + 1, B, T, H_t]."""
        return tf.stack([dense(states[i]) for i, dense in enumerate(self.maps)], axis=0)


class ClassifierDistiller(keras.Model):
    """A student classifier beside its frozen teacher (and TinyBERT's projections).

    Called, it is the student: inputs -> {"logits"} (what evaluation and export read). The
    losses read `student`, `teacher` and `projections` through the task.
    """

    def __init__(self, student, teacher, projections: Optional[Projections] = None, **kwargs):
        super().__init__(name="classifier_distiller", **kwargs)
        teacher.trainable = False
        self.student, self.teacher, self.projections = student, teacher, projections

    def call(self, inputs, training=False):
        return self.student(model_inputs(self.student, inputs), training=training)
