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

from typing import Dict

import numpy as np

from garden.models.electra.backbone import ElectraBackbone
from garden.models.electra.pretrainer import ElectraDiscriminator, ElectraGenerator
from garden.models.conversion import (HF_BERT_LAYER, NameTable, assign_weights,
                                      check_bert_style_config, check_tied, hf_bert_encoder_names,
                                      hf_bert_sizes)

# Buffers that some transformers versions save with the weights; they carry no parameters.
_BUFFERS = (r"embeddings\.position_ids$", r"embeddings\.token_type_ids$")


def backbone_config_from_huggingface(config: dict) -> dict:
    """ElectraBackbone arguments from a Hugging Face ElectraConfig dict (config.json)."""
    check_bert_style_config(config, "ELECTRA")
    sizes = hf_bert_sizes(config)
    return dict(
        **sizes,
        embedding_size=int(config.get("embedding_size") or sizes["hidden_size"]),
        max_sequence_length=int(config.get("max_position_embeddings", 512)),
        type_vocab_size=int(config.get("type_vocab_size", 2)),
        dropout=float(config.get("hidden_dropout_prob", 0.1)),
        initializer_range=float(config.get("initializer_range", 0.02)),
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-12)),
    )


def _hf_names(config: dict, prefix: str, kind: str) -> NameTable:
    """The name table of one tower (`prefix` "electra." or "") and the checkpoint's head."""
    L = HF_BERT_LAYER
    names = hf_bert_encoder_names(config["num_layers"], config["num_heads"], prefix)
    if config["embedding_size"] != config["hidden_size"]:
        names.update(L.dense(f"{prefix}embeddings_project", "embeddings_project"))
    if kind == "ElectraForPreTraining":
        names.update({
            **L.dense("discriminator_predictions.dense", "discriminator_head/dense"),
            **L.dense("discriminator_predictions.dense_prediction",
                      "discriminator_head/dense_prediction")})
    elif kind == "ElectraForMaskedLM":
        names.update(L.masked_lm_head("generator_predictions.dense", "generator_predictions.LayerNorm",
                                      "generator_lm_head.bias"))
    return names


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
    kind = ("ElectraForPreTraining" if has_disc else
            "ElectraForMaskedLM" if has_gen else "ElectraModel")

    kwargs = backbone_config_from_huggingface(config)
    backbone = ElectraBackbone(**kwargs, name="electra_backbone")
    pretrainer = None
    if has_disc:
        pretrainer = ElectraDiscriminator(backbone, name="electra_discriminator")
    elif has_gen:
        pretrainer = ElectraGenerator(backbone, name="electra_generator")
    # The generator's output matrix is the word table itself (tied) and may be absent.
    check_tied(weights, {"generator_lm_head.weight": f"{prefix}embeddings.word_embeddings.weight"})
    assign_weights(pretrainer or backbone, weights, _hf_names(kwargs, prefix, kind),
                   source=f"ELECTRA (read as {kind}, prefix {prefix!r})",
                   ignored={"generator_lm_head.weight"}, ignored_patterns=_BUFFERS)
    return {"backbone": backbone, "pretrainer": pretrainer}


# --- original Google ELECTRA (TF1, name-based checkpoints) ------------------------------------

# (TF1 pattern, Hugging Face name, transpose) for one tower. google-research/electra scopes the
# discriminator "electra/..." and the generator "generator/..." (its embeddings are the
# discriminator's "electra/embeddings/..." unless untied); tf.layers.dense kernels are [in, out],
# torch Linear weights [out, in]. Converting the names and going through from_huggingface keeps
# one set of shape checks and one report of missing / unexpected weights.
def _tower_rules(scope: str):
    layer = rf"{scope}/encoder/layer_(\d+)/"
    hf = r"electra.encoder.layer.\1."
    rules = [
        (rf"{scope}/embeddings_project/kernel", "electra.embeddings_project.weight", True),
        (rf"{scope}/embeddings_project/bias", "electra.embeddings_project.bias", False),
        (layer + r"attention/self/(query|key|value)/kernel", hf + r"attention.self.\2.weight", True),
        (layer + r"attention/self/(query|key|value)/bias", hf + r"attention.self.\2.bias", False),
        (layer + r"attention/output/dense/kernel", hf + "attention.output.dense.weight", True),
        (layer + r"attention/output/dense/bias", hf + "attention.output.dense.bias", False),
        (layer + r"attention/output/LayerNorm/gamma", hf + "attention.output.LayerNorm.weight", False),
        (layer + r"attention/output/LayerNorm/beta", hf + "attention.output.LayerNorm.bias", False),
        (layer + r"intermediate/dense/kernel", hf + "intermediate.dense.weight", True),
        (layer + r"intermediate/dense/bias", hf + "intermediate.dense.bias", False),
        (layer + r"output/dense/kernel", hf + "output.dense.weight", True),
        (layer + r"output/dense/bias", hf + "output.dense.bias", False),
        (layer + r"output/LayerNorm/gamma", hf + "output.LayerNorm.weight", False),
        (layer + r"output/LayerNorm/beta", hf + "output.LayerNorm.bias", False),
    ]
    return rules


def _embedding_rules(scope: str):
    return [
        (rf"{scope}/embeddings/(word|position|token_type)_embeddings",
         r"electra.embeddings.\1_embeddings.weight", False),
        (rf"{scope}/embeddings/LayerNorm/gamma", "electra.embeddings.LayerNorm.weight", False),
        (rf"{scope}/embeddings/LayerNorm/beta", "electra.embeddings.LayerNorm.bias", False),
    ]


