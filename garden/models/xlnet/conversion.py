"""XLNet weights from Hugging Face (XLNetModel / XLNetLMHeadModel state dicts).

`from_huggingface(config, weights)` returns {"backbone": XLNetBackbone, "pretrainer":
XLNetPretrainer or None}; the pretrainer when the weights hold the LM head (lm_loss.*: its
weight tied to the word table, its bias the pretrainer's lm_head/bias). Strict: every weight
named, no partial load (garden.models.conversion.assign_weights).

Layouts: Hugging Face keeps q, k, v, o, r as [d_model, n_head, d_head] einsum tensors, which
are garden's layouts too; the feed-forward layer_1 / layer_2 are torch Linear ([out, in]).
Config: ff_activation "gelu" is the exact GELU (Hugging Face's), "gelu_new" the tanh one (the
original's); attn_type must be "bi" (pretraining and fine-tuning), untie_r True (the released
models: biases per layer); mem_len / reuse_len / bi_data / clamp_len carry over.
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from garden.models.conversion import (NameTable, assign_weights, check_tied, identity,
                                      linear_kernel, strip_prefix)
from garden.models.xlnet.backbone import XLNetBackbone
from garden.models.xlnet.pretrainer import XLNetPretrainer

_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "relu": "relu"}


def backbone_kwargs_from_hf_config(config: Dict) -> Dict:
    """XLNetBackbone arguments from a Hugging Face XLNetConfig dict; settings the garden
    cannot express raise ValueError."""
    if config.get("attn_type", "bi") != "bi":
        raise ValueError(f"attn_type={config['attn_type']!r}: the garden XLNet has the 'bi' "
                         "attention only")
    if not config.get("untie_r", True):
        raise ValueError("untie_r=False (one r_w/r_r/r_s bias for all layers) is not supported")
    if config.get("same_length"):
        raise ValueError("same_length=True is not supported")
    activation = config.get("ff_activation", "gelu")
    if activation not in _ACTIVATIONS:
        raise ValueError(f"ff_activation={activation!r} is not supported; one of "
                         f"{sorted(_ACTIVATIONS)}")
    d_model, n_head = int(config["d_model"]), int(config["n_head"])
    return dict(
        vocab_size=int(config["vocab_size"]), num_layers=int(config["n_layer"]),
        hidden_size=d_model, num_heads=n_head, intermediate_size=int(config["d_inner"]),
        head_size=int(config.get("d_head", d_model // n_head)),
        activation=_ACTIVATIONS[activation], dropout=float(config.get("dropout", 0.1)),
        initializer_range=float(config.get("initializer_range", 0.02)),
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-12)),
        mem_len=int(config.get("mem_len") or 0), reuse_len=int(config.get("reuse_len") or 0),
        bi_data=bool(config.get("bi_data", False)), clamp_len=int(config.get("clamp_len", -1)))


def hf_names(num_layers: int, with_head: bool) -> NameTable:
    """Hugging Face state-dict name (without "transformer.") -> (garden path, transform)."""
    i = identity
    names: NameTable = {
        "word_embedding.weight": ("word_embedding/embeddings", i),
        "mask_emb": ("mask_embedding/mask_emb", i),
    }
    for n in range(num_layers):
        s, d = f"layer.{n}.", f"layer_{n}/"
        for w in ("q", "k", "v", "o", "r", "r_w_bias", "r_r_bias", "r_s_bias", "seg_embed"):
            names[f"{s}rel_attn.{w}"] = (f"{d}rel_attn/{w}", i)
        for src, dst in (("rel_attn.layer_norm", "rel_attn/layer_norm"),
                         ("ff.layer_norm", "ff_layer_norm")):
            names[f"{s}{src}.weight"] = (f"{d}{dst}/gamma", i)
            names[f"{s}{src}.bias"] = (f"{d}{dst}/beta", i)
        for part in ("layer_1", "layer_2"):
            names[f"{s}ff.{part}.weight"] = (f"{d}{part}/kernel", linear_kernel)
            names[f"{s}ff.{part}.bias"] = (f"{d}{part}/bias", i)
    if with_head:
        names["lm_loss.bias"] = ("lm_head/bias", i)
    return names


def from_huggingface(config: Dict, weights: Dict[str, np.ndarray]) -> Dict:
    """Garden XLNet from a Hugging Face XLNetModel or XLNetLMHeadModel state dict.

    Args:
        config: the parsed config.json (model_type "xlnet").
        weights: state-dict name (with or without "transformer.") -> numpy array.

    Returns:
        {"backbone": XLNetBackbone, "pretrainer": XLNetPretrainer or None}.
    """
    kwargs = backbone_kwargs_from_hf_config(config)
    weights = strip_prefix(weights, "transformer.")
    with_head = "lm_loss.bias" in weights or "lm_loss.weight" in weights
    tied = {"lm_loss.weight": "word_embedding.weight"}
    if "lm_loss.weight" in weights and "word_embedding.weight" not in weights:
        raise ValueError("Hugging Face XLNet: lm_loss.weight without word_embedding.weight; the "
                         "garden LM head is tied to the word table")
    check_tied(weights, tied)
    backbone = XLNetBackbone(**kwargs)
    pretrainer = XLNetPretrainer(backbone) if with_head else None
    assign_weights(pretrainer or backbone, weights, hf_names(kwargs["num_layers"], with_head),
                   source=f"Hugging Face XLNet (config {kwargs})", ignored=tied)
    return {"backbone": backbone, "pretrainer": pretrainer}
