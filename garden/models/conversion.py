"""Weight-import pieces every family's converter shares: layout transforms, the name table of
one BERT-style encoder layer, the strict assembler and its inverse (garden.to_huggingface).
Reading a checkpoint's files (a Hugging Face directory or model id, a keras-hub preset, a
release's JSON and HDF5 files) is garden/models/checkpoint_files.py.

A converter is a name table, `{source name: (garden weight path, transform)}`, handed to
`assign_weights`, which refuses a partial load: every mapped source array must be present (or
listed optional), every source array must be mapped (or ignored: optimizer slots, buffers,
tied duplicates), every shape must fit and every garden weight must receive a value; the
ValueError names each culprit so a user can tell a wrong config from a wrong checkpoint.

Layouts (checked numerically by each family's conversion tests):
- torch Linear stores [out, in]; Keras Dense and TF1 `tf.layers.dense` store [in, out].
- garden's MultiHeadAttention keeps q/k/v kernels as [H, heads, head_dim], their biases as
  [heads, head_dim] and the output kernel as [heads, head_dim, H]; sources store them flat.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Dict, Iterable, List, Tuple

import numpy as np

Transform = Callable[[np.ndarray], np.ndarray]
# source name -> (garden weight path, transform)
NameTable = Dict[str, Tuple[str, Transform]]


def identity(x: np.ndarray) -> np.ndarray:
    return x


def linear_kernel(x: np.ndarray) -> np.ndarray:
    """torch Linear [out, in] -> Keras Dense [in, out]."""
    return x.T


def qkv_kernel(num_heads: int, transpose: bool = True) -> Transform:
    """A flat q/k/v projection ([out, in] when `transpose`, else [in, out]) -> [H, heads, d]."""
    def f(x):
        x = x.T if transpose else x
        return x.reshape(x.shape[0], num_heads, -1)
    return f


def qkv_bias(num_heads: int) -> Transform:
    """A flat q/k/v bias [H] -> [heads, head_dim]."""
    return lambda x: x.reshape(num_heads, -1)


def attention_output_kernel(num_heads: int, transpose: bool = True) -> Transform:
    """A flat attention output projection -> [heads, head_dim, H]."""
    def f(x):
        x = x.T if transpose else x
        return x.reshape(num_heads, -1, x.shape[-1])
    return f


@dataclasses.dataclass(frozen=True)
class LayerNames:
    """A source's names for the parts of one post-LN encoder layer (BERT's layout)."""

    query: str
    key: str
    value: str
    attention_output: str
    attention_norm: str
    intermediate: str
    output: str
    output_norm: str
    sep: str = "."
    kernel: str = "weight"
    bias: str = "bias"
    gamma: str = "weight"
    beta: str = "bias"
    transpose: bool = True  # torch Linear kernels are [out, in]

    def dense(self, source: str, garden: str) -> NameTable:
        """A dense layer's kernel and bias."""
        kernel = linear_kernel if self.transpose else identity
        return {f"{source}{self.sep}{self.kernel}": (f"{garden}/kernel", kernel),
                f"{source}{self.sep}{self.bias}": (f"{garden}/bias", identity)}

    def layer_norm(self, source: str, garden: str) -> NameTable:
        return {f"{source}{self.sep}{self.gamma}": (f"{garden}/gamma", identity),
                f"{source}{self.sep}{self.beta}": (f"{garden}/beta", identity)}

    def masked_lm_head(self, dense: str, layer_norm: str, bias: str) -> NameTable:
        """The weights of garden.layers' masked-LM head under the source's names: the
        transform dense and LayerNorm and the output bias (the output matrix is the tied word
        table, so it has no entry of its own)."""
        return {**self.dense(dense, "masked_lm_head/transform_dense"),
                **self.layer_norm(layer_norm, "masked_lm_head/layer_norm"),
                bias: ("masked_lm_head/output_bias", identity)}


HF_BERT_LAYER = LayerNames(
    "attention.self.query", "attention.self.key", "attention.self.value",
    "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
    "output.dense", "output.LayerNorm")
TF1_BERT_LAYER = LayerNames(
    "attention/self/query", "attention/self/key", "attention/self/value",
    "attention/output/dense", "attention/output/LayerNorm", "intermediate/dense",
    "output/dense", "output/LayerNorm", sep="/", kernel="kernel", gamma="gamma", beta="beta",
    transpose=False)
HF_ALBERT_LAYER = LayerNames(
    "attention.query", "attention.key", "attention.value", "attention.dense",
    "attention.LayerNorm", "ffn", "ffn_output", "full_layer_layer_norm")