_DISCRIMINATOR_HEAD_RULES = [
    (r"discriminator_predictions/dense/kernel", "discriminator_predictions.dense.weight", True),
    (r"discriminator_predictions/dense/bias", "discriminator_predictions.dense.bias", False),
    (r"discriminator_predictions/dense_1/kernel", "discriminator_predictions.dense_prediction.weight", True),
    (r"discriminator_predictions/dense_1/bias", "discriminator_predictions.dense_prediction.bias", False),
]
_GENERATOR_HEAD_RULES = [
    (r"generator_predictions/dense/kernel", "generator_predictions.dense.weight", True),
    (r"generator_predictions/dense/bias", "generator_predictions.dense.bias", False),
    (r"generator_predictions/LayerNorm/gamma", "generator_predictions.LayerNorm.weight", False),
    (r"generator_predictions/LayerNorm/beta", "generator_predictions.LayerNorm.bias", False),
    (r"generator_predictions/output_bias", "generator_lm_head.bias", False),
]
# Not model weights: optimizer slots, step counters.
_TF1_IGNORED = (r"/adam_[mv]$", r"^global_step$")


def _rename(weights: Dict[str, np.ndarray], rules) -> Dict[str, np.ndarray]:
    import re

    out = {}
    for name, value in weights.items():
        for pattern, replacement, transpose in rules:
            if re.fullmatch(pattern, name):
                value = np.asarray(value)
                out[re.sub(f"^{pattern}$", replacement, name)] = value.T if transpose else value
                break
    return out


def _generator_config(config: dict, weights: Dict[str, np.ndarray]) -> dict:
    """The generator's ElectraConfig: the discriminator's with the generator's sizes, read from
    its weights (ELECTRA's get_generator_config: hidden = fraction x H, FFN = 4 x hidden, heads =
    max(1, hidden // 64), same depth unless generator_layers < 1) unless the config gives
    generator_hidden_size / generator_num_hidden_layers / generator_num_attention_heads /
    generator_intermediate_size."""
    query = weights["generator/encoder/layer_0/attention/self/query/kernel"]
    hidden = int(config.get("generator_hidden_size") or query.shape[1])
    layers = sum(1 for n in weights
                 if n.startswith("generator/encoder/layer_") and n.endswith("/attention/self/query/kernel"))
    ffn = weights["generator/encoder/layer_0/intermediate/dense/kernel"].shape[1]
    return {**config, "hidden_size": hidden,
            "num_hidden_layers": int(config.get("generator_num_hidden_layers") or layers),
            "num_attention_heads": int(config.get("generator_num_attention_heads")
                                       or max(1, hidden // 64)),
            "intermediate_size": int(config.get("generator_intermediate_size") or ffn)}


def from_tf1(config: dict, weights: Dict[str, np.ndarray]) -> dict:
    """Garden ELECTRA models from an original google-research/electra TF1 checkpoint.

    A pretraining checkpoint holds both towers; this returns the discriminator (what
    fine-tuning uses) as "backbone" / "pretrainer" and, when the generator is there, the
    generator (with its own copy of the shared embeddings) as "generator".

    Args:
        config: the model's hyperparameters as an ElectraConfig-style dict (vocab_size,
            hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
            embedding_size, ...; the released checkpoints' sizes are in their paper / in
            garden/models/electra/presets.py). The generator's sizes are read from its weights
            unless generator_* keys give them. ELECTRA's TF1 "gelu" is the tanh approximation;
            the garden's ELECTRA (like Hugging Face's import of these checkpoints) uses the
            exact GELU, as for BERT.
        weights: variable name (e.g. "electra/encoder/layer_0/attention/self/query/kernel") ->
            array, as tf.train.load_checkpoint reads them. Adam slots and global_step are skipped.

    Returns:
        {"backbone": ElectraBackbone, "pretrainer": ElectraDiscriminator or None,
         "generator": ElectraGenerator or None}.

    Example:
        models = garden.convert.load_tf1("electra_small/electra_small", "electra", "electra_small_config.json")
    """
    import re

    weights = {n: v for n, v in weights.items()
               if not any(re.search(p, n) for p in _TF1_IGNORED)}
    discriminator_rules = _embedding_rules("electra") + _tower_rules("electra") + _DISCRIMINATOR_HEAD_RULES
    has_generator = any(n.startswith("generator/") for n in weights)
    untied = any(n.startswith("generator/embeddings/") for n in weights)
    generator_rules = ((_embedding_rules("generator") if untied else _embedding_rules("electra"))
                       + _tower_rules("generator") + _GENERATOR_HEAD_RULES)
    known = set()
    for rules in (discriminator_rules, generator_rules if has_generator else []):
        for name in weights:
            if any(re.fullmatch(p, name) for p, _, _ in rules):
                known.add(name)
    unknown = sorted(set(weights) - known)
    if unknown:
        raise ValueError(f"TF1 ELECTRA checkpoint has variables this converter does not know: "
                         f"{unknown[:20]}")
    if "embedding_size" not in config and "electra/embeddings/word_embeddings" in weights:
        config = {**config, "embedding_size": int(weights["electra/embeddings/word_embeddings"].shape[1])}

    models = from_huggingface(config, _rename(weights, discriminator_rules))
    models["generator"] = None
    if has_generator:
        generator = from_huggingface(_generator_config(config, weights),
                                     _rename(weights, generator_rules))
        models["generator"] = generator["pretrainer"]
    return models
