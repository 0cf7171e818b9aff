"""BERT from a keras-hub preset directory: keras_hub.models.BertBackbone's weights by name.

A preset (`BertBackbone.save_to_preset(dir)`, or a downloaded one such as bert_base_en) holds
config.json (class_name "BertBackbone" and its constructor arguments) and model.weights.h5,
Keras 3's weights file, which garden.models.checkpoint_files.read_keras_hub_preset reads by dataset
path with h5py. The weights are read by name rather than by building keras-hub's model and
copying its variables: config.json names the Python module to import, and a name table keeps
the converter as strict as the others (assign_weights names every missing, unexpected or
misshapen weight) and independent of keras-hub's classes, which change between its releases.

Keras 3 names a functional model's layers in the weights file by class, counted in graph order
(`layers/transformer_encoder`, `layers/transformer_encoder_1`, ...) and their sub-layers by
attribute (garden.models.conversion.KERAS_HUB_LAYER, keras_hub_layer); keras-hub's attention
kernels have the garden's layout, so every array is copied as it is.

keras-hub's BertBackbone computes the tanh-approximate GELU (it reproduces Google's TF1 code,
whose checkpoints its presets are); the garden backbone computes the exact one, as for
--source=tf1 and Hugging Face's import of the same weights. The two differ by at most 4.7e-4
pointwise (at |x| = 2.7); the converter says so in a note.
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from garden.models.bert.backbone import BertBackbone
from garden.models.conversion import (KERAS_HUB_LAYER, NameTable, encoder_layer_names,
                                      keras_hub_backbone, keras_hub_embedding, keras_hub_layer)

CLASS_NAME = "BertBackbone"  # config.json's class_name
# Fixed by keras-hub's BertBackbone, not in its config: its LayerNormalization epsilon.
LAYER_NORM_EPSILON = 1e-12


def keras_hub_names(num_layers: int, num_heads: int) -> NameTable:
    """model.weights.h5 dataset path -> garden BertBackbone weight path. keras-hub's
    BertBackbone has one layer of each outer class: the token table (ReversibleEmbedding), the
    positions, the segment table (Embedding), the embeddings' LayerNormalization and the
    pooler (Dense)."""
    L = KERAS_HUB_LAYER
    names: NameTable = {
        **keras_hub_embedding("reversible_embedding", "embeddings/token_embedding"),
        **keras_hub_embedding("position_embedding", "embeddings/position_embedding"),
        **keras_hub_embedding("embedding", "embeddings/segment_embedding"),
        **L.layer_norm(keras_hub_layer("layer_normalization"), "embeddings/layer_norm"),
        **L.dense(keras_hub_layer("dense"), "pooler_dense"),
    }
    for n in range(num_layers):
        names.update(encoder_layer_names(L, keras_hub_layer("transformer_encoder", n) + "/",
                                         f"transformer_layer_{n}/", num_heads))
    return names


def from_keras_hub(config: Dict, weights: Dict[str, np.ndarray],
                   where: str = "config.json") -> Dict:
    """Garden BERT from a keras-hub BertBackbone preset.

    Args:
        config: the preset's config.json object ({"class_name": "BertBackbone", "config":
            {vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim, dropout,
            max_sequence_length, num_segments}}).
        weights: model.weights.h5's arrays by dataset path.
        where: config.json's path, for the errors.

    Returns:
        {"backbone": BertBackbone, "pretrainer": None}: a backbone preset has no heads.

    Example:
        config, weights = read_keras_hub_preset("bert_tiny_en_uncased")
        backbone = from_keras_hub(config, weights)["backbone"]
    """
    backbone = keras_hub_backbone(
        config, weights, where, CLASS_NAME, BertBackbone,
        lambda kwargs: keras_hub_names(kwargs["num_layers"], kwargs["num_heads"]),
        renames={"num_segments": "type_vocab_size"}, layer_norm_epsilon=LAYER_NORM_EPSILON)
    print("  note: keras-hub's BertBackbone computes the tanh-approximate GELU, the garden "
          "backbone the exact one (at most 4.7e-4 apart pointwise), as for the same weights "
          "from --source=tf1")
    return {"backbone": backbone, "pretrainer": None}
