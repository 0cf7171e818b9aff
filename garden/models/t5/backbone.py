"""T5 encoder-decoder: a shared token table -> pre-norm encoder stack | causal decoder stack with
cross-attention, RMSNorm everywhere, relative position buckets instead of positions.

The numerics follow the t5 / mesh-tensorflow code that trained the released checkpoints (and
Hugging Face's T5ForConditionalGeneration, which the conversion tests match to 1e-4):
- RMSNorm (no mean, no bias, epsilon 1e-6), statistics in float32 (garden.layers.RMSNorm);
  pre-norm residual sublayers, a final norm and dropout after each stack.
- Attention without 1/sqrt(d_kv) (folded into the query initialiser, std (d_model d_kv)^-0.5)
  and without biases; d_kv need not be d_model / heads.
- One relative position bias table per stack, owned by its first block and reused by every
  block: 32 buckets, max distance 128, bidirectional in the encoder, causal in the decoder;
  cross-attention has none. Decoding one token at cache index i offsets the query position
  by i, so a cached step sees exactly the bias of the full recompute.
- Feed-forward: v1.0 ReLU (wi, wo); v1.1 gated tanh-GELU (gelu(wi_0 x) * wi_1 x, then wo).
Dropout: on the embeddings, the attention probabilities, each sublayer's output, the
feed-forward hidden layer and after each stack's final norm.

The logits (tied table with the d_model^-0.5 scaling in v1.0, an untied lm_head in v1.1) are
garden.models.t5.seq2seq_lm.T5Seq2SeqLM's, the GenerativeLM that trains, decodes and serves.
"""

from __future__ import annotations

from typing import List, Optional

import keras
from keras import ops

from garden.layers import activations
from garden.layers.attention import MultiHeadAttention
from garden.layers.masks import causal_mask, merge_masks, padding_mask_to_attention
from garden.layers.norms import RMSNorm
from garden.layers.position_bias import RelativePositionBias
from garden.models.backbone import Backbone, backbone_inputs
from garden.models.instrument import Readout, ValueTransform


def _normal(stddev: float):
    return keras.initializers.RandomNormal(stddev=stddev)


# === Layers ===

