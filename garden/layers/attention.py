"""Multi-head scaled dot-product attention with the projections as plain 2-D matmuls."""

from __future__ import annotations

import math

import keras
import tensorflow as tf
from keras import ops

from garden.layers import row_products


def write_slots(cache, new, index, axis=1):
    """cache with new written at slots index..index+T-1 of `axis` (new's size T there, the
    same sizes as cache on every other axis): e.g. [B, T_max, A, d] at axis 1 or
    [B, A, T_max, d] at axis 2.

    A scatter (TensorScatterUpdate), not keras.ops.slice_update: the latter is
    XlaDynamicUpdateSlice, which the plain graph (what garden.models.decoding runs on a CPU for
    large models) executes by compiling and launching a one-op XLA cluster per call, slower
    than the scatter's kernel; under XLA the scatter compiles too (TensorStridedSliceUpdate
    would not: XLA wants its bounds constant). Both copy the values exactly.
    """
    shape = tf.shape(new)
    ranges = [tf.range(shape[i]) for i in range(axis)]
    ranges.append(tf.cast(index, tf.int32) + tf.range(shape[axis]))
    indices = tf.stack(tf.meshgrid(*ranges, indexing="ij"), axis=-1)
    return tf.tensor_scatter_nd_update(cache, indices, new)


def empty_caches(num_layers: int, batch, num_heads: int, length, head_width: int, dtype):
    """A decode loop's starting state for `num_layers` attention layers: one (keys, values)
    pair of zeros [B, A, length, d] per layer, the cache form MultiHeadAttention takes."""
    zeros = lambda: ops.zeros((batch, num_heads, length, head_width), dtype)  # noqa: E731
    return [(zeros(), zeros()) for _ in range(num_layers)]


def softmax_in_float32(scores):
    """softmax over the last axis, taken in float32 and returned in the scores' dtype (a no-op
    under float32). Under mixed_bfloat16 / mixed_float16 the scores arrive in the half type,
    whose softmax XLA computes with half-type exponentials; here they and their sum are
    float32, as in fairseq (RoBERTa, BART: utils.softmax(..., dtype=torch.float32)), Hugging
    Face's T5 (scores.float()) and Megatron's GPT (attention_softmax_in_fp32)."""
    return ops.cast(ops.softmax(ops.cast(scores, "float32"), axis=-1), scores.dtype)


# What a head mask does (MultiHeadAttention's head_mask_mode): scale the probabilities, or
# move the masked share to uniform attention over the allowed keys.
HEAD_MASK_MODES = ("scale", "uniform")


def negative_score(dtype) -> float:
    """The score that masks a key out before the softmax: -1e9, or -3e4 in float16 (whose
    range ends at 65504)."""
    return -3e4 if keras.backend.standardize_dtype(dtype) == "float16" else -1e9


def apply_head_mask(probabilities, head_mask, mode: str = "scale", allowed=None):
    """probabilities [B, A, ..., K] with head_mask [A] or [B, A] applied as `mode`
    (HEAD_MASK_MODES): "scale" multiplies head h's by m_h (Hugging Face's head_mask: 0 silences
    a head); "uniform" gives m p + (1 - m) u, u even over the keys `allowed` marks (bool,
    broadcastable to the probabilities; None: every key). Every layer that takes a head mask
    applies it here (MultiHeadAttention, the banded LocalMultiHeadAttention, XLNet's relative
    attention), so that garden.bertology.heads' modes mean the same in each."""
    dtype = probabilities.dtype
    head_mask = ops.reshape(ops.cast(head_mask, dtype),
                            (-1, probabilities.shape[1]) + (1,) * (len(probabilities.shape) - 2))
    if mode != "uniform":
        return probabilities * head_mask
    if allowed is None:
        uniform = ops.ones_like(probabilities) / ops.cast(ops.shape(probabilities)[-1], dtype)
    else:  # the softmax of 0 on the allowed keys and a masking score elsewhere
        uniform = ops.softmax(ops.where(allowed, ops.cast(0, dtype),
                                        ops.cast(negative_score(dtype), dtype)), axis=-1)
    return probabilities * head_mask + uniform * (1 - head_mask)


