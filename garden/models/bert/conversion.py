"""BERT weights from other implementations: Hugging Face, original Google TF1, Model Garden.

Each converter takes the source's config and a flat dict of named numpy arrays and returns
`{"backbone": BertBackbone, "pretrainer": BertPretrainer or None}`. The pretrainer is built only
when the checkpoint holds both pretraining heads (masked LM and next sentence).

The mapping of every source is a table of (source name, garden weight path, transform). All
three go through `_assemble`, which refuses a partial load: every garden weight must receive
exactly one source array of the right shape, and every source array must be used (or be a
known non-weight: optimizer slots, step counters, buffers), else ValueError naming them.

Layout differences handled here (checked numerically in tests/test_convert_bert.py):
- torch Linear stores [out, in]; Keras Dense and TF1 `tf.layers.dense` store [in, out].
- Keras MultiHeadAttention keeps q/k/v kernels as [H, heads, head_dim] and the output kernel
  as [heads, head_dim, H]; every source stores them flat as [H, H].
- TF1 `cls/seq_relationship/output_weights` is [2, H] ([out, in], used with transpose_b).
- Hugging Face "gelu" and our backbone are the exact erf GELU. The original TF1 code used the
  tanh approximation under the same config name; Hugging Face imports those checkpoints as
  exact GELU too, and so do we (trained BERT weights change by far less than fine-tuning noise).
"""

from __future__ import annotations

import re
from typing import Callable, Dict, Iterable, List, Tuple

import numpy as np

from garden.models.bert.backbone import BertBackbone
from garden.models.bert.pretrainer import BertPretrainer

Transform = Callable[[np.ndarray], np.ndarray]
# (source name, garden weight path, transform)
Mapping = List[Tuple[str, str, Transform]]


def _identity(x: np.ndarray) -> np.ndarray:
    return x


def _transpose(x: np.ndarray) -> np.ndarray:
    return x.T


def _qkv_kernel(num_heads: int, transpose: bool) -> Transform:
    """A flat projection ([out, in] or [in, out]) -> [H, heads, head_dim]."""
    def f(x):
        x = x.T if transpose else x
        return x.reshape(x.shape[0], num_heads, -1)
    return f


def _qkv_bias(num_heads: int) -> Transform:
    return lambda x: x.reshape(num_heads, -1)


def _attention_output_kernel(num_heads: int, transpose: bool) -> Transform:
    """A flat output projection -> [heads, head_dim, H]."""
    def f(x):
        x = x.T if transpose else x
        return x.reshape(num_heads, -1, x.shape[-1])
    return f


# --- configs ----------------------------------------------------------------------------------

def backbone_kwargs_from_bert_config(config: Dict) -> Dict:
    """BertBackbone arguments from a Hugging Face config.json or a TF1 bert_config.json.

    Both use the names of the original bert_config.json; Hugging Face adds layer_norm_eps
    (TF1 hard-codes 1e-12). Settings the garden backbone cannot express raise ValueError.
    """
    act = config.get("hidden_act", "gelu")
    if act != "gelu":
        raise ValueError(f"hidden_act={act!r}: the garden BertBackbone computes the exact GELU "
                         "only ('gelu'); convert a checkpoint trained with it")
    position_type = config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"position_embedding_type={position_type!r} is not supported "
                         "(the garden BertBackbone has learned absolute positions)")
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                           "num_attention_heads", "intermediate_size") if k not in config]
    if missing:
        raise ValueError(f"BERT config lacks {missing}")
    return dict(
        vocab_size=int(config["vocab_size"]),
        num_layers=int(config["num_hidden_layers"]),
        hidden_size=int(config["hidden_size"]),
        num_heads=int(config["num_attention_heads"]),
        intermediate_size=int(config["intermediate_size"]),
        max_sequence_length=int(config.get("max_position_embeddings", 512)),
        type_vocab_size=int(config.get("type_vocab_size", 2)),
        dropout=float(config.get("hidden_dropout_prob", 0.1)),
        initializer_range=float(config.get("initializer_range", 0.02)),
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-12)),
    )


# --- the shared assembly ----------------------------------------------------------------------