HF_DISTILBERT_LAYER = LayerNames(
    "attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin",
    "sa_layer_norm", "ffn.lin1", "ffn.lin2", "output_layer_norm")
# keras-hub's TransformerEncoder and TransformerDecoder in a preset's model.weights.h5 (Keras 3
# names a layer's variables vars/0, vars/1: kernel then bias, gamma then beta). Their attention
# kernels are EinsumDense [H, heads, head_dim] / [heads, head_dim, H] already, which the
# qkv / output reshapes leave as they are.
KERAS_HUB_LAYER = LayerNames(
    "_self_attention_layer/query_dense", "_self_attention_layer/key_dense",
    "_self_attention_layer/value_dense", "_self_attention_layer/output_dense",
    "_self_attention_layer_norm", "_feedforward_intermediate_dense", "_feedforward_output_dense",
    "_feedforward_layer_norm", sep="/", kernel="vars/0", bias="vars/1", gamma="vars/0",
    beta="vars/1", transpose=False)


def keras_hub_layer(class_scope: str, index: int = 0) -> str:
    """The weights-file scope of a functional model's `index`-th layer of one class: Keras 3
    counts them by class in graph order ("layers/transformer_encoder",
    "layers/transformer_encoder_1", ...), whatever the layers' own names."""
    return f"layers/{class_scope}" + (f"_{index}" if index else "")


def keras_hub_embedding(class_scope: str, garden: str) -> NameTable:
    """An embedding layer's table (its only variable) -> the garden's `garden`/embeddings."""
    return {f"{keras_hub_layer(class_scope)}/vars/0": (f"{garden}/embeddings", identity)}


# keras-hub's backbone arguments -> the garden's, for the sizes every family's config holds.
KERAS_HUB_SIZES = {"vocabulary_size": "vocab_size", "num_layers": "num_layers",
                   "hidden_dim": "hidden_size", "num_heads": "num_heads",
                   "intermediate_dim": "intermediate_size",
                   "max_sequence_length": "max_sequence_length"}


def keras_hub_backbone(config: Dict, weights: Dict[str, np.ndarray], where: str,
                       class_name: str, backbone_class: type,
                       names: Callable[[Dict], NameTable], renames: Dict[str, str] = None,
                       **fixed):
    """A garden `backbone_class` from a keras-hub preset's config.json object and
    model.weights.h5 arrays: ValueError naming `where` (config.json's path) unless its
    class_name is `class_name`; the constructor arguments are KERAS_HUB_SIZES (and `renames`,
    keras-hub name -> garden name) read from its "config", its dropout, and `fixed` (what
    keras-hub hard-codes, e.g. a LayerNorm epsilon); `names(arguments)` is the name table
    assign_weights loads with (strict: every weight named, every name used)."""
    found = config.get("class_name")
    if found != class_name:
        raise ValueError(f"{where} holds a keras-hub {found}, not a {class_name}: pass the "
                         f"--model of its family")
    settings = config["config"]
    kwargs = {ours: int(settings[theirs]) for theirs, ours in
              {**KERAS_HUB_SIZES, **(renames or {})}.items()}
    kwargs.update(dropout=float(settings.get("dropout", 0.1)), **fixed)
    backbone = backbone_class(**kwargs)
    assign_weights(backbone, weights, names(kwargs),
                   source=f"keras-hub {class_name} ({where}: {kwargs})")
    return backbone


def encoder_layer_names(names: LayerNames, source_prefix: str, garden_prefix: str,
                        num_heads: int) -> NameTable:
    """The name table of one encoder layer: `source_prefix` + the source's part names ->
    `garden_prefix` + garden.layers.TransformerEncoderBlock's weight paths."""
    s, d, sep = source_prefix, garden_prefix, names.sep
    table: NameTable = {}
    for part in ("query", "key", "value"):
        source = s + getattr(names, part)
        table[f"{source}{sep}{names.kernel}"] = (f"{d}attention/{part}/kernel",
                                                 qkv_kernel(num_heads, names.transpose))
        table[f"{source}{sep}{names.bias}"] = (f"{d}attention/{part}/bias", qkv_bias(num_heads))
    table[f"{s}{names.attention_output}{sep}{names.kernel}"] = (
        f"{d}attention/attention_output/kernel",
        attention_output_kernel(num_heads, names.transpose))
    table[f"{s}{names.attention_output}{sep}{names.bias}"] = (
        f"{d}attention/attention_output/bias", identity)
    table.update(names.layer_norm(s + names.attention_norm, f"{d}attention_layer_norm"))
    table.update(names.dense(s + names.intermediate, f"{d}intermediate_dense"))
    table.update(names.dense(s + names.output, f"{d}output_dense"))
    table.update(names.layer_norm(s + names.output_norm, f"{d}output_layer_norm"))
    return table


