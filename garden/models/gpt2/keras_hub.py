"""GPT-2 from a keras-hub preset directory: keras_hub.models.GPT2Backbone's weights by name.

The preset's config.json (class_name "GPT2Backbone") and model.weights.h5 are read as for BERT
(garden/models/bert/keras_hub.py says why by name and not through keras-hub's classes); its
tokenizer assets, vocabulary.json and merges.txt, are GPT-2's byte-level BPE files, copied as
vocab.json + merges.txt. keras-hub's GPT-2 computes the tanh GELU with LayerNorm epsilon 1e-5,
as the garden's does, so the converted model computes the same numbers.
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from garden.models.conversion import (KERAS_HUB_LAYER, NameTable, keras_hub_backbone,
                                      keras_hub_embedding, keras_hub_layer)
from garden.models.gpt2.backbone import GPT2Backbone
from garden.models.gpt2.causal_lm import GPT2CausalLM

CLASS_NAME = "GPT2Backbone"  # config.json's class_name
# Fixed by keras-hub's GPT2Backbone, not in its config: its LayerNormalization epsilon.
LAYER_NORM_EPSILON = 1e-5


def keras_hub_names(num_layers: int) -> NameTable:
    """model.weights.h5 dataset path -> garden GPT2Backbone weight path: the token table
    (ReversibleEmbedding, also the tied LM head), the positions, one pre-LN
    TransformerDecoder per layer and the final LayerNormalization."""
    L = KERAS_HUB_LAYER
    names: NameTable = {
        **keras_hub_embedding("reversible_embedding", "token_embedding"),
        **keras_hub_embedding("position_embedding", "position_embedding"),
        **L.layer_norm(keras_hub_layer("layer_normalization"), "layer_norm"),
    }
    for n in range(num_layers):
        s, d = keras_hub_layer("transformer_decoder", n) + "/", f"transformer_layer_{n}/"
        for part in ("query", "key", "value", "attention_output"):
            names.update(L.dense(s + getattr(L, part), f"{d}self_attention/{part}"))
        names.update(L.layer_norm(s + L.attention_norm, f"{d}self_attention_layer_norm"))
        names.update(L.dense(s + L.intermediate, f"{d}intermediate_dense"))
        names.update(L.dense(s + L.output, f"{d}output_dense"))
        names.update(L.layer_norm(s + L.output_norm, f"{d}output_layer_norm"))
    return names


def from_keras_hub(config: Dict, weights: Dict[str, np.ndarray],
                   where: str = "config.json") -> Dict:
    """Garden GPT-2 from a keras-hub GPT2Backbone preset.

    Args:
        config: the preset's config.json object ({"class_name": "GPT2Backbone", "config":
            {vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim, dropout,
            max_sequence_length}}).
        weights: model.weights.h5's arrays by dataset path.
        where: config.json's path, for the errors.

    Returns:
        {"backbone": GPT2Backbone, "pretrainer": GPT2CausalLM, "lm": the same GPT2CausalLM}
        (its head is the token table, so the backbone's weights are the LM's).

    Example:
        config, weights = read_keras_hub_preset("gpt2_base_en")
        lm = from_keras_hub(config, weights)["lm"]
    """
    backbone = keras_hub_backbone(
        config, weights, where, CLASS_NAME, GPT2Backbone,
        lambda kwargs: keras_hub_names(kwargs["num_layers"]),
        layer_norm_epsilon=LAYER_NORM_EPSILON)
    lm = GPT2CausalLM(backbone)
    return {"backbone": backbone, "pretrainer": lm, "lm": lm}
