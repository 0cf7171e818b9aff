"""BART (Lewis et al., 2020): encoder-decoder backbone, its GenerativeLM, presets, HF import."""

from garden.models.bart.backbone import BartBackbone, BartSeq2SeqLM, bart_positions
from garden.models.bart.presets import PRESETS, bart_parameter_count
from garden.models.family import FamilySpec

__all__ = ["SPEC", "BartBackbone", "BartSeq2SeqLM", "bart_positions", "PRESETS",
           "bart_parameter_count"]

SPEC = FamilySpec(
    name="bart", backbone=BartBackbone,
    tokenizer="bpe", layout="roberta", lower_case=False,
    lm=BartSeq2SeqLM, framing="bart",
    converters={"huggingface": ".conversion:from_huggingface"},
    pretraining="garden.tasks.pretraining.bart:RECORD")
