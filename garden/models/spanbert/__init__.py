"""SpanBERT (Joshi et al., 2020): the BERT backbone with masked LM and span boundary heads."""

from garden.models.family import FamilySpec
from garden.models.spanbert.presets import PRESETS, SBO, untrained_spanbert_pretrainer
from garden.models.spanbert.pretrainer import (SBO_INPUTS, SpanBertPretrainer, SpanBoundaryHead,
                                               spanbert_pretrain_loss)
from garden.models.bert.backbone import BertBackbone

__all__ = ["SPEC", "SpanBertPretrainer", "SpanBoundaryHead", "spanbert_pretrain_loss",
           "SBO_INPUTS", "PRESETS", "SBO", "untrained_spanbert_pretrainer"]

SPEC = FamilySpec(
    name="spanbert", backbone=BertBackbone,
    tokenizer="wordpiece", layout="bert", lower_case=False,
    pretrainer=SpanBertPretrainer,
    pretraining="garden.tasks.pretraining.spanbert:RECORD")
