"""The Transformer decoder block: causal self-attention with a KV cache, optional cross-attention
(GPT-2, BART)."""

from __future__ import annotations

from typing import Optional

import keras
from keras import ops

from garden.layers.attention import MultiHeadAttention
from garden.layers.embeddings import truncated_normal
from garden.layers.masks import causal_mask, merge_masks, padding_mask_to_attention
from garden.layers.transformer_block import TransformerBlockBase


@keras.saving.register_keras_serializable(package="garden")
class TransformerDecoderBlock(TransformerBlockBase):
    """One decoder layer of "Attention Is All You Need" (Vaswani et al., 2017).

    Post-LN by default (original Transformer, BART); `normalize_first=True` is pre-LN (GPT-2):
        a = LN(x + Dropout(SelfAttention(x, causal)))
        c = LN(a + Dropout(CrossAttention(a, encoder_sequence)))     (only with an encoder)
        y = LN(c + Dropout(Dense_2(act(Dense_1(c)))))
    The same arithmetic and variable order as keras_hub.layers.TransformerDecoder (tested
    with the same weights), on garden's MultiHeadAttention, so it also returns attention
    probabilities and takes head masks. Whether the block has cross-attention is fixed by
    its first call (with or without `encoder_sequence`), as in keras-hub.

    Args:
        num_heads: int, attention heads; hidden size must be divisible by it.
        intermediate_size: int, width of the feed-forward layer.
        dropout: float, dropout on the attention and feed-forward outputs.
        attention_dropout: float or None, dropout on attention probabilities; None = dropout.
        activation: str or callable (garden.layers.activations.get), e.g. "gelu_new" (GPT-2).
        layer_norm_epsilon: float (GPT-2, BART: 1e-5).
        initializer_range: float, stddev of the truncated normal kernel initializers.
        normalize_first: bool, pre-LN instead of post-LN.
        **kwargs: name, dtype, trainable.

    Call args:
        decoder_sequence: float [B, T, H].
        encoder_sequence: float [B, S, H_enc] or None.
        decoder_padding_mask: [B, T] (or [B, T_max] with a cache), 1 = real token.
        decoder_attention_mask: [B, T, T or T_max], 1 = may attend; merged with the others.
        encoder_padding_mask: [B, S]; encoder_attention_mask: [B, T, S].
        self_attention_cache: a (keys, values) pair of float [B, A, T_max, d] (returned as
            a pair), or None, with self_attention_cache_update_index (int): the position of
            decoder_sequence's first token; the causal mask then spans the T_max cache slots.
        cross_attention_cache: a (keys, values) pair of float [B, A, S, d] or None, with
            cross_attention_cache_update_index: 0 to fill it from encoder_sequence, None to
            read it as is (encoder_sequence is then not projected).
        use_causal_mask: bool, hide later positions (default True).
        head_mask, cross_head_mask: float [A] or [B, A] or None, per-head multipliers of the
            self- and cross-attention probabilities (Hugging Face's semantics).
        return_attention_scores: bool, also return the probabilities (after head masks).

    Returns:
        `y`, or a tuple `(y, *scores, *caches)`: scores = (self [B, A, T, T or T_max],
        cross [B, A, T, S] when the block has cross-attention) if return_attention_scores;
        caches = (self, cross when the block has cross-attention) if self_attention_cache.

    Example:
        block = TransformerDecoderBlock(num_heads=2, intermediate_size=512, normalize_first=True)
        y = block(keras.ops.zeros((2, 16, 128)))  # causal self-attention only: [2, 16, 128]
    """

    def __init__(self, num_heads: int, intermediate_size: int, dropout: float = 0.1,
                 attention_dropout: Optional[float] = None, activation="gelu",
                 layer_norm_epsilon: float = 1e-5, initializer_range: float = 0.02,
                 normalize_first: bool = False, **kwargs):
        super().__init__(num_heads, intermediate_size, dropout, attention_dropout, activation,
                         layer_norm_epsilon, initializer_range, normalize_first, **kwargs)

    def _attention_and_norm(self, name, query_shape, value_shape):
        attention = MultiHeadAttention(
            num_heads=self.num_heads, key_dim=self._head_width(query_shape[-1]),
            dropout=self.attention_dropout,
            kernel_initializer=truncated_normal(self.initializer_range),
            dtype=self.dtype_policy, name=name)
        attention.build(query_shape, value_shape)
        norm = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon,
                                               dtype=self.dtype_policy, name=f"{name}_layer_norm")
        norm.build(query_shape)
        dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy,
                                       name=f"{name}_dropout")
        return attention, norm, dropout

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        shape = decoder_sequence_shape
        (self.self_attention, self.self_attention_layer_norm,
         self.self_attention_dropout) = self._attention_and_norm("self_attention", shape, shape)
        self.cross_attention = None
        if encoder_sequence_shape is not None:
            (self.cross_attention, self.cross_attention_layer_norm,
             self.cross_attention_dropout) = self._attention_and_norm(
                 "cross_attention", shape, encoder_sequence_shape)
        self._build_feedforward_layers(shape)
        self.built = True

    def compute_output_spec(self, decoder_sequence, encoder_sequence=None, decoder_padding_mask=None,
                            decoder_attention_mask=None, encoder_padding_mask=None,
                            encoder_attention_mask=None, self_attention_cache=None,
                            self_attention_cache_update_index=None, cross_attention_cache=None,
                            cross_attention_cache_update_index=None, use_causal_mask=True,
                            head_mask=None, cross_head_mask=None, return_attention_scores=False,
                            training=None):
        # What call() returns, from the shapes alone, as TransformerEncoderBlock's (why there);
        # a call with a cache is traced, as Keras does by default.
        if self_attention_cache is not None or cross_attention_cache is not None:
            return super().compute_output_spec(
                decoder_sequence, encoder_sequence, decoder_padding_mask, decoder_attention_mask,
                encoder_padding_mask, encoder_attention_mask, self_attention_cache,
                self_attention_cache_update_index, cross_attention_cache,
                cross_attention_cache_update_index, use_causal_mask, head_mask, cross_head_mask,
                return_attention_scores, training)
        self._check_call(encoder_sequence, None, None)
        batch, length, width = decoder_sequence.shape
        outputs = [keras.KerasTensor((batch, length, width), dtype=self.compute_dtype)]
        if return_attention_scores:
            outputs.append(keras.KerasTensor((batch, self.num_heads, length, length),
                                             dtype=self.compute_dtype))
            if self.cross_attention is not None:
                outputs.append(keras.KerasTensor(
                    (batch, self.num_heads, length, encoder_sequence.shape[1]),
                    dtype=self.compute_dtype))
        return tuple(outputs) if len(outputs) > 1 else outputs[0]

    def _residual(self, attention, norm, dropout, x, value, training, **attention_kwargs):
        """x + Dropout(attention(LN?(x), value)), LN after unless pre-LN -> (y, scores, cache),
        scores and cache None when not asked for."""
        residual = x
        if self.normalize_first:
            x = norm(x)
        outputs = attention(x, x if value is None else value, training=training,
                            **attention_kwargs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        scores = outputs[1] if attention_kwargs["return_attention_scores"] else None
        cache = outputs[-1] if attention_kwargs["cache"] is not None else None
        x = dropout(outputs[0], training=training) + residual
        return (x if self.normalize_first else norm(x)), scores, cache

    def _self_attention_mask(self, x, padding_mask, attention_mask, cache, index, use_causal):
        causal = None
        if use_causal:  # with a cache, the T new queries start at `index` among T_max keys
            length = ops.shape(x)[1]
            key_length = length if cache is None else ops.shape(cache[0])[2]  # [B, A, T_max, d]
            causal = causal_mask(length, key_length, offset=0 if index is None else index)
        return merge_masks(padding_mask_to_attention(padding_mask), attention_mask, causal)

    def _check_call(self, encoder_sequence, self_attention_cache, cross_attention_cache):
        if (encoder_sequence is None) != (self.cross_attention is None):
            raise ValueError(
                f"{self.name} was built {'with' if self.cross_attention else 'without'} "
                "cross-attention: call it with encoder_sequence always or never")
        if self.cross_attention is not None and \
                (self_attention_cache is None) != (cross_attention_cache is None):
            raise ValueError(f"{self.name}: pass self_attention_cache and cross_attention_cache "
                             "together (both or neither)")

    def call(self, decoder_sequence, encoder_sequence=None, decoder_padding_mask=None,
             decoder_attention_mask=None, encoder_padding_mask=None, encoder_attention_mask=None,
             self_attention_cache=None, self_attention_cache_update_index=None,
             cross_attention_cache=None, cross_attention_cache_update_index=None,
             use_causal_mask=True, head_mask=None, cross_head_mask=None,
             return_attention_scores=False, training=None):
        self._check_call(encoder_sequence, self_attention_cache, cross_attention_cache)
        mask = self._self_attention_mask(decoder_sequence, decoder_padding_mask,
                                         decoder_attention_mask, self_attention_cache,
                                         self_attention_cache_update_index, use_causal_mask)
        x, self_scores, self_cache = self._residual(
            self.self_attention, self.self_attention_layer_norm, self.self_attention_dropout,
            decoder_sequence, None, training, attention_mask=mask, head_mask=head_mask,
            cache=self_attention_cache, cache_update_index=self_attention_cache_update_index,
            return_attention_scores=return_attention_scores)
        cross_scores = cross_cache = None
        if self.cross_attention is not None:
            cross_mask = merge_masks(padding_mask_to_attention(encoder_padding_mask),
                                     encoder_attention_mask)
            x, cross_scores, cross_cache = self._residual(
                self.cross_attention, self.cross_attention_layer_norm,
                self.cross_attention_dropout, x, encoder_sequence, training,
                attention_mask=cross_mask, head_mask=cross_head_mask, cache=cross_attention_cache,
                cache_update_index=cross_attention_cache_update_index,
                return_attention_scores=return_attention_scores)
        x = self._feedforward(x, training)
        extras = [t for t in (self_scores, cross_scores, self_cache, cross_cache) if t is not None]
        return tuple([x] + extras) if extras else x


def cached_decoder_stack(blocks, x, encoded, state, index, cross_index, training=False):
    """Runs TransformerDecoderBlocks in turn on x with the key/value caches of a decoding state:
    state["self_cache"][i], state["cross_cache"][i] ((key, value) of block i),
    state["padding_mask"] (decoder slots) and state["encoder_padding_mask"]; index and
    cross_index are the blocks' cache update indices. Returns (x, self caches, cross caches),
    one (key, value) per block."""
    self_layers, cross_layers = [], []
    for i, block in enumerate(blocks):
        x, layer_self, layer_cross = block(
            x, encoded, decoder_padding_mask=state["padding_mask"],
            encoder_padding_mask=state["encoder_padding_mask"],
            self_attention_cache=tuple(state["self_cache"][i]),
            self_attention_cache_update_index=index,
            cross_attention_cache=tuple(state["cross_cache"][i]),
            cross_attention_cache_update_index=cross_index, training=training)
        self_layers.append(layer_self)
        cross_layers.append(layer_cross)
    return x, self_layers, cross_layers
