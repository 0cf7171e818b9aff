"""BERT weights from other implementations: Hugging Face, original Google TF1, Model Garden.

Each converter takes the source's config and a flat dict of named numpy arrays and returns
`{"backbone": BertBackbone, "pretrainer": BertPretrainer or None}`. The pretrainer is built only
when the checkpoint holds both pretraining heads (masked LM and next sentence).

The mapping of every source is a name table {source name: (garden weight path, transform)}
built from garden.models.conversion's shared pieces (the encoder layer's table, the layout
transforms). All three go through `_assemble` -> garden.models.conversion.assign_weights, which
refuses a partial load and names every missing, unexpected or misshapen weight.

Layout differences beyond garden.models.conversion's (checked in tests/test_convert_bert.py):
- TF1 `cls/seq_relationship/output_weights` is [2, H] ([out, in], used with transpose_b).
- Hugging Face "gelu" and our backbone are the exact erf GELU. The original TF1 code used the
  tanh approximation under the same config name; Hugging Face imports those checkpoints as
  exact GELU too, and so do we (trained BERT weights change by far less than fine-tuning noise).
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, Tuple

import numpy as np

from garden.models.bert.backbone import BertBackbone
from garden.models.bert.pretrainer import BertPretrainer
from garden.models.conversion import (HF_BERT_LAYER, TF1_BERT_LAYER, NameTable, assign_weights,
                                      check_bert_style_config, check_tied, encoder_layer_names,
                                      hf_bert_encoder_names, hf_bert_sizes, identity,
                                      invert_weights, linear_kernel, special_token_ids)


# --- configs ----------------------------------------------------------------------------------

def backbone_kwargs_from_bert_config(config: Dict) -> Dict:
    """BertBackbone arguments from a Hugging Face config.json or a TF1 bert_config.json.

    Both use the names of the original bert_config.json; Hugging Face adds layer_norm_eps
    (TF1 hard-codes 1e-12). Settings the garden backbone cannot express raise ValueError.
    """
    check_bert_style_config(config, "BERT")
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                           "num_attention_heads", "intermediate_size") if k not in config]
    if missing:
        raise ValueError(f"BERT config lacks {missing}")
    return dict(
        **hf_bert_sizes(config),
        max_sequence_length=int(config.get("max_position_embeddings", 512)),
        type_vocab_size=int(config.get("type_vocab_size", 2)),
        dropout=float(config.get("hidden_dropout_prob", 0.1)),
        initializer_range=float(config.get("initializer_range", 0.02)),
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-12)),
    )


# --- the shared assembly ----------------------------------------------------------------------

def _assemble(kwargs: Dict, names: NameTable, weights: Dict[str, np.ndarray], source: str,
              ignore: Iterable[str] = (), tied: Iterable[Tuple[str, str]] = (),
              with_heads: bool = False) -> Dict:
    """Builds the garden models and assigns every weight of `names` (assign_weights: refuses
    partial loads, names every missing or unexpected weight).

    ignore: regexes of source names that are not model weights (optimizer slots, buffers).
    tied: (source name, name it must equal) pairs allowed to appear as duplicates of a tied
        tensor (e.g. the MLM decoder = word table); a differing copy is an error, since the
        garden MLM head is always tied.
    """
    tied = dict(tied)
    for name, equal_to in tied.items():
        if name in weights and equal_to not in weights:
            raise ValueError(f"{source}: {name} is not tied to {equal_to} (absent); the garden "
                             "BertPretrainer ties its MLM output to the word table")
    check_tied(weights, tied)
    backbone = BertBackbone(**kwargs)
    pretrainer = BertPretrainer(backbone) if with_heads else None
    assign_weights(pretrainer or backbone, weights, names,
                   source=f"{source} (BERT config {kwargs})", ignored=tied,
                   ignored_patterns=ignore)
    return {"backbone": backbone, "pretrainer": pretrainer}


# --- Hugging Face -----------------------------------------------------------------------------

def _hf_mapping(num_layers: int, num_heads: int, with_heads: bool) -> NameTable:
    L = HF_BERT_LAYER
    names = {**hf_bert_encoder_names(num_layers, num_heads),
             **L.dense("pooler.dense", "pooler_dense")}
    if with_heads:
        names.update({
            **L.masked_lm_head("cls.predictions.transform.dense",
                               "cls.predictions.transform.LayerNorm", "cls.predictions.bias"),
            **L.dense("cls.seq_relationship", "next_sentence_head"),
        })
    return names


def _normalize_hf_names(weights: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Drops the `bert.` prefix and renames the LayerNorm gamma/beta of old checkpoints."""
    out = {}
    for name, value in weights.items():
        key = name[len("bert."):] if name.startswith("bert.") else name
        key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key)
        key = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)
        if key in out:
            raise ValueError(f"parameter {name} appears twice (with and without 'bert.' prefix)")
        out[key] = value
    return out


