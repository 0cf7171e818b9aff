"""A GPT-3-style decoder (Brown et al., 2020, "Language Models are Few-Shot Learners",
section 2.1): GPT-2's architecture (pre-LN blocks, final LayerNorm, tanh GELU, learned
positions, logits tied to the token table) whose layers alternate dense causal attention and
locally banded causal attention, as in the Sparse Transformer.

Layer i is dense when i is even and banded when i is odd (GPT-Neo's "global, local" pattern);
a banded layer's query attends to its own position and the band_width - 1 before it, computed
in blocks by garden.layers.local_attention (O(T * w) scores, not a masked O(T^2)). The paper
does not publish the band width; the default 256 is GPT-Neo's window. band_width=None makes
every layer dense (GPT-2 with a 2048-row position table).

Initialisation (GPT-2's, which GPT-3 states it reuses): token table N(0, 0.02), position table
N(0, 0.01), kernels truncated N(0, 0.02), the attention and feed-forward output projections
scaled by 1 / sqrt(2 * num_layers) as Hugging Face applies the paper's residual scaling.

gpt3_small: 50,257 tokens, 2048 positions, 12 x 768, 12 heads, 3072: 125,226,240 parameters
(the paper's "GPT-3 Small, 125M"; GPT-2 small's 124,439,808 plus 1024 more position rows).
"""

from __future__ import annotations

import math
from typing import Optional

import keras

from garden.layers.embeddings import PositionEmbedding
from garden.layers.local_attention import LocalMultiHeadAttention
from garden.layers.masks import padding_mask_to_attention
from garden.layers.transformer_decoder import TransformerDecoderBlock
from garden.models.backbone import (Backbone, backbone_inputs, ending_after_final_norm,
                                    optional_outputs, run_encoder)
from garden.models.gpt.causal_lm import CachedCausalLM, position_ids
from garden.models.instrument import CAUSAL


@keras.saving.register_keras_serializable(package="garden")
class GPT3Block(TransformerDecoderBlock):
    """garden.layers.TransformerDecoderBlock whose self-attention is banded when `band_width`
    is set (LocalMultiHeadAttention, same weight names); dense otherwise. Self-attention only
    (no encoder); the block's padding mask and KV cache arguments work unchanged.

    Args:
        band_width: int or None (dense).
        others: TransformerDecoderBlock's.
    """

    def __init__(self, num_heads: int, intermediate_size: int,
                 band_width: Optional[int] = None, **kwargs):
        super().__init__(num_heads, intermediate_size, **kwargs)
        self.band_width = None if band_width is None else int(band_width)

    def _attention_and_norm(self, name, query_shape, value_shape):
        attention, norm, dropout = super()._attention_and_norm(name, query_shape, value_shape)
        if self.band_width is None:
            return attention, norm, dropout
        local = LocalMultiHeadAttention(
            num_heads=self.num_heads, key_dim=attention.key_dim, band_width=self.band_width,
            dropout=self.attention_dropout, kernel_initializer=attention.kernel_initializer,
            dtype=self.dtype_policy, name=name)
        local.build(query_shape)
        return local, norm, dropout

    def _self_attention_mask(self, x, padding_mask, attention_mask, cache, index, use_causal):
        if self.band_width is None:
            return super()._self_attention_mask(x, padding_mask, attention_mask, cache, index,
                                                use_causal)
        if attention_mask is not None or not use_causal:
            raise ValueError(f"{self.name}: a banded layer is causal by construction and takes "
                             "only the padding mask")
        return padding_mask_to_attention(padding_mask)  # [B, 1, Tk]: the band is built in

    def get_config(self):
        return {**super().get_config(), "band_width": self.band_width}