def _assemble(kwargs: Dict, mapping: Mapping, weights: Dict[str, np.ndarray], source: str,
              ignore: Iterable[str] = (), tied: Iterable[Tuple[str, str]] = (),
              with_heads: bool = False) -> Dict:
    """Builds the garden models and assigns every weight from `mapping`, refusing partial loads.

    ignore: regexes of source names that are not model weights (optimizer slots, buffers).
    tied: (source name, name it must equal) pairs allowed to appear as duplicates of a tied
        tensor (e.g. the MLM decoder = word table); a differing copy is an error, since the
        garden MLM head is always tied.
    """
    ignore_re = [re.compile(p) for p in ignore]
    used = set()
    for name, equal_to in tied:
        if name in weights:
            if equal_to not in weights or not np.array_equal(weights[name], weights[equal_to]):
                raise ValueError(f"{source}: {name} is not tied to {equal_to}; the garden "
                                 "BertPretrainer ties its MLM output to the word table")
            used.add(name)

    backbone = BertBackbone(**kwargs)
    pretrainer = BertPretrainer(backbone) if with_heads else None
    model = pretrainer if with_heads else backbone
    variables = {v.path: v for v in model.weights}
    if pretrainer is not None:
        # Pretrainer paths of backbone weights carry no prefix (embeddings/..., masked_lm_head/...).
        assert set(v.path for v in backbone.weights) <= set(variables)

    missing, shape_errors, assigned = [], [], set()
    for src, dst, transform in mapping:
        if dst not in variables:
            raise AssertionError(f"mapping names unknown garden weight {dst}")
        if src not in weights:
            missing.append(src)
            continue
        value = transform(np.asarray(weights[src], dtype=np.float32))
        var = variables[dst]
        if tuple(value.shape) != tuple(var.shape):
            shape_errors.append(f"{src} {tuple(np.shape(weights[src]))} -> {dst} "
                                f"{tuple(var.shape)}")
            continue
        var.assign(value)
        used.add(src)
        assigned.add(dst)
    unexpected = sorted(n for n in weights
                        if n not in used and not any(r.search(n) for r in ignore_re))
    problems = []
    if missing:
        problems.append(f"missing parameters: {sorted(missing)}")
    if unexpected:
        problems.append(f"unexpected parameters: {unexpected}")
    if shape_errors:
        problems.append(f"shape mismatches: {shape_errors}")
    if problems:
        raise ValueError(f"{source} checkpoint does not match the BERT config "
                         f"{kwargs}: " + "; ".join(problems))
    unassigned = sorted(set(variables) - assigned)
    if unassigned:  # a bug in the mapping table, not in the checkpoint
        raise AssertionError(f"garden weights left unassigned: {unassigned}")
    return {"backbone": backbone, "pretrainer": pretrainer}


# --- Hugging Face -----------------------------------------------------------------------------

def _hf_mapping(num_layers: int, num_heads: int, with_heads: bool) -> Mapping:
    t, i = _transpose, _identity
    m: Mapping = [
        ("embeddings.word_embeddings.weight", "embeddings/token_embedding/embeddings", i),
        ("embeddings.position_embeddings.weight", "embeddings/position_embedding/embeddings", i),
        ("embeddings.token_type_embeddings.weight", "embeddings/segment_embedding/embeddings", i),
        ("embeddings.LayerNorm.weight", "embeddings/layer_norm/gamma", i),
        ("embeddings.LayerNorm.bias", "embeddings/layer_norm/beta", i),
        ("pooler.dense.weight", "pooler_dense/kernel", t),
        ("pooler.dense.bias", "pooler_dense/bias", i),
    ]
    for n in range(num_layers):
        s, d = f"encoder.layer.{n}.", f"transformer_layer_{n}/"
        for proj in ("query", "key", "value"):
            m += [(f"{s}attention.self.{proj}.weight", f"{d}attention/{proj}/kernel",
                   _qkv_kernel(num_heads, transpose=True)),
                  (f"{s}attention.self.{proj}.bias", f"{d}attention/{proj}/bias",
                   _qkv_bias(num_heads))]
        m += [
            (f"{s}attention.output.dense.weight", f"{d}attention/attention_output/kernel",
             _attention_output_kernel(num_heads, transpose=True)),
            (f"{s}attention.output.dense.bias", f"{d}attention/attention_output/bias", i),
            (f"{s}attention.output.LayerNorm.weight", f"{d}attention_layer_norm/gamma", i),
            (f"{s}attention.output.LayerNorm.bias", f"{d}attention_layer_norm/beta", i),
            (f"{s}intermediate.dense.weight", f"{d}intermediate_dense/kernel", t),
            (f"{s}intermediate.dense.bias", f"{d}intermediate_dense/bias", i),
            (f"{s}output.dense.weight", f"{d}output_dense/kernel", t),
            (f"{s}output.dense.bias", f"{d}output_dense/bias", i),
            (f"{s}output.LayerNorm.weight", f"{d}output_layer_norm/gamma", i),
            (f"{s}output.LayerNorm.bias", f"{d}output_layer_norm/beta", i),
        ]
    if with_heads:
        m += [
            ("cls.predictions.transform.dense.weight", "masked_lm_head/transform_dense/kernel", t),
            ("cls.predictions.transform.dense.bias", "masked_lm_head/transform_dense/bias", i),
            ("cls.predictions.transform.LayerNorm.weight", "masked_lm_head/layer_norm/gamma", i),
            ("cls.predictions.transform.LayerNorm.bias", "masked_lm_head/layer_norm/beta", i),
            ("cls.predictions.bias", "masked_lm_head/output_bias", i),
            ("cls.seq_relationship.weight", "next_sentence_head/kernel", t),
            ("cls.seq_relationship.bias", "next_sentence_head/bias", i),
        ]
    return m


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

