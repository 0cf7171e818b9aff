"""BERT (Devlin et al., 2019): backbone, pretraining heads and loss, presets."""

from garden.models.bert.backbone import BertBackbone
from garden.models.bert.presets import PRESETS, bert_backbone_from_preset
from garden.models.bert.pretrainer import BertPretrainer, bert_pretrain_loss
from garden.models.family import FamilySpec

__all__ = ["SPEC", "BertBackbone", "BertPretrainer", "bert_pretrain_loss", "PRESETS",
           "bert_backbone_from_preset"]

SPEC = FamilySpec(
    name="bert", backbone="garden.models.bert.backbone:BertBackbone",
    presets="garden.models.bert.presets", default_preset="bert_base",
    tokenizer="wordpiece", layout="bert", lower_case=True,
    pretrainer="garden.models.bert.pretrainer:BertPretrainer",
    converters={"huggingface": "garden.models.bert.conversion:from_huggingface",
                "tf1": "garden.models.bert.conversion:from_tf1",
                "model_garden": "garden.models.bert.model_garden:load"},
    hf_model_types=("bert",),
    hf_tokenizer_files=("vocab.txt",),
    pretraining="garden.tasks.pretraining:BERT")
