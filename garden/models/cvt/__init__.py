"""CVT (Clark et al., 2018): the BiLSTM encoder and its primary + auxiliary tagger, presets."""

from garden.models.cvt.backbone import CvtBackbone
from garden.models.cvt.presets import PRESETS, cvt_backbone_from_preset
from garden.models.family import FamilySpec

__all__ = ["SPEC", "CvtBackbone", "PRESETS", "cvt_backbone_from_preset"]

SPEC = FamilySpec(name="cvt", backbone=CvtBackbone,
                  tokenizer="wordpiece", layout="bert", lower_case=True)
