"""GPT-2 weights from Hugging Face (GPT2Model / GPT2LMHeadModel) and from OpenAI's original
TF checkpoints (openai/gpt-2's models/<size>/model.ckpt + hparams.json).

Each converter takes the source's config and a flat dict of named numpy arrays and returns
`{"backbone": GPT2Backbone, "pretrainer": None, "lm": GPT2CausalLM}`: the LM head is the token
table (tied), so the backbone holds every weight and the LM is built on it.

Both sources store the same layout under different names, one name table serves both
(garden.models.conversion.assign_weights: a partial load is refused, every missing, unexpected
or misshapen weight is named):

    Hugging Face (state dict)             OpenAI (TF1 variables)           shape
    [transformer.]wte.weight              model/wte                         [V, H]
    [transformer.]wpe.weight              model/wpe                         [n_ctx, H]
    h.{i}.ln_1.weight / .bias             model/h{i}/ln_1/g / b             [H]
    h.{i}.attn.c_attn.weight / .bias      model/h{i}/attn/c_attn/w / b      [H, 3H] / [3H]
    h.{i}.attn.c_proj.weight / .bias      model/h{i}/attn/c_proj/w / b      [H, H]
    h.{i}.ln_2.weight / .bias             model/h{i}/ln_2/g / b
    h.{i}.mlp.c_fc.weight / .bias         model/h{i}/mlp/c_fc/w / b         [H, 4H]
    h.{i}.mlp.c_proj.weight / .bias       model/h{i}/mlp/c_proj/w / b       [4H, H]
    ln_f.weight / .bias                   model/ln_f/g / b

- Kernels are [in, out] in both (Hugging Face's `Conv1D`, OpenAI's conv1d with a leading
  filter-width axis of 1, [1, in, out], dropped here): no transpose, unlike torch Linear.
- q, k, v are one fused kernel, split here into thirds (query, key, value, in that order)
  before the table is applied; the split names read `<c_attn name>[query]` etc. in errors.
- Hugging Face's lm_head.weight is the tied token table (dropped by save_pretrained; a copy
  that differs is refused); attn.bias / attn.masked_bias are causal-mask buffers of older
  checkpoints, skipped. Configs the garden model cannot express (another activation,
  scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn, untied heads) raise ValueError.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, Tuple

import numpy as np

from garden.models.conversion import (NameTable, assign_weights, check_tied, identity,
                                      invert_weights, qkv_bias, qkv_kernel, special_token_ids,
                                      strip_prefix)
from garden.models.gpt2.backbone import GPT2Backbone
from garden.models.gpt2.causal_lm import GPT2CausalLM

_QKV = ("query", "key", "value")


# --- configs ----------------------------------------------------------------------------------

def _require(config: Dict, keys, source: str):
    missing = [k for k in keys if k not in config]
    if missing:
        raise ValueError(f"{source} config lacks {missing}")


def backbone_kwargs_from_hf_config(config: Dict) -> Dict:
    """GPT2Backbone arguments from a Hugging Face GPT-2 config.json."""
    _require(config, ("vocab_size", "n_embd", "n_layer", "n_head"), "Hugging Face GPT-2")
    activation = config.get("activation_function", "gelu_new")
    if activation not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(f"activation_function {activation!r}: the garden GPT-2 computes the "
                         "tanh GELU (gelu_new) only")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
        if config.get(flag):
            raise ValueError(f"{flag}=True is not supported by the garden GPT-2")
    if not config.get("scale_attn_weights", True):
        raise ValueError("scale_attn_weights=False is not supported (scores are scaled by "
                         "1/sqrt(head width))")
    if config.get("tie_word_embeddings", True) is False:
        raise ValueError("tie_word_embeddings=False: the garden GPT-2 ties its logits to the "
                         "token table")
    return dict(vocab_size=int(config["vocab_size"]), num_layers=int(config["n_layer"]),
                hidden_size=int(config["n_embd"]), num_heads=int(config["n_head"]),
                intermediate_size=int(config.get("n_inner") or 4 * int(config["n_embd"])),
                max_sequence_length=int(config.get("n_positions", 1024)),
                dropout=float(config.get("resid_pdrop", 0.1)),
                layer_norm_epsilon=float(config.get("layer_norm_epsilon", 1e-5)),
                initializer_range=float(config.get("initializer_range", 0.02)))


def backbone_kwargs_from_hparams(hparams: Dict) -> Dict:
    """GPT2Backbone arguments from openai/gpt-2's hparams.json (n_vocab, n_ctx, n_embd,
    n_head, n_layer; the rest is fixed by its model.py: eps 1e-5, 4H feed-forward)."""
    _require(hparams, ("n_vocab", "n_ctx", "n_embd", "n_head", "n_layer"), "OpenAI hparams.json")
    return dict(vocab_size=int(hparams["n_vocab"]), num_layers=int(hparams["n_layer"]),
                hidden_size=int(hparams["n_embd"]), num_heads=int(hparams["n_head"]),
                intermediate_size=4 * int(hparams["n_embd"]),
                max_sequence_length=int(hparams["n_ctx"]))


# --- the shared table -------------------------------------------------------------------------

def _name_table(num_layers: int, num_heads: int, name: Callable[[str], str],
                weight: str, bias: str, gamma: str, beta: str, kernel: Callable) -> NameTable:
    """{source name: (garden path, transform)}; `name(part)` spells a part's source name
    ("h.0.attn.c_attn" -> "model/h0/attn/c_attn"), `kernel` turns a stored kernel into [in, out]."""
    i = identity

    def norm(src, dst):
        return {f"{name(src)}{gamma}": (f"{dst}/gamma", i), f"{name(src)}{beta}": (f"{dst}/beta", i)}

    def dense(src, dst):
        return {f"{name(src)}{weight}": (f"{dst}/kernel", kernel),
                f"{name(src)}{bias}": (f"{dst}/bias", i)}

    table: NameTable = {f"{name('wte')}{_table(weight)}": ("token_embedding/embeddings", i),
                        f"{name('wpe')}{_table(weight)}": ("position_embedding/embeddings", i),
                        **norm("ln_f", "layer_norm")}
    for n in range(num_layers):
        s, d = f"h.{n}.", f"transformer_layer_{n}/"
        attention = f"{d}self_attention/"
        for part in _QKV:
            table[f"{name(s + 'attn.c_attn')}{weight}[{part}]"] = (
                f"{attention}{part}/kernel",
                lambda x, k=kernel: qkv_kernel(num_heads, transpose=False)(k(x)))
            table[f"{name(s + 'attn.c_attn')}{bias}[{part}]"] = (f"{attention}{part}/bias",
                                                                 qkv_bias(num_heads))
        proj = name(s + "attn.c_proj")
        table[f"{proj}{weight}"] = (f"{attention}attention_output/kernel",
                                    lambda x, k=kernel: k(x).reshape(num_heads, -1, x.shape[-1]))
        table[f"{proj}{bias}"] = (f"{attention}attention_output/bias", i)
        table.update(norm(s + "ln_1", f"{d}self_attention_layer_norm"))
        table.update(norm(s + "ln_2", f"{d}output_layer_norm"))
        table.update(dense(s + "mlp.c_fc", f"{d}intermediate_dense"))
        table.update(dense(s + "mlp.c_proj", f"{d}output_dense"))
    return table


def _table(weight: str) -> str:
    """Embedding tables: Hugging Face ".weight", OpenAI none (model/wte is the variable)."""
    return weight if weight.startswith(".") else ""


def _split_fused(weights: Dict[str, np.ndarray], suffixes) -> Dict[str, np.ndarray]:
    """Every fused c_attn weight/bias (last axis 3H) -> three entries `<name>[query]` etc."""
    out = {}
    for key, value in weights.items():
        if "c_attn" in key and key.endswith(tuple(suffixes)):
            value = np.asarray(value)
            if value.shape[-1] % 3:
                raise ValueError(f"{key} has shape {value.shape}: a fused q/k/v projection's "
                                 "last axis must be 3 x hidden size")
            for part, piece in zip(_QKV, np.split(value, 3, axis=-1)):
                out[f"{key}[{part}]"] = piece
        else:
            out[key] = value
    return out


def _assemble(kwargs: Dict, table: NameTable, weights: Dict[str, np.ndarray], source: str,
              ignored=(), ignored_patterns=()) -> Dict:
    backbone = GPT2Backbone(**kwargs)
    assign_weights(backbone, weights, table, source=f"{source} (GPT-2 config {kwargs})",
                   ignored=ignored, ignored_patterns=ignored_patterns)
    # "pretrainer" is what garden.convert writes as pretrainer.keras: for a generative family,
    # its GenerativeLM (as GPT, T5 and BART return it); "lm" names the same model.
    lm = GPT2CausalLM(backbone)
    return {"backbone": backbone, "pretrainer": lm, "lm": lm}


# --- Hugging Face -----------------------------------------------------------------------------

def _hf_name_table(num_layers: int, num_heads: int) -> NameTable:
    """The name table under Hugging Face's names (from_huggingface's and to_huggingface's)."""
    return _name_table(num_layers, num_heads, name=lambda part: part, weight=".weight",
                       bias=".bias", gamma=".weight", beta=".bias", kernel=identity)


