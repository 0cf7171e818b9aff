"""BERT (Devlin et al., 2019): backbone, pretraining heads and loss, presets."""

from garden.models.bert.backbone import BertBackbone
from garden.models.bert.presets import PRESETS, bert_backbone_from_preset
from garden.models.bert.pretrainer import BertPretrainer, bert_pretrain_loss

__all__ = ["BertBackbone", "BertPretrainer", "bert_pretrain_loss", "PRESETS",
           "bert_backbone_from_preset"]
