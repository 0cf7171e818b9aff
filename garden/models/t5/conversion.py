"""T5 weights from Hugging Face's T5ForConditionalGeneration (v1.0 and v1.1), strictly.

`from_huggingface(config, weights)` builds a T5Backbone and its T5Seq2SeqLM from config.json and
assigns every weight through one name table (garden.models.conversion.assign_weights): a
missing, unexpected or misshapen weight is named, nothing loads partially.

Layouts: torch Linear kernels are [out, in]; q/k/v are [A d_kv, d_model] -> garden's
[d_model, A, d_kv], o [d_model, A d_kv] -> [A, d_kv, d_model]; each stack's relative table
(`block.0.layer.0.SelfAttention.relative_attention_bias`, [buckets, A]) is its first block's.
Hugging Face layer indices: encoder layer.0 self-attention, layer.1 feed-forward; decoder
layer.0 self, layer.1 EncDecAttention, layer.2 feed-forward.

Tying and scaling: T5 v1.0 ties the logits to `shared` and scales the decoder output by
d_model^-0.5; v1.1 (config tie_word_embeddings false) has its own lm_head and no scaling.
transformers 5 records the scaling as `scale_decoder_outputs` and always ties lm_head to shared
in the files it writes; older files say tie_word_embeddings. A scaled checkpoint whose lm_head
differs from shared cannot be represented (refused); an unscaled one without lm_head gets a
copy of shared as its lm_head. `encoder.embed_tokens` / `decoder.embed_tokens` must equal
`shared` where present. Feed-forward: "relu" (v1.0), "gated-gelu" (v1.1: tanh GELU, as
Hugging Face computes it), or "<act>" / "gated-<act>" for another activation name.
"""

from __future__ import annotations

from typing import Dict, Iterable, Tuple

import numpy as np

from garden.models.conversion import (NameTable, assign_weights, attention_output_kernel,
                                      check_tied, identity, invert_weights, linear_kernel,
                                      qkv_kernel, special_token_ids)
from garden.models.t5.backbone import T5Backbone
from garden.models.t5.seq2seq_lm import T5Seq2SeqLM

_TIED = {"encoder.embed_tokens.weight": "shared.weight",
         "decoder.embed_tokens.weight": "shared.weight"}


def _activation(feed_forward_proj: str):
    """(activation name, gated) of a Hugging Face feed_forward_proj."""
    parts = feed_forward_proj.split("-")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise ValueError(f"T5 config feed_forward_proj {feed_forward_proj!r} is neither "
                         "'<act>' nor 'gated-<act>'")
    gated, act = len(parts) == 2, parts[-1]
    # Hugging Face maps "gated-gelu" to gelu_new (tanh), as the t5.1.1 checkpoints were trained.
    return ("gelu_tanh" if gated and act == "gelu" else act), gated


def scales_decoder_output(config: Dict) -> bool:
    """Whether the checkpoint scales the decoder output by d_model^-0.5 (T5 v1.0)."""
    if "scale_decoder_outputs" in config:  # transformers 5
        return bool(config["scale_decoder_outputs"])
    return config.get("tie_word_embeddings", True) is not False


def backbone_kwargs_from_hf_config(config: Dict) -> Dict:
    """T5Backbone arguments from a Hugging Face T5 config.json."""
    missing = [k for k in ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_heads")
               if k not in config]
    if missing:
        raise ValueError(f"T5 config lacks {missing}")
    activation, gated = _activation(config.get("feed_forward_proj", "relu"))
    return dict(
        vocab_size=int(config["vocab_size"]), num_layers=int(config["num_layers"]),
        hidden_size=int(config["d_model"]), num_heads=int(config["num_heads"]),
        intermediate_size=int(config["d_ff"]), head_size=int(config["d_kv"]),
        num_decoder_layers=int(config.get("num_decoder_layers") or config["num_layers"]),
        activation=activation, gated_feedforward=gated,
        tie_embeddings=scales_decoder_output(config),
        num_buckets=int(config.get("relative_attention_num_buckets", 32)),
        max_distance=int(config.get("relative_attention_max_distance", 128)),
        dropout=float(config.get("dropout_rate", 0.1)),
        layer_norm_epsilon=float(config.get("layer_norm_epsilon", 1e-6)),
        initializer_factor=float(config.get("initializer_factor", 1.0)))


def _attention_names(source: str, garden: str, num_heads: int) -> NameTable:
    table = {f"{source}.{s}.weight": (f"{garden}/{g}/kernel", qkv_kernel(num_heads))
             for s, g in (("q", "query"), ("k", "key"), ("v", "value"))}
    table[f"{source}.o.weight"] = (f"{garden}/attention_output/kernel",
                                   attention_output_kernel(num_heads))
    return table


def _block_names(stack: str, i: int, kwargs: Dict) -> NameTable:
    s, g = f"{stack}.block.{i}.layer", f"{stack}/block_{i}"
    heads = kwargs["num_heads"]
    table = {**_attention_names(f"{s}.0.SelfAttention", f"{g}/self_attention", heads),
             f"{s}.0.layer_norm.weight": (f"{g}/self_attention_norm/scale", identity)}
    if i == 0:
        table[f"{s}.0.SelfAttention.relative_attention_bias.weight"] = (
            f"{g}/relative_attention_bias/embeddings", identity)
    ff = 1
    if stack == "decoder":
        table.update(_attention_names(f"{s}.1.EncDecAttention", f"{g}/cross_attention", heads))
        table[f"{s}.1.layer_norm.weight"] = (f"{g}/cross_attention_norm/scale", identity)
        ff = 2
    inputs = ("wi_0", "wi_1") if kwargs["gated_feedforward"] else ("wi",)
    for name in inputs + ("wo",):
        table[f"{s}.{ff}.DenseReluDense.{name}.weight"] = (f"{g}/{name}/kernel", linear_kernel)
    table[f"{s}.{ff}.layer_norm.weight"] = (f"{g}/feedforward_norm/scale", identity)
    return table


