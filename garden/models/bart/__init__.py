"""BART (Lewis et al., 2020): encoder-decoder backbone, its GenerativeLM, presets, HF import."""

from garden.models.bart.backbone import BartBackbone, BartSeq2SeqLM, bart_positions
from garden.models.bart.presets import PRESETS, bart_parameter_count

__all__ = ["BartBackbone", "BartSeq2SeqLM", "bart_positions", "PRESETS", "bart_parameter_count"]
