"""Hugging Face RoBERTa checkpoints -> RobertaBackbone / RobertaPretrainer.

Maps the parameter names of transformers' RobertaModel and RobertaForMaskedLM (state-dict names,
with or without the `roberta.` prefix; `lm_head.*` for the MLM head) onto our variables. Torch
`Linear` weights are [out, in]; Keras kernels are [in, out], and the attention projections are
[H, heads, head_dim] (query/key/value) and [heads, head_dim, H] (output).
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional

import numpy as np

# BERT's HF name table and torch -> Keras layouts, shared with the BERT converter.
from garden.models.bert.conversion import _hf_mapping as bert_hf_mapping
from garden.models.bert.conversion import _identity
from garden.models.bert.conversion import _transpose as linear_kernel
from garden.models.roberta.backbone import RobertaBackbone
from garden.models.roberta.pretrainer import RobertaPretrainer

# Buffers some transformers versions save with the weights; they carry no parameters.
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")


def backbone_config_from_huggingface(config: Mapping) -> Dict:
    """RobertaBackbone arguments from a Hugging Face RobertaConfig dict (config.json)."""
    if config.get("hidden_act", "gelu") != "gelu":
        raise ValueError(f"hidden_act {config['hidden_act']!r} is not supported: the garden "
                         "encoder uses the exact (erf) GELU, HF 'gelu'")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"position_embedding_type {config['position_embedding_type']!r} is not "
                         "supported; only 'absolute' (learned) positions")
    padding_idx = int(config.get("pad_token_id", 1))
    return dict(
        vocab_size=int(config["vocab_size"]),
        num_layers=int(config["num_hidden_layers"]),
        hidden_size=int(config["hidden_size"]),
        num_heads=int(config["num_attention_heads"]),
        intermediate_size=int(config["intermediate_size"]),
        # HF counts the padding offset in the table: 514 rows -> 512 usable positions.
        max_sequence_length=int(config["max_position_embeddings"]) - padding_idx - 1,
        padding_idx=padding_idx,
        dropout=float(config.get("hidden_dropout_prob", 0.1)),
        initializer_range=float(config.get("initializer_range", 0.02)),
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-5)),
    )


def _first_row(table):
    # Without a segment input only token type 0 is ever looked up (HF's default token_type_ids
    # are zeros), so a checkpoint with more rows loses nothing reachable.
    return table[:1]


def _name_map(num_layers: int, num_heads: int, pretrainer: bool) -> Dict[str, tuple]:
    """HF name (without `roberta.`) -> (our variable path, transform).

    Below the heads HF RoBERTa uses BERT's parameter names and our backbones BERT's variable
    paths, so the encoder table is the BERT converter's.
    """
    names = {src: (dst, fn) for src, dst, fn in bert_hf_mapping(num_layers, num_heads, False)}
    names["embeddings.token_type_embeddings.weight"] = (
        "embeddings/segment_embedding/embeddings", _first_row)
    if pretrainer:
        names.update({
            "lm_head.dense.weight": ("masked_lm_head/transform_dense/kernel", linear_kernel),
            "lm_head.dense.bias": ("masked_lm_head/transform_dense/bias", _identity),
            "lm_head.layer_norm.weight": ("masked_lm_head/layer_norm/gamma", _identity),
            "lm_head.layer_norm.bias": ("masked_lm_head/layer_norm/beta", _identity),
            "lm_head.bias": ("masked_lm_head/output_bias", _identity),
        })
    return names


def strip_prefix(weights: Mapping[str, np.ndarray], prefix: str = "roberta.") -> Dict[str, np.ndarray]:
    out = {}
    for name, value in weights.items():
        out[name[len(prefix):] if name.startswith(prefix) else name] = np.asarray(value)
    return out


def check_tied(weights: Dict[str, np.ndarray], tied: Dict[str, str]):
    """Names that HF ties to another parameter must hold the same values (we keep one copy)."""
    for name, source in tied.items():
        if name in weights and source in weights and not np.array_equal(weights[name], weights[source]):
            raise ValueError(f"{name} differs from {source}: the garden ties them (one variable), "
                             "so an untied checkpoint cannot be imported")


def assign_weights(model, weights: Dict[str, np.ndarray], names: Dict[str, tuple],
                   optional=(), ignored=()) -> list:
    """Assigns weights[hf_name] (transformed) to model's variable at each mapped path.

    Raises ValueError naming every missing and unexpected parameter, and any shape mismatch.
    Returns the HF names in `optional` that the checkpoint lacks (left at their initial values).
    """
    variables = {v.path: v for v in model.weights}
    missing = sorted(n for n in names if n not in weights and n not in optional)
    unexpected = sorted(n for n in weights if n not in names and n not in ignored)
    if missing or unexpected:
        raise ValueError(f"{type(model).__name__}: checkpoint does not match the config; "
                         f"missing parameters: {missing}; unexpected parameters: {unexpected}")
    shape_errors, assigned = [], set()
    for hf_name, (path, transform) in names.items():
        if hf_name not in weights:
            continue
        value = transform(np.asarray(weights[hf_name], np.float32))
        variable = variables[path]
        if tuple(value.shape) != tuple(variable.shape):
            shape_errors.append(f"{hf_name} {tuple(weights[hf_name].shape)} -> {path} "
                                f"{tuple(variable.shape)}")
            continue
        variable.assign(value)
        assigned.add(path)
    if shape_errors:
        raise ValueError(f"{type(model).__name__}: shape mismatches: {shape_errors}")
    not_loaded = sorted(n for n in optional if n not in weights)
    unassigned = set(variables) - assigned - {names[n][0] for n in not_loaded}
    if unassigned:  # a bug in the mapping table, not in the checkpoint
        raise AssertionError(f"garden weights left unassigned: {sorted(unassigned)}")
    return not_loaded


def from_huggingface(config: Mapping, weights: Mapping[str, np.ndarray]) -> Dict[str, Optional[object]]:
    """Our RoBERTa from a Hugging Face RobertaModel or RobertaForMaskedLM checkpoint.

    Args:
        config: dict of the checkpoint's config.json.
        weights: parameter name -> array (e.g. `safetensors.numpy.load_file`, or a torch
            state_dict converted with `.numpy()`).

    Returns:
        {"backbone": RobertaBackbone, "pretrainer": RobertaPretrainer or None (no `lm_head.*`),
         "not_in_checkpoint": HF names absent and left initialised, e.g. the pooler, which
         RobertaForMaskedLM does not have}.

    Raises:
        ValueError naming the missing and unexpected parameters, or a shape that disagrees.

    Example:
        from safetensors.numpy import load_file
        models = from_huggingface(json.load(open("config.json")), load_file("model.safetensors"))
    """
    weights = strip_prefix(weights)
    # A file may keep either name of a tied pair (save_pretrained drops the duplicates).
    for name, alias in (("lm_head.bias", "lm_head.decoder.bias"),
                        ("embeddings.word_embeddings.weight", "lm_head.decoder.weight")):
        if name not in weights and alias in weights:
            weights[name] = weights[alias]
    has_head = any(n.startswith("lm_head.") for n in weights)
    kwargs = backbone_config_from_huggingface(config)
    backbone = RobertaBackbone(**kwargs)
    pretrainer = RobertaPretrainer(backbone) if has_head else None
    # lm_head.decoder is the word table (tied); its bias is lm_head.bias.
    check_tied(weights, {"lm_head.decoder.weight": "embeddings.word_embeddings.weight",
                          "lm_head.decoder.bias": "lm_head.bias"})
    names = _name_map(kwargs["num_layers"], kwargs["num_heads"], has_head)
    not_loaded = assign_weights(
        pretrainer or backbone, weights, names,
        optional=("pooler.dense.weight", "pooler.dense.bias"),
        ignored=_BUFFERS + ("lm_head.decoder.weight", "lm_head.decoder.bias"))
    return {"backbone": backbone, "pretrainer": pretrainer, "not_in_checkpoint": not_loaded}