def strip_prefix(weights, prefix: str) -> Dict[str, np.ndarray]:
    """Drops `prefix` (e.g. "roberta.", the base model's scope in a *ForMaskedLM file); a name
    present both with and without it is an error (which copy would be meant?)."""
    out: Dict[str, np.ndarray] = {}
    for name, value in weights.items():
        short = name[len(prefix):] if name.startswith(prefix) else name
        if short in out:
            raise ValueError(f"checkpoint has {short!r} both with and without the {prefix!r} "
                             "prefix; keep one copy")
        out[short] = np.asarray(value)
    return out


def check_tied(weights: Dict[str, np.ndarray], tied: Dict[str, str]):
    """Names a source ties to another parameter must hold the same values: garden keeps one
    variable (e.g. the MLM decoder is the word table), so an untied copy cannot be imported."""
    for name, source in tied.items():
        if name in weights and source in weights and not np.array_equal(weights[name],
                                                                        weights[source]):
            raise ValueError(f"{name} is not tied to {source}: the garden ties them (one "
                             "variable), so an untied checkpoint cannot be imported")


def assign_weights(model, weights: Dict[str, np.ndarray], names: NameTable, source: str = "",
                   optional: Iterable[str] = (), ignored: Iterable[str] = (),
                   ignored_patterns: Iterable[str] = ()) -> List[str]:
    """Assigns weights[name] (transformed) to `model`'s variable at each mapped path.

    Args:
        optional: source names a checkpoint may lack (left at their initial values).
        ignored: source names that are not model weights (buffers, tied duplicates).
        ignored_patterns: regexes of such names (optimizer slots: r"/adam_[mv]$").

    Raises ValueError naming every missing and unexpected parameter and every shape mismatch.
    Returns the `optional` names the checkpoint lacks.
    """
    variables = {v.path: v for v in model.weights}
    optional, ignored = set(optional), set(ignored)
    patterns = [re.compile(p) for p in ignored_patterns]
    missing = sorted(n for n in names if n not in weights and n not in optional)
    unexpected = sorted(n for n in weights if n not in names and n not in ignored
                        and not any(p.search(n) for p in patterns))
    shape_errors, assigned = [], set()
    for name, (path, transform) in names.items():
        if path not in variables:  # a bug in the name table, not in the checkpoint
            raise AssertionError(f"name table maps {name} to unknown garden weight {path}")
        if name not in weights:
            continue
        value = transform(np.asarray(weights[name], np.float32))
        variable = variables[path]
        if tuple(value.shape) != tuple(variable.shape):
            shape_errors.append(f"{name} {tuple(np.shape(weights[name]))} -> {path} "
                                f"{tuple(variable.shape)}")
            continue
        variable.assign(value)
        assigned.add(path)
    problems = [f"{what}: {names_}" for what, names_ in (
        ("missing parameters", missing), ("unexpected parameters", unexpected),
        ("shape mismatches", shape_errors)) if names_]
    if problems:
        raise ValueError(f"{source or type(model).__name__}: checkpoint does not match the "
                         "config; " + "; ".join(problems))
    not_loaded = sorted(n for n in optional if n in names and n not in weights)
    unassigned = set(variables) - assigned - {names[n][0] for n in not_loaded}
    if unassigned:  # a bug in the name table, not in the checkpoint
        raise AssertionError(f"garden weights left unassigned: {sorted(unassigned)}")
    return not_loaded


def hf_bert_encoder_names(num_layers: int, num_heads: int, prefix: str = "") -> NameTable:
    """Embeddings and encoder layers under Hugging Face's BERT names, which its BERT, RoBERTa
    and ELECTRA models share (`prefix`: "electra." etc. for a *For... checkpoint; BERT's and
    RoBERTa's converters strip theirs first). Poolers and heads are each family's own."""
    e = f"{prefix}embeddings."
    names: NameTable = {
        f"{e}word_embeddings.weight": ("embeddings/token_embedding/embeddings", identity),
        f"{e}position_embeddings.weight": ("embeddings/position_embedding/embeddings", identity),
        f"{e}token_type_embeddings.weight": ("embeddings/segment_embedding/embeddings", identity),
        **HF_BERT_LAYER.layer_norm(f"{e}LayerNorm", "embeddings/layer_norm"),
    }
    for n in range(num_layers):
        names.update(encoder_layer_names(HF_BERT_LAYER, f"{prefix}encoder.layer.{n}.",
                                         f"transformer_layer_{n}/", num_heads))
    return names


