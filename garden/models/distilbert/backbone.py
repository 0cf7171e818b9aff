"""DistilBERT encoder: word + position embeddings (no token types) -> post-LN Transformer blocks.
No pooler."""

from __future__ import annotations

import keras

from garden.models.backbone import (Backbone, backbone_inputs, encoder_outputs,
                                     shared_encoder_layers)


@keras.saving.register_keras_serializable(package="garden")
class DistilBertBackbone(Backbone):
    """DistilBERT (Sanh et al., 2019, "DistilBERT, a distilled version of BERT: smaller, faster,
    cheaper and lighter", arXiv:1910.01108) as a Keras functional model.

    BERT's encoder with half the layers, no token-type embeddings and no pooler (section 3 of
    the paper). The layer names and shapes are BERT's, so `init_student_from_teacher` copies a
    teacher's layers one to one.

    Inputs (dict, int32 [B, T]): token_ids, padding_mask (1 = real token).
    Outputs (dict): sequence_output [B, T, H].

    Args:
        vocab_size: int, word-piece vocabulary size (BERT uncased: 30522).
        num_layers: int, Transformer blocks (6).
        hidden_size: int, hidden width H (768).
        num_heads: int, attention heads (12).
        intermediate_size: int, feed-forward width (3072).
        max_sequence_length: int, rows of the learned position table (512).
        dropout: float, dropout on embeddings and block outputs (0.1).
        attention_dropout: float, dropout on attention probabilities (0.1).
        initializer_range: float, stddev of every truncated normal initializer (0.02).
        layer_norm_epsilon: float, LayerNorm epsilon (1e-12).
        dtype: None, str or keras.DTypePolicy for every layer (e.g. "mixed_bfloat16").
        output_hidden_states, output_attentions, use_head_mask: bool, the optional outputs
            and head mask input of garden.models.backbone.Backbone (off: the plain graph).
        num_heads_per_layer: None or L ints, the heads each layer keeps after pruning
            (garden.bertology.prune: each of width H / num_heads); None = num_heads everywhere.

    Example:
        backbone = DistilBertBackbone(vocab_size=1000, num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512)
        ids = np.ones((2, 16), "int32")
        out = backbone({"token_ids": ids, "padding_mask": ids})  # sequence_output [2, 16, 128]
    """

    presets_module = "garden.models.distilbert.presets"

    def __init__(
        self,
        vocab_size: int = 30522,
        num_layers: int = 6,
        hidden_size: int = 768,
        num_heads: int = 12,
        intermediate_size: int = 3072,
        max_sequence_length: int = 512,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        initializer_range: float = 0.02,
        layer_norm_epsilon: float = 1e-12,
        dtype=None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        use_head_mask: bool = False,
        num_heads_per_layer=None,
        **kwargs,
    ):
        # === Layers ===
        # BERT's layers without the token-type table and the pooler.
        embeddings, encoder_blocks, _ = shared_encoder_layers(
            vocab_size, num_layers, hidden_size, num_heads, intermediate_size,
            max_sequence_length=max_sequence_length, type_vocab_size=0, pooled=False,
            dropout=dropout, attention_dropout=attention_dropout,
            initializer_range=initializer_range, layer_norm_epsilon=layer_norm_epsilon,
            dtype=dtype, num_heads_per_layer=num_heads_per_layer)

        # === Functional graph ===
        inputs = backbone_inputs(("token_ids", "padding_mask"), use_head_mask,
                                 num_layers, num_heads)
        x = embeddings(inputs["token_ids"])
        outputs = encoder_outputs(
            x, encoder_blocks, inputs, pooled=False, output_hidden_states=output_hidden_states,
            output_attentions=output_attentions, use_head_mask=use_head_mask)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config === (recorded by Backbone from the arguments above)
        self.embeddings = embeddings
        self.encoder_blocks = encoder_blocks
