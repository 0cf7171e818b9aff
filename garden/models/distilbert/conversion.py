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
from garden.models.bert.conversion import _attention_output_kernel, _qkv_bias, _qkv_kernel
from garden.models.bert.conversion import _transpose as linear_kernel
from garden.models.roberta.conversion import assign_weights, check_tied, strip_prefix


def qkv_kernel(num_heads):
    return _qkv_kernel(num_heads, transpose=True)


def attention_output_kernel(num_heads):
    return _attention_output_kernel(num_heads, transpose=True)

_BUFFERS = ("embeddings.position_ids",)


def backbone_config_from_huggingface(config: Mapping) -> Dict:
    """DistilBertBackbone arguments from a Hugging Face DistilBertConfig dict (config.json)."""
    if config.get("activation", "gelu") != "gelu":
        raise ValueError(f"activation {config['activation']!r} is not supported: the garden "
                         "encoder uses the exact (erf) GELU, HF 'gelu'")
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


def _name_map(num_layers: int, num_heads: int, pretrainer: bool) -> Dict[str, tuple]:
    """HF name (without `distilbert.`) -> (our variable path, transform)."""
    identity = lambda x: x
    names = {
        "embeddings.word_embeddings.weight": ("embeddings/token_embedding/embeddings", identity),
        "embeddings.position_embeddings.weight": ("embeddings/position_embedding/embeddings", identity),
        "embeddings.LayerNorm.weight": ("embeddings/layer_norm/gamma", identity),
        "embeddings.LayerNorm.bias": ("embeddings/layer_norm/beta", identity),
    }
    for i in range(num_layers):
        hf, ours = f"transformer.layer.{i}.", f"transformer_layer_{i}/"
        for theirs, part in (("q_lin", "query"), ("k_lin", "key"), ("v_lin", "value")):
            names[hf + f"attention.{theirs}.weight"] = (ours + f"attention/{part}/kernel", qkv_kernel(num_heads))
            names[hf + f"attention.{theirs}.bias"] = (ours + f"attention/{part}/bias", _qkv_bias(num_heads))
        names.update({
            hf + "attention.out_lin.weight": (ours + "attention/attention_output/kernel", attention_output_kernel(num_heads)),
            hf + "attention.out_lin.bias": (ours + "attention/attention_output/bias", identity),
            hf + "sa_layer_norm.weight": (ours + "attention_layer_norm/gamma", identity),
            hf + "sa_layer_norm.bias": (ours + "attention_layer_norm/beta", identity),
            hf + "ffn.lin1.weight": (ours + "intermediate_dense/kernel", linear_kernel),
            hf + "ffn.lin1.bias": (ours + "intermediate_dense/bias", identity),
            hf + "ffn.lin2.weight": (ours + "output_dense/kernel", linear_kernel),
            hf + "ffn.lin2.bias": (ours + "output_dense/bias", identity),
            hf + "output_layer_norm.weight": (ours + "output_layer_norm/gamma", identity),
            hf + "output_layer_norm.bias": (ours + "output_layer_norm/beta", identity),
        })
    if pretrainer:
        names.update({
            "vocab_transform.weight": ("masked_lm_head/transform_dense/kernel", linear_kernel),
            "vocab_transform.bias": ("masked_lm_head/transform_dense/bias", identity),
            "vocab_layer_norm.weight": ("masked_lm_head/layer_norm/gamma", identity),
            "vocab_layer_norm.bias": ("masked_lm_head/layer_norm/beta", identity),
            "vocab_projector.bias": ("masked_lm_head/output_bias", identity),
        })
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
