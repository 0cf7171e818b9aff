"""Hugging Face BART checkpoints (BartModel, BartForConditionalGeneration) -> BartSeq2SeqLM.

Strict: every parameter of the checkpoint maps to one garden variable and every garden
variable is assigned (garden.models.conversion.assign_weights names the missing and the
unexpected ones). Names are state-dict names with or without the `model.` prefix. The token
table appears as shared.weight, encoder.embed_tokens.weight, decoder.embed_tokens.weight and
lm_head.weight (tied; a file may keep any of them) and must hold one value. final_logits_bias
[1, V] (a buffer of BartForConditionalGeneration) becomes BartSeq2SeqLM's [V] weight; a
BartModel checkpoint lacks it (left at zero, reported in not_in_checkpoint).

Hugging Face layer -> garden block: self_attn.{q,k,v,out}_proj -> (self_)attention/{query,
key,value,attention_output}; encoder_attn -> cross_attention; self_attn_layer_norm ->
(self_)attention_layer_norm; encoder_attn_layer_norm -> cross_attention_layer_norm; fc1 / fc2
-> intermediate_dense / output_dense; final_layer_norm -> output_layer_norm (the block's last
LayerNorm, not a stack-final one: BART has none).

The stacks may differ in depth (encoder_layers != decoder_layers: the distilled BARTs,
distilbart-cnn-12-6 and distilbart-xsum-12-3, keep 12 encoder layers and 6 or 3 decoder
layers): the backbone gets num_decoder_layers and the table maps each stack's own layers. Their
widths must agree (decoder_attention_heads, decoder_ffn_dim: refused otherwise).
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional

import numpy as np

from garden.models.bart.backbone import POSITION_OFFSET, BartBackbone, BartSeq2SeqLM
from garden.models.conversion import (LayerNames, NameTable, assign_weights,
                                      attention_output_kernel, check_tied, encoder_layer_names,
                                      identity, qkv_bias, qkv_kernel, strip_prefix)

HF_BART_LAYER = LayerNames("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                           "self_attn.out_proj", "self_attn_layer_norm", "fc1", "fc2",
                           "final_layer_norm")
_TABLE = "shared.weight"
_TIED = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight")


def backbone_config_from_huggingface(config: Mapping) -> Dict:
    """BartBackbone arguments from a Hugging Face BartConfig dict; refuses what BART's
    garden architecture cannot express (with the config key named)."""
    refusals = {
        "activation_function": (config.get("activation_function", "gelu"), "gelu"),
        "scale_embedding": (bool(config.get("scale_embedding", False)), False),
        "normalize_before": (bool(config.get("normalize_before", False)), False),
        "add_final_layer_norm": (bool(config.get("add_final_layer_norm", False)), False),
        "tie_word_embeddings": (bool(config.get("tie_word_embeddings", True)), True),
        "decoder_attention_heads": (config.get("decoder_attention_heads"),
                                    config.get("encoder_attention_heads")),
        "decoder_ffn_dim": (config.get("decoder_ffn_dim"), config.get("encoder_ffn_dim")),
    }
    for key, (value, wanted) in refusals.items():
        if value != wanted:
            raise ValueError(f"BART config {key}={value!r} is not supported: the garden BART "
                             f"needs {wanted!r} (exact GELU, no embedding scaling, post-LN "
                             "without final LayerNorms, tied table, stacks of one width)")
    encoder_layers = int(config["encoder_layers"])
    decoder_layers = int(config.get("decoder_layers") or encoder_layers)
    return dict(
        vocab_size=int(config["vocab_size"]), num_layers=encoder_layers,
        hidden_size=int(config["d_model"]), num_heads=int(config["encoder_attention_heads"]),
        intermediate_size=int(config["encoder_ffn_dim"]),
        max_sequence_length=int(config["max_position_embeddings"]),
        dropout=float(config.get("dropout", 0.1)),
        attention_dropout=float(config.get("attention_dropout", 0.0)),
        initializer_range=float(config.get("init_std", 0.02)), layer_norm_epsilon=1e-5,
        num_decoder_layers=None if decoder_layers == encoder_layers else decoder_layers)


def _attention(source: str, garden: str, num_heads: int) -> NameTable:
    """q/k/v/out projections of one Hugging Face BartAttention (`source` + "q_proj" ...) ->
    the garden MultiHeadAttention at `garden`."""
    parts = {"q_proj": ("query", qkv_kernel(num_heads), qkv_bias(num_heads)),
             "k_proj": ("key", qkv_kernel(num_heads), qkv_bias(num_heads)),
             "v_proj": ("value", qkv_kernel(num_heads), qkv_bias(num_heads)),
             "out_proj": ("attention_output", attention_output_kernel(num_heads), identity)}
    table: NameTable = {}
    for hf, (part, kernel, bias) in parts.items():
        table[f"{source}{hf}.weight"] = (f"{garden}/{part}/kernel", kernel)
        table[f"{source}{hf}.bias"] = (f"{garden}/{part}/bias", bias)
    return table


def _name_map(num_layers: int, num_decoder_layers: int, num_heads: int,
              lm_bias_path: str) -> NameTable:
    names: NameTable = {
        _TABLE: ("token_embedding/embeddings", identity),
        "final_logits_bias": (lm_bias_path, lambda x: x.reshape(-1)),
    }
    for stack in ("encoder", "decoder"):
        names[f"{stack}.embed_positions.weight"] = (f"{stack}_position_embedding/embeddings",
                                                    identity)
        names.update(HF_BART_LAYER.layer_norm(f"{stack}.layernorm_embedding",
                                              f"{stack}_embeddings_layer_norm"))
    for n in range(num_layers):
        names.update(encoder_layer_names(HF_BART_LAYER, f"encoder.layers.{n}.",
                                         f"transformer_layer_{n}/", num_heads))
    for n in range(num_decoder_layers):
        s, d = f"decoder.layers.{n}.", f"decoder_layer_{n}/"
        names.update(_attention(f"{s}self_attn.", f"{d}self_attention", num_heads))
        names.update(_attention(f"{s}encoder_attn.", f"{d}cross_attention", num_heads))
        names.update(HF_BART_LAYER.layer_norm(f"{s}self_attn_layer_norm",
                                              f"{d}self_attention_layer_norm"))
        names.update(HF_BART_LAYER.layer_norm(f"{s}encoder_attn_layer_norm",
                                              f"{d}cross_attention_layer_norm"))
        names.update(HF_BART_LAYER.dense(f"{s}fc1", f"{d}intermediate_dense"))
        names.update(HF_BART_LAYER.dense(f"{s}fc2", f"{d}output_dense"))
        names.update(HF_BART_LAYER.layer_norm(f"{s}final_layer_norm", f"{d}output_layer_norm"))
    return names


def from_huggingface(config: Mapping, weights: Mapping[str, np.ndarray]) -> Dict[str, Optional[object]]:
    """Our BART from a Hugging Face BartModel or BartForConditionalGeneration checkpoint.

    Returns:
        {"backbone": BartBackbone, "lm": BartSeq2SeqLM (final_logits_bias loaded),
         "pretrainer": the same BartSeq2SeqLM (what garden.convert saves),
         "not_in_checkpoint": ["final_logits_bias"] for a BartModel checkpoint, else []}.

    Raises:
        ValueError naming the missing and unexpected parameters, a shape that disagrees, an
        untied token table, or a config the garden BART cannot express.

    Example:
        from safetensors.numpy import load_file
        models = from_huggingface(json.load(open("config.json")), load_file("model.safetensors"))
    """
    weights = strip_prefix(weights, "model.")
    check_tied(weights, {name: _TABLE for name in _TIED})
    present = [n for n in (_TABLE,) + _TIED if n in weights]
    for name in present[1:]:
        if not np.array_equal(weights[name], weights[present[0]]):
            raise ValueError(f"{name} is not tied to {present[0]}: the garden BART keeps one "
                             "token table, so an untied checkpoint cannot be imported")
    if present and _TABLE not in weights:
        weights[_TABLE] = weights[present[0]]
    kwargs = backbone_config_from_huggingface(config)
    backbone = BartBackbone(**kwargs)
    lm = BartSeq2SeqLM(backbone)
    rows = kwargs["max_sequence_length"] + POSITION_OFFSET
    for stack in ("encoder", "decoder"):
        shape = np.shape(weights.get(f"{stack}.embed_positions.weight", np.zeros((rows, 0))))
        if shape[0] != rows:
            raise ValueError(f"{stack}.embed_positions.weight has {shape[0]} rows; BART's "
                             f"max_position_embeddings {rows - POSITION_OFFSET} needs {rows}")
    names = _name_map(kwargs["num_layers"], len(backbone.decoder_blocks), kwargs["num_heads"],
                      lm.final_logits_bias.path)
    not_loaded = assign_weights(lm, weights, names, source="BART checkpoint",
                                optional=("final_logits_bias",), ignored=_TIED)
    return {"backbone": backbone, "lm": lm, "pretrainer": lm, "not_in_checkpoint": not_loaded}