def from_huggingface(config: Dict, weights: Dict[str, np.ndarray]) -> Dict:
    """Garden BERT from a Hugging Face BertModel / BertForPreTraining state dict.

    Args:
        config: the parsed config.json (model_type "bert").
        weights: Hugging Face parameter name (with or without "bert.") -> numpy array.

    Returns:
        {"backbone": BertBackbone, "pretrainer": BertPretrainer or None}; the pretrainer when
        the weights hold cls.predictions.* and cls.seq_relationship.* (BertForPreTraining).

    Example:
        models = from_huggingface(json.load(open("config.json")), safetensors.numpy.load_file(path))
    """
    kwargs = backbone_kwargs_from_bert_config(config)
    weights = _normalize_hf_names(weights)
    with_heads = any(n.startswith("cls.") for n in weights)
    return _assemble(
        kwargs, _hf_mapping(kwargs["num_layers"], kwargs["num_heads"], with_heads), weights,
        source="Hugging Face BERT",
        # position_ids / token_type_ids are registered buffers that older versions saved.
        ignore=[r"^embeddings\.(position_ids|token_type_ids)$"],
        tied=[("cls.predictions.decoder.weight", "embeddings.word_embeddings.weight"),
              ("cls.predictions.decoder.bias", "cls.predictions.bias")],
        with_heads=with_heads)


# --- original Google BERT (TF1, name-based checkpoints) ---------------------------------------

def _tf1_mapping(num_layers: int, num_heads: int, with_heads: bool) -> NameTable:
    i, L = identity, TF1_BERT_LAYER
    outer: NameTable = {
        "bert/embeddings/word_embeddings": ("embeddings/token_embedding/embeddings", i),
        "bert/embeddings/position_embeddings": ("embeddings/position_embedding/embeddings", i),
        "bert/embeddings/token_type_embeddings": ("embeddings/segment_embedding/embeddings", i),
        **L.layer_norm("bert/embeddings/LayerNorm", "embeddings/layer_norm"),
        **L.dense("bert/pooler/dense", "pooler_dense"),
    }
    if with_heads:
        outer.update({
            **L.masked_lm_head("cls/predictions/transform/dense",
                               "cls/predictions/transform/LayerNorm", "cls/predictions/output_bias"),
            # [2, H]: run_pretraining.py multiplies with transpose_b=True.
            "cls/seq_relationship/output_weights": ("next_sentence_head/kernel", linear_kernel),
            "cls/seq_relationship/output_bias": ("next_sentence_head/bias", i),
        })
    for n in range(num_layers):
        outer.update(encoder_layer_names(L, f"bert/encoder/layer_{n}/",
                                         f"transformer_layer_{n}/", num_heads))
    return outer


def from_tf1(config: Dict, weights: Dict[str, np.ndarray]) -> Dict:
    """Garden BERT from an original google-research/bert TF1 checkpoint.

    Args:
        config: the bert_config.json dict.
        weights: variable name (e.g. "bert/encoder/layer_0/attention/self/query/kernel") ->
            numpy array, as `tf.train.load_checkpoint(prefix).get_tensor(name)` returns them.
            Adam slots (…/adam_m, …/adam_v) and global_step are skipped.

    Returns:
        {"backbone": BertBackbone, "pretrainer": BertPretrainer or None}; the pretrainer when
        the checkpoint holds cls/predictions/* and cls/seq_relationship/* (pretraining
        checkpoints such as uncased_L-12_H-768_A-12/bert_model.ckpt do).
    """
    kwargs = backbone_kwargs_from_bert_config(config)
    with_heads = any(n.startswith("cls/") for n in weights)
    return _assemble(
        kwargs, _tf1_mapping(kwargs["num_layers"], kwargs["num_heads"], with_heads), weights,
        source="TF1 BERT", ignore=[r"/adam_[mv]$", r"^global_step$"], with_heads=with_heads)


# --- tf-models-official (Model Garden) BertEncoder --------------------------------------------

def _model_garden_mapping(num_layers: int) -> NameTable:
    """Model Garden's layers are Keras MultiHeadAttention / EinsumDense with our layouts."""
    i = identity
    m: NameTable = {
        "word_embeddings/embeddings": ("embeddings/token_embedding/embeddings", i),
        "position_embedding/embeddings": ("embeddings/position_embedding/embeddings", i),
        "type_embeddings/embeddings": ("embeddings/segment_embedding/embeddings", i),
        "embeddings/layer_norm/gamma": ("embeddings/layer_norm/gamma", i),
        "embeddings/layer_norm/beta": ("embeddings/layer_norm/beta", i),
        "pooler_transform/kernel": ("pooler_dense/kernel", i),
        "pooler_transform/bias": ("pooler_dense/bias", i),
    }
    for n in range(num_layers):
        s, d = f"transformer/layer_{n}/", f"transformer_layer_{n}/"
        parts = [(f"self_attention/{p}", f"attention/{p}", ("kernel", "bias"))
                 for p in ("query", "key", "value", "attention_output")]
        parts += [("self_attention_layer_norm", "attention_layer_norm", ("gamma", "beta")),
                  ("output_layer_norm", "output_layer_norm", ("gamma", "beta")),
                  ("intermediate", "intermediate_dense", ("kernel", "bias")),
                  ("output", "output_dense", ("kernel", "bias"))]
        for src, dst, kinds in parts:
            m.update({f"{s}{src}/{k}": (f"{d}{dst}/{k}", i) for k in kinds})
    return m


