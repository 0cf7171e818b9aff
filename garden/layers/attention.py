"""Multi-head scaled dot-product attention with the projections as plain 2-D matmuls."""

from __future__ import annotations

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="garden")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention of Vaswani et al. (2017), as BERT computes it.

        q, k, v = x_q Wq + bq, x_kv Wk + bk, x_kv Wv + bv          (per head: d = H / A wide)
        p = Dropout(softmax(q k^T / sqrt(d) with masked keys at -1e9))
        y = concat_heads(p v) Wo + bo

    Same weights, names and shapes as `keras.layers.MultiHeadAttention` with
    key_dim = value_dim = d (query/key/value kernels [H, A, d], biases [A, d];
    attention_output kernel [A, d, H], bias [H]), so checkpoints, converters and variable
    paths ("attention/query/kernel") are those of the Keras layer, and the outputs equal it
    up to float rounding (tests/layers/test_attention.py). The difference is the arithmetic
    on CPUs: every projection is one [B*T, H] x [H, A*d] matmul instead of an einsum that
    TensorFlow lowers to a batch matmul with the kernel broadcast over the batch (whose
    kernel gradient is a batch matmul and a sum), 1/sqrt(d) is folded into the query kernel
    ([H, H] values instead of [B, T, H]), and masked keys are set once, not twice.

    Args:
        num_heads: int, A.
        key_dim: int, d (the width of each head).
        dropout: float, dropout on the attention probabilities.
        kernel_initializer, bias_initializer: for the four projections (each gets a clone).
        **kwargs: name, dtype, trainable.

    Call args:
        query: float [B, Tq, H].
        value: float [B, Tk, H] (also the keys).
        key: ignored unless given, then must be `value` (self- or cross-attention over one
            sequence, the only use in this garden).
        attention_mask: bool or int [B, Tq or 1, Tk], 1 = may attend; None = all.
        training: bool, dropout on or off.

    Example:
        attention = MultiHeadAttention(num_heads=2, key_dim=64)
        y = attention(x, x, attention_mask=keras.ops.ones((2, 1, 16), "bool"))  # x: [2, 16, 128]
    """

    def __init__(self, num_heads: int, key_dim: int, dropout: float = 0.0,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.key_dim = int(key_dim)
        self.dropout = float(dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def _dense(self, equation, output_shape, bias_axes, name):
        clone = lambda init: init.__class__.from_config(init.get_config())  # noqa: E731
        return keras.layers.EinsumDense(
            equation, output_shape=output_shape, bias_axes=bias_axes,
            kernel_initializer=clone(self.kernel_initializer),
            bias_initializer=clone(self.bias_initializer), dtype=self.dtype_policy, name=name)

    def build(self, query_shape, value_shape=None, key_shape=None):
        heads, width = self.num_heads, self.key_dim
        self.query_dense = self._dense("abc,cde->abde", (None, heads, width), "de", "query")
        self.key_dense = self._dense("abc,cde->abde", (None, heads, width), "de", "key")
        self.value_dense = self._dense("abc,cde->abde", (None, heads, width), "de", "value")
        self.query_dense.build(query_shape)
        for dense in (self.key_dense, self.value_dense):
            dense.build(query_shape if value_shape is None else value_shape)
        self.output_dense = self._dense("abcd,cde->abe", (None, query_shape[-1]), "e",
                                        "attention_output")
        self.output_dense.build(tuple(query_shape[:-1]) + (heads, width))
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy,
                                                  name="attention_dropout")
        self.built = True

    def _project(self, dense, x, scale=None):
        """[B, T, H_in] -> [B, A, T, d] with one 2-D matmul."""
        kernel = ops.reshape(dense.kernel, (-1, self.num_heads * self.key_dim))
        bias = ops.reshape(dense.bias, (self.num_heads * self.key_dim,))
        if scale is not None:
            kernel, bias = kernel * scale, bias * scale
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        y = ops.matmul(ops.reshape(x, (-1, ops.shape(x)[-1])), kernel) + bias
        y = ops.reshape(y, (batch, length, self.num_heads, self.key_dim))
        return ops.transpose(y, (0, 2, 1, 3))

    def call(self, query, value, key=None, attention_mask=None, training=None):
        if key is not None and key is not value:
            raise ValueError("garden MultiHeadAttention takes the keys from `value`; "
                             "a separate `key` tensor is not supported")
        q = self._project(self.query_dense, query, scale=1.0 / math.sqrt(self.key_dim))
        k = self._project(self.key_dense, value)
        v = self._project(self.value_dense, value)
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))  # [B, A, Tq, Tk]
        if attention_mask is not None:
            mask = ops.expand_dims(ops.cast(attention_mask, "bool"), 1)  # [B, 1, Tq|1, Tk]
            negative = -3e4 if keras.backend.standardize_dtype(scores.dtype) == "float16" else -1e9
            scores = ops.where(mask, scores, ops.cast(negative, scores.dtype))
        probabilities = self.dropout_layer(ops.softmax(scores, axis=-1), training=training)
        context = ops.transpose(ops.matmul(probabilities, v), (0, 2, 1, 3))  # [B, Tq, A, d]
        batch, length = ops.shape(query)[0], ops.shape(query)[1]
        context = ops.reshape(context, (-1, self.num_heads * self.key_dim))
        kernel = ops.reshape(self.output_dense.kernel, (self.num_heads * self.key_dim, -1))
        out = ops.matmul(context, kernel) + self.output_dense.bias
        return ops.reshape(out, (batch, length, ops.shape(out)[-1]))

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None,
                             attention_mask_shape=None):
        return query_shape

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, key_dim=self.key_dim, dropout=self.dropout,
                      kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
                      bias_initializer=keras.initializers.serialize(self.bias_initializer))
        return config
