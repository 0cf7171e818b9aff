"""Hugging Face DistilBERT checkpoints -> DistilBertBackbone / DistilBertPretrainer.

Maps the parameter names of transformers' DistilBertModel and DistilBertForMaskedLM
(`distilbert.` prefix optional; `vocab_transform`, `vocab_layer_norm`, `vocab_projector` for the
MLM head) onto our variables, with the torch -> Keras layouts of the BERT converter.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional

import numpy as np

from garden.models.distilbert.backbone import DistilBertBackbone
from garden.models.distilbert.pretrainer import DistilBertPretrainer
from garden.models.conversion import (HF_DISTILBERT_LAYER, NameTable, assign_weights,
                                      check_bert_style_config, check_tied, encoder_layer_names,
                                      identity, strip_prefix)


_BUFFERS = ("embeddings.position_ids",)


def backbone_config_from_huggingface(config: Mapping) -> Dict:
    """DistilBertBackbone arguments from a Hugging Face DistilBertConfig dict (config.json)."""
    check_bert_style_config(config, "DistilBERT", activation_key="activation")
    return dict(
        vocab_size=int(config["vocab_size"]),
        num_layers=int(config["n_layers"]),
        hidden_size=int(config["dim"]),
        num_heads=int(config["n_heads"]),
        intermediate_size=int(config["hidden_dim"]),
        max_sequence_length=int(config["max_position_embeddings"]),
        dropout=float(config.get("dropout", 0.1)),
        attention_dropout=float(config.get("attention_dropout", 0.1)),
        initializer_range=float(config.get("initializer_range", 0.02)),
        layer_norm_epsilon=1e-12,  # hard-coded in transformers' DistilBERT
    )


def _name_map(num_layers: int, num_heads: int, pretrainer: bool) -> NameTable:
    """HF name (without `distilbert.`) -> (our variable path, transform)."""
    L = HF_DISTILBERT_LAYER
    names = {
        "embeddings.word_embeddings.weight": ("embeddings/token_embedding/embeddings", identity),
        "embeddings.position_embeddings.weight": ("embeddings/position_embedding/embeddings",
                                                  identity),
        **L.layer_norm("embeddings.LayerNorm", "embeddings/layer_norm"),
    }
    for i in range(num_layers):
        names.update(encoder_layer_names(L, f"transformer.layer.{i}.", f"transformer_layer_{i}/",
                                         num_heads))
    if pretrainer:
        names.update(L.masked_lm_head("vocab_transform", "vocab_layer_norm", "vocab_projector.bias"))
    return names


def from_huggingface(config: Mapping, weights: Mapping[str, np.ndarray]) -> Dict[str, Optional[object]]:
    """Our DistilBERT from a Hugging Face DistilBertModel or DistilBertForMaskedLM checkpoint.

    Args:
        config: dict of the checkpoint's config.json.
        weights: parameter name -> array (safetensors.numpy.load_file, or a torch state_dict
            converted with `.numpy()`).

    Returns:
        {"backbone": DistilBertBackbone, "pretrainer": DistilBertPretrainer or None (no
         `vocab_*` head), "not_in_checkpoint": []}.

    Raises:
        ValueError naming the missing and unexpected parameters, or a shape that disagrees.

    Example:
        from safetensors.numpy import load_file
        models = from_huggingface(json.load(open("config.json")), load_file("model.safetensors"))
    """
    weights = strip_prefix(weights, "distilbert.")
    # vocab_projector.weight is the word table (tied); a file may keep either name.
    if "embeddings.word_embeddings.weight" not in weights and "vocab_projector.weight" in weights:
        weights["embeddings.word_embeddings.weight"] = weights["vocab_projector.weight"]
    check_tied(weights, {"vocab_projector.weight": "embeddings.word_embeddings.weight"})
    has_head = any(n.startswith(("vocab_transform.", "vocab_layer_norm.", "vocab_projector."))
                   for n in weights)
    kwargs = backbone_config_from_huggingface(config)
    backbone = DistilBertBackbone(**kwargs)
    pretrainer = DistilBertPretrainer(backbone) if has_head else None
    names = _name_map(kwargs["num_layers"], kwargs["num_heads"], has_head)
    not_loaded = assign_weights(pretrainer or backbone, weights, names,
                                ignored=_BUFFERS + ("vocab_projector.weight",))
    return {"backbone": backbone, "pretrainer": pretrainer, "not_in_checkpoint": not_loaded}
