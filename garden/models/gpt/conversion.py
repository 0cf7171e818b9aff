"""GPT (2018) weights from Hugging Face "openai-gpt" checkpoints (OpenAIGPTModel,
OpenAIGPTLMHeadModel), strictly: garden.models.conversion.assign_weights names every missing,
unexpected or misshapen weight.

Layouts:
- tokens_embed [n_vocab (+ specials), H] and positions_embed [n_ctx, H] are concatenated into
  GPTEmbedding's one table (tokens first, as openai/finetune-transformer-lm stores `we`).
- Hugging Face's Conv1D kernels are [in, out] (no transpose); attn.c_attn fuses q, k, v:
  kernel [H, 3H] and bias [3H], split in thirds into the [H, heads, d] / [heads, d] kernels.
- lm_head.weight is tied to tokens_embed (the garden model keeps one variable): an untied copy
  is refused.
- afn "gelu" in this model type is the tanh GELU (Hugging Face's ACT_FNS maps it to
  NewGELUActivation); "relu" and "silu"/"swish" map to Keras' functions.

    models = from_huggingface(config, weights)   # {"backbone": GPTBackbone, "pretrainer": GPTCausalLM}
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from garden.models.conversion import (NameTable, assign_weights, attention_output_kernel,
                                      check_tied, identity, qkv_bias, qkv_kernel, strip_prefix)
from garden.models.gpt.backbone import GPTBackbone, GPTCausalLM

_ACTIVATIONS = {"gelu": "gelu_tanh", "relu": "relu", "silu": "silu", "swish": "silu"}
_TABLE = "transformer.tokens_and_positions"  # the concatenated table's (synthetic) name


def backbone_kwargs_from_hf_config(config: Dict) -> Dict:
    """GPTBackbone arguments from an OpenAIGPTConfig dict (config.json)."""
    activation = config.get("afn", "gelu")
    if activation not in _ACTIVATIONS:
        raise ValueError(f"afn={activation!r} is not supported; choose one of "
                         f"{sorted(_ACTIVATIONS)}")
    return dict(vocab_size=int(config["vocab_size"]), num_layers=int(config["n_layer"]),
                hidden_size=int(config["n_embd"]), num_heads=int(config["n_head"]),
                intermediate_size=4 * int(config["n_embd"]),
                max_sequence_length=int(config["n_positions"]), num_special_tokens=0,
                dropout=float(config.get("resid_pdrop", 0.1)),
                initializer_range=float(config.get("initializer_range", 0.02)),
                layer_norm_epsilon=float(config.get("layer_norm_epsilon", 1e-5)),
                activation=_ACTIVATIONS[activation])


def _fused_part(part: int, transform):
    """One third (q, k or v) of a fused c_attn tensor along its last axis, transformed."""
    return lambda x: transform(np.split(x, 3, axis=-1)[part])


def _mapping(num_layers: int, num_heads: int, prefix: str) -> NameTable:
    names: NameTable = {_TABLE: (f"{prefix}embeddings/embeddings", identity)}
    for n in range(num_layers):
        s, d = f"transformer.h.{n}.", f"{prefix}transformer_layer_{n}/"
        for i, part in enumerate(("query", "key", "value")):
            names[f"{s}attn.c_attn.weight#{part}"] = (
                f"{d}self_attention/{part}/kernel",
                _fused_part(i, qkv_kernel(num_heads, transpose=False)))
            names[f"{s}attn.c_attn.bias#{part}"] = (f"{d}self_attention/{part}/bias",
                                                    _fused_part(i, qkv_bias(num_heads)))
        names[f"{s}attn.c_proj.weight"] = (f"{d}self_attention/attention_output/kernel",
                                           attention_output_kernel(num_heads, transpose=False))
        names[f"{s}attn.c_proj.bias"] = (f"{d}self_attention/attention_output/bias", identity)
        for source, garden in (("ln_1", "self_attention_layer_norm"),
                               ("ln_2", "output_layer_norm")):
            names[f"{s}{source}.weight"] = (f"{d}{garden}/gamma", identity)
            names[f"{s}{source}.bias"] = (f"{d}{garden}/beta",
                                          identity)
        for source, garden in (("mlp.c_fc", "intermediate_dense"), ("mlp.c_proj", "output_dense")):
            names[f"{s}{source}.weight"] = (f"{d}{garden}/kernel", identity)
            names[f"{s}{source}.bias"] = (f"{d}{garden}/bias", identity)
    return names


def _fuse_names(weights: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The checkpoint's names as the table keys them: the two tables joined into one entry,
    each c_attn tensor under one name per part (so a missing c_attn is named, once per part)."""
    out = {}
    for name, value in weights.items():
        if ".attn.c_attn." in name:
            for part in ("query", "key", "value"):
                out[f"{name}#{part}"] = value
        elif name not in ("transformer.tokens_embed.weight", "transformer.positions_embed.weight"):
            out[name] = value
    tokens = weights.get("transformer.tokens_embed.weight")
    positions = weights.get("transformer.positions_embed.weight")
    if tokens is not None and positions is not None:
        out[_TABLE] = np.concatenate([tokens, positions], axis=0)
    else:  # named as missing by the check below
        for name, value in (("transformer.tokens_embed.weight", tokens),
                            ("transformer.positions_embed.weight", positions)):
            if value is None:
                raise ValueError(f"Hugging Face GPT: missing parameters: ['{name}']")
    return out


def from_huggingface(config: Dict, weights: Dict[str, np.ndarray]) -> Dict:
    """Garden GPT from a Hugging Face openai-gpt state dict.

    Args:
        config: the parsed config.json (model_type "openai-gpt").
        weights: parameter name (with or without "transformer.") -> numpy array; lm_head.weight
            (OpenAIGPTLMHeadModel) must equal tokens_embed when present.

    Returns:
        {"backbone": GPTBackbone, "pretrainer": GPTCausalLM}: the LM is always built, its
        softmax being the tied token rows.
    """
    kwargs = backbone_kwargs_from_hf_config(config)
    weights = {(k if k.startswith(("transformer.", "lm_head.")) else f"transformer.{k}"): v
               for k, v in strip_prefix(weights, "transformer.").items()}
    tied = {"lm_head.weight": "transformer.tokens_embed.weight"}
    check_tied(weights, tied)
    backbone = GPTBackbone(**kwargs)
    lm = GPTCausalLM(backbone)
    names = _mapping(kwargs["num_layers"], kwargs["num_heads"], "")
    assign_weights(backbone, _fuse_names(weights), names,
                   source=f"Hugging Face GPT (config {kwargs})", ignored=tied,
                   ignored_patterns=[r"\.attn\.bias$", r"position_ids$"])
    return {"backbone": backbone, "pretrainer": lm}
