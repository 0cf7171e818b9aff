"""Banded (local) causal attention computed in blocks: O(T * w), not a masked O(T^2).

GPT-3 (Brown et al., 2020, section 2.1) alternates dense and "locally banded sparse" attention
layers as in the Sparse Transformer (Child et al., 2019). A band of width w includes the token
itself: query i attends to keys i-w+1 .. i (openai/sparse_attention's `local` mask is
band_part(ones, w - 1, 0); GPT-Neo's local layers use w = 256).

Blocked computation (what makes the band cheaper than a masked dense layer): the T positions
are padded to n = ceil(T / w) blocks of w; block j's w queries attend to the 2w keys of blocks
j-1 and j, which hold every key of their bands, with a fixed [w, 2w] band mask. Scores and
probabilities are [B, A, n, w, 2w]: 2 T w entries instead of T^2 (at T = 4096, w = 256 an
eighth of the dense scores). T need not be a multiple of w (the padded keys are masked, the
padded queries dropped).

For analysis (garden.bertology) the layer takes MultiHeadAttention's `head_mask` (each head's
probabilities multiplied, or in head_mask_mode "uniform" blended with even attention over the
band) and `return_attention_scores`: the band's probabilities scattered into a full
[B, A, T, T] tensor, zero outside what a query sees (the scatter costs the O(T^2) the blocks
save, so only when asked for).

Decoding with a KV cache, MultiHeadAttention's (keys, values) pair of head-major
[B, A, T_max, d] tensors: a one-token step at `cache_update_index` i writes its key and value
at slot i and attends to the w slots i-w+1 .. i only (a dynamic slice of the cache's slot
axis: O(w) per step, whatever T_max). A multi-token call with a cache is the prompt fill and
must start at slot 0 (start_decoding's contract); it runs the blocked path over the prompt.

    attention = LocalMultiHeadAttention(num_heads=2, key_dim=32, band_width=4)
    y = attention(x, x, attention_mask=padding_mask[:, None, :])    # x [B, T, 64]
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf
from keras import ops

from garden.layers.attention import (MultiHeadAttention, apply_head_mask, negative_score,
                                     softmax_in_float32, swap_heads)


def band_mask(query_length, key_length, width, offset=0):
    """bool [1, Tq, Tk]: query i (at absolute position offset + i) sees keys offset+i-w+1 ..
    offset+i; the dense equivalent of the banded layer (garden.layers.masks' shape)."""
    rows = ops.expand_dims(ops.arange(query_length, dtype="int32") + ops.cast(offset, "int32"), 1)
    columns = ops.expand_dims(ops.arange(key_length, dtype="int32"), 0)
    distance = rows - columns
    return ops.expand_dims(ops.logical_and(distance >= 0, distance < width), 0)


def full_probabilities(blocked, length, width):
    """The blocked probabilities [B, A, n, w, 2w] as the dense layer's [B, A, T, T]: query t's
    row holds its band's keys t-w+1 .. t in place and zeros everywhere else."""
    batch, heads, blocks = ops.shape(blocked)[0], ops.shape(blocked)[1], ops.shape(blocked)[2]
    rows = ops.reshape(blocked, (batch, heads, blocks * width, 2 * width))[:, :, :length]
    query = ops.arange(length, dtype="int32")[:, None]
    key = ops.arange(length, dtype="int32")[None, :]
    # Block j's 2w keys start at (j - 1) w: key s of query t sits at column s - (t//w - 1) w.
    column = key - (query // width - 1) * width
    inside = ops.logical_and(query - key >= 0, query - key < width)  # band_mask's [T, T]
    column = ops.where(inside, column, ops.zeros_like(column))
    index = ops.broadcast_to(column[None, None], (batch, heads, length, length))
    full = ops.take_along_axis(rows, index, axis=3)
    return ops.where(inside[None, None], full, ops.zeros_like(full))


def blocked_local_attention(q, k, v, key_mask, width, dropout=None, training=None,
                            head_mask=None, head_mask_mode="scale",
                            return_probabilities=False):
    """Causal band attention in blocks of `width` (see the module docstring).

    Args:
        q: [B, A, T, d] queries, already scaled; k, v: [B, A, T, d].
        key_mask: bool [B, T] (True = real key) or None.
        width: int, the band width w (the token itself included).
        dropout: a Dropout layer for the probabilities, or None.
        head_mask: float [A] or [B, A] or None (garden.layers.attention.apply_head_mask, as
            `head_mask_mode`).
        return_probabilities: also return the probabilities as [B, A, T, T]
            (full_probabilities: after the head mask, before dropout).

    Returns:
        context [B, A, T, d], or (context, probabilities).
    """
    batch, heads, length, depth = (ops.shape(q)[0], ops.shape(q)[1], ops.shape(q)[2],
                                   ops.shape(q)[3])
    blocks = (length + width - 1) // width
    pad = blocks * width - length

    def blocked(x):  # [B, A, T, d] -> [B, A, n, w, d]
        x = ops.pad(x, [[0, 0], [0, 0], [0, pad], [0, 0]])
        return ops.reshape(x, (batch, heads, blocks, width, depth))

    def with_previous(x):  # [..., n, w, ...] -> [..., n, 2w, ...]: block j-1 then block j
        previous = ops.concatenate([ops.zeros_like(x[:, :, :1]), x[:, :, :-1]], axis=2)
        return ops.concatenate([previous, x], axis=3)

    queries, keys, values = blocked(q), with_previous(blocked(k)), with_previous(blocked(v))
    scores = ops.matmul(queries, ops.swapaxes(keys, -1, -2))  # [B, A, n, w, 2w]
    # Local query i and local key c (c < w: previous block) are i + w - c positions apart.
    distance = (ops.arange(width, dtype="int32")[:, None] + width
                - ops.arange(2 * width, dtype="int32")[None, :])
    allowed = ops.logical_and(distance >= 0, distance < width)[None, None, None]
    real = ops.ones((batch, length), "bool") if key_mask is None else ops.cast(key_mask, "bool")
    real = ops.reshape(ops.pad(real, [[0, 0], [0, pad]], constant_values=False),
                       (batch, 1, blocks, width, 1))  # the first block's "previous" is padding
    real = ops.reshape(with_previous(real), (batch, 1, blocks, 1, 2 * width))
    allowed = ops.logical_and(allowed, real)
    scores = ops.where(allowed, scores, ops.cast(negative_score(scores.dtype), scores.dtype))
    probabilities = softmax_in_float32(scores)
    if head_mask is not None:
        probabilities = apply_head_mask(probabilities, head_mask, head_mask_mode, allowed)
    full = full_probabilities(probabilities, length, width) if return_probabilities else None
    if dropout is not None:
        probabilities = dropout(probabilities, training=training)
    context = ops.matmul(probabilities, values)  # [B, A, n, w, d]
    context = ops.reshape(context, (batch, heads, blocks * width, depth))[:, :, :length]
    return (context, full) if return_probabilities else context


@keras.saving.register_keras_serializable(package="garden")
class LocalMultiHeadAttention(MultiHeadAttention):
    """Causal self-attention restricted to a band of `band_width` keys (the query's own
    position and the w-1 before it), blocked so that it costs O(T * w).

    Same weights, names and projections as garden.layers.MultiHeadAttention (a converter or a
    dense twin can share them); only the score computation differs, and it equals the dense
    layer with `band_mask` (tests/layers/test_local_attention.py). Self-attention only.

    Args:
        num_heads, key_dim, dropout, use_bias, scale_queries, kernel_initializer,
            bias_initializer: as MultiHeadAttention.
        band_width: int w >= 1.

    Call args:
        query: float [B, T, H]; value, key: [B, T, H] (default: the query), the same length.
        attention_mask: bool or int [B, 1, Tk] (the key padding mask, e.g.
            masks.padding_mask_to_attention(padding_mask)) or None; the causal band is built
            in, so a [B, Tq, Tk] causal mask must not be passed (it would be dense O(T^2)).
        cache, cache_update_index: as MultiHeadAttention (see the module docstring).
        head_mask: float [A] or [B, A], as MultiHeadAttention (its head_mask_mode too).
        return_attention_scores: bool, also return the probabilities [B, A, T, T] (after the
            head mask, before dropout; zero outside the band); not with a cache.
        attention_bias: not supported (ValueError), taken so that TransformerDecoderBlock can
            call the layer as its MultiHeadAttention.
        training: bool.

    Returns:
        output [B, T, H], (output, scores), or (output, cache) with a cache.
    """

    def __init__(self, num_heads: int, key_dim: int, band_width: int, **kwargs):
        super().__init__(num_heads, key_dim, **kwargs)
        if int(band_width) < 1:
            raise ValueError(f"LocalMultiHeadAttention: band_width must be >= 1, got "
                             f"{band_width}")
        self.band_width = int(band_width)

    def _key_mask(self, attention_mask):
        if attention_mask is None:
            return None
        if len(attention_mask.shape) != 3 or attention_mask.shape[1] not in (1, None):
            raise ValueError(f"{self.name}: attention_mask must be the key padding mask "
                             f"[B, 1, Tk] (the band is built in), got shape "
                             f"{tuple(attention_mask.shape)}")
        return ops.cast(attention_mask[:, 0, :], "bool")

    def _output(self, context, batch, length):
        context = ops.reshape(swap_heads(context), (-1, self.num_heads * self.key_dim))
        kernel = ops.reshape(self.output_dense.kernel, (self.num_heads * self.key_dim, -1))
        out = ops.matmul(context, kernel)
        if self.use_bias:
            out = out + self.output_dense.bias
        return ops.reshape(out, (batch, length, ops.shape(out)[-1]))

    def _window_step(self, q, keys, values, key_mask, index, head_mask=None):
        """One query [B, A, 1, d] at slot `index` over the w cache slots index-w+1..index of
        head-major keys and values [B, A, T_max, d]."""
        slots = keys.shape[2]
        window = min(self.band_width, slots)
        start = ops.clip(ops.cast(index, "int32") - self.band_width + 1, 0, slots - window)
        size = [ops.shape(keys)[0], self.num_heads, window, self.key_dim]
        keys = ops.slice(keys, [0, 0, start, 0], size)
        values = ops.slice(values, [0, 0, start, 0], size)
        positions = start + ops.arange(window, dtype="int32")
        distance = ops.cast(index, "int32") - positions
        allowed = ops.logical_and(distance >= 0, distance < self.band_width)[None, None, None]
        if key_mask is not None:
            window_mask = ops.slice(key_mask, [0, start], [ops.shape(key_mask)[0], window])
            allowed = ops.logical_and(allowed, window_mask[:, None, None, :])
        scores = ops.matmul(q, ops.transpose(keys, (0, 1, 3, 2)))  # [B, A, 1, w]
        scores = ops.where(allowed, scores, ops.cast(negative_score(scores.dtype), scores.dtype))
        probabilities = softmax_in_float32(scores)
        if head_mask is not None:
            probabilities = apply_head_mask(probabilities, head_mask, self.head_mask_mode, allowed)
        return ops.matmul(probabilities, values)

    def call(self, query, value=None, key=None, attention_mask=None, attention_bias=None,
             head_mask=None, cache=None, cache_update_index=None,
             return_attention_scores=False, training=None):
        if attention_bias is not None:
            raise ValueError(f"{self.name}: LocalMultiHeadAttention does not take "
                             "attention_bias")
        if return_attention_scores and cache is not None:
            raise ValueError(f"{self.name}: attention scores are given without a cache only "
                             "(a decode step sees a window of the cache, not [T, T])")
        value = query if value is None else value
        key = value if key is None else key
        if value.shape[1] != query.shape[1] or key.shape[1] != query.shape[1]:
            raise ValueError(f"{self.name}: the band is over one sequence; query, key and value "
                             f"must have the same length, got {query.shape[1]}, "
                             f"{key.shape[1]}, {value.shape[1]}")
        batch, length = ops.shape(query)[0], ops.shape(query)[1]
        scale = 1.0 / math.sqrt(self.key_dim) if self.scale_queries else None
        q = swap_heads(self._project(self.query_dense, query, scale=scale))
        key_mask = self._key_mask(attention_mask)
        if cache is not None and cache_update_index is None:
            raise ValueError(f"{self.name}: a cache needs cache_update_index (self-attention "
                             "writes the new keys and values)")
        k, v, cache = self._keys_and_values(key, value, cache, cache_update_index)
        if cache is not None and query.shape[1] == 1:
            context = self._window_step(q, k, v, key_mask, cache_update_index, head_mask)
            return self._output(context, batch, length), cache
        if cache is not None:  # the prompt fill: attends to its own slots 0..T-1 only
            tf.debugging.assert_equal(cache_update_index, 0, message=(
                f"{self.name}: a multi-token call with a cache must start at slot 0"))
            k, v = k[:, :, :length], v[:, :, :length]
            key_mask = None if key_mask is None else key_mask[:, :length]
        context = blocked_local_attention(q, k, v, key_mask, self.band_width,
                                          self.dropout_layer, training, head_mask,
                                          self.head_mask_mode, return_attention_scores)
        if return_attention_scores:
            context, probabilities = context
            return self._output(context, batch, length), probabilities
        out = self._output(context, batch, length)
        return (out, cache) if cache is not None else out

    def get_config(self):
        return {**super().get_config(), "band_width": self.band_width}
