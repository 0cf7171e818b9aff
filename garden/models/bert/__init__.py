"""BERT (Devlin et al., 2019): backbone, pretraining heads and loss, presets."""

from garden.models.bert.backbone import BertBackbone
from garden.models.bert.presets import PRESETS, untrained_bert_backbone
from garden.models.bert.pretrainer import BertPretrainer, bert_pretrain_loss
from garden.models.family import FamilySpec

__all__ = ["SPEC", "BertBackbone", "BertPretrainer", "bert_pretrain_loss", "PRESETS",
           "untrained_bert_backbone"]

SPEC = FamilySpec(
    name="bert", backbone=BertBackbone,
    tokenizer="wordpiece", layout="bert", lower_case=True,
    pretrainer=BertPretrainer,
    pretraining="garden.tasks.pretraining.bert:RECORD",
    converters={"huggingface": ".conversion:from_huggingface", "tf1": ".conversion:from_tf1",
                "model_garden": ".model_garden:load", "keras_hub": ".keras_hub:from_keras_hub"})
