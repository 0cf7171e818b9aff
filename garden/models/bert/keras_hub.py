"""BERT from a keras-hub preset directory: keras_hub.models.BertBackbone's weights by name.

A preset (`BertBackbone.save_to_preset(dir)`, or a downloaded one such as bert_base_en) holds
config.json (class_name "BertBackbone" and its constructor arguments) and model.weights.h5,
Keras 3's weights file, which garden.models.conversion.read_keras_hub_preset reads by dataset
path with h5py. The weights are read by name rather than by building keras-hub's model and
copying its variables: config.json names the Python module to import, and a name table keeps
the converter as strict as the others (assign_weights names every missing, unexpected or
misshapen weight) and independent of keras-hub's classes, which change between its releases.

Keras 3 names a functional model's layers in the weights file by class, counted in graph order
(`layers/transformer_encoder`, `layers/transformer_encoder_1`, ...) and their sub-layers by
attribute; each layer's variables are `vars/0`, `vars/1` (kernel then bias, gamma then beta).
keras-hub's attention kernels are EinsumDense [H, heads, head_dim] and [heads, head_dim, H],
the garden's layout, so every array is copied as it is.

keras-hub's BertBackbone computes the tanh-approximate GELU (it reproduces Google's TF1 code,
whose checkpoints its presets are); the garden backbone computes the exact one, as for
--source=tf1 and Hugging Face's import of the same weights. The two differ by at most 4.7e-4
pointwise (at |x| = 2.7); the converter says so in a note.
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from garden.models.bert.backbone import BertBackbone
from garden.models.conversion import NameTable, assign_weights, identity

CLASS_NAME = "BertBackbone"  # config.json's class_name
# Fixed by keras-hub's BertBackbone, not in its config: its LayerNormalization epsilon.
LAYER_NORM_EPSILON = 1e-12
# keras-hub's sub-layer attribute -> the garden block's weight path, ((kernel, bias) or
# (gamma, beta)).
_BLOCK = {
    "_self_attention_layer/query_dense": ("attention/query", ("kernel", "bias")),
    "_self_attention_layer/key_dense": ("attention/key", ("kernel", "bias")),
    "_self_attention_layer/value_dense": ("attention/value", ("kernel", "bias")),
    "_self_attention_layer/output_dense": ("attention/attention_output", ("kernel", "bias")),
    "_self_attention_layer_norm": ("attention_layer_norm", ("gamma", "beta")),
    "_feedforward_intermediate_dense": ("intermediate_dense", ("kernel", "bias")),
    "_feedforward_output_dense": ("output_dense", ("kernel", "bias")),
    "_feedforward_layer_norm": ("output_layer_norm", ("gamma", "beta")),
}
_OUTER = {
    "reversible_embedding": ("embeddings/token_embedding", ("embeddings",)),
    "position_embedding": ("embeddings/position_embedding", ("embeddings",)),
    "embedding": ("embeddings/segment_embedding", ("embeddings",)),
    "layer_normalization": ("embeddings/layer_norm", ("gamma", "beta")),
    "dense": ("pooler_dense", ("kernel", "bias")),
}


def _vars(source: str, garden: str, kinds) -> NameTable:
    return {f"{source}/vars/{i}": (f"{garden}/{kind}", identity) for i, kind in enumerate(kinds)}


def keras_hub_names(num_layers: int) -> NameTable:
    """model.weights.h5 dataset path -> garden BertBackbone weight path."""
    names: NameTable = {}
    for source, (garden, kinds) in _OUTER.items():
        names.update(_vars(f"layers/{source}", garden, kinds))
    for n in range(num_layers):
        block = "layers/transformer_encoder" + (f"_{n}" if n else "")
        for source, (garden, kinds) in _BLOCK.items():
            names.update(_vars(f"{block}/{source}", f"transformer_layer_{n}/{garden}", kinds))
    return names


def backbone_kwargs(config: Dict) -> Dict:
    """BertBackbone arguments from keras-hub's BertBackbone config (config.json "config")."""
    return dict(vocab_size=int(config["vocabulary_size"]), num_layers=int(config["num_layers"]),
                hidden_size=int(config["hidden_dim"]), num_heads=int(config["num_heads"]),
                intermediate_size=int(config["intermediate_dim"]),
                max_sequence_length=int(config["max_sequence_length"]),
                type_vocab_size=int(config["num_segments"]),
                dropout=float(config.get("dropout", 0.1)),
                layer_norm_epsilon=LAYER_NORM_EPSILON)


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
    class_name = config.get("class_name")
    if class_name != CLASS_NAME:
        raise ValueError(f"{where} holds a keras-hub {class_name}, not a {CLASS_NAME}: pass the "
                         f"--model of its family")
    kwargs = backbone_kwargs(config["config"])
    backbone = BertBackbone(**kwargs)
    assign_weights(backbone, weights, keras_hub_names(kwargs["num_layers"]),
                   source=f"keras-hub {CLASS_NAME} ({where}: {kwargs})")
    print("  note: keras-hub's BertBackbone computes the tanh-approximate GELU, the garden "
          "backbone the exact one (at most 4.7e-4 apart pointwise), as for the same weights "
          "from --source=tf1")
    return {"backbone": backbone, "pretrainer": None}
