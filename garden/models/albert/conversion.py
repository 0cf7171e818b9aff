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

from typing import Callable, Dict, Mapping

import numpy as np

from garden.models.albert.backbone import AlbertBackbone
from garden.models.albert.pretrainer import AlbertPretrainer

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
    names = {}
    for name, value in weights.items():
        short = name[len("albert."):] if name.startswith("albert.") else name
        if short in names:
            raise ValueError(f"checkpoint has {short!r} both with and without the 'albert.' prefix")
        names[short] = np.asarray(value)
    unused = set(names) - set(_IGNORED)

    backbone = AlbertBackbone(**backbone_config_from_huggingface(config))
    has_heads = any(n.startswith(("predictions.", "sop_classifier.")) for n in names)
    pretrainer = AlbertPretrainer(backbone) if has_heads else None
    model = pretrainer if pretrainer is not None else backbone
    variables = {v.path: v for v in model.weights}
    filled, missing = set(), []

    def put(ours: str, theirs: str, transform: Callable = lambda x: x):
        if theirs not in names:
            missing.append(theirs)
            return
        variable = variables[ours]
        value = transform(names[theirs]).astype(np.float32)
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(f"{theirs}: shape {names[theirs].shape} does not fit {ours} "
                             f"{tuple(variable.shape)} (config says otherwise?)")
        variable.assign(value)
        unused.discard(theirs)
        filled.add(ours)

    heads, head_dim = backbone.num_heads, backbone.hidden_size // backbone.num_heads
    t = lambda w: w.T
    to_heads = lambda w: w.T.reshape(-1, heads, head_dim)           # [H, H] -> [H, A, d]
    bias_to_heads = lambda b: b.reshape(heads, head_dim)
    from_heads = lambda w: w.T.reshape(heads, head_dim, -1)         # [H, H] -> [A, d, H]

    put("embeddings/token_embedding/embeddings", "embeddings.word_embeddings.weight")
    put("embeddings/position_embedding/embeddings", "embeddings.position_embeddings.weight")
    put("embeddings/segment_embedding/embeddings", "embeddings.token_type_embeddings.weight")
    put("embeddings/layer_norm/gamma", "embeddings.LayerNorm.weight")
    put("embeddings/layer_norm/beta", "embeddings.LayerNorm.bias")
    put("embeddings/projection/kernel", "encoder.embedding_hidden_mapping_in.weight", t)
    put("embeddings/projection/bias", "encoder.embedding_hidden_mapping_in.bias")
    for g, block in enumerate(backbone.encoder_blocks):
        src, dst = f"encoder.albert_layer_groups.{g}.albert_layers.0.", f"{block.name}/"
        for part in ("query", "key", "value"):
            put(dst + f"attention/{part}/kernel", src + f"attention.{part}.weight", to_heads)
            put(dst + f"attention/{part}/bias", src + f"attention.{part}.bias", bias_to_heads)
        put(dst + "attention/attention_output/kernel", src + "attention.dense.weight", from_heads)
        put(dst + "attention/attention_output/bias", src + "attention.dense.bias")
        put(dst + "attention_layer_norm/gamma", src + "attention.LayerNorm.weight")
        put(dst + "attention_layer_norm/beta", src + "attention.LayerNorm.bias")
        put(dst + "intermediate_dense/kernel", src + "ffn.weight", t)
        put(dst + "intermediate_dense/bias", src + "ffn.bias")
        put(dst + "output_dense/kernel", src + "ffn_output.weight", t)
        put(dst + "output_dense/bias", src + "ffn_output.bias")
        put(dst + "output_layer_norm/gamma", src + "full_layer_layer_norm.weight")
        put(dst + "output_layer_norm/beta", src + "full_layer_layer_norm.bias")
    put("pooler_dense/kernel", "pooler.weight", t)
    put("pooler_dense/bias", "pooler.bias")

    if pretrainer is not None:
        put("masked_lm_head/transform_dense/kernel", "predictions.dense.weight", t)
        put("masked_lm_head/transform_dense/bias", "predictions.dense.bias")
        put("masked_lm_head/layer_norm/gamma", "predictions.LayerNorm.weight")
        put("masked_lm_head/layer_norm/beta", "predictions.LayerNorm.bias")
        put("masked_lm_head/output_bias", "predictions.bias")
        put("sentence_order_head/kernel", "sop_classifier.classifier.weight", t)
        put("sentence_order_head/bias", "sop_classifier.classifier.bias")
        # The decoder is tied in Hugging Face too; a checkpoint may repeat it. Our model has one
        # table and one bias, so a copy that differs cannot be represented.
        _check_tied(names, unused, "predictions.decoder.weight", "embeddings.word_embeddings.weight")
        _check_tied(names, unused, "predictions.decoder.bias", "predictions.bias")

    problems = []
    if missing:
        problems.append(f"missing from the checkpoint: {sorted(missing)}")
    if unused:
        problems.append(f"unexpected in the checkpoint (not ALBERT weights we know): "
                        f"{sorted(unused)}")
    not_filled = sorted(set(variables) - filled)
    if not_filled and not missing:
        problems.append(f"weights of our model left unset: {not_filled}")
    if problems:
        raise ValueError("cannot convert this Hugging Face ALBERT checkpoint: " + "; ".join(problems))
    return {"backbone": backbone, "pretrainer": pretrainer}


def _check_tied(names: Dict[str, np.ndarray], unused: set, copy: str, original: str) -> None:
    if copy not in names:
        return
    if original in names and not np.array_equal(names[copy], names[original]):
        raise ValueError(f"{copy} differs from {original}: this model ties them (one variable)")
    unused.discard(copy)