def _tf1_mapping(num_layers: int, num_heads: int, with_heads: bool) -> Mapping:
    i = _identity
    m: Mapping = [
        ("bert/embeddings/word_embeddings", "embeddings/token_embedding/embeddings", i),
        ("bert/embeddings/position_embeddings", "embeddings/position_embedding/embeddings", i),
        ("bert/embeddings/token_type_embeddings", "embeddings/segment_embedding/embeddings", i),
        ("bert/embeddings/LayerNorm/gamma", "embeddings/layer_norm/gamma", i),
        ("bert/embeddings/LayerNorm/beta", "embeddings/layer_norm/beta", i),
        ("bert/pooler/dense/kernel", "pooler_dense/kernel", i),
        ("bert/pooler/dense/bias", "pooler_dense/bias", i),
    ]
    for n in range(num_layers):
        s, d = f"bert/encoder/layer_{n}/", f"transformer_layer_{n}/"
        for proj in ("query", "key", "value"):
            m += [(f"{s}attention/self/{proj}/kernel", f"{d}attention/{proj}/kernel",
                   _qkv_kernel(num_heads, transpose=False)),
                  (f"{s}attention/self/{proj}/bias", f"{d}attention/{proj}/bias",
                   _qkv_bias(num_heads))]
        m += [
            (f"{s}attention/output/dense/kernel", f"{d}attention/attention_output/kernel",
             _attention_output_kernel(num_heads, transpose=False)),
            (f"{s}attention/output/dense/bias", f"{d}attention/attention_output/bias", i),
            (f"{s}attention/output/LayerNorm/gamma", f"{d}attention_layer_norm/gamma", i),
            (f"{s}attention/output/LayerNorm/beta", f"{d}attention_layer_norm/beta", i),
            (f"{s}intermediate/dense/kernel", f"{d}intermediate_dense/kernel", i),
            (f"{s}intermediate/dense/bias", f"{d}intermediate_dense/bias", i),
            (f"{s}output/dense/kernel", f"{d}output_dense/kernel", i),
            (f"{s}output/dense/bias", f"{d}output_dense/bias", i),
            (f"{s}output/LayerNorm/gamma", f"{d}output_layer_norm/gamma", i),
            (f"{s}output/LayerNorm/beta", f"{d}output_layer_norm/beta", i),
        ]
    if with_heads:
        m += [
            ("cls/predictions/transform/dense/kernel", "masked_lm_head/transform_dense/kernel", i),
            ("cls/predictions/transform/dense/bias", "masked_lm_head/transform_dense/bias", i),
            ("cls/predictions/transform/LayerNorm/gamma", "masked_lm_head/layer_norm/gamma", i),
            ("cls/predictions/transform/LayerNorm/beta", "masked_lm_head/layer_norm/beta", i),
            ("cls/predictions/output_bias", "masked_lm_head/output_bias", i),
            # [2, H]: run_pretraining.py multiplies with transpose_b=True.
            ("cls/seq_relationship/output_weights", "next_sentence_head/kernel", _transpose),
            ("cls/seq_relationship/output_bias", "next_sentence_head/bias", i),
        ]
    return m


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

def _model_garden_mapping(num_layers: int) -> Mapping:
    """Model Garden's layers are Keras MultiHeadAttention / EinsumDense with our layouts."""
    i = _identity
    m: Mapping = [
        ("word_embeddings/embeddings", "embeddings/token_embedding/embeddings", i),
        ("position_embedding/embeddings", "embeddings/position_embedding/embeddings", i),
        ("type_embeddings/embeddings", "embeddings/segment_embedding/embeddings", i),
        ("embeddings/layer_norm/gamma", "embeddings/layer_norm/gamma", i),
        ("embeddings/layer_norm/beta", "embeddings/layer_norm/beta", i),
        ("pooler_transform/kernel", "pooler_dense/kernel", i),
        ("pooler_transform/bias", "pooler_dense/bias", i),
    ]
    for n in range(num_layers):
        s, d = f"transformer/layer_{n}/", f"transformer_layer_{n}/"
        for proj in ("query", "key", "value", "attention_output"):
            for kind in ("kernel", "bias"):
                m.append((f"{s}self_attention/{proj}/{kind}", f"{d}attention/{proj}/{kind}", i))
        for src, dst in (("self_attention_layer_norm", "attention_layer_norm"),
                         ("output_layer_norm", "output_layer_norm")):
            m += [(f"{s}{src}/gamma", f"{d}{dst}/gamma", i), (f"{s}{src}/beta", f"{d}{dst}/beta", i)]
        for src, dst in (("intermediate", "intermediate_dense"), ("output", "output_dense")):
            m += [(f"{s}{src}/kernel", f"{d}{dst}/kernel", i), (f"{s}{src}/bias", f"{d}{dst}/bias", i)]
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
            garden.convert.load_model_garden.
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
    canonical = _strip_model_garden_names(weights, (src for src, _, _ in mapping))
    renamed = {}
    for name, key in canonical.items():
        if key in renamed:
            raise ValueError(f"two Model Garden variables map to {key}: is more than one "
                             "encoder in the weights?")
        renamed[key] = weights[name]
    return _assemble(kwargs, mapping, renamed, source="Model Garden BertEncoder")
