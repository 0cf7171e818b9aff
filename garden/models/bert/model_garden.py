"""BERT from tf-models-official (Model Garden): a `BertEncoder`, or an object-based checkpoint
of one, read into garden weights for `garden.models.bert.conversion.from_model_garden`.

`load` is the family's "model_garden" converter (its FamilySpec), which garden.convert's
load_model_garden calls: tf-models-official is imported only here, only when it runs.
"""

from __future__ import annotations

import math
import os
import re
import sys
from typing import Dict, Optional

import numpy as np

from garden.models.bert.conversion import from_model_garden


def _gelu_exact(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def check_activation(encoder, allow_approximate_gelu: bool) -> None:
    """Probes the encoder's feed-forward activation numerically: its config stores only a
    name, and Model Garden's default ("gelu" through tf_utils, or BertEncoder's own default)
    is the tanh approximation while the garden backbone computes the exact GELU."""
    block = encoder.transformer_layers[0]
    activation = block._inner_activation  # the callable the block applies
    if isinstance(activation, str):
        import tf_keras

        activation = tf_keras.activations.get(activation)
    x = np.linspace(-5.0, 5.0, 201).astype(np.float32)
    y = np.asarray(activation(x), np.float64)
    if np.max(np.abs(y - _gelu_exact(x))) < 1e-5:
        return
    if np.max(np.abs(y - _gelu_tanh(x))) < 1e-5:
        gap = float(np.max(np.abs(_gelu_tanh(x) - _gelu_exact(x))))
        if allow_approximate_gelu:
            print(f"garden.convert: the encoder uses the tanh-approximate GELU; the garden "
                  f"backbone uses the exact one (pointwise difference up to {gap:.1e})",
                  file=sys.stderr)
            return
        raise ValueError(
            "the Model Garden encoder uses the tanh-approximate GELU (its default) but the "
            f"garden BertBackbone computes the exact GELU (they differ by up to {gap:.1e} "
            "pointwise, so outputs will not match to 1e-4); pass allow_approximate_gelu=True "
            "(--allow_approximate_gelu) to convert anyway")
    raise ValueError("the Model Garden encoder's feed-forward activation is not GELU; the "
                     "garden BertBackbone cannot represent it")


def encoder_kwargs(config: Dict) -> Dict:
    """BertEncoder constructor arguments from either `BertEncoder.get_config()` or Model
    Garden's `BertEncoderConfig` (the `encoder.bert` block of its YAML experiment configs)."""
    from official.modeling import tf_utils

    config = dict(config)
    if "inner_dim" in config:  # BertEncoder.get_config()
        kwargs = {k: config[k] for k in (
            "vocab_size", "hidden_size", "num_layers", "num_attention_heads",
            "max_sequence_length", "type_vocab_size", "inner_dim", "output_dropout",
            "attention_dropout", "embedding_width", "norm_first") if k in config}
        if "inner_activation" in config:
            import tf_keras

            kwargs["inner_activation"] = tf_keras.activations.get(config["inner_activation"])
        return kwargs
    # BertEncoderConfig: its hidden_activation goes through tf_utils.get_activation, where
    # "gelu" is the tanh approximation.
    return dict(
        vocab_size=config["vocab_size"], hidden_size=config.get("hidden_size", 768),
        num_layers=config.get("num_layers", 12),
        num_attention_heads=config.get("num_attention_heads", 12),
        max_sequence_length=config.get("max_position_embeddings", 512),
        type_vocab_size=config.get("type_vocab_size", 2),
        inner_dim=config.get("intermediate_size", 3072),
        inner_activation=tf_utils.get_activation(config.get("hidden_activation", "gelu")),
        output_dropout=config.get("dropout_rate", 0.1),
        attention_dropout=config.get("attention_dropout_rate", 0.1),
        embedding_width=config.get("embedding_size"),
        norm_first=config.get("norm_first", False))


def load(checkpoint_or_encoder, config: Optional[Dict] = None, checkpoint_key: str = "encoder",
         allow_approximate_gelu: bool = False) -> Dict:
    """{"backbone": BertBackbone, "pretrainer": None} of a built BertEncoder, or of the
    checkpoint prefix holding one under `checkpoint_key` with its `config` (a dict:
    `BertEncoder.get_config()` or a `BertEncoderConfig`); garden.convert.load_model_garden
    documents the arguments."""
    if isinstance(checkpoint_or_encoder, (str, os.PathLike)):
        import tensorflow as tf
        from official.nlp.modeling.networks import BertEncoder

        if config is None:
            raise ValueError("a Model Garden checkpoint needs --config (the encoder config)")
        encoder = BertEncoder(**encoder_kwargs(config))
        status = tf.train.Checkpoint(**{checkpoint_key: encoder}).read(str(checkpoint_or_encoder))
        # Every encoder variable must come from the checkpoint: no silent partial restore.
        status.expect_partial()  # optimizer slots etc. may be in the checkpoint too
        try:
            status.assert_existing_objects_matched()
        except AssertionError as e:
            # TF's message prints whole arrays; keep the variable names (first 10 of them).
            names = re.findall(r"<tf\.Variable '([^']+)'", str(e)) or [str(e)[:300]]
            raise ValueError(f"{checkpoint_or_encoder} does not hold every variable of a "
                             f"BertEncoder built from this config under {checkpoint_key!r} "
                             f"(check the config): missing e.g. {names}") from None
    else:
        encoder = checkpoint_or_encoder
    check_activation(encoder, allow_approximate_gelu)
    weights = {v.name: v.numpy() for v in encoder.weights}
    return from_model_garden(encoder.get_config(), weights)
