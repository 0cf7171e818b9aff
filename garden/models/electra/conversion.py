"""Hugging Face ELECTRA checkpoints -> garden ELECTRA models.

Which Hugging Face class becomes which of ours:
  ElectraModel            (no prefix or `electra.`)              -> ElectraBackbone
  ElectraForPreTraining   (`electra.*`, `discriminator_predictions.*`, the discriminator)
                          -> ElectraBackbone + ElectraDiscriminator (RTD head)
  ElectraForMaskedLM      (`electra.*`, `generator_predictions.*`, `generator_lm_head.*`,
                          the generator) -> ElectraBackbone + ElectraGenerator (tied MLM head)
The released discriminator and generator are separate checkpoints with separate copies of the
embeddings, so they convert to separate towers; an ElectraPretrainer (one shared embedding
block) is built from presets, not from a pair of Hugging Face checkpoints.

Name mapping (torch Linear weights are [out, in]; Keras kernels [in, out]):
  embeddings.word_embeddings / position_embeddings / token_type_embeddings / LayerNorm
      -> embeddings/token_embedding, position_embedding, segment_embedding, layer_norm
  embeddings_project                      -> embeddings_project
  encoder.layer.i.attention.self.{query,key,value} -> transformer_layer_i/attention/{q,k,v}
      (kernel reshaped to [H, heads, head_size], bias to [heads, head_size])
  encoder.layer.i.attention.output.dense  -> attention/attention_output ([heads, head_size, H])
  encoder.layer.i.attention.output.LayerNorm -> attention_layer_norm
  encoder.layer.i.intermediate.dense / output.dense / output.LayerNorm
      -> intermediate_dense / output_dense / output_layer_norm
  discriminator_predictions.dense / dense_prediction -> discriminator_head/dense, dense_prediction
  generator_predictions.dense / LayerNorm -> masked_lm_head/transform_dense, layer_norm
  generator_lm_head.bias -> masked_lm_head/output_bias; generator_lm_head.weight must be the
      word table itself (tied, as in every released generator) and may be absent.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from garden.models.electra.backbone import ElectraBackbone
from garden.models.electra.pretrainer import ElectraDiscriminator, ElectraGenerator

# Buffers that some transformers versions save with the weights; they carry no parameters.
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")


def backbone_config_from_huggingface(config: dict) -> dict:
    """ElectraBackbone arguments from a Hugging Face ElectraConfig dict (config.json)."""
    if config.get("hidden_act", "gelu") != "gelu":
        raise ValueError(f"hidden_act {config['hidden_act']!r} is not supported: the garden's "
                         "ELECTRA uses the exact GELU ('gelu')")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"position_embedding_type {config['position_embedding_type']!r} is not "
                         "supported: only 'absolute' positions")
    hidden_size = int(config["hidden_size"])
    return dict(
        vocab_size=int(config["vocab_size"]),
        num_layers=int(config["num_hidden_layers"]),
        hidden_size=hidden_size,
        num_heads=int(config["num_attention_heads"]),
        intermediate_size=int(config["intermediate_size"]),
        embedding_size=int(config.get("embedding_size") or hidden_size),
        max_sequence_length=int(config.get("max_position_embeddings", 512)),
        type_vocab_size=int(config.get("type_vocab_size", 2)),
        dropout=float(config.get("hidden_dropout_prob", 0.1)),
        initializer_range=float(config.get("initializer_range", 0.02)),
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-12)),
    )


class _Weights:
    """The checkpoint's tensors, handed out by name; remembers what was taken."""

    def __init__(self, weights: Dict[str, np.ndarray]):
        self.weights = {k: np.asarray(v, np.float32) for k, v in weights.items()}
        self.used = set()
        self.missing = []

    def get(self, name: str) -> Optional[np.ndarray]:
        if name not in self.weights:
            self.missing.append(name)
            return None
        self.used.add(name)
        return self.weights[name]

    def linear(self, name: str):
        """(kernel [in, out], bias) of a torch Linear."""
        w, b = self.get(name + ".weight"), self.get(name + ".bias")
        return (None if w is None else w.T), b

    def layer_norm(self, name: str):
        return self.get(name + ".weight"), self.get(name + ".bias")


def _assign(variable, value, source: str):
    if value is None:  # reported as missing once everything has been read
        return
    value = np.asarray(value, np.float32)
    if tuple(variable.shape) != value.shape:
        value_shape = value.shape
        try:
            value = value.reshape(tuple(variable.shape))
        except ValueError:
            raise ValueError(f"{source}: shape {value_shape} does not fit "
                             f"{variable.path} {tuple(variable.shape)}") from None
    variable.assign(value)