def swap_heads(x):
    """[B, T, A, d] <-> [B, A, T, d]: heads before time for the per-head score products, and
    back."""
    return ops.transpose(x, (0, 2, 1, 3))


@keras.saving.register_keras_serializable(package="garden")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention of Vaswani et al. (2017), as BERT computes it, and able to decode.

        q, k, v = x_q Wq + bq, x_k Wk + bk, x_v Wv + bv            (per head: d wide)
        p = softmax(q k^T / sqrt(d) + attention_bias, masked keys at -1e9) * head_mask
        y = concat_heads(Dropout(p) v) Wo + bo

    Same weights, names and shapes as `keras.layers.MultiHeadAttention` with
    key_dim = value_dim = d (query/key/value kernels [H, A, d], biases [A, d];
    attention_output kernel [A, d, H], bias [H]; no biases with use_bias=False), so
    checkpoints, converters and variable paths ("attention/query/kernel") are those of the
    Keras layer, and the outputs equal it up to float rounding (tests/layers/test_attention.py).
    The difference is the arithmetic on CPUs: every projection is one [B*T, H] x [H, A*d]
    matmul instead of an einsum that TensorFlow lowers to a batch matmul with the kernel
    broadcast over the batch (whose kernel gradient is a batch matmul and a sum), 1/sqrt(d)
    multiplies the query kernel or, where that has fewer values and changes no bit, the
    projected queries (see `_project`), and masked keys are set once, not twice. Options left at their defaults add
    no op to that path.

    Decoding follows keras-hub's CachedMultiHeadAttention, with one cache form: `cache` is
    the pair (keys, values) of head-major [B, A, T_max, d] tensors (in the compute dtype),
    returned as a pair. A decode loop keeps one pair per layer, so it never slices or
    re-stacks a cache stacked over layers, and the head-major layout is what the scores
    read, so a step transposes only its new slot, not the whole cache
    (garden.models.gpt.causal_lm, the T5 and BART decoders). keras-hub's stacked
    [B, 2, T_max, A, d] array is refused with a ValueError.
    With `cache_update_index` the new keys/values of `key`/`value` are written at that
    position and attention runs over all T_max slots (mask the unwritten ones, e.g. with
    masks.causal_mask(Tq, T_max, offset)); without it the cache is read as is (precomputed
    cross-attention keys/values: `key` and `value` are then not projected).

    Args:
        num_heads: int, A.
        key_dim: int, d (the width of each head; T5's d_kv need not be H / A).
        dropout: float, dropout on the attention probabilities.
        use_bias: bool, biases on the four projections (T5: False).
        scale_queries: bool, divide scores by sqrt(d) (T5: False, folded into its init).
        kernel_initializer, bias_initializer: for the four projections (each gets a clone).
        head_mask_mode: str, what a head mask m does to head h's probabilities p: "scale"
            (default; Michel et al., 2019, Hugging Face) gives m p, so 0 silences the head;
            "uniform" (Kovaleva et al., 2019) gives m p + (1 - m) u, u uniform over the keys
            the mask allows, so 0 makes the head attend evenly. A plain attribute too: an
            analysis may switch a built model's layers (garden.bertology.heads).
        **kwargs: name, dtype, trainable.

    Call args:
        query: float [B, Tq, H].
        value: float [B, Tk, H_v].
        key: float [B, Tk, H_k] or None (= value).
        attention_mask: bool or int [B or 1, Tq or 1, Tk] (or with a head axis,
            [B or 1, A or 1, Tq, Tk]), 1 = may attend; None = all.
        attention_bias: float [B or 1, A, Tq, Tk] added to the scores (relative positions).
        head_mask: float [A] or [B, A], multiplies each head's probabilities (0 = head off).
        cache: a (keys, values) pair of float [B, A, T_max, d], or None;
            cache_update_index: int scalar or None.
        return_attention_scores: bool, also return the probabilities [B, A, Tq, Tk]
            (after the head mask, before dropout).
        training: bool, dropout on or off.

    Returns:
        output [B, Tq, H], or `(output, scores)`, `(output, cache)` or
        `(output, scores, cache)` when scores are asked for and/or a cache is given.

    Example:
        attention = MultiHeadAttention(num_heads=2, key_dim=64)
        y = attention(x, x, attention_mask=keras.ops.ones((2, 1, 16), "bool"))  # x: [2, 16, 128]
    """

    def __init__(self, num_heads: int, key_dim: int, dropout: float = 0.0,
                 use_bias: bool = True, scale_queries: bool = True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 head_mask_mode: str = "scale", **kwargs):
        super().__init__(**kwargs)
        if head_mask_mode not in HEAD_MASK_MODES:
            raise ValueError(f"head_mask_mode={head_mask_mode!r}: choose one of {HEAD_MASK_MODES}")
        self.head_mask_mode = head_mask_mode
        self.num_heads = int(num_heads)
        self.key_dim = int(key_dim)
        self.dropout = float(dropout)
        self.use_bias = bool(use_bias)
        self.scale_queries = bool(scale_queries)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def _dense(self, equation, output_shape, bias_axes, name):
        clone = lambda init: init.__class__.from_config(init.get_config())  # noqa: E731
        return keras.layers.EinsumDense(
            equation, output_shape=output_shape, bias_axes=bias_axes if self.use_bias else None,
            kernel_initializer=clone(self.kernel_initializer),
            bias_initializer=clone(self.bias_initializer), dtype=self.dtype_policy, name=name)

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        heads, width = self.num_heads, self.key_dim
        self.query_dense = self._dense("abc,cde->abde", (None, heads, width), "de", "query")
        self.key_dense = self._dense("abc,cde->abde", (None, heads, width), "de", "key")
        self.value_dense = self._dense("abc,cde->abde", (None, heads, width), "de", "value")
        self.query_dense.build(query_shape)
        self.key_dense.build(key_shape)
        self.value_dense.build(value_shape)
        self.output_dense = self._dense("abcd,cde->abe", (None, query_shape[-1]), "e",
                                        "attention_output")
        self.output_dense.build(tuple(query_shape[:-1]) + (heads, width))
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy,
                                                  name="attention_dropout")
        self.built = True

    def _project(self, dense, x, scale=None):
        """[B, T, H_in] -> [B, T, A, d] with one 2-D matmul, times `scale` if given.

        The scale goes where it costs fewer multiplies when that changes no bit: on the
        projected rows when the rows B*T are unknown (serving: one sequence of 128 tokens
        scales 98K values instead of the 590K of a BERT-base kernel, per layer and call) or
        fewer than H_in (a decode step), if the scale is a power of two (d = 64: then both
        orders give the same bits); otherwise on the kernel ([H_in, A*d]), as Keras'
        MultiHeadAttention does up to float rounding."""
        kernel = ops.reshape(dense.kernel, (-1, self.num_heads * self.key_dim))
        bias = ops.reshape(dense.bias, (self.num_heads * self.key_dim,)) if self.use_bias else None
        rows = None if None in x.shape[:2] else x.shape[0] * x.shape[1]
        # On the projected rows when they are unknown (serving) or fewer than the kernel's
        # inputs (a decode step: B rows against H), and only for a power-of-two scale (d = 4,
        # 16, 64, 256), for which both orders are bit-identical; else folded into the kernel.
        scale_outputs = (scale is not None and (rows is None or rows < kernel.shape[0])
                         and math.frexp(scale)[0] == 0.5)
        if scale is not None and not scale_outputs:
            kernel = kernel * scale
            bias = None if bias is None else bias * scale
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        y = row_products.matmul(ops.reshape(x, (-1, ops.shape(x)[-1])), kernel)
        if bias is not None:
            y = y + bias
        if scale_outputs:
            y = y * ops.cast(scale, y.dtype)
        return ops.reshape(y, (batch, length, self.num_heads, self.key_dim))

    def _keys_and_values(self, key, value, cache, cache_update_index):
        """Keys and values [B, A, Tk, d] (the layout the scores read) and the (updated) cache,
        a (keys, values) pair of [B, A, T_max, d] or None. A step projects only its new
        tokens and transposes only their slots; without an update index the cache is read
        as is (cross-attention keys and values projected once per decode)."""
        if cache is None:
            if cache_update_index is not None:
                raise ValueError("MultiHeadAttention: `cache_update_index` was given without a "
                                 "`cache`; pass the (keys, values) pair of [B, A, T_max, d] "
                                 "tensors it indexes")
            return (swap_heads(self._project(self.key_dense, key)),
                    swap_heads(self._project(self.value_dense, value)), None)
        if not isinstance(cache, (tuple, list)) or len(cache) != 2:
            shape = getattr(cache, "shape", None)
            raise ValueError(
                f"{self.name}: `cache` must be a (keys, values) pair of head-major "
                f"[B, A, T_max, d] tensors, got {type(cache).__name__}"
                f"{'' if shape is None else f' of shape {tuple(shape)}'} (a stacked "
                "[B, 2, T_max, A, d] array is not one)")
        keys, values = cache
        if cache_update_index is None:  # read only: e.g. cross-attention over a fixed encoder
            return keys, values, (keys, values)
        new_keys = swap_heads(ops.cast(self._project(self.key_dense, key), keys.dtype))
        new_values = swap_heads(ops.cast(self._project(self.value_dense, value), values.dtype))
        keys = write_slots(keys, new_keys, cache_update_index, axis=2)
        values = write_slots(values, new_values, cache_update_index, axis=2)
        return keys, values, (keys, values)

    def _probabilities(self, q, k, attention_mask, attention_bias, head_mask):
        """q [B, A, Tq, d], k [B, A, Tk, d] -> softmax probabilities [B, A, Tq, Tk]."""
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))
        if attention_bias is not None:
            scores = scores + ops.cast(attention_bias, scores.dtype)
        mask = None
        if attention_mask is not None:
            mask = ops.cast(attention_mask, "bool")
            if len(mask.shape) == 3:
                mask = ops.expand_dims(mask, 1)  # [B, 1, Tq|1, Tk]: the same for every head
            scores = ops.where(mask, scores, ops.cast(negative_score(scores.dtype), scores.dtype))
        probabilities = softmax_in_float32(scores)
        if head_mask is not None:
            probabilities = apply_head_mask(probabilities, head_mask, self.head_mask_mode, mask)
        return probabilities

    def call(self, query, value, key=None, attention_mask=None, attention_bias=None,
             head_mask=None, cache=None, cache_update_index=None,
             return_attention_scores=False, training=None):
        key = value if key is None else key
        scale = 1.0 / math.sqrt(self.key_dim) if self.scale_queries else None
        q = ops.transpose(self._project(self.query_dense, query, scale=scale), (0, 2, 1, 3))
        k, v, cache = self._keys_and_values(key, value, cache, cache_update_index)
        probabilities = self._probabilities(q, k, attention_mask, attention_bias, head_mask)
        dropped = self.dropout_layer(probabilities, training=training)
        context = ops.transpose(ops.matmul(dropped, v), (0, 2, 1, 3))  # [B, Tq, A, d]
        batch, length = ops.shape(query)[0], ops.shape(query)[1]
        context = ops.reshape(context, (-1, self.num_heads * self.key_dim))
        kernel = ops.reshape(self.output_dense.kernel, (self.num_heads * self.key_dim, -1))
        out = row_products.matmul(context, kernel)
        if self.use_bias:
            out = out + self.output_dense.bias
        out = ops.reshape(out, (batch, length, ops.shape(out)[-1]))
        extras = ((probabilities,) if return_attention_scores else ()) + \
            ((cache,) if cache is not None else ())
        return (out,) + extras if extras else out

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, key_dim=self.key_dim, dropout=self.dropout,
                      use_bias=self.use_bias, scale_queries=self.scale_queries,
                      head_mask_mode=self.head_mask_mode,
                      kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
                      bias_initializer=keras.initializers.serialize(self.bias_initializer))
        return config