def from_huggingface(config: Dict, weights: Dict[str, np.ndarray]) -> Dict:
    """Garden GPT-2 from a Hugging Face GPT2Model / GPT2LMHeadModel state dict.

    Args:
        config: the parsed config.json (model_type "gpt2").
        weights: parameter name (with or without "transformer.") -> numpy array.

    Example:
        models = from_huggingface(json.load(open("config.json")), safetensors.numpy.load_file(p))
        models["lm"]({"token_ids": ids, "padding_mask": mask})["logits"]
    """
    kwargs = backbone_kwargs_from_hf_config(config)
    weights = strip_prefix(weights, "transformer.")
    tied = {"lm_head.weight": "wte.weight"}
    check_tied(weights, tied)
    table = _hf_name_table(kwargs["num_layers"], kwargs["num_heads"])
    return _assemble(kwargs, table, _split_fused(weights, (".weight", ".bias")),
                     source="Hugging Face GPT-2", ignored=tied,
                     ignored_patterns=[r"^h\.\d+\.attn\.(masked_)?bias$"])


# --- OpenAI's original TF checkpoints ---------------------------------------------------------

def _openai_name(part: str) -> str:
    """"h.3.attn.c_attn" -> "model/h3/attn/c_attn/"; "wte" -> "model/wte"."""
    if part in ("wte", "wpe"):
        return f"model/{part}"
    if part.startswith("h."):
        _, layer, rest = part.split(".", 2)
        return f"model/h{layer}/{rest.replace('.', '/')}/"
    return f"model/{part}/"


