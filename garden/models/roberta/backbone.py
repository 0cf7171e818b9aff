"""RoBERTa encoder: BERT's encoder blocks under RoBERTa's embeddings (padding-offset positions,
one token type, no segment input) -> tanh pooler on <s>."""

from __future__ import annotations

import keras
from keras import ops

from garden.models.backbone import (Backbone, backbone_inputs, encoder_outputs,
                                     shared_encoder_layers)


def padding_offset_positions(token_ids, padding_idx: int):
    """RoBERTa's position ids (fairseq `make_positions`, HF `create_position_ids_from_input_ids`).

    Real tokens count from padding_idx + 1; padding tokens get padding_idx itself:
        position = cumsum(token != padding_idx) * (token != padding_idx) + padding_idx
    e.g. padding_idx 1, tokens [0, 31, 2, 1, 1] -> positions [2, 3, 4, 1, 1]. Hence a table of
    max_sequence_length + padding_idx + 1 rows (512 + 1 + 1 = 514 for the released models).
    """
    real = ops.cast(ops.not_equal(token_ids, padding_idx), "int32")
    return ops.cumsum(real, axis=1) * real + padding_idx


@keras.saving.register_keras_serializable(package="garden")
class RobertaBackbone(Backbone):
    """RoBERTa (Liu et al., 2019, "RoBERTa: A Robustly Optimized BERT Pretraining Approach",
    arXiv:1907.11692) as a Keras functional model.

    The encoder is BERT's (post-LN blocks, exact GELU); what differs is the input: no segment
    input, and learned positions offset by the padding id (see `padding_offset_positions`). The
    released checkpoints keep a one-row token-type table, added at every position; it is kept
    here so that weights import one to one and parameter counts equal the reference (124.6M
    for roberta_base). The pooler (tanh dense on <s>) is that of Hugging Face's RobertaModel.

    Inputs (dict, int32 [B, T]): token_ids, padding_mask (1 = real token). Padding must use
    token id `padding_idx` (positions are computed from the ids, as in fairseq).
    Outputs (dict): sequence_output [B, T, H]; pooled_output [B, H] = tanh(dense(h[:, 0])).

    Args:
        vocab_size: int, byte-level BPE vocabulary size (50265).
        num_layers: int, Transformer blocks L.
        hidden_size: int, hidden width H.
        num_heads: int, attention heads A (H must be divisible by A).
        intermediate_size: int, feed-forward width (4H).
        max_sequence_length: int, longest input (512); the position table has
            max_sequence_length + padding_idx + 1 rows.
        padding_idx: int, id of <pad> (1); positions start at padding_idx + 1.
        dropout: float, dropout on embeddings, attention probabilities and block outputs (0.1).
        initializer_range: float, stddev of every truncated normal initializer (0.02).
        layer_norm_epsilon: float, LayerNorm epsilon (1e-5, fairseq's default).
        dtype: None, str or keras.DTypePolicy for every layer (e.g. "mixed_bfloat16").
        output_hidden_states, output_attentions, use_head_mask: bool, the optional outputs
            and head mask input of garden.models.backbone.Backbone (off: the plain graph).
        num_heads_per_layer: None or L ints, the heads each layer keeps after pruning
            (garden.bertology.prune: each of width H / num_heads); None = num_heads everywhere.

    Example:
        backbone = RobertaBackbone(vocab_size=1000, num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512)
        ids = np.array([[0, 42, 43, 2, 1, 1]], "int32")
        out = backbone({"token_ids": ids, "padding_mask": (ids != 1).astype("int32")})
    """

    presets_module = "garden.models.roberta.presets"

    def __init__(
        self,
        vocab_size: int = 50265,
        num_layers: int = 12,
        hidden_size: int = 768,
        num_heads: int = 12,
        intermediate_size: int = 3072,
        max_sequence_length: int = 512,
        padding_idx: int = 1,
        dropout: float = 0.1,
        initializer_range: float = 0.02,
        layer_norm_epsilon: float = 1e-5,
        dtype=None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        use_head_mask: bool = False,
        num_heads_per_layer=None,
        **kwargs,
    ):
        # === Layers ===
        # BERT's layers; positions start after the padding id, hence padding_idx + 1 more
        # rows (514 for the released models), and the token-type table has one row.
        embeddings, encoder_blocks, pooler = shared_encoder_layers(
            vocab_size, num_layers, hidden_size, num_heads, intermediate_size,
            max_sequence_length=max_sequence_length + padding_idx + 1, type_vocab_size=1,
            dropout=dropout, initializer_range=initializer_range,
            layer_norm_epsilon=layer_norm_epsilon, dtype=dtype,
            num_heads_per_layer=num_heads_per_layer)

        # === Functional graph ===
        inputs = backbone_inputs(("token_ids", "padding_mask"), use_head_mask,
                                 num_layers, num_heads)
        position_ids = padding_offset_positions(inputs["token_ids"], padding_idx)
        # No segment ids: the one-row token-type table adds row 0 everywhere.
        x = embeddings(inputs["token_ids"], position_ids=position_ids)
        outputs = encoder_outputs(
            x, encoder_blocks, inputs, pooler, output_hidden_states=output_hidden_states,
            output_attentions=output_attentions, use_head_mask=use_head_mask)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config === (recorded by Backbone from the arguments above)
        self.embeddings = embeddings
        self.encoder_blocks = encoder_blocks
        self.pooler = pooler
