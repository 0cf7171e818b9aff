"""Small GenerativeLMs (garden/models/generative.py) for testing what drives a generative model
(garden.models.decoding, the generation export, garden.fewshot, the LM tasks) without depending on
any one family: a pre-LN decoder-only model and an encoder-decoder, both on garden.layers with
real KV caches, built in milliseconds.

    model = ToyCausalLM(vocab_size=40, seed=0)
    logits = model({"token_ids": ids, "padding_mask": mask})["logits"]      # [B, T, V]
    next_logits, state = model.start_decoding({"token_ids": ids, "padding_mask": mask}, 16)
    next_logits, state = model.decode_step(tokens, index, state)
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from garden.layers import TransformerDecoderBlock, TransformerEncoderBlock
from garden.layers.transformer_decoder import cached_decoder_stack
from garden.models.generative import GenerativeLM


def _positions(padding_mask):
    """Left-padding-aware position ids: max(cumsum(mask) - 1, 0)."""
    return ops.maximum(ops.cumsum(ops.cast(padding_mask, "int32"), axis=1) - 1, 0)


def _empty_pairs(model, batch, length):
    """The KV cache of garden.layers.MultiHeadAttention for each of the model's blocks: a list
    of (keys, values) pairs of zeros [B, A, length, d]."""
    width = model.hidden_size // model.num_heads
    zeros = lambda: ops.zeros((batch, model.num_heads, length, width))  # noqa: E731
    return [(zeros(), zeros()) for _ in range(model.num_layers)]


def _track_for_checkpoints(model, blocks):
    """tf.train.Checkpoint (what garden.train saves) does not follow layers held in a Python
    list of a subclassed Keras 3 model: without an attribute each, a checkpoint of the toy held
    4 of its 36 weights. Keras' own saving tracks them either way."""
    for i, block in enumerate(blocks):
        setattr(model, f"block_{i}", block)


class _ToyLM(GenerativeLM):
    """What both toys share: the seeded constructor and its sizes, the token table (tied
    logits), the decoder's position table, and the decoder's start."""

    def __init__(self, vocab_size: int = 40, hidden_size: int = 32, num_heads: int = 2,
                 num_layers: int = 2, max_decoder_length: int = 64, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        keras.utils.set_random_seed(seed)  # the subclass's layers are made after it too
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.num_heads, self.num_layers = num_heads, num_layers
        self.max_decoder_length = max_decoder_length
        self.token_table = keras.layers.Embedding(
            vocab_size, hidden_size, embeddings_initializer=keras.initializers.RandomNormal(
                stddev=1.0), name="tokens")
        self.position_table = keras.layers.Embedding(max_decoder_length, hidden_size,
                                                     name="positions")

    def get_config(self):
        """The constructor's arguments (Keras' automatic config records only defaults here), so
        that model.save / keras.saving.load_model round-trip a toy."""
        return dict(super().get_config(), vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                    num_heads=self.num_heads, num_layers=self.num_layers,
                    max_decoder_length=self.max_decoder_length)

    def _embed(self, token_ids, positions):
        return self.token_table(token_ids) + self.position_table(positions)

    def _start(self, token_ids, padding_mask, max_length):
        """The prompt embedded, its mask, and the mask of all ``max_length`` slots: slots after
        the prompt count as real, the causal mask hides them until written."""
        mask = ops.cast(padding_mask, "int32")
        batch, length = ops.shape(mask)[0], ops.shape(mask)[1]
        slots = ops.concatenate([mask, ops.ones((batch, max_length - length), "int32")], axis=1)
        return self._embed(token_ids, _positions(mask)), mask, slots


class ToyCausalLM(_ToyLM):
    """Token + position tables, pre-LN decoder blocks, final LayerNorm, tied logits (GPT-2's
    shape at toy size)."""

    is_encoder_decoder = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.blocks = [TransformerDecoderBlock(self.num_heads, 2 * self.hidden_size, dropout=0.0,
                                               normalize_first=True, name=f"block_{i}")
                       for i in range(self.num_layers)]
        _track_for_checkpoints(self, self.blocks)
        self.final_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="final_norm")

    def _logits(self, x):
        return ops.cast(ops.matmul(self.final_norm(x), ops.transpose(self.token_table.embeddings)),
                        "float32")

    def call(self, inputs, training=False):
        mask = ops.cast(inputs["padding_mask"], "int32")
        x = self._embed(inputs["token_ids"], _positions(mask))
        for block in self.blocks:
            x = block(x, decoder_padding_mask=mask, training=training)
        return {"logits": self._logits(x)}

    def start_decoding(self, prompt, max_length):
        x, mask, slots = self._start(prompt["token_ids"], prompt["padding_mask"], max_length)
        cache = _empty_pairs(self, ops.shape(mask)[0], max_length)
        layers = []
        for i, block in enumerate(self.blocks):
            x, layer_cache = block(x, decoder_padding_mask=slots,
                                   self_attention_cache=cache[i],
                                   self_attention_cache_update_index=0)
            layers.append(layer_cache)
        state = {"cache": layers, "padding_mask": slots,
                 "positions": ops.sum(mask, axis=1)}
        return self._logits(x[:, -1]), state

    def decode_step(self, token_ids, index, state):
        x = self._embed(token_ids[:, None], state["positions"][:, None])
        layers = []
        for i, block in enumerate(self.blocks):
            x, layer_cache = block(x, decoder_padding_mask=state["padding_mask"],
                                   self_attention_cache=tuple(state["cache"][i]),
                                   self_attention_cache_update_index=index)
            layers.append(layer_cache)
        state = {"cache": layers, "padding_mask": state["padding_mask"],
                 "positions": state["positions"] + 1}
        return self._logits(x[:, 0]), state