def _strip_model_garden_names(names: Iterable[str], expected: Iterable[str]) -> Dict[str, str]:
    """Variable name -> canonical name: drops ':0' and any outer scope (a pretrainer or a
    model name around the encoder) in front of a name the mapping knows."""
    expected = set(expected)
    out = {}
    for name in names:
        key = name[:-2] if name.endswith(":0") else name
        parts = key.split("/")
        canonical = next(("/".join(parts[k:]) for k in range(len(parts))
                          if "/".join(parts[k:]) in expected), key)
        out[name] = canonical
    return out


def from_model_garden(config: Dict, weights: Dict[str, np.ndarray]) -> Dict:
    """Garden BERT from the variables of a tf-models-official `BertEncoder`.

    Args:
        config: the encoder's constructor arguments, as `BertEncoder.get_config()` returns
            them (vocab_size, hidden_size, num_layers, num_attention_heads, inner_dim,
            max_sequence_length, type_vocab_size, output_dropout, embedding_width, norm_first).
            The activation is not checked here (its config entry is only a name); see
            garden.models.bert.model_garden.check_activation.
        weights: variable name (e.g. "transformer/layer_0/self_attention/query/kernel:0") ->
            numpy array.

    Returns:
        {"backbone": BertBackbone, "pretrainer": None}: an encoder has no pretraining heads.
    """
    hidden = int(config["hidden_size"])
    if config.get("norm_first"):
        raise ValueError("norm_first=True (pre-LN) encoders are not BERT; not supported")
    if config.get("embedding_width") not in (None, hidden):
        raise ValueError(f"embedding_width={config['embedding_width']} != hidden_size {hidden}: "
                         "factorized embeddings are not BERT (see the ALBERT converter)")
    kwargs = dict(
        vocab_size=int(config["vocab_size"]),
        num_layers=int(config["num_layers"]),
        hidden_size=hidden,
        num_heads=int(config["num_attention_heads"]),
        intermediate_size=int(config["inner_dim"]),
        max_sequence_length=int(config["max_sequence_length"]),
        type_vocab_size=int(config["type_vocab_size"]),
        dropout=float(config.get("output_dropout", 0.1)),
        # Model Garden's TransformerEncoderBlock default norm_epsilon.
        layer_norm_epsilon=float(config.get("norm_epsilon", 1e-12)),
    )
    mapping = _model_garden_mapping(kwargs["num_layers"])
    canonical = _strip_model_garden_names(weights, mapping)
    renamed = {}
    for name, key in canonical.items():
        if key in renamed:
            raise ValueError(f"two Model Garden variables map to {key}: is more than one "
                             "encoder in the weights?")
        renamed[key] = weights[name]
    return _assemble(kwargs, mapping, renamed, source="Model Garden BertEncoder")


# --- back to Hugging Face (garden.to_huggingface) ---------------------------------------------

def to_huggingface(config: Dict, weights: Dict[str, np.ndarray],
                   tokens: Iterable[str] = ()) -> Tuple[Dict, Dict]:
    """(config.json, state dict) of the Hugging Face BertModel (BertForPreTraining when
    `weights` hold the pretrainer's heads) equal to a garden BERT: the inverse of
    from_huggingface through the same name table.

    Args:
        config: the BertBackbone's get_config().
        weights: garden weight path -> array, the backbone's (or its BertPretrainer's).
        tokens: the vocabulary's token strings by id (pad_token_id is [PAD]'s).
    """
    if config.get("num_heads_per_layer"):
        raise ValueError("a pruned BERT (num_heads_per_layer) has no Hugging Face config here; "
                         "write the unpruned model")
    with_heads = "masked_lm_head/output_bias" in weights
    hf = {"model_type": "bert",
          "architectures": ["BertForPreTraining" if with_heads else "BertModel"],
          "vocab_size": config["vocab_size"], "hidden_size": config["hidden_size"],
          "num_hidden_layers": config["num_layers"],
          "num_attention_heads": config["num_heads"],
          "intermediate_size": config["intermediate_size"], "hidden_act": "gelu",
          "max_position_embeddings": config["max_sequence_length"],
          "type_vocab_size": config["type_vocab_size"],
          "hidden_dropout_prob": config["dropout"],
          "attention_probs_dropout_prob": config["dropout"],
          "initializer_range": config["initializer_range"],
          "layer_norm_eps": config["layer_norm_epsilon"],
          "position_embedding_type": "absolute", "tie_word_embeddings": True,
          **special_token_ids(tokens, {"pad_token_id": "[PAD]"})}
    state = invert_weights(weights, _hf_mapping(config["num_layers"], config["num_heads"],
                                                with_heads), source="Hugging Face BERT")
    # BertForPreTraining's base model is `bert.`; its MLM decoder (weight and bias) is tied to
    # the word table and cls.predictions.bias, so, as save_pretrained does, it is not written.
    if with_heads:
        state = {(n if n.startswith("cls.") else f"bert.{n}"): v for n, v in state.items()}
    return hf, state
