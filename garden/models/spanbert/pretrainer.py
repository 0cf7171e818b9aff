"""SpanBERT pretraining heads (masked LM + span boundary objective) and their loss.

docs/objectives.md section 4 (Joshi et al., 2020, "SpanBERT: Improving Pre-training by Representing
and Predicting Spans", TACL, arXiv:1907.10529, section 3.2): every masked piece x_i of a span
(s, e) is predicted twice, by BERT's MLM head from h_i and by the span boundary objective (SBO)
from the two states just outside the span and the piece's offset in it:

    y_i = f(h_{s-1}, h_{e+1}, p_{i-s+1})
    f   = LayerNorm(GeLU(W2 . LayerNorm(GeLU(W1 . [h_{s-1}; h_{e+1}; p]))))

with p a learned relative-position embedding (max_targets rows of 200 values, as the released
code's `pair_pos_embeddings`), then logits tied to the word table plus the head's own bias.
Loss = MLM mean + 1.0 * SBO mean (no NSP: SpanBERT trains single segments).

The backbone is the BERT encoder itself (composed, not subclassed): a SpanBERT checkpoint is a
BERT checkpoint with one more head.
"""

from __future__ import annotations

from typing import Dict, Optional

import keras
import tensorflow as tf
from keras import ops

from garden.losses import masked_lm_metrics, with_total_loss
from garden.layers.embeddings import truncated_normal
from garden.layers.heads import transform_layers
from garden.models.pretrainer import Pretrainer, masked_lm_graph, tied_masked_lm_head

# Inputs of the pretrainer beyond the backbone's: the MLM positions and the SBO targets, which
# make_pretrain --objective=spanbert writes aligned with masked_lm_positions.
SBO_INPUTS = ("span_left_positions", "span_right_positions", "span_relative_positions")


@keras.saving.register_keras_serializable(package="garden")
class SpanBoundaryHead(keras.layers.Layer):
    """The span boundary objective head of SpanBERT (Joshi et al., 2020, section 3.2).

    For prediction j of example b: concat(h[b, left[b, j]], h[b, right[b, j]],
    P[min(relative[b, j], max_targets - 1)]) -> Dense(H) -> GeLU -> LayerNorm -> Dense(H) ->
    GeLU -> LayerNorm -> x @ word_table^T + bias. Offsets beyond the table are clipped to its
    last row (the data gives sbo_weights 0 to such targets, so they count nothing in the loss;
    clipping only keeps the gather in range). The word table is the backbone's (tied).

    Args:
        token_embedding: keras.layers.ReversibleEmbedding, the word table [V, E] (E = H).
        max_targets: int, rows of the relative-position table (15: the longest span predicted).
        position_embedding_size: int, width of a relative-position embedding (200).
        activation: str or callable (exact GeLU).
        layer_norm_epsilon: float (1e-12, as BERT).
        initializer_range: float, stddev of the truncated normal initializers.
        **kwargs: name, dtype, trainable.

    Call args:
        inputs: float [B, T, H], the encoder output.
        left_positions, right_positions: int [B, P], the boundary positions (start-1, end+1).
        relative_positions: int [B, P], 0-based offset of the predicted piece in its span.

    Example:
        head = SpanBoundaryHead(backbone.token_embedding)
        logits = head(h, left, right, offset)  # [B, P, V] float32
    """

    def __init__(self, token_embedding, max_targets: int = 15, position_embedding_size: int = 200,
                 activation="gelu", layer_norm_epsilon: float = 1e-12,
                 initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.token_embedding = token_embedding
        self.max_targets = int(max_targets)
        self.position_embedding_size = int(position_embedding_size)
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.initializer_range = float(initializer_range)

    def build(self, inputs_shape, *positions_shapes):
        hidden = inputs_shape[-1]
        vocab_size = self.token_embedding.input_dim
        width = self.token_embedding.output_dim
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_targets, self.position_embedding_size),
            initializer=truncated_normal(self.initializer_range))
        concat_width = 2 * hidden + self.position_embedding_size
        self.dense_1, self.layer_norm_1 = transform_layers(
            self, hidden, (None, None, concat_width), "dense_1", "layer_norm_1")
        self.dense_2, self.layer_norm_2 = transform_layers(
            self, width, (None, None, hidden), "dense_2", "layer_norm_2")
        # float32 and never autocast: a vocabulary-sized bias added to float32 logits.
        self.output_bias = self.add_weight(
            name="output_bias", shape=(vocab_size,), initializer="zeros", dtype="float32",
            autocast=False)
        self.built = True

    def call(self, inputs, left_positions, right_positions, relative_positions):
        def gather(positions):
            positions = ops.expand_dims(ops.cast(positions, "int32"), -1)
            return ops.take_along_axis(inputs, positions, axis=1)  # [B, P, H]

        offsets = ops.clip(ops.cast(relative_positions, "int32"), 0, self.max_targets - 1)
        position = ops.take(ops.cast(self.position_embeddings, inputs.dtype), offsets, axis=0)
        x = ops.concatenate([gather(left_positions), gather(right_positions), position], axis=-1)
        x = self.layer_norm_1(self.dense_1(x))
        x = self.layer_norm_2(self.dense_2(x))
        logits = self.token_embedding(x, reverse=True)
        return ops.cast(logits, "float32") + self.output_bias

    def compute_output_spec(self, inputs, left_positions, right_positions, relative_positions):
        shape = tuple(left_positions.shape) + (self.token_embedding.input_dim,)
        return keras.KerasTensor(shape, dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            max_targets=self.max_targets,
            position_embedding_size=self.position_embedding_size,
            activation=keras.activations.serialize(self.activation),
            layer_norm_epsilon=self.layer_norm_epsilon,
            initializer_range=self.initializer_range,
        )
        return config