def hf_bert_sizes(config) -> Dict[str, int]:
    """The sizes under Hugging Face's BERT config names (BERT, RoBERTa, ELECTRA), as the
    backbone arguments vocab_size, num_layers, hidden_size, num_heads, intermediate_size."""
    return dict(vocab_size=int(config["vocab_size"]),
                num_layers=int(config["num_hidden_layers"]),
                hidden_size=int(config["hidden_size"]),
                num_heads=int(config["num_attention_heads"]),
                intermediate_size=int(config["intermediate_size"]))


def check_bert_style_config(config, family: str, activation_key: str = "hidden_act"):
    """Refuses the Hugging Face config settings that garden's BERT-style encoders (BERT,
    RoBERTa, ELECTRA, DistilBERT) cannot express: another activation than the exact (erf) GELU
    ("gelu"), and relative or rotary position embeddings."""
    activation = config.get(activation_key, "gelu")
    if activation != "gelu":
        raise ValueError(f"{activation_key}={activation!r} is not supported: the garden {family} "
                         "encoder computes the exact (erf) GELU only ('gelu'); convert a "
                         "checkpoint trained with it")
    position_type = config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"position_embedding_type={position_type!r} is not supported: the "
                         f"garden {family} encoder has learned absolute positions")


# --- the inverse: garden weights under a source's names (garden.to_huggingface) ---------------

def _source_shapes(shape: Tuple[int, ...]) -> List[Tuple[int, ...]]:
    """The shapes a source may store a garden weight of `shape` in: flat, or two axes of which
    one is the garden's first or last axis (a transposed kernel, a flattened head axis)."""
    n = int(np.prod(shape, dtype=np.int64))
    shapes = [(n,)]
    for d in dict.fromkeys((int(shape[0]), int(shape[-1])) if shape else ()):
        if d and n % d == 0:
            shapes += [(d, n // d), (n // d, d)]
    return list(dict.fromkeys(shapes))


def source_layout(name: str, value: np.ndarray, transform: Transform) -> np.ndarray:
    """The array `x` in the source's layout with transform(x) == value: the inverse of a name
    table's entry. The transforms are reshapes and transposes, so the source's shape is the
    one of _source_shapes that `transform` maps onto `value`'s (a flat one first: a q/k/v bias
    [heads, head_dim] is stored [H]), and the transform applied to the indices of that shape
    says where each element came from."""
    value = np.asarray(value)
    fits = []
    for shape in _source_shapes(value.shape):
        try:
            if transform(np.empty(shape, np.int8)).shape == value.shape:
                fits.append(shape)
        except ValueError:  # a reshape the shape does not allow
            continue
    if not fits or (len(fits[0]) > 1 and len(fits) > 1):
        raise AssertionError(f"cannot tell the source shape of {name} from garden's "
                             f"{value.shape}: candidates {fits}")
    shape = fits[0]
    where = transform(np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape))
    flat = np.zeros(where.size, value.dtype)
    flat[where.reshape(-1)] = value.reshape(-1)
    out = flat.reshape(shape)
    if not np.array_equal(transform(out), value):  # a transform that is no permutation
        raise AssertionError(f"the name table's transform of {name} cannot be inverted")
    return out


def invert_weights(values: Dict[str, np.ndarray], names: NameTable,
                   source: str = "") -> Dict[str, np.ndarray]:
    """{source name: array in the source's layout} from garden weights {path: value} through
    the name table `from_<source>` assigns them with (assign_weights run backwards). Every
    mapped path must be in `values` and every value must be mapped, else a ValueError naming
    them (a model the table does not describe)."""
    mapped = {path for path, _ in names.values()}
    missing = sorted(path for path in mapped if path not in values)
    unmapped = sorted(path for path in values if path not in mapped)
    if missing or unmapped:
        raise ValueError(f"{source or 'the name table'} does not describe the model: "
                         + "; ".join(f"{what}: {paths}" for what, paths in (
                             ("weights it lacks", missing), ("weights with no source name",
                                                              unmapped)) if paths))
    return {name: source_layout(name, np.asarray(values[path], np.float32), transform)
            for name, (path, transform) in names.items()}


def special_token_ids(tokens: Iterable[str], wanted: Dict[str, str]) -> Dict[str, int]:
    """{config key: id} of the special tokens in `tokens` (strings by id) that `wanted` names
    ({"eos_token_id": "</s>"}); a token the vocabulary lacks is left out (the config's default)."""
    ids = {token: i for i, token in enumerate(tokens)}
    return {key: ids[token] for key, token in wanted.items() if token in ids}
