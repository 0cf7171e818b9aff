"""Pretraining heads shared by several families (BERT, RoBERTa, ALBERT, ELECTRA, SpanBERT)."""

from __future__ import annotations

import keras
from keras import ops
import tensorflow as tf

from garden.layers import activations
from garden.layers.embeddings import truncated_normal


def transform_layers(head: keras.layers.Layer, width: int, inputs_shape, dense_name: str,
                     norm_name: str):
    """BERT's head transform, dense(width, activation) -> LayerNorm, built on `inputs_shape`:
    the MLM head's (width E) and each of the span boundary head's two (SpanBERT).

    The activation, initializer range, LayerNorm epsilon and dtype policy are `head`'s own
    (its `activation`, `initializer_range`, `layer_norm_epsilon` attributes); the two layers are
    returned for the head to hold under their checkpoint names.
    """
    dense = keras.layers.Dense(width, activation=head.activation,
                               kernel_initializer=truncated_normal(head.initializer_range),
                               dtype=head.dtype_policy, name=dense_name)
    dense.build(inputs_shape)
    norm = keras.layers.LayerNormalization(epsilon=head.layer_norm_epsilon,
                                           dtype=head.dtype_policy, name=norm_name)
    norm.build(tuple(inputs_shape[:-1]) + (width,))
    return dense, norm


@keras.saving.register_keras_serializable(package="garden")
class MaskedLMHead(keras.layers.Layer):
    """Masked language model head with the output projection tied to the word table.

    BERT (Devlin et al., 2019; `get_masked_lm_output` in the original run_pretraining.py):
    gather the hidden states at the masked positions -> dense(E, gelu) -> LayerNorm ->
    logits = x @ word_table^T + output_bias. E is the width of the word table (H for BERT,
    the factorized embedding size for ALBERT). The table is the very variable of
    `token_embedding` (a `keras.layers.ReversibleEmbedding` called with reverse=True), not a
    copy, so the MLM loss trains the input embeddings too. Logits are float32 whatever the
    dtype policy, so that the softmax cross-entropy is taken at full precision.

    The embedding layer is an argument, not part of the config: the model that owns both
    (e.g. BertPretrainer) rebuilds the head from its backbone when it is deserialized.

    Args:
        token_embedding: keras.layers.ReversibleEmbedding, the word table [V, E].
        activation: str or callable (garden.layers.activations.get), activation of the
            transform (BERT: exact GELU "gelu"; "gelu_new" the tanh form).
        layer_norm_epsilon: float, LayerNorm epsilon (BERT: 1e-12).
        initializer_range: float, stddev of the transform kernel initializer.
        **kwargs: name, dtype, trainable.

    Call args:
        inputs: float [B, T, H], the encoder output.
        masked_positions: int [B, P], positions to predict (padding predictions may point at 0),
            or None when `inputs` already holds just those rows ([B, P, H]).

    Example:
        head = MaskedLMHead(backbone.token_embedding)
        logits = head(outputs["sequence_output"], positions)  # [B, P, V] float32
        loss = keras.losses.sparse_categorical_crossentropy(ids, logits, from_logits=True)
    """

    def __init__(self, token_embedding, activation="gelu", layer_norm_epsilon: float = 1e-12,
                 initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.token_embedding = token_embedding
        self.activation = activations.get(activation)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.initializer_range = float(initializer_range)

    def build(self, inputs_shape, masked_positions_shape=None):
        vocab_size = self.token_embedding.input_dim
        self.transform_dense, self.layer_norm = transform_layers(
            self, self.token_embedding.output_dim, inputs_shape, "transform_dense", "layer_norm")
        # float32 and never autocast: a vocabulary-sized bias added to float32 logits.
        self.output_bias = self.add_weight(
            name="output_bias", shape=(vocab_size,), initializer="zeros", dtype="float32",
            autocast=False)
        self.built = True

    def call(self, inputs, masked_positions=None):
        x = inputs
        if masked_positions is not None:
            positions = ops.expand_dims(ops.cast(masked_positions, "int32"), -1)
            x = ops.take_along_axis(inputs, positions, axis=1)  # [B, P, H]
        x = self.transform_dense(x)
        x = self.layer_norm(x)
        # x @ table^T, what token_embedding(x, reverse=True) computes, with the transpose in
        # the matmul: the table's gradient then comes out [V, E] without a transpose of its own.
        rows = ops.reshape(x, (-1, ops.shape(x)[-1]))
        logits = tf.linalg.matmul(rows, self.token_embedding.embeddings, transpose_b=True)
        logits = ops.reshape(logits, tuple(ops.shape(x)[:-1]) + (self.token_embedding.input_dim,))
        return ops.cast(logits, "float32") + self.output_bias

    def compute_output_shape(self, inputs_shape, masked_positions_shape=None):
        rows = inputs_shape[:-1] if masked_positions_shape is None else masked_positions_shape
        return tuple(rows) + (self.token_embedding.input_dim,)

    def compute_output_spec(self, inputs, masked_positions=None):
        rows = inputs.shape[:-1] if masked_positions is None else masked_positions.shape
        shape = tuple(rows) + (self.token_embedding.input_dim,)
        return keras.KerasTensor(shape, dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            activation=keras.activations.serialize(self.activation),
            layer_norm_epsilon=self.layer_norm_epsilon,
            initializer_range=self.initializer_range,
        )
        return config
