"""GPT-2 decoder: token + learned positions -> pre-LN causal Transformer blocks -> final LayerNorm.

Radford et al., 2019, "Language Models are Unsupervised Multitask Learners" (section 2.3: GPT's
decoder with LayerNorm moved to each sub-block's input, a final LayerNorm, residual weights
scaled at initialisation by 1/sqrt(N) with N the number of residual layers).
"""

from __future__ import annotations

import math
from typing import Optional

import keras
from keras import ops

from garden.layers.transformer_decoder import TransformerDecoderBlock
from garden.models.backbone import (Backbone, backbone_inputs, ending_after_final_norm,
                                    optional_outputs, run_encoder)
# Left-padding-aware positions, max(cumsum(mask) - 1, 0) (Hugging Face's GPT-2 generate): a
# row's first real token is position 0 however many pads precede it.
from garden.models.gpt.causal_lm import position_ids
from garden.models.instrument import CAUSAL


@keras.saving.register_keras_serializable(package="garden")
class GPT2Backbone(Backbone):
    """GPT-2 as a Keras functional model.

    Inputs (dict, int32 [B, T]): token_ids, padding_mask (1 = real token). Rows may be
        LEFT-padded (batched prompts): positions are max(cumsum(padding_mask) - 1, 0), so a
        left-padded row's real positions get the outputs of the same row unpadded.
    Outputs (dict): sequence_output float [B, T, H], after the final LayerNorm (ln_f);
        with output_hidden_states=True also hidden_states [L+1, B, T, H] as Hugging Face's
        GPT2Model returns them: the embeddings, the outputs of blocks 0..L-2, then
        sequence_output (the last block's raw output is not exposed, ln_f follows it);
        with output_attentions=True also attention_probs [L, B, A, T, T] (zero on the keys a
        query cannot see: later positions, padding); use_head_mask=True adds the input
        head_mask [L, A] (garden.models.backbone.Backbone's switches, for garden.bertology).

    Numerics (checked against Hugging Face's GPT2LMHeadModel in tests/models/test_gpt2.py):
    pre-LN blocks (garden.layers.TransformerDecoderBlock, normalize_first=True), LayerNorm
    epsilon 1e-5, tanh GELU ("gelu_new"), attention scaled by 1/sqrt(head width). Masked keys
    (later positions, padding) are REPLACED by a large negative score before the softmax
    (garden's MultiHeadAttention uses -1e9; OpenAI's code and Hugging Face -1e10 / the dtype's
    minimum): each gives exactly zero probability in float32, so the outputs are the same.

    Initialisation: token table N(0, 0.02), position table N(0, 0.01) (OpenAI's model.py;
    keras-hub swaps the two); projection kernels truncated normal with stddev
    initializer_range (0.02), biases 0, LayerNorms 1 / 0; and, as Hugging Face does (the
    paper's "1/sqrt(N)", N = 2 residual layers per block), the two projections that write into
    the residual stream (attention output, feed-forward output) re-drawn from
    N(0, initializer_range / sqrt(2 * num_layers)). OpenAI's released code does not scale.

    Args:
        vocab_size: int (byte-level BPE: 50257).
        num_layers: int, blocks L.
        hidden_size: int, width H.
        num_heads: int, heads A (H divisible by A).
        intermediate_size: int or None, feed-forward width (None: 4H).
        max_sequence_length: int, rows of the position table (1024, n_ctx).
        dropout: float, dropout on the embeddings, attention probabilities and block outputs
            (resid_pdrop = embd_pdrop = attn_pdrop = 0.1).
        layer_norm_epsilon: float (1e-5).
        initializer_range: float (0.02).
        dtype: None, str or keras.DTypePolicy.
        output_hidden_states: bool, add hidden_states (see Outputs).
        output_attentions: bool, add attention_probs (see Outputs).
        use_head_mask: bool, take a head_mask input (see Outputs).

    Example:
        backbone = GPT2Backbone(vocab_size=1000, num_layers=2, hidden_size=64, num_heads=2)
        ids = np.ones((2, 16), "int32")
        out = backbone({"token_ids": ids, "padding_mask": ids})["sequence_output"]  # [2, 16, 64]
    """

    presets_module = "garden.models.gpt2.presets"
    readout = CAUSAL

    def __init__(
        self,
        vocab_size: int,
        num_layers: int,
        hidden_size: int,
        num_heads: int,
        intermediate_size: Optional[int] = None,
        max_sequence_length: int = 1024,
        dropout: float = 0.1,
        layer_norm_epsilon: float = 1e-5,
        initializer_range: float = 0.02,
        dtype=None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        use_head_mask: bool = False,
        **kwargs,
    ):
        # === Layers ===
        token_embedding = keras.layers.ReversibleEmbedding(
            vocab_size, hidden_size, tie_weights=True,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=0.02),
            dtype=dtype, name="token_embedding")
        position_embedding = keras.layers.Embedding(
            max_sequence_length, hidden_size,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=0.01),
            dtype=dtype, name="position_embedding")
        embeddings_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="embeddings_dropout")
        blocks = [TransformerDecoderBlock(
            num_heads, intermediate_size or 4 * hidden_size, dropout=dropout,
            activation="gelu_new", layer_norm_epsilon=layer_norm_epsilon,
            initializer_range=initializer_range, normalize_first=True, dtype=dtype,
            name=f"transformer_layer_{i}") for i in range(num_layers)]
        final_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=dtype,
                                                     name="layer_norm")

        # === Functional graph ===
        inputs = backbone_inputs(("token_ids", "padding_mask"), use_head_mask, num_layers,
                                 num_heads)
        mask = inputs["padding_mask"]
        x = token_embedding(inputs["token_ids"]) + position_embedding(position_ids(mask))
        x = embeddings_dropout(x)
        x, extras = run_encoder(x, blocks, mask, inputs.get("head_mask"),
                                **optional_outputs(output_hidden_states, output_attentions,
                                                   use_head_mask),
                                mask_argument="decoder_padding_mask")
        x = final_norm(x)
        outputs = {"sequence_output": x, **extras}
        if output_hidden_states:
            outputs["hidden_states"] = ending_after_final_norm(extras["hidden_states"], x)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config === (recorded by Backbone from the arguments above)
        self._token_embedding = token_embedding
        self.position_embedding = position_embedding
        self.embeddings_dropout = embeddings_dropout
        self.transformer_blocks = blocks
        self.final_norm = final_norm
        self._scale_residual_projections(num_layers, initializer_range)

    def _scale_residual_projections(self, num_layers: int, initializer_range: float):
        """Hugging Face's GPT-2 init of c_proj (attention and MLP): N(0, r / sqrt(2 L))."""
        std = initializer_range / math.sqrt(2 * num_layers)
        for block in self.transformer_blocks:
            for kernel in (block.self_attention.output_dense.kernel, block.output_dense.kernel):
                kernel.assign(keras.initializers.RandomNormal(stddev=std)(kernel.shape,
                                                                          dtype=kernel.dtype))

    @property
    def token_embedding(self) -> keras.layers.ReversibleEmbedding:
        """The token table; GPT2CausalLM's logits project onto it (tied)."""
        return self._token_embedding

    def layer_groups(self):
        """Backbone.layer_groups: the two tables, each block, the final LayerNorm on top."""
        return [[self._token_embedding, self.position_embedding],
                *[[block] for block in self.transformer_blocks], [self.final_norm]]

    # -- what garden.models.gpt.causal_lm.CachedCausalLM (GPT2CausalLM) drives --------------
    def embed(self, token_ids, positions, training=None):
        """Token + position embeddings of explicit positions, then the embedding dropout
        (incremental decoding: the functional graph's first step)."""
        x = (self._token_embedding(token_ids) +
             self.position_embedding(ops.cast(positions, "int32")))
        return self.embeddings_dropout(x, training=training)

    @property
    def decoder_blocks(self):
        """The Transformer blocks, in order (a view: tracked as transformer_blocks)."""
        return self.transformer_blocks

    def finish(self, x):
        """The final LayerNorm (ln_f), after the last block."""
        return self.final_norm(x)

    def output_table(self):
        """[V, H], the tied softmax's rows: the token table."""
        return self._token_embedding.embeddings
