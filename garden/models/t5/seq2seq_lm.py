"""T5Seq2SeqLM: the T5 backbone with its logits, as the encoder-decoder GenerativeLM of
garden/models/generative.py (training and scoring call, cached incremental decoding).

Logits: v1.0 (tie_embeddings) scores the decoder output, scaled by d_model^-0.5, against the
shared token table; v1.1 applies an untied `lm_head` [d_model, V] without scaling. Either way
they come back float32.

Decoding: `start_decoding` runs the encoder once, projects every decoder layer's
cross-attention keys and values once into `cross_cache` (never recomputed), and runs the
decoder prompt (T5's start token 0, left-padded when prompts differ) into slots 0..P-1 of the
self-attention cache; `decode_step` writes one token at slot `index`, its relative position
bias offset by `index`. The state (batch on axis 0 in every tensor):
    self_cache: a list of L (keys, values) pairs, one per decoder block, each
        [B, A, max_length, d_kv] (garden.layers.MultiHeadAttention's cache, head-major as the
        scores read it; never stacked over layers, so a step copies no other block's cache);
    cross_cache: L pairs of [B, A, S, d_kv], read as is by every step;
    encoder_padding_mask [B, S], padding_mask [B, max_length] (the prompt's, then ones:
    the causal mask hides the slots not yet written).

    lm = T5Seq2SeqLM(T5Backbone.untrained("t5_tiny"))
    logits = lm({"encoder_token_ids": x, "encoder_padding_mask": xm,
                 "decoder_token_ids": y, "decoder_padding_mask": ym})["logits"]  # [B, T, V]
"""

from __future__ import annotations

import keras
from keras import ops

from garden.layers.attention import empty_caches
from garden.models.generative import BackboneLM, tied_step_logits
from garden.models.t5.backbone import T5Backbone


@keras.saving.register_keras_serializable(package="garden")
class T5Seq2SeqLM(BackboneLM):
    """T5 as a text-to-text model (see the module docstring).

    Args:
        backbone: a T5Backbone.
        **kwargs: name, trainable.
    """

    is_encoder_decoder = True
    max_decoder_length = None  # relative buckets: no position table bounds the decoder
    decoder_start_token_id = 0

    def __init__(self, backbone: T5Backbone, **kwargs):
        kwargs.setdefault("dtype", backbone.dtype_policy)
        super().__init__(**kwargs)
        self.backbone = backbone
        self.lm_head = None
        if not backbone.tie_embeddings:
            self.lm_head = keras.layers.Dense(
                backbone.vocab_size, use_bias=False, dtype=backbone.dtype_policy,
                kernel_initializer=keras.initializers.RandomNormal(
                    stddev=backbone.initializer_factor), name="lm_head")
            self.lm_head.build((None, None, backbone.hidden_size))
        self.built = True

    def logits(self, x):
        """Decoder outputs [..., d_model] -> float32 logits [..., V]."""
        if self.lm_head is not None:
            return ops.cast(self.lm_head(x), "float32")
        x = x * ops.cast(self.backbone.hidden_size ** -0.5, x.dtype)
        table = ops.cast(self.backbone.token_embedding.embeddings, x.dtype)
        return ops.cast(ops.matmul(x, ops.transpose(table)), "float32")

    def next_token_logits(self, x):
        """`logits` of one decoder state per row [B, d_model] (a decode step's); a tied table's
        products in the kernel that is faster for the batch (generative.tied_step_logits)."""
        if self.lm_head is not None:
            return self.logits(x)
        x = x * ops.cast(self.backbone.hidden_size ** -0.5, x.dtype)
        return ops.cast(tied_step_logits(x, self.backbone.token_embedding.embeddings), "float32")

    def call(self, inputs, training=False):
        outputs = self.backbone({k: inputs[k] for k in self.input_names}, training=training)
        return {"logits": self.logits(outputs["decoder_sequence_output"])}

    # -- incremental decoding ---------------------------------------------------------------
    def _empty_cache(self, batch, length):
        """L (keys, values) pairs of zeros [B, A, length, d_kv]."""
        b = self.backbone
        return empty_caches(b.decoder.num_layers, batch, b.num_heads, length, b.head_size,
                            b.token_embedding.compute_dtype)

    def start_decoding(self, prompt, max_length):
        b = self.backbone
        encoder_mask = ops.cast(prompt["encoder_padding_mask"], "int32")
        encoded = b.encoder(b.token_embedding(prompt["encoder_token_ids"]),
                            padding_mask=encoder_mask)
        mask = ops.cast(prompt["decoder_padding_mask"], "int32")
        batch, length = ops.shape(mask)[0], ops.shape(mask)[1]
        slots = ops.concatenate([mask, ops.ones((batch, max_length - length), "int32")], axis=1)
        x, self_cache, cross_cache = b.decoder(
            b.token_embedding(prompt["decoder_token_ids"]), padding_mask=slots,
            encoder_sequence=encoded, encoder_padding_mask=encoder_mask,
            self_cache=self._empty_cache(batch, max_length), cache_index=0,
            cross_cache=self._empty_cache(batch, ops.shape(encoded)[1]), fill_cross_cache=True)
        state = {"self_cache": self_cache, "cross_cache": cross_cache,
                 "encoder_padding_mask": encoder_mask, "padding_mask": slots}
        return self.next_token_logits(x[:, -1]), state

    def decode_step(self, token_ids, index, state):
        b = self.backbone
        x, self_cache, _ = b.decoder(
            b.token_embedding(ops.cast(token_ids, "int32")[:, None]),
            padding_mask=state["padding_mask"],
            encoder_padding_mask=state["encoder_padding_mask"], self_cache=state["self_cache"],
            cache_index=index, cross_cache=state["cross_cache"], fill_cross_cache=False)
        return self.next_token_logits(x[:, 0]), dict(state, self_cache=self_cache)
