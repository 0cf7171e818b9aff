"""ELECTRA encoder: shareable E-wide embeddings -> projection to H -> post-LN Transformer blocks."""

from __future__ import annotations

from typing import Optional

import keras

from garden.layers.embeddings import TransformerEmbeddings, truncated_normal
from garden.models.backbone import (Backbone, backbone_inputs, encoder_block_list,
                                     encoder_outputs)


@keras.saving.register_keras_serializable(package="garden")
class ElectraBackbone(Backbone):
    """One ELECTRA tower, the discriminator or the generator (Clark et al., 2020, "ELECTRA:
    Pre-training Text Encoders as Discriminators Rather Than Generators", arXiv:2003.10555).

    BERT's encoder (the shared `TransformerEncoderBlock`) on embeddings that are E wide: word,
    position and token-type tables summed -> LayerNorm -> dropout, then this tower's own dense
    E -> H ("embeddings_project") when E != H. The embedding block stops at width E because the
    generator and the discriminator share it (tables and LayerNorm) while each projects to its
    own hidden size; pass the discriminator's `embeddings` to the generator to share them.
    There is no pooler dense (Hugging Face's ElectraModel has none): `pooled_output` is the
    [CLS] token's final hidden state as is, as in the original code (google-research/electra
    model/modeling.py: `self.pooled_output = self.sequence_output[:, 0]`), whose GLUE
    classifier is dropout(0.1) -> dense(num_labels) on it: garden's SequenceClassifier.

    Inputs (dict, int32 [B, T]): token_ids, segment_ids, padding_mask (1 = real token).
    Outputs (dict): sequence_output [B, T, H]; pooled_output [B, H] = sequence_output[:, 0].

    Args:
        vocab_size: int, word-piece vocabulary size (ELECTRA uses BERT's uncased 30522).
        num_layers: int, Transformer blocks L.
        hidden_size: int, hidden width H.
        num_heads: int, attention heads A (H must be divisible by A).
        intermediate_size: int, feed-forward width.
        embedding_size: int, width E of the embedding tables (small: 128; base/large: E = H).
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
        embeddings: optional TransformerEmbeddings (hidden_size = E, no projection) to reuse
            instead of making one: the generator takes the discriminator's. Not part of the
            config; ElectraPretrainer re-ties it when it is deserialized.

    Example:
        backbone = ElectraBackbone(vocab_size=1000, num_layers=2, hidden_size=64, num_heads=2, intermediate_size=256, embedding_size=32)
        ids = np.ones((2, 16), "int32")
        out = backbone({"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids})
    """

    presets_module = "garden.models.electra.presets"
    non_config_args = ("embeddings",)

    def __init__(
        self,
        vocab_size: int,
        num_layers: int,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        embedding_size: int,
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
        embeddings: Optional[TransformerEmbeddings] = None,
        **kwargs,
    ):
        # === Layers ===
        if embeddings is None:
            embeddings = TransformerEmbeddings(
                vocab_size=vocab_size, hidden_size=embedding_size,
                max_sequence_length=max_sequence_length, type_vocab_size=type_vocab_size,
                dropout=dropout, initializer_range=initializer_range,
                layer_norm_epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings")
        else:
            _check_shared_embeddings(embeddings, vocab_size, embedding_size, max_sequence_length,
                                     type_vocab_size)
        embeddings_project = None
        if embedding_size != hidden_size:
            embeddings_project = keras.layers.Dense(
                hidden_size, kernel_initializer=truncated_normal(initializer_range),
                dtype=dtype, name="embeddings_project")
        encoder_blocks = encoder_block_list(
            num_layers, num_heads_per_layer, hidden_size, num_heads=num_heads,
            intermediate_size=intermediate_size, dropout=dropout,
            activation="gelu", layer_norm_epsilon=layer_norm_epsilon,
            initializer_range=initializer_range, dtype=dtype)

        # === Functional graph ===
        inputs = backbone_inputs(("token_ids", "segment_ids", "padding_mask"), use_head_mask,
                                 num_layers, num_heads)
        x = embeddings(inputs["token_ids"], inputs["segment_ids"])
        if embeddings_project is not None:
            x = embeddings_project(x)
        outputs = encoder_outputs(
            x, encoder_blocks, inputs, output_hidden_states=output_hidden_states,
            output_attentions=output_attentions, use_head_mask=use_head_mask)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config === (recorded by Backbone from the arguments above)
        self.embeddings = embeddings
        self.embeddings_project = embeddings_project
        self.encoder_blocks = encoder_blocks

    def layer_groups(self):
        """Backbone.layer_groups: the projection to H is an embeddings layer (ELECTRA's own
        depth table puts "embeddings_project" at 0, as the tables); no pooler."""
        bottom = [self.embeddings] + ([self.embeddings_project]
                                      if self.embeddings_project is not None else [])
        return [bottom, *[[block] for block in self.encoder_blocks], []]


def _check_shared_embeddings(embeddings, vocab_size, embedding_size, max_sequence_length,
                             type_vocab_size):
    """A shared embedding block must be exactly the tables this tower would have made."""
    got = (embeddings.vocab_size, embeddings.hidden_size, embeddings.max_sequence_length,
           embeddings.type_vocab_size, embeddings.projection is None)
    want = (int(vocab_size), int(embedding_size), int(max_sequence_length), int(type_vocab_size),
            True)
    if got != want:
        raise ValueError(
            "shared embeddings do not fit this tower: (vocab_size, embedding width, "
            f"max_sequence_length, type_vocab_size, no projection) is {got}, expected {want}; "
            "build both towers with the same vocab_size, embedding_size, max_sequence_length "
            "and type_vocab_size")
