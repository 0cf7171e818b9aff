"""DistilBERT (Sanh et al., 2019): backbone, MLM head, distillation from a BERT teacher,
preset, HF import."""

from garden.models.distilbert.backbone import DistilBertBackbone
from garden.models.distilbert.distiller import (TEACHER_LAYERS, DistilBertDistiller,
                                                distillation_loss, init_student_from_teacher)
from garden.models.distilbert.presets import PRESETS, untrained_distilbert_backbone
from garden.models.distilbert.pretrainer import DistilBertPretrainer
from garden.models.family import FamilySpec

__all__ = ["SPEC", "DistilBertBackbone", "DistilBertPretrainer", "DistilBertDistiller",
           "distillation_loss", "init_student_from_teacher", "TEACHER_LAYERS", "PRESETS",
           "untrained_distilbert_backbone"]

SPEC = FamilySpec(
    name="distilbert", backbone=DistilBertBackbone,
    tokenizer="wordpiece", layout="bert", lower_case=True,
    pretrainer=DistilBertPretrainer,
    converters={"huggingface": ".conversion:from_huggingface"})