@keras.saving.register_keras_serializable(package="garden")
class SpanBertPretrainer(Pretrainer):
    """A BERT backbone with SpanBERT's masked LM and span boundary heads (no NSP).

    Inputs (dict, int32): token_ids, segment_ids, padding_mask [B, T]; masked_lm_positions,
    span_left_positions, span_right_positions, span_relative_positions [B, P] (aligned: entry
    j of each describes prediction j). Outputs (dict, float32): mlm_logits, sbo_logits
    [B, P, V]. Both heads project onto the backbone's word table (tied).

    Args:
        backbone: BertBackbone (or any backbone with its inputs, sequence_output and a
            `token_embedding` ReversibleEmbedding of width H).
        max_targets: int, rows of the SBO relative-position table (15).
        position_embedding_size: int, width of the SBO relative-position embedding (200).
        **kwargs: name, trainable.

    Example:
        pretrainer = SpanBertPretrainer(untrained_bert_backbone("bert_tiny", vocab_size=1000))
        outputs = pretrainer({**backbone_inputs, "masked_lm_positions": p, **sbo_targets})
        metrics = spanbert_pretrain_loss(outputs, masked_lm_ids, masked_lm_weights, sbo_weights)
    """

    config_attributes = ("max_targets", "position_embedding_size")

    def __init__(self, backbone, max_targets: int = 15, position_embedding_size: int = 200,
                 **kwargs):
        # === Layers ===
        dtype = backbone.dtype_policy
        initializer_range = getattr(backbone, "initializer_range", 0.02)
        epsilon = getattr(backbone, "layer_norm_epsilon", 1e-12)
        masked_lm_head = tied_masked_lm_head(backbone)
        span_boundary_head = SpanBoundaryHead(
            backbone.token_embedding, max_targets=max_targets,
            position_embedding_size=position_embedding_size, activation="gelu",
            layer_norm_epsilon=epsilon, initializer_range=initializer_range, dtype=dtype,
            name="span_boundary_head")

        # === Functional graph ===
        inputs, backbone_outputs, mlm_logits = masked_lm_graph(
            backbone, masked_lm_head, ("token_ids", "segment_ids", "padding_mask"), SBO_INPUTS)
        sbo_logits = span_boundary_head(backbone_outputs["sequence_output"],
                                        *(inputs[k] for k in SBO_INPUTS))
        super().__init__(inputs=inputs,
                         outputs={"mlm_logits": mlm_logits, "sbo_logits": sbo_logits}, **kwargs)

        # === Config ===
        self.backbone = backbone
        self.masked_lm_head = masked_lm_head
        self.span_boundary_head = span_boundary_head
        self.max_targets = int(max_targets)
        self.position_embedding_size = int(position_embedding_size)


def spanbert_pretrain_loss(outputs: Dict[str, tf.Tensor], masked_lm_ids, masked_lm_weights,
                           sbo_weights, sbo_loss_weight: float = 1.0,
                           mlm_denominator: Optional[tf.Tensor] = None,
                           sbo_denominator: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
    """MLM + SBO loss and accuracies of one (per-replica) batch, in plain TF ops.

    mlm_loss = sum(w * nll_mlm) / (sum(w) + 1e-5) with w = masked_lm_weights;
    sbo_loss = sum(s * nll_sbo) / (sum(s) + 1e-5) with s = sbo_weights (0 for padding, for
    spans touching the block edge and for offsets past max_targets); both heads predict the same
    original ids. loss = mlm_loss + sbo_loss_weight * sbo_loss (Joshi et al. 2020: 1.0).

    Args:
        outputs: dict with "mlm_logits" and "sbo_logits" float [B, P, V].
        masked_lm_ids: int [B, P], the original ids at the masked positions.
        masked_lm_weights: float [B, P], 1.0 for real predictions.
        sbo_weights: float [B, P], 1.0 where the SBO target counts.
        sbo_loss_weight: float, the SBO term's weight.
        mlm_denominator, sbo_denominator: optional float scalars replacing the weight sums (the
            trainer passes this batch's share of the global sums, see bert_pretrain_loss).

    Returns:
        dict of float32 scalars: loss, mlm_loss, sbo_loss, mlm_accuracy, sbo_accuracy.
    """
    return with_total_loss(
        {**masked_lm_metrics(outputs["mlm_logits"], masked_lm_ids, masked_lm_weights,
                             mlm_denominator),
         **masked_lm_metrics(outputs["sbo_logits"], masked_lm_ids, sbo_weights,
                             sbo_denominator, prefix="sbo")},
        mlm=1.0, sbo=sbo_loss_weight)
