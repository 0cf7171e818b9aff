"""What every family's heads-on-a-backbone model shares: the config (the serialized backbone plus
the model's own arguments), the tied masked-LM head built from the backbone's config, the graph
of a masked-LM pretrainer, and the sentence-level head.
"""

from __future__ import annotations

from typing import Dict, Sequence, Tuple

import keras

from garden.layers.embeddings import truncated_normal
from garden.layers.heads import MaskedLMHead
from garden.models.backbone import backbone_inputs


class PretrainerConfig:
    """The config of a heads-on-a-backbone model: get_config returns the backbone, serialized,
    plus the attributes named in `config_attributes` (the subclass's own constructor
    arguments); from_config rebuilds the backbone and calls the constructor. A subclass sets
    `self.backbone` and those attributes.

    A mixin rather than only a keras.Model base: Keras' Model.__init__ with inputs/outputs
    (every functional pretrainer) rewrites keras.Model to Functional in the bases of every
    class above it, for the whole process, so a SUBCLASSED model under the same base
    (XLNetPretrainer) would then fail to construct. XLNetPretrainer takes this mixin with
    keras.Model directly; tests/models/test_pretrainer_bases.py builds them in both orders.
    """

    config_attributes: Sequence[str] = ()

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable,
                  "backbone": keras.layers.serialize(self.backbone)}
        config.update({k: getattr(self, k) for k in self.config_attributes})
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.layers.deserialize(config["backbone"])
        return cls(**config)


class Pretrainer(PretrainerConfig, keras.Model):
    """Base of the functional models that put heads on a backbone (BertPretrainer,
    AlbertPretrainer, ...); see PretrainerConfig."""


def tied_masked_lm_head(backbone, activation="gelu") -> MaskedLMHead:
    """BERT's MLM head on `backbone` (dense -> activation -> LayerNorm -> tied word table + bias),
    with the backbone's LayerNorm epsilon, initializer range and dtype policy."""
    return MaskedLMHead(
        backbone.token_embedding, activation=activation,
        layer_norm_epsilon=getattr(backbone, "layer_norm_epsilon", 1e-12),
        initializer_range=getattr(backbone, "initializer_range", 0.02),
        dtype=backbone.dtype_policy, name="masked_lm_head")


def masked_lm_graph(backbone, masked_lm_head: MaskedLMHead, encoder_inputs: Sequence[str],
                    extra_inputs: Sequence[str] = ()) -> Tuple[Dict, Dict, keras.KerasTensor]:
    """The graph every masked-LM pretrainer starts from: int32 Inputs named `encoder_inputs`,
    then masked_lm_positions [B, P], then `extra_inputs` (SpanBERT's span boundary targets);
    the backbone's outputs on the encoder inputs; the head's logits [B, P, V] at the positions.

    Returns (inputs, backbone outputs, mlm_logits); the caller adds its other heads.
    """
    inputs = backbone_inputs((*encoder_inputs, "masked_lm_positions", *extra_inputs))
    backbone_outputs = backbone({k: inputs[k] for k in encoder_inputs})
    mlm_logits = masked_lm_head(backbone_outputs["sequence_output"],
                                inputs["masked_lm_positions"])
    return inputs, backbone_outputs, mlm_logits


def sentence_head(backbone, name: str, num_classes: int = 2) -> keras.layers.Dense:
    """dense(num_classes) on the pooled output (NSP, SOP); float32 whatever the policy, since
    the logits feed a softmax cross-entropy."""
    return keras.layers.Dense(
        num_classes, kernel_initializer=truncated_normal(getattr(backbone, "initializer_range",
                                                                 0.02)),
        dtype="float32", name=name)
