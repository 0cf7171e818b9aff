"""ALBERT (Lan et al., 2020): backbone, pretraining heads and loss, presets, weight import."""

from garden.models.albert.backbone import AlbertBackbone, gelu_approximate
from garden.models.albert.presets import PRESETS, untrained_albert_backbone
from garden.models.albert.pretrainer import AlbertPretrainer, albert_pretrain_loss
from garden.models.family import FamilySpec

__all__ = ["SPEC", "AlbertBackbone", "AlbertPretrainer", "albert_pretrain_loss", "PRESETS",
           "untrained_albert_backbone", "gelu_approximate"]

SPEC = FamilySpec(
    name="albert", backbone=AlbertBackbone,
    tokenizer="sentencepiece", layout="bert", lower_case=True,
    pretrainer=AlbertPretrainer,
    pretraining="garden.tasks.pretraining.albert:RECORD",
    converters={"huggingface": ".conversion:from_huggingface", "tf1": ".conversion:from_tf1"})