@keras.saving.register_keras_serializable(package="garden")
class T5Block(keras.layers.Layer):
    """One T5 layer: pre-norm self-attention, (decoder) pre-norm cross-attention, pre-norm
    feed-forward, each `x + Dropout(sublayer(RMSNorm(x)))`.

    Args:
        num_heads: int, A.
        head_size: int, d_kv (64 in every released T5).
        intermediate_size: int, d_ff.
        is_decoder: bool, cross-attention after self-attention.
        has_relative_bias: bool, this block owns its stack's relative position table.
        bidirectional: bool, the table's bucketing (True in the encoder).
        activation: "relu" (v1.0) or "gelu_tanh" (v1.1), by garden.layers.activations' names.
        gated_feedforward: bool, v1.1's act(wi_0 x) * wi_1 x.
        num_buckets, max_distance: the relative table's (32, 128).
        dropout: float.
        layer_norm_epsilon: float (1e-6).
        initializer_factor: float, Mesh TF / Hugging Face's scale of every initialiser (1.0).

    Call args:
        x: float [B, T, d_model]; position_bias: float [1, A, T, Tk]; attention_mask: bool
        [B or 1, T, Tk]; encoder_sequence [B, S, d_model] and encoder_attention_mask
        [B, 1, S] (decoder); self_cache: a (keys, values) pair of [B, A, T_max, d_kv]
        (garden.layers.MultiHeadAttention's cache) with cache_index; cross_cache: a pair of
        [B, A, S, d_kv], filled from encoder_sequence when fill_cross_cache, else read as is;
        return_attention_scores (without a cache): also the self-attention probabilities.
    Returns: y, or (y, self_cache, cross_cache or None) with a self_cache, or (y, probabilities
    [B, A, T, Tk]) with return_attention_scores.
    """

    def __init__(self, num_heads: int, head_size: int, intermediate_size: int,
                 is_decoder: bool = False, has_relative_bias: bool = False,
                 bidirectional: bool = True, activation: str = "relu",
                 gated_feedforward: bool = False, num_buckets: int = 32, max_distance: int = 128,
                 dropout: float = 0.1, layer_norm_epsilon: float = 1e-6,
                 initializer_factor: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.num_heads, self.head_size = int(num_heads), int(head_size)
        self.intermediate_size = int(intermediate_size)
        self.is_decoder, self.has_relative_bias = bool(is_decoder), bool(has_relative_bias)
        self.bidirectional = bool(bidirectional)
        self.activation = activation
        self.gated_feedforward = bool(gated_feedforward)
        self.num_buckets, self.max_distance = int(num_buckets), int(max_distance)
        self.dropout = float(dropout)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.initializer_factor = float(initializer_factor)

    def _attention(self, name, shape):
        d, f = shape[-1], self.initializer_factor
        attention = MultiHeadAttention(
            self.num_heads, self.head_size, dropout=self.dropout, use_bias=False,
            scale_queries=False, kernel_initializer=_normal(f * d ** -0.5),
            dtype=self.dtype_policy, name=name)
        attention.build(shape, shape)
        # Mesh TF's initialisers: q (d_model d_kv)^-0.5 (the folded 1/sqrt(d_kv)), k and v
        # d_model^-0.5, o (A d_kv)^-0.5; drawn at d_model^-0.5 above, rescaled here.
        attention.query_dense.kernel.assign(attention.query_dense.kernel * self.head_size ** -0.5)
        inner = self.num_heads * self.head_size
        attention.output_dense.kernel.assign(attention.output_dense.kernel * (d / inner) ** 0.5)
        norm = RMSNorm(self.layer_norm_epsilon, dtype=self.dtype_policy, name=f"{name}_norm")
        norm.build(shape)
        return attention, norm

    def _dense(self, units, stddev, name, input_width):
        dense = keras.layers.Dense(units, use_bias=False, kernel_initializer=_normal(stddev),
                                   dtype=self.dtype_policy, name=name)
        dense.build((None, None, input_width))
        return dense

    def build(self, input_shape):
        d, f, ff = input_shape[-1], self.initializer_factor, self.intermediate_size
        if self.has_relative_bias:
            self.relative_attention_bias = RelativePositionBias(
                self.num_heads, self.num_buckets, self.max_distance, self.bidirectional,
                embeddings_initializer=_normal(f * d ** -0.5), name="relative_attention_bias")
            self.relative_attention_bias.build()
        self.self_attention, self.self_attention_norm = self._attention("self_attention",
                                                                        input_shape)
        if self.is_decoder:
            self.cross_attention, self.cross_attention_norm = self._attention("cross_attention",
                                                                              input_shape)
        # Plain attributes, not a list: TensorFlow checkpoints do not follow Keras' lists.
        if self.gated_feedforward:
            self.wi_0 = self._dense(ff, f * d ** -0.5, "wi_0", d)
            self.wi_1 = self._dense(ff, f * d ** -0.5, "wi_1", d)
        else:
            self.wi = self._dense(ff, f * d ** -0.5, "wi", d)
        self.wo = self._dense(d, f * ff ** -0.5, "wo", ff)
        self.feedforward_norm = RMSNorm(self.layer_norm_epsilon, dtype=self.dtype_policy,
                                        name="feedforward_norm")
        self.feedforward_norm.build(input_shape)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy,
                                                  name="dropout")
        self.act = activations.get(self.activation)
        self.built = True

    def _feedforward(self, x, training):
        if self.gated_feedforward:
            h = self.act(self.wi_0(x)) * self.wi_1(x)
        else:
            h = self.act(self.wi(x))
        return self.wo(self.dropout_layer(h, training=training))

    def call(self, x, position_bias=None, attention_mask=None, encoder_sequence=None,
             encoder_attention_mask=None, self_cache=None, cache_index=None, cross_cache=None,
             fill_cross_cache=False, return_attention_scores=False, training=None):
        h = self.self_attention_norm(x)
        out = self.self_attention(h, h, attention_mask=attention_mask, attention_bias=position_bias,
                                  cache=self_cache, cache_update_index=cache_index,
                                  return_attention_scores=return_attention_scores,
                                  training=training)
        if self_cache is not None:
            out, self_cache = out
        elif return_attention_scores:
            out, probabilities = out
        x = x + self.dropout_layer(out, training=training)
        if self.is_decoder:
            h = self.cross_attention_norm(x)
            # Reading a filled cache needs no encoder sequence: `h` stands in for it, unused.
            value = encoder_sequence if encoder_sequence is not None else h
            out = self.cross_attention(h, value, attention_mask=encoder_attention_mask,
                                       cache=cross_cache,
                                       cache_update_index=0 if fill_cross_cache else None,
                                       training=training)
            if cross_cache is not None:
                out, cross_cache = out
            x = x + self.dropout_layer(out, training=training)
        x = x + self.dropout_layer(self._feedforward(self.feedforward_norm(x), training),
                                   training=training)
        if return_attention_scores and self_cache is None:
            return x, probabilities
        return x if self_cache is None else (x, self_cache, cross_cache)

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, head_size=self.head_size,
                      intermediate_size=self.intermediate_size, is_decoder=self.is_decoder,
                      has_relative_bias=self.has_relative_bias, bidirectional=self.bidirectional,
                      activation=self.activation, gated_feedforward=self.gated_feedforward,
                      num_buckets=self.num_buckets, max_distance=self.max_distance,
                      dropout=self.dropout, layer_norm_epsilon=self.layer_norm_epsilon,
                      initializer_factor=self.initializer_factor)
        return config


