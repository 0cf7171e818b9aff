"""BART (Lewis et al., 2020): encoder-decoder backbone, its GenerativeLM, presets, HF import."""

from garden.models.bart.backbone import BartBackbone, BartSeq2SeqLM, bart_positions
from garden.models.bart.presets import PRESETS, bart_parameter_count
from garden.models.family import FamilySpec

__all__ = ["SPEC", "BartBackbone", "BartSeq2SeqLM", "bart_positions", "PRESETS",
           "bart_parameter_count"]

SPEC = FamilySpec(
    name="bart", backbone="garden.models.bart.backbone:BartBackbone",
    presets="garden.models.bart.presets", default_preset="bart_base",
    tokenizer="bpe", layout="roberta", lower_case=False,
    lm="garden.models.bart.backbone:BartSeq2SeqLM", framing="bart",
    converters={"huggingface": "garden.models.bart.conversion:from_huggingface"},
    hf_model_types=("bart",),
    hf_tokenizer_files=("vocab.json", "merges.txt"),
    pretraining="garden.tasks.pretraining_bart:RECORD")
