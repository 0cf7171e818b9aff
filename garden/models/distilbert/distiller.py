"""DistilBERT distillation (Sanh et al., 2019; docs/objectives.md section 10).

- The student is initialised from the teacher: embeddings (word, position, LayerNorm; the
  student has no token types) and teacher layers [0, 2, 4, 7, 9, 11], one every other layer,
  as the released `scripts/extract_distilbert.py` does.
- The loss is 5 * KL(teacher_T || student_T) * T^2 + 2 * MLM cross-entropy + 1 * cosine
  embedding loss between the last hidden states, with T = 2.
- The teacher is any garden BERT (`BertPretrainer`, e.g. restored from a checkpoint), frozen.
"""

from __future__ import annotations

from typing import Dict, Sequence

import keras
import tensorflow as tf

# Teacher layer copied into each of the 6 student layers (12-layer teacher).
TEACHER_LAYERS = (0, 2, 4, 7, 9, 11)


def _backbone(model):
    return getattr(model, "backbone", model)


def _copy(target_layer, source_layer):
    target_layer.set_weights(source_layer.get_weights())


def init_student_from_teacher(student, teacher_bert_backbone, layers: Sequence[int] = TEACHER_LAYERS):
    """Copies the teacher's embeddings and chosen layers into the student, in place.

    Student layer i gets teacher layer layers[i] (every variable: attention projections and
    LayerNorm, feed-forward and LayerNorm). The word and position tables and the embedding
    LayerNorm are copied; the teacher's token-type table is dropped (the student has none and
    adds no type-0 vector: that is what the original extraction does too). When both are
    pretrainers (DistilBertPretrainer, BertPretrainer) the MLM transform, its LayerNorm and the
    output bias are copied as well (the projection is the tied word table).

    Args:
        student: DistilBertBackbone or DistilBertPretrainer.
        teacher_bert_backbone: BertBackbone or BertPretrainer of the same width, heads,
            feed-forward size and vocabulary, and at least as many positions.
        layers: teacher layer index for each student layer; len(layers) == student layers.

    Returns:
        the student.

    Example:
        teacher = keras.models.load_model("bert_base_pretrainer.keras")
        student = DistilBertPretrainer(untrained_distilbert_backbone("distilbert_base"))
        init_student_from_teacher(student, teacher)
    """
    s, t = _backbone(student), _backbone(teacher_bert_backbone)
    layers = [int(i) for i in layers]
    if len(layers) != len(s.encoder_blocks):
        raise ValueError(f"{len(layers)} teacher layers {layers} for a student of "
                         f"{len(s.encoder_blocks)} layers: give one teacher layer per student layer")
    bad = [i for i in layers if not 0 <= i < len(t.encoder_blocks)]
    if bad:
        raise ValueError(f"teacher layers {bad} do not exist: the teacher has "
                         f"{len(t.encoder_blocks)} layers (0..{len(t.encoder_blocks) - 1})")
    for name in ("vocab_size", "hidden_size", "num_heads", "intermediate_size"):
        if getattr(s, name) != getattr(t, name):
            raise ValueError(f"student {name}={getattr(s, name)} but teacher {name}="
                             f"{getattr(t, name)}: the copied weights would not fit")
    if s.max_sequence_length > t.max_sequence_length:
        raise ValueError(f"student max_sequence_length {s.max_sequence_length} exceeds the "
                         f"teacher's {t.max_sequence_length}")

    _copy(s.embeddings.token_embedding, t.embeddings.token_embedding)
    positions = t.embeddings.position_embedding.position_embeddings.numpy()
    s.embeddings.position_embedding.position_embeddings.assign(positions[:s.max_sequence_length])
    _copy(s.embeddings.layer_norm, t.embeddings.layer_norm)
    for student_block, teacher_index in zip(s.encoder_blocks, layers):
        _copy(student_block, t.encoder_blocks[teacher_index])

    s_head = getattr(student, "masked_lm_head", None)
    t_head = getattr(teacher_bert_backbone, "masked_lm_head", None)
    if s_head is not None and t_head is not None:
        _copy(s_head.transform_dense, t_head.transform_dense)
        _copy(s_head.layer_norm, t_head.layer_norm)
        s_head.output_bias.assign(t_head.output_bias.numpy())
    return student