def _squeeze_filter_axis(x: np.ndarray) -> np.ndarray:
    """OpenAI's conv1d kernels [1, in, out] -> [in, out]."""
    if x.ndim != 3 or x.shape[0] != 1:
        raise ValueError(f"expected an OpenAI conv1d kernel [1, in, out], got {x.shape}")
    return x[0]


def from_tf1(config: Dict, weights: Dict[str, np.ndarray]) -> Dict:
    """Garden GPT-2 from openai/gpt-2's TF checkpoint (`python -m garden.convert --source=tf1
    --model=gpt2 --input=models/124M/model.ckpt --config=models/124M/hparams.json`).

    Args:
        config: the hparams.json dict (n_vocab, n_ctx, n_embd, n_head, n_layer).
        weights: variable name ("model/h0/attn/c_attn/w", ...) -> numpy array, as
            tf.train.load_checkpoint(prefix).get_tensor returns them.
    """
    kwargs = backbone_kwargs_from_hparams(config)
    table = _name_table(kwargs["num_layers"], kwargs["num_heads"], name=_openai_name,
                        weight="w", bias="b", gamma="g", beta="b", kernel=_squeeze_filter_axis)
    return _assemble(kwargs, table, _split_fused(weights, ("/w", "/b")), source="OpenAI GPT-2",
                     ignored_patterns=[r"/adam(_1)?$", r"/Adam(_1)?$", r"^global_step$",
                                       r"^beta[12]_power$"])


# --- back to Hugging Face (garden.to_huggingface) ---------------------------------------------

def _fuse(weights: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The inverse of _split_fused: `<name>[query]`, `[key]`, `[value]` -> `<name>`, joined
    along the last axis in that order."""
    out = {k: v for k, v in weights.items() if not k.endswith("]")}
    for key in {k.rpartition("[")[0] for k in weights if k.endswith("]")}:
        out[key] = np.concatenate([weights[f"{key}[{part}]"] for part in _QKV], axis=-1)
    return out


def to_huggingface(config: Dict, weights: Dict[str, np.ndarray],
                   tokens: Iterable[str] = ()) -> Tuple[Dict, Dict]:
    """(config.json, state dict) of the Hugging Face GPT2LMHeadModel equal to a garden GPT-2:
    the inverse of from_huggingface through the same name table. lm_head.weight is the tied
    token table, so, as save_pretrained does, it is not written.

    Args:
        config: the GPT2Backbone's get_config().
        weights: garden weight path -> array, the backbone's (its GPT2CausalLM adds none).
        tokens: the vocabulary's token strings by id (<|endoftext|> is bos and eos).
    """
    hf = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
          "vocab_size": config["vocab_size"], "n_embd": config["hidden_size"],
          "n_layer": config["num_layers"], "n_head": config["num_heads"],
          "n_inner": config["intermediate_size"] or 4 * config["hidden_size"],
          "n_positions": config["max_sequence_length"], "activation_function": "gelu_new",
          "resid_pdrop": config["dropout"], "embd_pdrop": config["dropout"],
          "attn_pdrop": config["dropout"], "layer_norm_epsilon": config["layer_norm_epsilon"],
          "initializer_range": config["initializer_range"], "tie_word_embeddings": True,
          **special_token_ids(tokens, {"bos_token_id": "<|endoftext|>",
                                      "eos_token_id": "<|endoftext|>"})}
    table = _hf_name_table(config["num_layers"], config["num_heads"])
    state = _fuse(invert_weights(weights, table, source="Hugging Face GPT-2"))
    return hf, {f"transformer.{name}": value for name, value in state.items()}
