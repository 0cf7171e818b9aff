"""Hugging Face ALBERT checkpoints -> AlbertBackbone / AlbertPretrainer.

`from_huggingface(config, weights)` takes the parsed config.json and the state dict as NumPy
arrays (garden.convert reads safetensors / pytorch_model.bin) and returns our models with those
weights. It understands AlbertModel (names without a prefix) and the models that wrap it under
`albert.` (AlbertForPreTraining, ...), with the heads `predictions.*` (masked LM) and
`sop_classifier.*` (sentence order). Every checkpoint name must be used and every weight of our
model filled: anything else is a ValueError that names the offenders. (So an AlbertForMaskedLM
saved by transformers, which has neither the pooler nor the SOP head, is refused rather than
returned with freshly initialised parts.)

torch.nn.Linear stores [out, in]; Keras Dense kernels are [in, out], and the
MultiHeadAttention projections are [H, heads, head_dim] (query/key/value) and
[heads, head_dim, H] (output), hence the transposes and reshapes below.
"""

from __future__ import annotations

import re
from typing import Dict, Mapping

import numpy as np

from garden.models.albert.backbone import AlbertBackbone
from garden.models.albert.pretrainer import AlbertPretrainer
from garden.models.conversion import (HF_ALBERT_LAYER, NameTable, assign_weights, check_tied,
                                      encoder_layer_names, identity, strip_prefix)

# Hugging Face hidden_act -> our activation name ("gelu" is the exact erf form in both).
_ACTIVATIONS = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "gelu": "gelu",
                "relu": "relu", "silu": "silu", "swish": "silu", "tanh": "tanh"}
# Non-persistent buffers that older checkpoints still carry; they hold no weights.
_IGNORED = ("embeddings.position_ids", "embeddings.token_type_ids")


def backbone_config_from_huggingface(config: Mapping) -> Dict:
    """AlbertBackbone arguments for a Hugging Face AlbertConfig (as a dict)."""
    if config.get("inner_group_num", 1) != 1:
        raise ValueError(f"inner_group_num={config['inner_group_num']} is not supported: "
                         "every released ALBERT uses 1 (one Transformer layer per group)")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"position_embedding_type={config['position_embedding_type']!r} is "
                         "not supported: only 'absolute' (learned positions)")
    act = config.get("hidden_act", "gelu_new")
    if act not in _ACTIVATIONS:
        raise ValueError(f"hidden_act={act!r} is not supported; known: {sorted(_ACTIVATIONS)}")
    return dict(
        vocab_size=config.get("vocab_size", 30000),
        num_layers=config.get("num_hidden_layers", 12),
        hidden_size=config.get("hidden_size", 4096),
        num_heads=config.get("num_attention_heads", 64),
        intermediate_size=config.get("intermediate_size", 16384),
        embedding_size=config.get("embedding_size", 128),
        max_sequence_length=config.get("max_position_embeddings", 512),
        type_vocab_size=config.get("type_vocab_size", 2),
        num_groups=config.get("num_hidden_groups", 1),
        share="all",
        # One rate for both: ALBERT v1 has 0.1 and v2 0.0 for hidden and attention dropout alike.
        dropout=config.get("hidden_dropout_prob", 0.0),
        initializer_range=config.get("initializer_range", 0.02),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
        activation=_ACTIVATIONS[act],
    )


def from_huggingface(config: Mapping, weights: Mapping[str, np.ndarray]) -> Dict:
    """Builds our ALBERT from a Hugging Face config and state dict.

    Args:
        config: the checkpoint's config.json as a dict (AlbertConfig fields).
        weights: parameter name -> array, e.g. "albert.encoder.embedding_hidden_mapping_in.weight".

    Returns:
        {"backbone": AlbertBackbone, "pretrainer": AlbertPretrainer or None}; the pretrainer
        (sharing the backbone's variables) when the checkpoint has the `predictions.*` heads.

    Raises:
        ValueError: unsupported config, a weight of the wrong shape, checkpoint names that were
            not used, or weights of our model that the checkpoint does not provide.
    """
    names = strip_prefix(weights, "albert.")
    backbone = AlbertBackbone(**backbone_config_from_huggingface(config))
    has_heads = any(n.startswith(("predictions.", "sop_classifier.")) for n in names)
    pretrainer = AlbertPretrainer(backbone) if has_heads else None
    # The decoder is tied in Hugging Face too; a checkpoint may repeat it. Our model has one
    # table and one bias, so a copy that differs cannot be represented.
    tied = {"predictions.decoder.weight": "embeddings.word_embeddings.weight",
            "predictions.decoder.bias": "predictions.bias"}
    check_tied(names, tied)
    assign_weights(pretrainer or backbone, names, _hf_names(backbone, has_heads),
                   source="Hugging Face ALBERT", ignored=set(_IGNORED) | set(tied))
    return {"backbone": backbone, "pretrainer": pretrainer}


