"""GPT (Radford et al., 2018, "Improving Language Understanding by Generative Pre-Training"):
one embedding table for tokens, special tokens and positions -> post-LN decoder blocks, no
final LayerNorm.

Embedding table. openai/finetune-transformer-lm keeps a single matrix `we` of
[n_vocab + n_special + n_ctx, H]: rows 0..n_vocab-1 are the BPE tokens, the next n_special
rows the tokens added for fine-tuning (_start_, _delimiter_, _classify_), the last n_ctx rows
the learned positions; an input position holds (token id, n_vocab + n_special + position) and
the two rows are summed. GPTEmbedding keeps exactly that table. Hugging Face splits it:
`tokens_embed` = rows [0, n_vocab + n_special) and `positions_embed` = the last n_ctx rows
(garden.models.gpt.conversion concatenates them). The tied softmax uses the token rows only
(as Hugging Face's lm_head does: a position is never a next token); the original code
multiplied by the whole `we`, position rows included.

Blocks (garden.layers.TransformerDecoderBlock, normalize_first=False):
    a = LN(x + Dropout(CausalSelfAttention(x)));  y = LN(a + Dropout(W2 gelu_tanh(W1 a)))
LayerNorm epsilon 1e-5, tanh GELU, dropout 0.1 on embeddings, attention and residuals.

Position ids are max(cumsum(padding_mask) - 1, 0), so left-padded rows (batched prompts) get
the positions of the unpadded row, and right-padded rows 0, 1, 2, ... as the original.

Parameter count: the preset `gpt` (40,478 BPE tokens, 512 positions, 12 x 768, 3072 feed-
forward, no special tokens) has 116,534,784 parameters, exactly Hugging Face's OpenAIGPTModel
(tokens_embed 31,087,104 + positions_embed 393,216 + 12 blocks x 7,087,872). Fine-tuning as the
paper adds n_special = 3 rows: 116,537,088 (+3 x 768) and a classifier head (768 x classes).
"""

from __future__ import annotations

import keras
from keras import ops

from garden.layers.embeddings import truncated_normal
from garden.layers.transformer_decoder import TransformerDecoderBlock
from garden.models.backbone import Backbone, backbone_inputs, optional_outputs, run_encoder
from garden.models.gpt.causal_lm import CachedCausalLM, position_ids
from garden.models.instrument import CAUSAL


@keras.saving.register_keras_serializable(package="garden")
class GPTEmbedding(keras.layers.Layer):
    """The table of openai/finetune-transformer-lm: [vocab_size + num_special_tokens +
    max_sequence_length, H], tokens then special tokens then positions; output = table[token]
    + table[vocab_size + num_special_tokens + position], then dropout.

    Args:
        vocab_size, num_special_tokens, max_sequence_length, hidden_size: ints (see above).
        dropout: float, dropout on the sum (embd_pdrop).
        initializer_range: float, stddev of the truncated normal initializer.
        **kwargs: name, dtype, trainable.
    """

    def __init__(self, vocab_size: int, num_special_tokens: int, max_sequence_length: int,
                 hidden_size: int, dropout: float = 0.1, initializer_range: float = 0.02,
                 **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = int(vocab_size)
        self.num_special_tokens = int(num_special_tokens)
        self.max_sequence_length = int(max_sequence_length)
        self.hidden_size = int(hidden_size)
        self.dropout = float(dropout)
        self.initializer_range = float(initializer_range)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    @property
    def num_tokens(self) -> int:
        """Rows that are tokens (BPE + special): the softmax's classes."""
        return self.vocab_size + self.num_special_tokens

    def build(self, *args):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.num_tokens + self.max_sequence_length,
                                      self.hidden_size),
            initializer=truncated_normal(self.initializer_range))
        self.built = True

    def token_rows(self):
        return self.embeddings[:self.num_tokens]

    def call(self, token_ids, position_ids, training=None, token_vectors=None):
        # token_vectors [B, T, H]: the token rows to use instead of table[token_ids]
        # (garden.bertology.attributions interpolates them); None in every model.
        table = self.embeddings
        tokens = (ops.take(table, ops.cast(token_ids, "int32"), axis=0)
                  if token_vectors is None else token_vectors)
        x = tokens + ops.take(table, ops.cast(position_ids, "int32") + self.num_tokens, axis=0)
        return self.dropout_layer(ops.cast(x, self.compute_dtype), training=training)

    def compute_output_shape(self, token_ids_shape, position_ids_shape=None):
        return tuple(token_ids_shape) + (self.hidden_size,)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size,
                "num_special_tokens": self.num_special_tokens,
                "max_sequence_length": self.max_sequence_length,
                "hidden_size": self.hidden_size, "dropout": self.dropout,
                "initializer_range": self.initializer_range}


