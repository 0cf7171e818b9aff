"""ALBERT (Lan et al., 2020): backbone, pretraining heads and loss, presets, weight import."""

from garden.models.albert.backbone import AlbertBackbone, gelu_approximate
from garden.models.albert.presets import PRESETS, albert_backbone_from_preset
from garden.models.albert.pretrainer import AlbertPretrainer, albert_pretrain_loss
from garden.models.family import FamilySpec

__all__ = ["SPEC", "AlbertBackbone", "AlbertPretrainer", "albert_pretrain_loss", "PRESETS",
           "albert_backbone_from_preset", "gelu_approximate"]

SPEC = FamilySpec(
    name="albert", backbone="garden.models.albert.backbone:AlbertBackbone",
    presets="garden.models.albert.presets", default_preset="albert_base",
    tokenizer="sentencepiece", layout="bert", lower_case=True,
    pretrainer="garden.models.albert.pretrainer:AlbertPretrainer",
    converters={"huggingface": "garden.models.albert.conversion:from_huggingface",
                "tf1": "garden.models.albert.conversion:from_tf1"},
    hf_model_types=("albert",),
    hf_tokenizer_files=("spiece.model",),
    pretraining="garden.tasks.pretraining:ALBERT")
