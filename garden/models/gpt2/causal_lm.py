"""GPT2CausalLM: the GPT-2 backbone with tied float32 logits and a static KV cache, the
GenerativeLM (garden/models/generative.py) that pretraining, LM fine-tuning, generation and
serving drive. The decode loop is garden.models.gpt.causal_lm.CachedCausalLM's (shared with
GPT and the GPT-3-style model); GPT2Backbone supplies embed / decoder_blocks / finish (the
final LayerNorm) / output_table (the token table).

    lm = GPT2CausalLM(GPT2Backbone.untrained("gpt2_tiny", vocab_size=1000))
    logits = lm({"token_ids": ids, "padding_mask": mask})["logits"]      # float32 [B, T, V]
    next_logits, state = lm.start_decoding({"token_ids": ids, "padding_mask": mask}, 64)
    next_logits, state = lm.decode_step(next_ids, index, state)          # index = T, T+1, ...

The decoding state is {"cache": one (keys, values) pair of [B, A, max_length, d] per block,
"padding_mask": int32 [B, max_length] (the prompt's mask, then ones: the causal mask hides
slots not yet written), "positions": int32 [B] (the next token's position, = the row's real
prompt tokens + steps taken, so left-padded rows count from their first real token)}: shapes
fixed, batch on axis 0 everywhere.

A subclassed model over the (functional) backbone, not a functional model itself: Keras'
functional construction of a subclass rewrites the bases of every class above it (GenerativeLM
among them), which broke every other family's LM in the same process (GenerativeLM now refuses
it).
"""

from __future__ import annotations

import keras

from garden.models.gpt.causal_lm import CachedCausalLM


@keras.saving.register_keras_serializable(package="garden")
class GPT2CausalLM(CachedCausalLM):
    """GPT-2 language model: logits = sequence_output @ token_table^T (tied, no bias), float32;
    `save("x.keras")` / keras.saving.load_model round-trip it.

    Args:
        backbone: a GPT2Backbone.
        **kwargs: name, dtype, trainable.
    """

    def start_decoding(self, prompt, max_length):
        if isinstance(max_length, int) and max_length > self.max_decoder_length:
            raise ValueError(f"max_length {max_length} exceeds GPT-2's {self.max_decoder_length} "
                             "positions (the position table's rows)")
        return super().start_decoding(prompt, max_length)
