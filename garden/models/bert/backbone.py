"""BERT encoder: embeddings -> post-LN Transformer blocks -> tanh pooler on [CLS]."""

from __future__ import annotations

import keras
from keras import ops

from garden.models.backbone import (Backbone, backbone_inputs, encoder_outputs,
                                     shared_encoder_layers)


@keras.saving.register_keras_serializable(package="garden")
class BertBackbone(Backbone):
    """BERT (Devlin et al., 2019, "BERT: Pre-training of Deep Bidirectional Transformers for
    Language Understanding", arXiv:1810.04805) as a Keras functional model.

    Inputs (dict, int32 [B, T]): token_ids, segment_ids, padding_mask (1 = real token).
    Outputs (dict): sequence_output [B, T, H]; pooled_output [B, H] = tanh(dense(h[:, 0])).
    The constructor arguments are the config (garden.models.backbone.Backbone records them).

    Args:
        vocab_size: int, word-piece vocabulary size (BERT uncased: 30522).
        num_layers: int, Transformer blocks L.
        hidden_size: int, hidden width H.
        num_heads: int, attention heads A (H must be divisible by A).
        intermediate_size: int, feed-forward width (4H in the paper).
        max_sequence_length: int, rows of the learned position table (512).
        type_vocab_size: int, token types / segments (2).
        dropout: float, dropout on embeddings, attention probabilities and block outputs (0.1).
        initializer_range: float, stddev of every truncated normal initializer (0.02).
        layer_norm_epsilon: float, LayerNorm epsilon (1e-12).
        dtype: None, str or keras.DTypePolicy for every layer (e.g. "mixed_bfloat16").
        output_hidden_states, output_attentions, use_head_mask: bool, the optional outputs
            and head mask input of garden.models.backbone.Backbone (off: the plain graph).
        num_heads_per_layer: None or L ints, the heads each layer keeps after pruning
            (garden.bertology.prune: each of width H / num_heads); None = num_heads everywhere.

    Example:
        backbone = BertBackbone(vocab_size=1000, num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512)
        ids = np.ones((2, 16), "int32")
        out = backbone({"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids})
    """

    presets_module = "garden.models.bert.presets"

    def __init__(
        self,
        vocab_size: int,
        num_layers: int,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        max_sequence_length: int = 512,
        type_vocab_size: int = 2,
        dropout: float = 0.1,
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
        embeddings, encoder_blocks, pooler = shared_encoder_layers(
            vocab_size, num_layers, hidden_size, num_heads, intermediate_size,
            max_sequence_length=max_sequence_length, type_vocab_size=type_vocab_size,
            dropout=dropout, initializer_range=initializer_range,
            layer_norm_epsilon=layer_norm_epsilon, dtype=dtype,
            num_heads_per_layer=num_heads_per_layer)

        # === Functional graph ===
        inputs = backbone_inputs(("token_ids", "segment_ids", "padding_mask"), use_head_mask,
                                 num_layers, num_heads)
        x = embeddings(inputs["token_ids"], inputs["segment_ids"])
        outputs = encoder_outputs(
            x, encoder_blocks, inputs, pooler, output_hidden_states=output_hidden_states,
            output_attentions=output_attentions, use_head_mask=use_head_mask)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config === (recorded by Backbone from the arguments above)
        self.embeddings = embeddings
        self.encoder_blocks = encoder_blocks
        self.pooler = pooler

    def outputs_at(self, inputs, positions):
        """The sequence output at `positions` and the pooled output, computing less.

        Equal (up to float rounding, and dropout's random draws) to gathering `positions`
        from `self(inputs)["sequence_output"]`, but the last block computes only the rows the
        caller reads ([CLS] for the pooler and `positions`): a pretraining head that looks at
        20 of 128 positions skips about 85% of that block's attention and feed-forward work.

        Args:
            inputs: dict of token_ids, segment_ids, padding_mask [B, T] (symbolic or eager).
            positions: int [B, P].

        Returns:
            (sequence rows [B, P, H], pooled_output [B, H]).
        """
        positions = ops.cast(positions, "int32")
        x = self.embeddings(inputs["token_ids"], inputs["segment_ids"])
        for block in self.encoder_blocks[:-1]:
            x = block(x, padding_mask=inputs["padding_mask"])
        rows = ops.concatenate([ops.zeros_like(positions[:, :1]), positions], axis=1)
        y = self.encoder_blocks[-1](x, padding_mask=inputs["padding_mask"], output_positions=rows)
        return y[:, 1:, :], self.pooler(y[:, 0, :])