@keras.saving.register_keras_serializable(package="garden")
class T5Stack(keras.layers.Layer):
    """T5's encoder or decoder: dropout on the embedded input, `num_layers` T5Blocks sharing
    the first block's relative position bias, a final RMSNorm and dropout.

    Call args:
        x: float [B, T, d_model], the embedded tokens.
        padding_mask: int [B, T] (with a cache: [B, T_max], the cache slots), 1 = real.
        encoder_sequence, encoder_padding_mask: [B, S, d_model], [B, S] (decoder).
        self_cache: a sequence of L (keys, values) pairs, one per block, each
            [B, A, T_max, d_kv], with cache_index (int scalar, the slot of x's first token;
            the bias's query offset and the causal mask's); cross_cache: L pairs of
            [B, A, S, d_kv], filled when fill_cross_cache, else read as is. Never stacked
            over layers: a step writes each block's pair and copies no other.
        outputs: () or among "hidden_states", "attention_probs" (without a cache): also return
            {name: the stack's input (after dropout) then each block's output, the last after
            the final norm [L+1, B, T, d_model]; each block's self-attention probabilities
            [L, B, A, T, T]} (garden.bertology).
    Returns: y [B, T, d_model], or (y, self_cache, cross_cache) with a self_cache, the caches
        as lists of L (keys, values) tuples (cross_cache None when none was given), or
        (y, {name: tensor}) with outputs.
    """

    def __init__(self, num_layers: int, is_decoder: bool = False, **block_args):
        name = block_args.pop("name", None)
        dtype = block_args.pop("dtype", None)
        trainable = block_args.pop("trainable", True)
        super().__init__(name=name, dtype=dtype, trainable=trainable)
        self.num_layers, self.is_decoder = int(num_layers), bool(is_decoder)
        self.block_args = dict(block_args)

    def build(self, input_shape):
        for i in range(self.num_layers):
            block = T5Block(is_decoder=self.is_decoder, has_relative_bias=i == 0,
                            bidirectional=not self.is_decoder, dtype=self.dtype_policy,
                            name=f"block_{i}", **self.block_args)
            block.build(input_shape)
            # One attribute per block, not a list: TensorFlow checkpoints (garden.train's)
            # do not follow the lists Keras tracks, so a list's weights would not be saved.
            setattr(self, f"block_{i}", block)
        self.final_norm = RMSNorm(self.block_args.get("layer_norm_epsilon", 1e-6),
                                  dtype=self.dtype_policy, name="final_norm")
        self.final_norm.build(input_shape)
        self.dropout_layer = keras.layers.Dropout(self.block_args.get("dropout", 0.1),
                                                  dtype=self.dtype_policy, name="dropout")
        self.built = True

    @property
    def blocks(self):
        return [getattr(self, f"block_{i}") for i in range(self.num_layers)]

    @property
    def relative_attention_bias(self) -> RelativePositionBias:
        """The stack's one table (its first block's)."""
        return self.blocks[0].relative_attention_bias

    def call(self, x, padding_mask=None, encoder_sequence=None, encoder_padding_mask=None,
             self_cache=None, cache_index=None, cross_cache=None, fill_cross_cache=False,
             outputs=(), training=None):
        length = ops.shape(x)[1]
        key_length = length if self_cache is None else ops.shape(self_cache[0][0])[2]
        offset = 0 if cache_index is None else cache_index
        bias = self.relative_attention_bias(query_length=length, key_length=key_length,
                                            offset=offset)
        mask = padding_mask_to_attention(padding_mask)
        if self.is_decoder:
            mask = merge_masks(mask, causal_mask(length, key_length, offset=offset))
        encoder_mask = padding_mask_to_attention(encoder_padding_mask)
        x = self.dropout_layer(x, training=training)
        self_caches, cross_caches = [], []
        states, scores = [x], []
        for i, block in enumerate(self.blocks):
            if self_cache is None:
                x = block(x, position_bias=bias, attention_mask=mask,
                          encoder_sequence=encoder_sequence, encoder_attention_mask=encoder_mask,
                          return_attention_scores="attention_probs" in outputs,
                          training=training)
                if "attention_probs" in outputs:
                    x, probabilities = x
                    scores.append(probabilities)
                states.append(x)
                continue
            x, layer_self, layer_cross = block(
                x, position_bias=bias, attention_mask=mask, encoder_sequence=encoder_sequence,
                encoder_attention_mask=encoder_mask, self_cache=tuple(self_cache[i]),
                cache_index=cache_index,
                cross_cache=None if cross_cache is None else tuple(cross_cache[i]),
                fill_cross_cache=fill_cross_cache, training=training)
            self_caches.append(layer_self)
            cross_caches.append(layer_cross)
        x = self.dropout_layer(self.final_norm(x), training=training)
        if outputs and self_cache is None:
            extras = {"hidden_states": ops.stack(states[:-1] + [x], axis=0),
                      "attention_probs": ops.stack(scores, axis=0) if scores else None}
            return x, {name: extras[name] for name in outputs}
        if self_cache is None:
            return x
        return x, self_caches, None if cross_cache is None else cross_caches

    def compute_output_spec(self, x, padding_mask=None, encoder_sequence=None,
                            encoder_padding_mask=None, self_cache=None, cache_index=None,
                            cross_cache=None, fill_cross_cache=False, outputs=(), training=None):
        # What call() returns, from the shapes alone: Keras' default traces the whole stack
        # into a graph to find out, each time a functional T5 is built (6% of the suite's
        # worker CPU, py-spy, 2026-12-07). A call with a cache is traced as by default.
        if self_cache is not None:
            return super().compute_output_spec(
                x, padding_mask, encoder_sequence, encoder_padding_mask, self_cache, cache_index,
                cross_cache, fill_cross_cache, outputs, training)
        batch, length, width = x.shape
        dtype = self.compute_dtype
        y = keras.KerasTensor((batch, length, width), dtype=dtype)
        if not outputs:
            return y
        shapes = {"hidden_states": (self.num_layers + 1, batch, length, width),
                  "attention_probs": (self.num_layers, batch, self.blocks[0].num_heads, length,
                                      length)}
        return y, {name: keras.KerasTensor(shapes[name], dtype=dtype) for name in outputs}

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers, is_decoder=self.is_decoder, **self.block_args)
        return config


