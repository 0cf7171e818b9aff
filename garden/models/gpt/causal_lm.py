"""A decoder-only GenerativeLM over a backbone (garden/models/generative.py's contract), shared
by GPT (2018), GPT-2 and the GPT-3-style sparse model.

The backbone supplies what the LM drives, so the cached decode loop is written once:
    backbone.embed(token_ids, position_ids, training) -> float [B, T, H]
    backbone.decoder_blocks: blocks called as
        block(x, decoder_padding_mask=..., self_attention_cache=...,
              self_attention_cache_update_index=...) -> (x, cache)
        (garden.layers.TransformerDecoderBlock's signature; without a cache -> x)
    backbone.finish(x) -> x after the last block (GPT: identity, GPT-2 / GPT-3: final LayerNorm)
    backbone.output_table() -> float [V, H], the tied softmax's rows (the token rows)
    backbone.num_layers, num_heads, hidden_size, max_sequence_length
and its functional call {"token_ids", "padding_mask"} -> {"sequence_output"} computes the same
as embed -> blocks -> finish.

Decoding state: {"cache": a list of L (keys, values) pairs, each [B, A, T_max, d] (one per
block: a step writes each block's slot without slicing or re-stacking a [B, L, 2, ...] array,
which copied the whole cache twice a step; head-major, as the attention scores read it, so no
step transposes a cache), "padding_mask": [B, T_max] (1 on real prompt
tokens and on every slot after the prompt; the causal mask hides slots not yet written),
"positions": [B] (next position id)}.
"""

from __future__ import annotations

from keras import ops

from garden.layers.attention import empty_caches
from garden.models.generative import BackboneLM, tied_step_logits


def position_ids(padding_mask):
    """Left-padding-aware position ids, max(cumsum(mask) - 1, 0) (Hugging Face's rule)."""
    return ops.maximum(ops.cumsum(ops.cast(padding_mask, "int32"), axis=1) - 1, 0)


class CachedCausalLM(BackboneLM):
    """Logits tied to the backbone's output table, plus the KV-cached decode of the contract.

    Subclasses only register themselves (Keras serialization needs a concrete class name).

    Args:
        backbone: a backbone with the interface of the module docstring.
        **kwargs: name, dtype, trainable.
    """

    is_encoder_decoder = False

    def __init__(self, backbone, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.max_decoder_length = int(backbone.max_sequence_length)
        # Every weight is the (functional, built) backbone's: built now, so count_params and
        # saving work before a first call.
        self.built = True

    def logits(self, hidden):
        """float32 logits [..., V] of hidden states [..., H] (the tied softmax)."""
        table = ops.cast(self.backbone.output_table(), hidden.dtype)
        return ops.cast(ops.matmul(hidden, ops.transpose(table)), "float32")

    def next_token_logits(self, hidden):
        """float32 logits [B, V] of one hidden state per row [B, H] (a decode step's): the
        same products as `logits`, in the kernel that is faster for the batch
        (garden.models.generative.tied_step_logits)."""
        return ops.cast(tied_step_logits(hidden, self.backbone.output_table()), "float32")

    def call(self, inputs, training=False):
        hidden = self.backbone({"token_ids": inputs["token_ids"],
                                "padding_mask": inputs["padding_mask"]},
                               training=training)["sequence_output"]
        return {"logits": self.logits(hidden), "sequence_output": hidden}

    def _run_blocks(self, x, padding_mask, cache, index):
        layers = []
        for block, layer_cache in zip(self.backbone.decoder_blocks, cache):
            x, layer_cache = block(x, decoder_padding_mask=padding_mask,
                                   self_attention_cache=tuple(layer_cache),
                                   self_attention_cache_update_index=index)
            layers.append(layer_cache)
        return self.backbone.finish(x), layers

    def start_decoding(self, prompt, max_length):
        mask = ops.cast(prompt["padding_mask"], "int32")
        batch, length = ops.shape(mask)[0], ops.shape(mask)[1]
        if isinstance(max_length, int) and max_length > self.max_decoder_length:
            raise ValueError(f"{type(self).__name__}: max_length {max_length} exceeds the "
                             f"{self.max_decoder_length} positions of the model")
        slots = ops.concatenate([mask, ops.ones((batch, max_length - length), "int32")], axis=1)
        x = self.backbone.embed(prompt["token_ids"], position_ids(mask))
        b = self.backbone
        cache = empty_caches(b.num_layers, batch, b.num_heads, max_length,
                             b.hidden_size // b.num_heads, x.dtype)
        x, cache = self._run_blocks(x, slots, cache, 0)
        state = {"cache": cache, "padding_mask": slots, "positions": ops.sum(mask, axis=1)}
        return self.next_token_logits(x[:, -1]), state

    def decode_step(self, token_ids, index, state):
        x = self.backbone.embed(ops.cast(token_ids, "int32")[:, None],
                                state["positions"][:, None])
        x, cache = self._run_blocks(x, state["padding_mask"], state["cache"], index)
        state = {"cache": cache, "padding_mask": state["padding_mask"],
                 "positions": state["positions"] + 1}
        return self.next_token_logits(x[:, 0]), state