@keras.saving.register_keras_serializable(package="garden")
class DistilBertDistiller(keras.Model):
    """A frozen BERT teacher and a DistilBERT student run on the same masked batch.

    The teacher always runs in inference mode (no dropout) and its variables are not
    trainable, so `distiller.trainable_variables` are the student's. The teacher sees the
    student's inputs with all-zero segment ids (one segment, as DistilBERT is trained).

    Inputs (dict, int32): token_ids, padding_mask [B, T]; masked_lm_positions [B, P].
    Outputs (dict): student_logits, teacher_logits float32 [B, P, V]; student_hidden,
    teacher_hidden [B, T, H] (last hidden states) -- the arguments of `distillation_loss`.

    Args:
        student: DistilBertPretrainer.
        teacher: BertPretrainer (its MLM head gives the soft targets).
        **kwargs: name, trainable.

    Example:
        distiller = DistilBertDistiller(init_student_from_teacher(student, teacher), teacher)
        out = distiller(batch, training=True)
        metrics = distillation_loss(out["student_logits"], out["teacher_logits"], ids, weights, out["student_hidden"], out["teacher_hidden"], batch["padding_mask"])
    """

    def __init__(self, student, teacher, **kwargs):
        super().__init__(**kwargs)
        if student.backbone.hidden_size != teacher.backbone.hidden_size:
            raise ValueError(f"student hidden_size {student.backbone.hidden_size} != teacher "
                             f"{teacher.backbone.hidden_size}: the cosine loss compares them")
        if student.backbone.vocab_size != teacher.backbone.vocab_size:
            raise ValueError(f"student vocab_size {student.backbone.vocab_size} != teacher "
                             f"{teacher.backbone.vocab_size}: the KL compares their logits")
        self.student = student
        self.teacher = teacher
        self.teacher.trainable = False

    def call(self, inputs, training=None):
        student_out = self.student(
            {k: inputs[k] for k in ("token_ids", "padding_mask", "masked_lm_positions")},
            training=training)
        teacher_backbone = self.teacher.backbone
        teacher_hidden = teacher_backbone(
            {"token_ids": inputs["token_ids"], "segment_ids": keras.ops.zeros_like(inputs["token_ids"]),
             "padding_mask": inputs["padding_mask"]}, training=False)["sequence_output"]
        teacher_logits = self.teacher.masked_lm_head(teacher_hidden, inputs["masked_lm_positions"],
                                                     training=False)
        return {
            "student_logits": student_out["mlm_logits"],
            "teacher_logits": keras.ops.stop_gradient(teacher_logits),
            "student_hidden": student_out["sequence_output"],
            "teacher_hidden": keras.ops.stop_gradient(teacher_hidden),
        }

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "student": keras.layers.serialize(self.student),
                "teacher": keras.layers.serialize(self.teacher)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["student"] = keras.layers.deserialize(config["student"])
        config["teacher"] = keras.layers.deserialize(config["teacher"])
        return cls(**config)


def distillation_loss(student_logits, teacher_logits, masked_lm_ids, weights, student_hidden,
                      teacher_hidden, mask, temperature: float = 2.0, alpha_ce: float = 5.0,
                      alpha_mlm: float = 2.0, alpha_cos: float = 1.0) -> Dict[str, tf.Tensor]:
    """DistilBERT's triple loss (Sanh et al., 2019, section 3), in plain TF ops.

        ce_loss  = mean over predictions of KL(softmax(t / T) || softmax(s / T)) * T^2
        mlm_loss = mean over predictions of -log softmax(s)[id]
        cos_loss = mean over real tokens of 1 - cos(h_student, h_teacher)
        loss     = alpha_ce * ce_loss + alpha_mlm * mlm_loss + alpha_cos * cos_loss

    "Mean over predictions" is weighted by `weights` (padding predictions count nothing), as
    torch's KLDivLoss(batchmean) and CrossEntropyLoss(ignore_index) over the selected tokens.
    The KL is taken at the predicted positions (the original's --restrict_ce_to_mask; its
    default scores every real token: predict all positions to get that). T^2 keeps the
    gradient scale of the soft term independent of T (Hinton et al., 2015).

    Args:
        student_logits, teacher_logits: float [B, P, V].
        masked_lm_ids: int [B, P], the original ids at the predicted positions.
        weights: float [B, P], 1.0 for real predictions, 0.0 for padding.
        student_hidden, teacher_hidden: float [B, T, H], last hidden states.
        mask: int [B, T], 1 for real tokens (the padding mask).
        temperature, alpha_ce, alpha_mlm, alpha_cos: float, the published 2.0, 5.0, 2.0, 1.0.

    Returns:
        dict of float32 scalars: loss, ce_loss, mlm_loss, cos_loss, mlm_accuracy.
    """
    s_logits = tf.cast(student_logits, tf.float32)
    t_logits = tf.cast(teacher_logits, tf.float32)
    w = tf.cast(weights, tf.float32)
    weight_sum = tf.reduce_sum(w)

    log_p_s = tf.nn.log_softmax(s_logits / temperature, axis=-1)
    log_p_t = tf.nn.log_softmax(t_logits / temperature, axis=-1)
    kl = tf.reduce_sum(tf.exp(log_p_t) * (log_p_t - log_p_s), axis=-1)  # [B, P]
    ce_loss = tf.math.divide_no_nan(tf.reduce_sum(w * kl), weight_sum) * temperature ** 2

    ids = tf.cast(masked_lm_ids, tf.int32)
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids, logits=s_logits)
    mlm_loss = tf.math.divide_no_nan(tf.reduce_sum(w * nll), weight_sum)
    correct = tf.cast(tf.equal(tf.argmax(s_logits, -1, output_type=tf.int32), ids), tf.float32)
    mlm_accuracy = tf.math.divide_no_nan(tf.reduce_sum(w * correct), weight_sum)

    s_h = tf.cast(student_hidden, tf.float32)
    t_h = tf.cast(teacher_hidden, tf.float32)
    real = tf.cast(mask, tf.float32)
    # torch.nn.CosineEmbeddingLoss: x.y / sqrt((|x|^2 + 1e-12) * (|y|^2 + 1e-12)).
    cos = tf.reduce_sum(s_h * t_h, -1) / tf.sqrt(
        (tf.reduce_sum(s_h * s_h, -1) + 1e-12) * (tf.reduce_sum(t_h * t_h, -1) + 1e-12))
    cos_loss = tf.math.divide_no_nan(tf.reduce_sum(real * (1.0 - cos)), tf.reduce_sum(real))

    loss = alpha_ce * ce_loss + alpha_mlm * mlm_loss + alpha_cos * cos_loss
    return {"loss": loss, "ce_loss": ce_loss, "mlm_loss": mlm_loss, "cos_loss": cos_loss,
            "mlm_accuracy": mlm_accuracy}
