"""GPT2CausalLM: the GPT-2 backbone with tied float32 logits and a static KV cache, the
GenerativeLM (garden/models/generative.py) that pretraining, LM fine-tuning, generation and
serving drive.

    lm = GPT2CausalLM(GPT2Backbone.from_preset("gpt2_tiny", vocab_size=1000))
    logits = lm({"token_ids": ids, "padding_mask": mask})["logits"]      # float32 [B, T, V]
    next_logits, state = lm.start_decoding({"token_ids": ids, "padding_mask": mask}, 64)
    next_logits, state = lm.decode_step(next_ids, index, state)          # index = T, T+1, ...

The decoding state is {"cache": [B, L, 2, max_length, A, d] keys and values of every block
(compute dtype), "padding_mask": int32 [B, max_length] (the prompt's mask, then ones: the
causal mask hides slots not yet written), "positions": int32 [B] (the next token's position,
= the row's real prompt tokens + steps taken, so left-padded rows count from their first real
token)}: shapes fixed, batch on axis 0 everywhere.
"""

from __future__ import annotations

import keras
from keras import ops

from garden.models.generative import GenerativeLM
from garden.models.gpt2.backbone import GPT2Backbone, position_ids


@keras.saving.register_keras_serializable(package="garden")
class GPT2CausalLM(GenerativeLM):
    """GPT-2 language model: logits = sequence_output @ token_table^T (tied, no bias), float32.

    A functional model on the backbone's inputs (token_ids, padding_mask), so the backbone's
    weights are the model's and `save("x.keras")` / keras.saving.load_model round-trip it.

    Args:
        backbone: a GPT2Backbone.
        **kwargs: name, trainable.
    """

    is_encoder_decoder = False

    def __init__(self, backbone: GPT2Backbone, **kwargs):
        inputs = {name: backbone.input[name] for name in ("token_ids", "padding_mask")}
        x = backbone(inputs)["sequence_output"]
        logits = ops.cast(backbone.token_embedding(x, reverse=True), "float32")
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)
        self.backbone = backbone
        self.max_decoder_length = int(backbone.max_sequence_length)

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "backbone": keras.saving.serialize_keras_object(self.backbone)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        backbone = keras.saving.deserialize_keras_object(config.pop("backbone"))
        return cls(backbone, **config)

    # -- incremental decoding (the GenerativeLM contract) ------------------------------------
    def _logits(self, x):
        x = self.backbone.final_norm(x)
        return ops.cast(self.backbone.token_embedding(x, reverse=True), "float32")

    def _run_blocks(self, x, cache, padding_mask, index):
        layers = []
        for i, block in enumerate(self.backbone.transformer_blocks):
            x, layer_cache = block(x, decoder_padding_mask=padding_mask,
                                   self_attention_cache=cache[:, i],
                                   self_attention_cache_update_index=index, training=False)
            layers.append(layer_cache)
        return x, ops.stack(layers, axis=1)

    def start_decoding(self, prompt, max_length: int):
        """Runs the (left-padded) prompt into cache slots 0..P-1 -> (next-token logits, state)."""
        max_length = int(max_length)
        if max_length > self.max_decoder_length:
            raise ValueError(f"max_length {max_length} exceeds GPT-2's {self.max_decoder_length} "
                             "positions (the position table's rows)")
        mask = ops.cast(prompt["padding_mask"], "int32")
        batch, length = ops.shape(mask)[0], ops.shape(mask)[1]
        slots = ops.concatenate([mask, ops.ones((batch, max_length - length), "int32")], axis=1)
        b = self.backbone
        width = b.hidden_size // b.num_heads
        cache = ops.zeros((batch, b.num_layers, 2, max_length, b.num_heads, width),
                          dtype=b.token_embedding.compute_dtype)
        x = b.embed(prompt["token_ids"], position_ids(mask))
        x, cache = self._run_blocks(x, cache, slots, 0)
        state = {"cache": cache, "padding_mask": slots,
                 "positions": ops.sum(mask, axis=1)}
        return self._logits(x[:, -1]), state

    def decode_step(self, token_ids, index, state):
        """Writes token_ids [B] into cache slot `index` -> (logits of the next token, state)."""
        x = self.backbone.embed(ops.cast(token_ids, "int32")[:, None],
                                state["positions"][:, None])
        x, cache = self._run_blocks(x, state["cache"], state["padding_mask"], index)
        state = {"cache": cache, "padding_mask": state["padding_mask"],
                 "positions": state["positions"] + 1}
        return self._logits(x[:, 0]), state