class ToySeq2SeqLM(_ToyLM):
    """One post-LN encoder block, decoder blocks with cross-attention, one shared token table
    (BART's shape at toy size, without positions in the encoder)."""

    is_encoder_decoder = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.encoder = TransformerEncoderBlock(self.num_heads, 2 * self.hidden_size, dropout=0.0,
                                               name="encoder")
        self.blocks = [TransformerDecoderBlock(self.num_heads, 2 * self.hidden_size, dropout=0.0,
                                               name=f"block_{i}") for i in range(self.num_layers)]
        _track_for_checkpoints(self, self.blocks)

    def _logits(self, x):
        return ops.cast(ops.matmul(x, ops.transpose(self.token_table.embeddings)), "float32")

    def _encode(self, inputs):
        mask = ops.cast(inputs["encoder_padding_mask"], "int32")
        return self.encoder(self.token_table(inputs["encoder_token_ids"]), padding_mask=mask), mask

    def call(self, inputs, training=False):
        encoded, encoder_mask = self._encode(inputs)
        mask = ops.cast(inputs["decoder_padding_mask"], "int32")
        x = self._embed(inputs["decoder_token_ids"], _positions(mask))
        for block in self.blocks:
            x = block(x, encoded, decoder_padding_mask=mask, encoder_padding_mask=encoder_mask,
                      training=training)
        return {"logits": self._logits(x)}

    def start_decoding(self, prompt, max_length):
        encoded, encoder_mask = self._encode(prompt)
        x, mask, slots = self._start(prompt["decoder_token_ids"], prompt["decoder_padding_mask"],
                                     max_length)
        batch = ops.shape(mask)[0]
        self_cache = _empty_pairs(self, batch, max_length)
        cross_cache = _empty_pairs(self, batch, ops.shape(encoded)[1])
        self_layers, cross_layers = [], []
        for block, layer_self, layer_cross in zip(self.blocks, self_cache, cross_cache):
            x, layer_self, layer_cross = block(
                x, encoded, decoder_padding_mask=slots, encoder_padding_mask=encoder_mask,
                self_attention_cache=layer_self, self_attention_cache_update_index=0,
                cross_attention_cache=layer_cross, cross_attention_cache_update_index=0)
            self_layers.append(layer_self)
            cross_layers.append(layer_cross)
        state = {"self_cache": self_layers, "cross_cache": cross_layers,
                 "encoder_padding_mask": encoder_mask, "padding_mask": slots,
                 "positions": ops.sum(mask, axis=1)}
        return self._logits(x[:, -1]), state

    def decode_step(self, token_ids, index, state):
        x = self._embed(token_ids[:, None], state["positions"][:, None])
        encoded = ops.zeros((ops.shape(x)[0], ops.shape(state["cross_cache"][0][0])[2],
                             self.hidden_size))  # unused: the cross cache is read as is
        x, self_layers, _ = cached_decoder_stack(self.blocks, x, encoded, state, index, None)
        state = dict(state, self_cache=self_layers,
                     positions=state["positions"] + 1)
        return self._logits(x[:, 0]), state


def seq2seq_inputs(vocab: int, pad: int, seed: int = 1):
    """A BART-style seq2seq batch: encoder rows right-padded to 9, 6, 4 real tokens; decoder
    rows </s> <s> ... right-padded to 7, 5, 7; padding filled with `pad`."""
    rng = np.random.default_rng(seed)
    enc = rng.integers(3, vocab, (3, 9)).astype("int32")
    dec = rng.integers(3, vocab, (3, 7)).astype("int32")
    dec[:, :2] = (2, 0)
    enc_mask, dec_mask = np.zeros_like(enc), np.zeros_like(dec)
    for b, (n, m) in enumerate(((9, 7), (6, 5), (4, 7))):
        enc_mask[b, :n], dec_mask[b, :m] = 1, 1
    enc[enc_mask == 0], dec[dec_mask == 0] = pad, pad
    return {"encoder_token_ids": enc, "encoder_padding_mask": enc_mask,
            "decoder_token_ids": dec, "decoder_padding_mask": dec_mask}