@keras.saving.register_keras_serializable(package="garden")
class GPTBackbone(Backbone):
    """GPT (2018) as a Keras functional model (see the module docstring).

    Inputs (dict, int32 [B, T]): token_ids, padding_mask (1 = real token; left or right
    padding). Outputs (dict): sequence_output [B, T, H], the last block's output; with
    output_hidden_states=True also hidden_states [L+1, B, T, H] (the embeddings, then each
    block's output), with output_attentions=True attention_probs [L, B, A, T, T] (zero on
    later positions and padding); use_head_mask=True adds the input head_mask [L, A]
    (garden.models.backbone.Backbone's switches, for garden.bertology).

    Args:
        vocab_size: int, BPE tokens (40,478 for the released model).
        num_layers, hidden_size, num_heads, intermediate_size: ints (12, 768, 12, 3072).
        max_sequence_length: int, position rows (512).
        num_special_tokens: int, extra token rows after the BPE vocabulary (0 in pretraining,
            3 in the paper's fine-tuning: start, delimiter, classify).
        dropout: float, embedding, attention and residual dropout (0.1).
        initializer_range: float, stddev of the initializers (0.02).
        layer_norm_epsilon: float (1e-5).
        activation: str, feed-forward activation ("gelu_tanh": OpenAI's and Hugging Face's
            "gelu" for this model).
        dtype: None, str or keras.DTypePolicy.
        output_hidden_states, output_attentions, use_head_mask: bool (see Outputs).

    Example:
        backbone = GPTBackbone.untrained("gpt_tiny", vocab_size=1000)
        out = backbone({"token_ids": ids, "padding_mask": ones})["sequence_output"]
    """

    presets_module = "garden.models.gpt.presets"
    readout = CAUSAL

    def __init__(self, vocab_size: int, num_layers: int, hidden_size: int, num_heads: int,
                 intermediate_size: int, max_sequence_length: int = 512,
                 num_special_tokens: int = 0, dropout: float = 0.1,
                 initializer_range: float = 0.02, layer_norm_epsilon: float = 1e-5,
                 activation: str = "gelu_tanh", dtype=None,
                 output_hidden_states: bool = False, output_attentions: bool = False,
                 use_head_mask: bool = False, **kwargs):
        # === Layers ===
        embeddings = GPTEmbedding(vocab_size, num_special_tokens, max_sequence_length,
                                  hidden_size, dropout=dropout,
                                  initializer_range=initializer_range, dtype=dtype,
                                  name="embeddings")
        decoder_blocks = [TransformerDecoderBlock(
            num_heads, intermediate_size, dropout=dropout, activation=activation,
            layer_norm_epsilon=layer_norm_epsilon, initializer_range=initializer_range,
            normalize_first=False, dtype=dtype, name=f"transformer_layer_{i}")
            for i in range(num_layers)]

        # === Functional graph ===
        inputs = backbone_inputs(("token_ids", "padding_mask"), use_head_mask, num_layers,
                                 num_heads)
        x = embeddings(inputs["token_ids"], position_ids(inputs["padding_mask"]))
        x, extras = run_encoder(x, decoder_blocks, inputs["padding_mask"],
                                inputs.get("head_mask"),
                                **optional_outputs(output_hidden_states, output_attentions,
                                                   use_head_mask),
                                mask_argument="decoder_padding_mask")
        super().__init__(inputs=inputs, outputs={"sequence_output": x, **extras}, dtype=dtype,
                         **kwargs)

        # === Config === (recorded by Backbone from the arguments above)
        self.embeddings = embeddings
        self.decoder_blocks = decoder_blocks

    def layer_groups(self):
        """Backbone.layer_groups: the token and position table, each block (GPT has no
        final norm)."""
        return [[self.embeddings], *[[block] for block in self.decoder_blocks]]

    @property
    def token_embedding(self):
        return self.embeddings

    def embed(self, token_ids, position_ids, training=None):
        return self.embeddings(token_ids, position_ids, training=training)

    def finish(self, x):
        return x  # GPT has no final LayerNorm

    def output_table(self):
        return self.embeddings.token_rows()


@keras.saving.register_keras_serializable(package="garden")
class GPTCausalLM(CachedCausalLM):
    """GPT's language model: the backbone's states times the token rows of its table (tied
    softmax over vocab_size + num_special_tokens classes), with the KV-cached decoding of
    garden/models/generative.py (max_decoder_length = max_sequence_length, 512).

    Example:
        lm = GPTCausalLM(GPTBackbone.untrained("gpt_tiny", vocab_size=1000))
        logits = lm({"token_ids": ids, "padding_mask": mask})["logits"]  # [B, T, 1000]
    """