def _load_backbone(backbone: ElectraBackbone, w: _Weights, prefix: str):
    emb = backbone.embeddings
    p = prefix + "embeddings."
    _assign(emb.token_embedding.embeddings, w.get(p + "word_embeddings.weight"), p + "word_embeddings")
    _assign(emb.position_embedding.position_embeddings, w.get(p + "position_embeddings.weight"),
            p + "position_embeddings")
    _assign(emb.segment_embedding.embeddings, w.get(p + "token_type_embeddings.weight"),
            p + "token_type_embeddings")
    gamma, beta = w.layer_norm(p + "LayerNorm")
    _assign(emb.layer_norm.gamma, gamma, p + "LayerNorm")
    _assign(emb.layer_norm.beta, beta, p + "LayerNorm")
    if backbone.embeddings_project is not None:
        kernel, bias = w.linear(prefix + "embeddings_project")
        _assign(backbone.embeddings_project.kernel, kernel, prefix + "embeddings_project")
        _assign(backbone.embeddings_project.bias, bias, prefix + "embeddings_project")

    for i, block in enumerate(backbone.encoder_blocks):
        p = f"{prefix}encoder.layer.{i}."
        attention = block.attention
        for ours, theirs in (("query", "query"), ("key", "key"), ("value", "value")):
            kernel, bias = w.linear(p + "attention.self." + theirs)
            dense = getattr(attention, f"_{ours}_dense")
            _assign(dense.kernel, kernel, p + "attention.self." + theirs)  # [H, A*d] -> [H, A, d]
            _assign(dense.bias, bias, p + "attention.self." + theirs)
        kernel, bias = w.linear(p + "attention.output.dense")
        _assign(attention._output_dense.kernel, kernel, p + "attention.output.dense")  # -> [A, d, H]
        _assign(attention._output_dense.bias, bias, p + "attention.output.dense")
        for layer, name in ((block.attention_layer_norm, "attention.output.LayerNorm"),
                            (block.output_layer_norm, "output.LayerNorm")):
            gamma, beta = w.layer_norm(p + name)
            _assign(layer.gamma, gamma, p + name)
            _assign(layer.beta, beta, p + name)
        for layer, name in ((block.intermediate_dense, "intermediate.dense"),
                            (block.output_dense, "output.dense")):
            kernel, bias = w.linear(p + name)
            _assign(layer.kernel, kernel, p + name)
            _assign(layer.bias, bias, p + name)


def from_huggingface(config: dict, weights: Dict[str, np.ndarray]) -> dict:
    """Garden ELECTRA models holding the weights of a Hugging Face ELECTRA checkpoint.

    The kind of checkpoint is read from the names (see the module docstring): with
    `discriminator_predictions.*` it is an ElectraForPreTraining, with `generator_predictions.*`
    an ElectraForMaskedLM, else an ElectraModel.

    Args:
        config: the checkpoint's config.json as a dict (ElectraConfig fields).
        weights: name -> array, the state dict (safetensors or pytorch_model.bin) as numpy.

    Returns:
        {"backbone": ElectraBackbone, "pretrainer": ElectraDiscriminator, ElectraGenerator or
        None (ElectraModel)}; "pretrainer" holds the backbone plus the checkpoint's head.

    Raises:
        ValueError naming the missing and the unexpected checkpoint names, a shape that does
        not fit, an untied generator output matrix, or an unsupported config.

    Example:
        converted = from_huggingface(json.load(open("config.json")), safetensors.numpy.load_file("model.safetensors"))
        discriminator = converted["pretrainer"]  # ElectraDiscriminator for ElectraForPreTraining
        backbone = converted["backbone"]  # what fine-tuning loads
    """
    names = set(weights)
    has_disc = any(n.startswith("discriminator_predictions.") for n in names)
    has_gen = any(n.startswith(("generator_predictions.", "generator_lm_head.")) for n in names)
    if has_disc and has_gen:
        raise ValueError("the checkpoint has both discriminator_predictions.* and "
                         "generator_predictions.* weights; convert the discriminator and the "
                         "generator checkpoints separately")
    prefix = "electra." if any(n.startswith("electra.") for n in names) else ""

    backbone = ElectraBackbone(**backbone_config_from_huggingface(config), name="electra_backbone")
    w = _Weights(weights)
    _load_backbone(backbone, w, prefix)

    pretrainer = None
    if has_disc:
        pretrainer = ElectraDiscriminator(backbone, name="electra_discriminator")
        head = pretrainer.discriminator_head
        for layer, name in ((head.dense, "discriminator_predictions.dense"),
                            (head.dense_prediction, "discriminator_predictions.dense_prediction")):
            kernel, bias = w.linear(name)
            _assign(layer.kernel, kernel, name)
            _assign(layer.bias, bias, name)
    elif has_gen:
        pretrainer = ElectraGenerator(backbone, name="electra_generator")
        head = pretrainer.masked_lm_head
        kernel, bias = w.linear("generator_predictions.dense")
        _assign(head.transform_dense.kernel, kernel, "generator_predictions.dense")
        _assign(head.transform_dense.bias, bias, "generator_predictions.dense")
        gamma, beta = w.layer_norm("generator_predictions.LayerNorm")
        _assign(head.layer_norm.gamma, gamma, "generator_predictions.LayerNorm")
        _assign(head.layer_norm.beta, beta, "generator_predictions.LayerNorm")
        _assign(head.output_bias, w.get("generator_lm_head.bias"), "generator_lm_head.bias")
        if "generator_lm_head.weight" in names:
            w.used.add("generator_lm_head.weight")
            table = w.weights.get(prefix + "embeddings.word_embeddings.weight")
            if table is not None and not np.array_equal(w.weights["generator_lm_head.weight"], table):
                raise ValueError("generator_lm_head.weight differs from "
                                 f"{prefix}embeddings.word_embeddings.weight: the garden's "
                                 "generator ties its output matrix to the word table")

    unexpected = sorted(n for n in names - w.used if not n.endswith(_BUFFERS))
    if w.missing or unexpected:
        kind = ("ElectraForPreTraining" if has_disc else
                "ElectraForMaskedLM" if has_gen else "ElectraModel")
        raise ValueError(
            f"the checkpoint does not fit an ELECTRA of this config (read as {kind}, prefix "
            f"{prefix!r}): missing {sorted(w.missing)}; unexpected {unexpected}")
    return {"backbone": backbone, "pretrainer": pretrainer}