def _hf_names(backbone: AlbertBackbone, has_heads: bool) -> NameTable:
    """Hugging Face ALBERT name -> (our path, transform): one entry per distinct block (layer
    group g is our block g), the factorized embedding projection, pooler and heads."""
    L = HF_ALBERT_LAYER
    names: NameTable = {
        "embeddings.word_embeddings.weight": ("embeddings/token_embedding/embeddings", identity),
        "embeddings.position_embeddings.weight": ("embeddings/position_embedding/embeddings",
                                                  identity),
        "embeddings.token_type_embeddings.weight": ("embeddings/segment_embedding/embeddings",
                                                    identity),
        **L.layer_norm("embeddings.LayerNorm", "embeddings/layer_norm"),
        **L.dense("encoder.embedding_hidden_mapping_in", "embeddings/projection"),
        **L.dense("pooler", "pooler_dense"),
    }
    for g, block in enumerate(backbone.encoder_blocks):
        names.update(encoder_layer_names(L, f"encoder.albert_layer_groups.{g}.albert_layers.0.",
                                         f"{block.name}/", backbone.num_heads))
    if has_heads:
        names.update({
            **L.masked_lm_head("predictions.dense", "predictions.LayerNorm", "predictions.bias"),
            **L.dense("sop_classifier.classifier", "sentence_order_head"),
        })
    return names


# --- original Google ALBERT (TF1, name-based checkpoints) -------------------------------------

# (TF1 variable name pattern, Hugging Face name, transpose): the released google-research/albert
# checkpoints (modeling.py scopes). Kernels of tf.layers.dense are [in, out], torch Linear
# weights [out, in]; cls/seq_relationship/output_weights is already [2, H] (used with
# transpose_b). Converting the names and then going through from_huggingface keeps one set of
# shape checks and one report of missing / unexpected weights.
_TF1_RULES = [
    (r"bert/embeddings/(word|position|token_type)_embeddings", r"embeddings.\1_embeddings.weight", False),
    (r"bert/embeddings/LayerNorm/gamma", "embeddings.LayerNorm.weight", False),
    (r"bert/embeddings/LayerNorm/beta", "embeddings.LayerNorm.bias", False),
    (r"bert/encoder/embedding_hidden_mapping_in/kernel", "encoder.embedding_hidden_mapping_in.weight", True),
    (r"bert/encoder/embedding_hidden_mapping_in/bias", "encoder.embedding_hidden_mapping_in.bias", False),
    (r"bert/encoder/transformer/group_(\d+)/inner_group_0/attention_1/self/(query|key|value)/kernel",
     r"encoder.albert_layer_groups.\1.albert_layers.0.attention.\2.weight", True),
    (r"bert/encoder/transformer/group_(\d+)/inner_group_0/attention_1/self/(query|key|value)/bias",
     r"encoder.albert_layer_groups.\1.albert_layers.0.attention.\2.bias", False),
    (r"bert/encoder/transformer/group_(\d+)/inner_group_0/attention_1/output/dense/kernel",
     r"encoder.albert_layer_groups.\1.albert_layers.0.attention.dense.weight", True),
    (r"bert/encoder/transformer/group_(\d+)/inner_group_0/attention_1/output/dense/bias",
     r"encoder.albert_layer_groups.\1.albert_layers.0.attention.dense.bias", False),
    (r"bert/encoder/transformer/group_(\d+)/inner_group_0/LayerNorm/gamma",
     r"encoder.albert_layer_groups.\1.albert_layers.0.attention.LayerNorm.weight", False),
    (r"bert/encoder/transformer/group_(\d+)/inner_group_0/LayerNorm/beta",
     r"encoder.albert_layer_groups.\1.albert_layers.0.attention.LayerNorm.bias", False),
    (r"bert/encoder/transformer/group_(\d+)/inner_group_0/ffn_1/intermediate/dense/kernel",
     r"encoder.albert_layer_groups.\1.albert_layers.0.ffn.weight", True),
    (r"bert/encoder/transformer/group_(\d+)/inner_group_0/ffn_1/intermediate/dense/bias",
     r"encoder.albert_layer_groups.\1.albert_layers.0.ffn.bias", False),
    (r"bert/encoder/transformer/group_(\d+)/inner_group_0/ffn_1/intermediate/output/dense/kernel",
     r"encoder.albert_layer_groups.\1.albert_layers.0.ffn_output.weight", True),
    (r"bert/encoder/transformer/group_(\d+)/inner_group_0/ffn_1/intermediate/output/dense/bias",
     r"encoder.albert_layer_groups.\1.albert_layers.0.ffn_output.bias", False),
    (r"bert/encoder/transformer/group_(\d+)/inner_group_0/LayerNorm_1/gamma",
     r"encoder.albert_layer_groups.\1.albert_layers.0.full_layer_layer_norm.weight", False),
    (r"bert/encoder/transformer/group_(\d+)/inner_group_0/LayerNorm_1/beta",
     r"encoder.albert_layer_groups.\1.albert_layers.0.full_layer_layer_norm.bias", False),
    (r"bert/pooler/dense/kernel", "pooler.weight", True),
    (r"bert/pooler/dense/bias", "pooler.bias", False),
    (r"cls/predictions/transform/dense/kernel", "predictions.dense.weight", True),
    (r"cls/predictions/transform/dense/bias", "predictions.dense.bias", False),
    (r"cls/predictions/transform/LayerNorm/gamma", "predictions.LayerNorm.weight", False),
    (r"cls/predictions/transform/LayerNorm/beta", "predictions.LayerNorm.bias", False),
    (r"cls/predictions/output_bias", "predictions.bias", False),
    (r"cls/seq_relationship/output_weights", "sop_classifier.classifier.weight", False),
    (r"cls/seq_relationship/output_bias", "sop_classifier.classifier.bias", False),
]
# Not model weights: optimizer slots (Adam / LAMB), step counters.
_TF1_IGNORED = (r"/adam_[mv]$", r"/(lamb|Lamb)_[mv]$", r"^global_step$", r"^bad_steps$",
                r"^loss_scale$", r"^good_steps$")