def hf_name_table(kwargs: Dict) -> NameTable:
    """Hugging Face name -> (T5Seq2SeqLM weight path, transform) for a config's kwargs."""
    table: NameTable = {"shared.weight": ("token_embedding/embeddings", identity)}
    if not kwargs["tie_embeddings"]:
        table["lm_head.weight"] = ("lm_head/kernel", linear_kernel)
    for stack, layers in (("encoder", kwargs["num_layers"]),
                          ("decoder", kwargs["num_decoder_layers"])):
        for i in range(layers):
            table.update(_block_names(stack, i, kwargs))
        table[f"{stack}.final_layer_norm.weight"] = (f"{stack}/final_norm/scale", identity)
    return table


def from_huggingface(config: Dict, weights: Dict[str, np.ndarray]) -> Dict:
    """Garden T5 from a Hugging Face T5ForConditionalGeneration (or T5Model) state dict.

    Returns {"backbone": T5Backbone, "pretrainer": T5Seq2SeqLM} (the LM is T5's pretraining
    model: span corruption trains it as is).

    Example:
        models = from_huggingface(json.load(open("config.json")), safetensors.numpy.load_file(path))
    """
    kwargs = backbone_kwargs_from_hf_config(config)
    weights = dict(weights)
    tied = dict(_TIED)
    if kwargs["tie_embeddings"]:
        tied["lm_head.weight"] = "shared.weight"
    elif "lm_head.weight" not in weights and "shared.weight" in weights:
        weights["lm_head.weight"] = weights["shared.weight"]  # written tied by transformers 5
    try:
        check_tied(weights, tied)
    except ValueError as e:
        if "lm_head" in str(e):
            raise ValueError(f"{e}: this T5 checkpoint scales the decoder output (v1.0) yet "
                             "has its own lm_head; the garden ties them in v1.0") from None
        raise
    backbone = T5Backbone(**kwargs)
    lm = T5Seq2SeqLM(backbone)
    assign_weights(lm, weights, hf_name_table(kwargs),
                   source=f"Hugging Face T5 (config {kwargs})", ignored=tied)
    return {"backbone": backbone, "pretrainer": lm}


# --- back to Hugging Face (garden.to_huggingface) ---------------------------------------------

def to_huggingface(config: Dict, weights: Dict[str, np.ndarray],
                   tokens: Iterable[str] = ()) -> Tuple[Dict, Dict]:
    """(config.json, state dict) of the Hugging Face T5ForConditionalGeneration equal to a
    garden T5: the inverse of from_huggingface through the same name table. v1.0 (tied) has
    no lm_head of its own: transformers ties it to `shared`, so it is not written; v1.1's
    lm_head is its T5Seq2SeqLM's, written (transformers 4 reads it) when it equals the token
    table (transformers 5 ties them: a T5 v1.1 converted from transformers 5 has them equal);
    one that differs is refused.

    Args:
        config: the T5Backbone's get_config().
        weights: garden weight path -> array: the T5Seq2SeqLM's (the backbone's suffices for
            a tied, v1.0, model).
        tokens: the vocabulary's pieces by id (<pad> pads and starts the decoder, </s> ends).
    """
    gated, activation = bool(config["gated_feedforward"]), config["activation"]
    proj = ("gated-" if gated else "") + ("gelu" if gated and activation == "gelu_tanh"
                                          else activation)
    if _activation(proj) != (activation, gated):
        raise ValueError(f"a T5 feed-forward of activation {activation!r} (gated={gated}) has "
                         "no Hugging Face feed_forward_proj")
    tied = bool(config["tie_embeddings"])
    if not tied and "lm_head/kernel" not in weights:
        raise ValueError("an untied T5 (v1.1) needs its T5Seq2SeqLM's lm_head: give the "
                         "weights of the LM, not of the backbone alone")
    # transformers 5's T5Config forces tie_word_embeddings (lm_head is `shared`; the scaling
    # follows scale_decoder_outputs): an lm_head of its own would load as the token table.
    if not tied and not np.array_equal(np.asarray(weights["lm_head/kernel"]).T,
                                       weights["token_embedding/embeddings"]):
        raise ValueError("this T5's lm_head differs from its token table, and transformers 5 "
                         "ties T5's lm_head to `shared`: it would load with other logits")
    hf = {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"],
          "vocab_size": config["vocab_size"], "d_model": config["hidden_size"],
          "d_kv": config["head_size"], "d_ff": config["intermediate_size"],
          "num_layers": config["num_layers"],
          "num_decoder_layers": config["num_decoder_layers"] or config["num_layers"],
          "num_heads": config["num_heads"], "feed_forward_proj": proj,
          "relative_attention_num_buckets": config["num_buckets"],
          "relative_attention_max_distance": config["max_distance"],
          "dropout_rate": config["dropout"], "layer_norm_epsilon": config["layer_norm_epsilon"],
          "initializer_factor": config["initializer_factor"],
          # transformers 5 reads the scaling from scale_decoder_outputs, older ones from the tie
          "tie_word_embeddings": tied, "scale_decoder_outputs": tied,
          "is_encoder_decoder": True,
          **special_token_ids(tokens, {"pad_token_id": "<pad>", "eos_token_id": "</s>",
                                      "decoder_start_token_id": "<pad>"})}
    kwargs = backbone_kwargs_from_hf_config(hf)
    return hf, invert_weights(weights, hf_name_table(kwargs), source="Hugging Face T5")
