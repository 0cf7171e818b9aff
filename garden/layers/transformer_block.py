"""What the encoder and decoder blocks share: their config and the feed-forward sublayer."""

from __future__ import annotations

from typing import Optional

import keras
from keras import ops

from garden.layers import activations, row_products
from garden.layers.embeddings import truncated_normal

# The constructor arguments stored as given (activation is serialized on its own).
_CONFIG_NAMES = ("num_heads", "intermediate_size", "dropout", "attention_dropout",
                 "layer_norm_epsilon", "initializer_range", "normalize_first")


class TransformerBlockBase(keras.layers.Layer):
    """Base of TransformerEncoderBlock and TransformerDecoderBlock (see their docstrings).

    Holds the eight config arguments both take and builds / applies the position-wise
    feed-forward sublayer, y = LN(x + Dropout(Dense_2(act(Dense_1(x))))) (LN first when
    normalize_first), under the variable names both use: intermediate_dense, output_dense,
    output_layer_norm.
    """

    def __init__(self, num_heads: int, intermediate_size: int, dropout: float,
                 attention_dropout: Optional[float], activation, layer_norm_epsilon: float,
                 initializer_range: float, normalize_first: bool, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.intermediate_size = int(intermediate_size)
        self.dropout = float(dropout)
        self.attention_dropout = (self.dropout if attention_dropout is None
                                  else float(attention_dropout))
        self.activation = activations.get(activation)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.initializer_range = float(initializer_range)
        self.normalize_first = bool(normalize_first)
        self.supports_masking = False

    def _head_width(self, hidden_size):
        if hidden_size % self.num_heads:
            raise ValueError(f"{self.name}: hidden size {hidden_size} is not divisible by "
                             f"num_heads {self.num_heads}")
        return hidden_size // self.num_heads

    def _build_feedforward_layers(self, inputs_shape):
        # One initializer each, made in this order: each draws its seed when made, and the
        # fixed-seed runs (tests/test_frozen_outputs.py) depend on the order.
        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_size, activation=self.activation,
            kernel_initializer=truncated_normal(self.initializer_range), name="intermediate_dense",
            dtype=self.dtype_policy)
        self.intermediate_dense.build(inputs_shape)
        self.output_dense = keras.layers.Dense(
            inputs_shape[-1], kernel_initializer=truncated_normal(self.initializer_range),
            name="output_dense", dtype=self.dtype_policy)
        self.output_dense.build(tuple(inputs_shape[:-1]) + (self.intermediate_size,))
        self.output_dropout = keras.layers.Dropout(self.dropout, name="output_dropout",
                                                   dtype=self.dtype_policy)
        self.output_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="output_layer_norm", dtype=self.dtype_policy)
        self.output_layer_norm.build(inputs_shape)

    def _feedforward(self, x, training):
        # On rows [B*T, H], not [B, T, H]: Keras' Dense multiplies a 3-D input as reshape,
        # MatMul, reshape, and the reshape between MatMul and BiasAdd stops Grappler's
        # remapper from fusing MatMul + BiasAdd + GELU into one oneDNN _FusedMatMul. In 2-D
        # they fuse (BERT-base, batch 1, 128 tokens: 24 MatMul, 24 BiasAdd and the GELUs'
        # 12 Erfc, 12 Neg, 36 Mul become 24 fused MatMuls). Same layers, same variables.
        shape = ops.shape(x)
        x = residual = ops.reshape(x, (-1, shape[-1]))
        if self.normalize_first:
            x = self.output_layer_norm(x)
        # A decode step's few rows go through row_products, which splits large kernels'
        # products over the cores; any other input is Dense's own call (the same arithmetic).
        x = row_products.dense(self.intermediate_dense, x)
        x = row_products.dense(self.output_dense, x)
        x = self.output_dropout(x, training=training)
        x = x + residual
        if not self.normalize_first:
            x = self.output_layer_norm(x)
        return ops.reshape(x, shape)

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in _CONFIG_NAMES},
                      activation=keras.activations.serialize(self.activation))
        return config