# === The functional graph ===

@keras.saving.register_keras_serializable(package="garden")
class T5Backbone(Backbone):
    """T5 (Raffel et al., 2020, "Exploring the Limits of Transfer Learning with a Unified
    Text-to-Text Transformer", arXiv:1910.10683), v1.0 and v1.1, as a Keras functional model.

    Inputs (dict, int32): encoder_token_ids, encoder_padding_mask [B, S];
        decoder_token_ids, decoder_padding_mask [B, T] (targets shifted right behind pad = 0,
        T5's decoder start token). 1 = real token in the masks.
    Outputs (dict): encoder_sequence_output [B, S, d_model]; decoder_sequence_output
        [B, T, d_model] (after the decoder's final norm, before any logits scaling).
    The constructor arguments are the config (garden.models.backbone.Backbone records them).

    Args:
        vocab_size: int (32128: 32000 SentencePiece pieces + 100 sentinels, padded).
        num_layers: int, encoder blocks (and decoder blocks unless num_decoder_layers).
        hidden_size: int, d_model.
        num_heads: int, A.
        intermediate_size: int, d_ff.
        head_size: int, d_kv (64).
        num_decoder_layers: int or None (= num_layers).
        activation: "relu" (v1.0) or "gelu_tanh" (v1.1).
        gated_feedforward: bool, v1.1's gated feed-forward.
        tie_embeddings: bool, v1.0: logits on the token table after scaling the decoder output
            by d_model^-0.5; False (v1.1): an untied lm_head, no scaling (T5Seq2SeqLM's).
        num_buckets, max_distance: relative position buckets (32, 128).
        dropout: float (0.1).
        layer_norm_epsilon: float (1e-6).
        initializer_factor: float (1.0).
        dtype: None, str or keras.DTypePolicy (T5 trained in "mixed_bfloat16"; float16
            overflows).
        output_hidden_states: bool, add encoder_hidden_states and decoder_hidden_states, each
            [L+1, B, T, d_model]: the stack's embedded input, then each block's output, the last
            after the final norm (as Hugging Face's), for garden.bertology.
        output_attentions: bool, add encoder_attention_probs and decoder_attention_probs
            [L, B, A, T, T], each stack's self-attention (the decoder's causal).

    Example:
        backbone = T5Backbone(vocab_size=1000, num_layers=2, hidden_size=64, num_heads=2, intermediate_size=128)
        ids = np.ones((2, 16), "int32")
        out = backbone({"encoder_token_ids": ids, "encoder_padding_mask": ids, "decoder_token_ids": ids, "decoder_padding_mask": ids})
    """

    presets_module = "garden.models.t5.presets"
    # Analysed one stack at a time (garden.models.stack_view.StackView, which states its own).
    readout = Readout("bidirectional", "the encoder's or the decoder's layers (StackView)",
                      blocks="", stacks=("encoder", "decoder"))

    def __init__(
        self,
        vocab_size: int,
        num_layers: int,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        head_size: int = 64,
        num_decoder_layers: Optional[int] = None,
        activation: str = "relu",
        gated_feedforward: bool = False,
        tie_embeddings: bool = True,
        num_buckets: int = 32,
        max_distance: int = 128,
        dropout: float = 0.1,
        layer_norm_epsilon: float = 1e-6,
        initializer_factor: float = 1.0,
        dtype=None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        **kwargs,
    ):
        # === Layers ===
        token_embedding = keras.layers.Embedding(
            vocab_size, hidden_size, embeddings_initializer=_normal(initializer_factor),
            dtype=dtype, name="token_embedding")
        block_args = dict(num_heads=num_heads, head_size=head_size,
                          intermediate_size=intermediate_size, activation=activation,
                          gated_feedforward=gated_feedforward, num_buckets=num_buckets,
                          max_distance=max_distance, dropout=dropout,
                          layer_norm_epsilon=layer_norm_epsilon,
                          initializer_factor=initializer_factor, dtype=dtype)
        encoder = T5Stack(num_layers, is_decoder=False, name="encoder", **block_args)
        decoder = T5Stack(num_layers if num_decoder_layers is None else num_decoder_layers,
                          is_decoder=True, name="decoder", **block_args)

        # === Functional graph ===
        inputs = backbone_inputs(("encoder_token_ids", "encoder_padding_mask",
                                  "decoder_token_ids", "decoder_padding_mask"))
        extra = tuple(name for name, on in (("hidden_states", output_hidden_states),
                                            ("attention_probs", output_attentions)) if on)
        encoded = encoder(token_embedding(inputs["encoder_token_ids"]),
                          padding_mask=inputs["encoder_padding_mask"], outputs=extra)
        decoded = decoder(token_embedding(inputs["decoder_token_ids"]),
                          padding_mask=inputs["decoder_padding_mask"],
                          encoder_sequence=encoded[0] if extra else encoded,
                          encoder_padding_mask=inputs["encoder_padding_mask"], outputs=extra)
        outputs = {}
        for stack, result in (("encoder", encoded), ("decoder", decoded)):
            outputs[f"{stack}_sequence_output"] = result[0] if extra else result
            for name in extra:
                outputs[f"{stack}_{name}"] = result[1][name]
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config === (recorded by Backbone from the arguments above)
        self.shared_embedding = token_embedding
        self.encoder = encoder
        self.decoder = decoder

    @property
    def token_embedding(self) -> keras.layers.Embedding:
        """The one table of the encoder, the decoder and (v1.0) the logits."""
        return self.shared_embedding

    def value_transforms(self, stack: str) -> List[ValueTransform]:
        """Each block's self-attention value transform in `stack` ("encoder" or "decoder";
        garden.models.instrument): no biases, read through the block's pre-attention RMSNorm.
        The decoder's cross-attention is another sublayer, not part of it."""
        return [ValueTransform.of(block.self_attention, block.self_attention_norm)
                for block in getattr(self, stack).blocks]

    def layer_groups(self):
        """Backbone.layer_groups: the shared table; the encoder's blocks, its final norm with
        the last of them (it normalises what the decoder's cross-attention reads); the
        decoder's blocks; the decoder's final norm on top. Each stack's relative position
        bias lives in its block_0 (every block reads it), so it is block 0's."""
        encoder = [[block] for block in self.encoder.blocks]
        encoder[-1].append(self.encoder.final_norm)
        return [[self.shared_embedding], *encoder,
                *[[block] for block in self.decoder.blocks], [self.decoder.final_norm]]