def _rename_tf1(weights: Mapping[str, np.ndarray], rules, ignored, source: str) -> Dict[str, np.ndarray]:
    """TF1 variable names -> Hugging Face names (transposing dense kernels); a name that no rule
    knows is a ValueError naming it, so nothing is silently dropped."""
    compiled = [(re.compile(f"^{p}$"), r, t) for p, r, t in rules]
    skip = [re.compile(p) for p in ignored]
    out, unknown = {}, []
    for name, value in weights.items():
        if any(s.search(name) for s in skip):
            continue
        for pattern, replacement, transpose in compiled:
            if pattern.match(name):
                value = np.asarray(value)
                out[pattern.sub(replacement, name)] = value.T if transpose else value
                break
        else:
            unknown.append(name)
    if unknown:
        raise ValueError(f"{source} checkpoint has variables this converter does not know: "
                         f"{sorted(unknown)[:20]}")
    return out


def hf_config_from_tf1(config: Mapping) -> Dict:
    """The albert_config.json of an original checkpoint, as a Hugging Face AlbertConfig dict.

    Google's ALBERT modeling.py computes "gelu" with the tanh approximation, which Hugging Face
    calls "gelu_new" (its converted ALBERT configs say so); the other names are shared.
    """
    config = dict(config)
    if config.get("hidden_act", "gelu") == "gelu":
        config["hidden_act"] = "gelu_new"
    if config.get("net_structure_type", 0) != 0:
        raise ValueError(f"albert_config net_structure_type={config['net_structure_type']} is "
                         "not supported (every released ALBERT uses 0)")
    return config


def from_tf1(config: Mapping, weights: Mapping[str, np.ndarray]) -> Dict:
    """Builds our ALBERT from an original google-research/albert TF1 checkpoint.

    Args:
        config: the albert_config.json dict (vocab_size, embedding_size, hidden_size,
            num_hidden_layers, num_hidden_groups, inner_group_num, ...).
        weights: variable name (e.g. "bert/encoder/transformer/group_0/inner_group_0/
            attention_1/self/query/kernel") -> array, as tf.train.load_checkpoint reads them.
            Optimizer slots and global_step are skipped.

    Returns:
        {"backbone": AlbertBackbone, "pretrainer": AlbertPretrainer or None}; the pretrainer
        when the checkpoint holds the cls/predictions and cls/seq_relationship heads.

    Example:
        models = garden.convert.load_tf1("albert_base/model.ckpt-best", "albert", "albert_base/albert_config.json")
    """
    renamed = _rename_tf1(weights, _TF1_RULES, _TF1_IGNORED, "TF1 ALBERT")
    return from_huggingface(hf_config_from_tf1(config), renamed)
