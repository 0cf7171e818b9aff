"""What every family's heads-on-a-backbone model shares: the config (the serialized backbone plus
the model's own arguments), the tied masked-LM head built from the backbone's config, the graph
of a masked-LM pretrainer, the sentence-level head, and the masked LM + sentence-pair pretrainer
with its loss (BERT's NSP, ALBERT's SOP).
"""

from __future__ import annotations

from typing import Dict, Sequence, Tuple

import keras
import tensorflow as tf

from garden.layers.embeddings import truncated_normal
from garden.layers.heads import MaskedLMHead
from garden.losses import masked_lm_metrics, sentence_metrics, with_total_loss
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


# The inputs of a sentence-pair backbone (BERT's order).
PAIR_INPUTS = ("token_ids", "segment_ids", "padding_mask")


class SentencePairPretrainer(Pretrainer):
    """A masked LM head and a sentence-pair head (sentence_head: dense(2) on the pooled output)
    on a backbone with segment inputs: BertPretrainer (next sentence prediction) and
    AlbertPretrainer (sentence order prediction).

    Inputs (dict, int32): token_ids, segment_ids, padding_mask [B, T]; masked_lm_positions
    [B, P]. Outputs (dict, float32): mlm_logits [B, P, V], `<sentence>`_logits [B, 2].

    A subclass names the pair task (`sentence`: the output's and the loss's prefix, "nsp") and
    the pair head (`sentence_head_name`: its attribute and layer name, which checkpoints and the
    converters know), and may change the MLM head (`masked_lm_head_for`) or how the graph reaches
    the masked rows and the pooled output (`masked_lm_and_pooled`).
    """

    sentence: str = ""
    sentence_head_name: str = ""

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        masked_lm_head = self.masked_lm_head_for(backbone)
        pair_head = sentence_head(backbone, self.sentence_head_name)

        # === Functional graph ===
        inputs, mlm_logits, pooled_output = self.masked_lm_and_pooled(backbone, masked_lm_head)
        pair_logits = pair_head(pooled_output)
        super().__init__(inputs=inputs, outputs={"mlm_logits": mlm_logits,
                                                 f"{self.sentence}_logits": pair_logits},
                         **kwargs)

        # === Config ===
        self.backbone = backbone
        self.masked_lm_head = masked_lm_head
        setattr(self, self.sentence_head_name, pair_head)

    @staticmethod
    def masked_lm_head_for(backbone) -> MaskedLMHead:
        """BERT's tied MLM head (GELU transform)."""
        return tied_masked_lm_head(backbone)

    @staticmethod
    def masked_lm_and_pooled(backbone, masked_lm_head: MaskedLMHead):
        """(inputs, mlm_logits, pooled_output): masked_lm_graph on the pair inputs."""
        inputs, backbone_outputs, mlm_logits = masked_lm_graph(backbone, masked_lm_head,
                                                               PAIR_INPUTS)
        return inputs, mlm_logits, backbone_outputs["pooled_output"]


def sentence_pair_loss(outputs: Dict[str, tf.Tensor], masked_lm_ids, masked_lm_weights,
                       sentence_labels, sentence: str,
                       mlm_denominator=None) -> Dict[str, tf.Tensor]:
    """MLM + sentence-pair loss and accuracies of one (per-replica) batch, in plain TF ops:
    bert_pretrain_loss with the pair task named `sentence` ("nsp", "sop": the logits are
    outputs[f"{sentence}_logits"], the metrics f"{sentence}_loss", f"{sentence}_accuracy")."""
    return with_total_loss(
        {**masked_lm_metrics(outputs["mlm_logits"], masked_lm_ids, masked_lm_weights,
                             mlm_denominator),
         **sentence_metrics(outputs[f"{sentence}_logits"], sentence_labels, sentence)},
        **{"mlm": 1.0, sentence: 1.0})