@keras.saving.register_keras_serializable(package="garden")
class GPT3Backbone(Backbone):
    """GPT-3-style decoder as a Keras functional model (see the module docstring).

    Inputs (dict, int32 [B, T]): token_ids, padding_mask (1 = real; left or right padding).
    Outputs (dict): sequence_output [B, T, H], after the final LayerNorm; with
    output_hidden_states=True also hidden_states [L+1, B, T, H] (the embeddings, the outputs of
    blocks 0..L-2, then sequence_output, as GPT-2's); with output_attentions=True also
    attention_probs [L, B, A, T, T] (zero on the keys a query cannot see: later positions,
    padding, and in a banded layer the keys before its band); use_head_mask=True adds the
    input head_mask [L, A] (garden.models.backbone.Backbone's switches, for garden.bertology;
    a banded layer applies it as the dense layers do).

    Args:
        vocab_size, num_layers, hidden_size, num_heads, intermediate_size: ints.
        max_sequence_length: int, position rows (2048).
        band_width: int or None, the banded layers' width w (odd layers); None = all dense.
        dropout: float (0.1 on embeddings, attention probabilities and residuals).
        initializer_range: float (0.02).
        layer_norm_epsilon: float (1e-5).
        dtype: None, str or keras.DTypePolicy.
        output_hidden_states, output_attentions, use_head_mask: bool (see Outputs).

    Example:
        backbone = GPT3Backbone.untrained("gpt3_tiny", vocab_size=1000)
    """

    presets_module = "garden.models.gpt3.presets"
    readout = CAUSAL

    def __init__(self, vocab_size: int, num_layers: int, hidden_size: int, num_heads: int,
                 intermediate_size: int, max_sequence_length: int = 2048,
                 band_width: Optional[int] = 256, dropout: float = 0.1,
                 initializer_range: float = 0.02, layer_norm_epsilon: float = 1e-5,
                 dtype=None, output_hidden_states: bool = False,
                 output_attentions: bool = False, use_head_mask: bool = False, **kwargs):
        # === Layers ===
        token_embedding = keras.layers.Embedding(
            vocab_size, hidden_size, dtype=dtype, name="token_embedding",
            embeddings_initializer=keras.initializers.RandomNormal(stddev=initializer_range))
        position_embedding = PositionEmbedding(max_sequence_length, initializer_range / 2,
                                               dtype=dtype, name="position_embedding")
        embedding_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="embedding_dropout")
        decoder_blocks = [GPT3Block(
            num_heads, intermediate_size, band_width=band_width if i % 2 else None,
            dropout=dropout, activation="gelu_tanh", layer_norm_epsilon=layer_norm_epsilon,
            initializer_range=initializer_range, normalize_first=True, dtype=dtype,
            name=f"transformer_layer_{i}") for i in range(num_layers)]
        final_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=dtype,
                                                     name="final_layer_norm")

        # === Functional graph ===
        inputs = backbone_inputs(("token_ids", "padding_mask"), use_head_mask, num_layers,
                                 num_heads)
        positions = position_ids(inputs["padding_mask"])
        x = token_embedding(inputs["token_ids"])
        x = embedding_dropout(x + position_embedding(x, position_ids=positions))
        x, extras = run_encoder(x, decoder_blocks, inputs["padding_mask"],
                                inputs.get("head_mask"),
                                **optional_outputs(output_hidden_states, output_attentions,
                                                   use_head_mask),
                                mask_argument="decoder_padding_mask")
        x = final_norm(x)
        outputs = {"sequence_output": x, **extras}
        if output_hidden_states:
            outputs["hidden_states"] = ending_after_final_norm(extras["hidden_states"], x)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config === (recorded by Backbone from the arguments above)
        self.token_embedding_layer = token_embedding
        self.position_embedding = position_embedding
        self.embedding_dropout = embedding_dropout
        self.decoder_blocks = decoder_blocks
        self.final_norm = final_norm
        scale = 1.0 / math.sqrt(2 * num_layers)
        for block in decoder_blocks:  # GPT-2's residual scaling of the output projections
            for kernel in (block.self_attention.output_dense.kernel, block.output_dense.kernel):
                kernel.assign(kernel * scale)

    @property
    def token_embedding(self):
        return self.token_embedding_layer

    def layer_groups(self):
        """Backbone.layer_groups: the two tables, each block, the final LayerNorm on top."""
        return [[self.token_embedding_layer, self.position_embedding],
                *[[block] for block in self.decoder_blocks], [self.final_norm]]

    def embed(self, token_ids, position_ids, training=None):
        x = self.token_embedding_layer(token_ids)
        x = x + self.position_embedding(x, position_ids=position_ids)
        return self.embedding_dropout(x, training=training)

    def finish(self, x):
        return self.final_norm(x)

    def output_table(self):
        return self.token_embedding_layer.embeddings


@keras.saving.register_keras_serializable(package="garden")
class GPT3CausalLM(CachedCausalLM):
    """The GPT-3-style LM: final states times the token table (tied), with the KV-cached
    decoding of garden/models/generative.py; banded layers attend to their last band_width
    cache slots only (max_decoder_length = max_sequence_length, 2048).

    Example:
        lm = GPT3CausalLM(GPT3Backbone.untrained("gpt3_tiny", vocab_size=1000))
    """
