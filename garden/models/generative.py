"""The contract between the models that generate and everything that drives them.

GPT, GPT-2, the GPT-3-style sparse model (decoder-only) and T5, BART (encoder-decoder) each
provide one `GenerativeLM`; garden.models.decoding (greedy, sampling, beam search), the generation
export (garden/serving), garden.fewshot and the LM tasks use only what is written here, so a new
family that honours it decodes, serves and is scored without an edit elsewhere.

Training / scoring call, `model(inputs, training=...)` -> {"logits": float32 [B, T, V], ...}:
    decoder-only    inputs {"token_ids": int32 [B, T], "padding_mask": int32 [B, T]}, 1 = real
                    token. Rows may be LEFT-padded (batched prompts): position ids are then
                    max(cumsum(padding_mask) - 1, 0), as Hugging Face computes them, so a
                    left-padded row gives the logits of the same row unpadded.
    encoder-decoder inputs {"encoder_token_ids", "encoder_padding_mask": [B, S],
                    "decoder_token_ids", "decoder_padding_mask": [B, T]}; decoder_token_ids
                    are the targets shifted right behind the decoder start token(s).
    logits[:, t] scores the token at t + 1 (decoder-only) / target t (encoder-decoder); float32
    whatever the dtype policy, since they feed a softmax.

Incremental decoding (what garden.models.decoding calls, inside one tf.function):
    start_decoding(prompt, max_length) -> (logits float32 [B, V], state)
        prompt: the decoder-only inputs above (left-padded), or for encoder-decoder models
            the encoder inputs plus "decoder_token_ids" / "decoder_padding_mask" [B, P] (the
            start tokens: T5 [0], BART [2, 0] = </s> <s>), left-padded likewise.
        max_length: int (Python), the decoder slots of the cache, P + the most new tokens.
        The prompt fills cache slots 0..P-1; logits are the next-token scores after slot P-1.
        Encoder-decoder models run the encoder and project the cross-attention keys and values
        here, once (T5 and BART then never recompute them).
    decode_step(token_ids int32 [B], index int32 scalar, state) -> (logits float32 [B, V], state)
        token_ids go into cache slot `index` (P, P+1, ...); logits score the token after it.
    `state` is a dict (nest) of tensors whose shapes do not change from step to step (so it
    is a tf.while_loop variable) and whose axis 0 is the batch in every tensor, so beam search
    reorders beams with tf.gather(t, rows) and widens a batch with tf.repeat(t, k, axis=0)
    over the whole nest. No Python value may live in it, and decode_step returns the nest
    start_decoding made (the same lists and tuples: tf.while_loop and tf.cond compare the
    types). The families keep their KV caches as a list of per-layer (keys, values) pairs of
    [B, A, T, d] (garden.layers.MultiHeadAttention's one cache form), never stacked over layers.

Class attributes:
    is_encoder_decoder: bool.
    max_decoder_length: int or None, the most decoder positions the model has (learned
        position tables: GPT-2 1024, BART 1024); None when unbounded (T5's relative buckets).

The default `start_decoding` / `decode_step` raise; every family implements both and is tested
against its own full recompute (cached logits equal to model(inputs) over the whole sequence).

Construction: a GenerativeLM is a SUBCLASSED model over its (functional) backbone, built with
`super().__init__(**kwargs)` (name, dtype, trainable). Functional construction
(`super().__init__(inputs=..., outputs=...)`) is refused with a TypeError: Keras then rewrites
the bases of every class above the subclass (GenerativeLM's become (Functional,)), after which
no other family's LM can be built in the same process. Every family's LM is a `BackboneLM`:
built as `Cls(backbone, **kwargs)`, its config is keras.Model's plus the serialized backbone.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import keras
import tensorflow as tf
from keras import ops

from garden.layers import row_products

DECODER_INPUTS = ("token_ids", "padding_mask")
SEQ2SEQ_INPUTS = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids",
                  "decoder_padding_mask")


def tied_step_logits(hidden, table):
    """A decode step's logits from a tied output table: hidden [B, H] (one state per row)
    times table [V, H] transposed -> [B, V] in hidden's dtype; the products of
    `matmul(hidden, transpose(table))`, in the kernel that is faster for the batch (GPT-2
    small's 50,257 x 768 table on this CPU, one thread, min of 15 interleaved calls):

    up to 3 rows, MatMul with the table transposed (oneDNN's _MklMatMul: 11.2 ms against 14.3
    ms as an Einsum at 1 row, 11.0 against 14.2 at 2); from 4 rows, Einsum "bh,vh->bv"
    (_MklEinsum), which does not slow down with the rows as that MatMul does (4 rows: 14.8 ms
    against 21.1, 8: 18 against 35, 16: 21.6 against 30.1). A batch unknown when traced
    (serving) picks at run time. 3 rows were not timed. Where garden.layers.row_products
    splits products (rows known when traced, one-thread ops), the table's row slices are
    multiplied side by side, each in that kernel, and the logits concatenated."""
    table = ops.cast(table, hidden.dtype)
    # transpose_b: the MatMul that matmul(hidden, transpose(table)) becomes after Grappler folds
    # the transpose (same time, same bits), without a transposed copy of a slice to fold.
    few_rows = lambda t: tf.matmul(hidden, t, transpose_b=True)  # noqa: E731
    # tf.einsum, not keras.ops.einsum: Keras rewrites "ab,cb->ac" into that same MatMul.
    many_rows = lambda t: tf.einsum("bh,vh->bv", hidden, t)  # noqa: E731
    batch = hidden.shape[0]
    if batch is None:
        return tf.cond(tf.shape(hidden)[0] < 4, lambda: few_rows(table),
                       lambda: many_rows(table))
    kernel = few_rows if batch < 4 else many_rows
    parts = row_products.weight_parts(batch, table)
    if parts == 1:
        return kernel(table)
    return tf.concat([kernel(t) for t in row_products.split_rows(table, parts)], axis=1)


class GenerativeLM(keras.Model):
    """Base of every model that generates text (see the module docstring for the contract)."""

    is_encoder_decoder: bool = False
    max_decoder_length: Optional[int] = None

    def __init__(self, *args, **kwargs):
        if args or "inputs" in kwargs or "outputs" in kwargs:
            raise TypeError(
                f"{type(self).__name__}: a GenerativeLM is built as a subclassed model "
                f"(super().__init__(**kwargs) with name/dtype/trainable), not from "
                f"inputs/outputs: Keras' functional construction of a subclass rewrites "
                f"GenerativeLM's bases and breaks every other family's LM in the process")
        super().__init__(**kwargs)

    @property
    def input_names(self) -> Tuple[str, ...]:
        """The names `call` reads (training and scoring)."""
        return SEQ2SEQ_INPUTS if self.is_encoder_decoder else DECODER_INPUTS

    def start_decoding(self, prompt: Dict, max_length: int) -> Tuple[object, Dict]:
        raise NotImplementedError(f"{type(self).__name__} does not implement start_decoding")

    def decode_step(self, token_ids, index, state: Dict) -> Tuple[object, Dict]:
        raise NotImplementedError(f"{type(self).__name__} does not implement decode_step")


class BackboneLM(GenerativeLM):
    """A GenerativeLM over one backbone (`self.backbone`), constructed as `Cls(backbone,
    **kwargs)`: get_config is keras.Model's (name, trainable, dtype) plus the backbone,
    serialized; from_config rebuilds the backbone and calls the constructor, so
    `model.save("x.keras")` / keras.saving.load_model round-trip every family's LM."""

    def get_config(self):
        return {**super().get_config(),
                "backbone": keras.saving.serialize_keras_object(self.backbone)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        backbone = keras.saving.deserialize_keras_object(config.pop("backbone"))
        return cls(backbone, **config)
