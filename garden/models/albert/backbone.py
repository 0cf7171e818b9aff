"""ALBERT encoder: factorized embeddings (V x E, then E -> H) -> cross-layer shared post-LN
Transformer blocks -> tanh pooler on [CLS]."""

from __future__ import annotations

from typing import List

import keras

from garden.layers.embeddings import TransformerEmbeddings
from garden.layers.transformer_encoder import TransformerEncoderBlock
from garden.models.backbone import Backbone, backbone_inputs, encoder_outputs, pooler_dense

# What `share` may say, and which parts of a Transformer block every layer then has in common.
SHARING_MODES = ("all", "attention", "ffn", "none")


@keras.saving.register_keras_serializable(package="garden")
def gelu_approximate(x):
    """GELU with the tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

    The original ALBERT code's `gelu` and Hugging Face's "gelu_new": ALBERT v2 configs use it.
    Keras's "gelu" string is the exact erf form, which differs by up to ~1e-3.
    """
    return keras.activations.gelu(x, approximate=True)


def get_activation(name):
    """Maps a config activation name to a function: "gelu_new" is the tanh approximation
    (as in Hugging Face configs); every other name ("gelu" = exact erf, "relu", ...) is Keras's."""
    if name in ("gelu_new", "gelu_approximate", "gelu_pytorch_tanh"):
        return gelu_approximate
    return keras.activations.get(name)


@keras.saving.register_keras_serializable(package="garden")
class AlbertBackbone(Backbone):
    """ALBERT (Lan et al., 2020, "ALBERT: A Lite BERT for Self-supervised Learning of Language
    Representations", arXiv:1909.11942) as a Keras functional model.

    BERT's encoder with two parameter reductions (section 3.1): the word, position and token-type
    tables are E wide (E = 128 for every released size) and a dense layer maps E -> H after
    their LayerNorm; and the L Transformer layers share parameters across depth. With
    share="all" (the released models) layer i runs block i // (L / num_groups), so one group
    means one set of layer weights applied L times. share="attention" or "ffn" shares only that
    half of each block (the ablation of table 4), share="none" gives L independent blocks.
    The shared encoder block and embeddings are garden.layers' (the same as BERT's).

    Inputs (dict, int32 [B, T]): token_ids, segment_ids, padding_mask (1 = real token).
    Outputs (dict): sequence_output [B, T, H]; pooled_output [B, H] = tanh(dense(h[:, 0])).
    The constructor arguments are the config (garden.models.backbone.Backbone records them).

    Args:
        vocab_size: int, SentencePiece vocabulary size (released models: 30000).
        num_layers: int, Transformer layers L (applications of a block).
        hidden_size: int, hidden width H.
        num_heads: int, attention heads A (H must be divisible by A).
        intermediate_size: int, feed-forward width (4H).
        embedding_size: int, width E of the embedding tables (128).
        max_sequence_length: int, rows of the learned position table (512).
        type_vocab_size: int, token types / segments (2).
        num_groups: int, distinct blocks when share="all" (Hugging Face num_hidden_groups);
            must divide num_layers.
        share: str, cross-layer sharing: "all", "attention", "ffn" or "none".
        dropout: float, dropout on embeddings, attention probabilities and block outputs
            (ALBERT v2: 0.0; v1: 0.1).
        initializer_range: float, stddev of every truncated normal initializer (0.02).
        layer_norm_epsilon: float, LayerNorm epsilon (1e-12).
        activation: str, feed-forward activation; "gelu_new" = tanh-approximate GELU (v2),
            "gelu" = exact erf GELU.
        dtype: None, str or keras.DTypePolicy for every layer (e.g. "mixed_bfloat16").
        output_hidden_states, output_attentions, use_head_mask: bool, the optional outputs
            and head mask input of garden.models.backbone.Backbone (off: the plain graph).

    Example:
        backbone = AlbertBackbone(vocab_size=1000, num_layers=4, hidden_size=128, num_heads=2, intermediate_size=512)
        ids = np.ones((2, 16), "int32")
        out = backbone({"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids})
    """

    presets_module = "garden.models.albert.presets"

    def __init__(
        self,
        vocab_size: int,
        num_layers: int,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        embedding_size: int = 128,
        max_sequence_length: int = 512,
        type_vocab_size: int = 2,
        num_groups: int = 1,
        share: str = "all",
        dropout: float = 0.0,
        initializer_range: float = 0.02,
        layer_norm_epsilon: float = 1e-12,
        activation: str = "gelu_new",
        dtype=None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        use_head_mask: bool = False,
        **kwargs,
    ):
        if share not in SHARING_MODES:
            raise ValueError(f"share={share!r}: choose one of {SHARING_MODES}")
        if num_groups < 1 or num_layers % num_groups:
            raise ValueError(f"num_groups={num_groups} must divide num_layers={num_layers}")
        if num_groups != 1 and share != "all":
            raise ValueError(f"num_groups={num_groups} only applies to share='all' "
                             f"(got share={share!r})")

        # === Layers ===
        embeddings = TransformerEmbeddings(
            vocab_size=vocab_size, hidden_size=hidden_size,
            max_sequence_length=max_sequence_length, type_vocab_size=type_vocab_size,
            embedding_size=embedding_size, dropout=dropout, initializer_range=initializer_range,
            layer_norm_epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings")
        encoder_blocks = _encoder_blocks(
            num_layers, num_groups, share, num_heads=num_heads,
            intermediate_size=intermediate_size, dropout=dropout,
            activation=get_activation(activation), layer_norm_epsilon=layer_norm_epsilon,
            initializer_range=initializer_range, dtype=dtype)
        pooler = pooler_dense(hidden_size, initializer_range, dtype)

        # === Functional graph ===
        inputs = backbone_inputs(("token_ids", "segment_ids", "padding_mask"), use_head_mask,
                                 num_layers, num_heads)
        x = embeddings(inputs["token_ids"], inputs["segment_ids"])
        layers_per_group = num_layers // len(encoder_blocks) if share == "all" else 1
        layer_blocks = [encoder_blocks[i // layers_per_group] for i in range(num_layers)]
        outputs = encoder_outputs(
            x, layer_blocks, inputs, pooler, output_hidden_states=output_hidden_states,
            output_attentions=output_attentions, use_head_mask=use_head_mask)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config === (recorded by Backbone from the arguments above)
        self.embeddings = embeddings
        self.encoder_blocks = encoder_blocks
        self.pooler = pooler

    def block_for_layer(self, index: int) -> TransformerEncoderBlock:
        """The block that layer `index` (0-based, < num_layers) runs."""
        if self.share == "all":
            return self.encoder_blocks[index // (self.num_layers // self.num_groups)]
        return self.encoder_blocks[index]


def _encoder_blocks(num_layers: int, num_groups: int, share: str,
                    **block_args) -> List[TransformerEncoderBlock]:
    """The distinct blocks: num_groups of them for share="all", otherwise one per layer, the
    later ones borrowing the first block's attention ("attention") or feed-forward ("ffn")."""
    if share == "all":
        return [TransformerEncoderBlock(name=f"transformer_layer_{g}", **block_args)
                for g in range(num_groups)]
    first = TransformerEncoderBlock(name="transformer_layer_0", **block_args)
    donors = {"attention": dict(share_attention_with=first),
              "ffn": dict(share_feedforward_with=first), "none": {}}[share]
    return [first] + [TransformerEncoderBlock(name=f"transformer_layer_{i}", **donors, **block_args)
                      for i in range(1, num_layers)]
