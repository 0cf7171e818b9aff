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
from garden.models.conversion import (HF_BERT_LAYER, NameTable, assign_weights,
                                      check_bert_style_config, check_tied, hf_bert_encoder_names,
                                      hf_bert_sizes, strip_prefix)
from garden.models.roberta.backbone import RobertaBackbone
from garden.models.roberta.pretrainer import RobertaPretrainer

# Buffers some transformers versions save with the weights; they carry no parameters.
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")


def backbone_config_from_huggingface(config: Mapping) -> Dict:
    """RobertaBackbone arguments from a Hugging Face RobertaConfig dict (config.json)."""
    check_bert_style_config(config, "RoBERTa")
    padding_idx = int(config.get("pad_token_id", 1))
    return dict(
        **hf_bert_sizes(config),
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


def _name_map(num_layers: int, num_heads: int, pretrainer: bool) -> NameTable:
    """HF name (without `roberta.`) -> (our variable path, transform).

    Below the heads HF RoBERTa uses BERT's parameter names and our backbones BERT's variable
    paths, so the encoder table is the shared one of garden.models.conversion.
    """
    names = {**hf_bert_encoder_names(num_layers, num_heads),
             **HF_BERT_LAYER.dense("pooler.dense", "pooler_dense")}
    names["embeddings.token_type_embeddings.weight"] = (
        "embeddings/segment_embedding/embeddings", _first_row)
    if pretrainer:
        names.update({
            **HF_BERT_LAYER.masked_lm_head("lm_head.dense", "lm_head.layer_norm", "lm_head.bias"),
        })
    return names


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
    weights = strip_prefix(weights, "roberta.")
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
