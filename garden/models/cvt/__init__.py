"""CVT (Clark et al., 2018): the BiLSTM encoder and its primary + auxiliary tagger, presets."""

from garden.models.cvt.backbone import CvtBackbone
from garden.models.cvt.presets import PRESETS, untrained_cvt_backbone
from garden.models.family import FamilySpec

__all__ = ["SPEC", "CvtBackbone", "PRESETS", "untrained_cvt_backbone"]

SPEC = FamilySpec(name="cvt", backbone=CvtBackbone,
                  tokenizer="wordpiece", layout="bert", lower_case=True)
