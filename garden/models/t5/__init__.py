"""T5 v1.0 and v1.1 (Raffel et al., 2020): encoder-decoder backbone, the Seq2Seq LM that
trains, decodes and serves, presets and Hugging Face import."""

from garden.models.family import FamilySpec
from garden.models.t5.backbone import T5Backbone, T5Block, T5Stack
from garden.models.t5.presets import PRESETS, parameter_count
from garden.models.t5.seq2seq_lm import T5Seq2SeqLM

__all__ = ["SPEC", "PRESETS", "T5Backbone", "T5Block", "T5Seq2SeqLM", "T5Stack", "parameter_count"]

SPEC = FamilySpec(
    name="t5", backbone=T5Backbone,
    tokenizer="sentencepiece", layout="bert", lower_case=False,
    lm=T5Seq2SeqLM, framing="t5",
    converters={"huggingface": ".conversion:from_huggingface"},
    pretraining="garden.tasks.pretraining.t5:RECORD")
