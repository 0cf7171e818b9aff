"""GPT-3-style decoder: GPT-2's pre-LN blocks, layers alternating dense and banded attention."""

from garden.models.family import FamilySpec

SPEC = FamilySpec(
    name="gpt3", backbone="garden.models.gpt3.backbone:GPT3Backbone",
    presets="garden.models.gpt3.presets", default_preset="gpt3_small",
    tokenizer="bpe", layout="gpt2", lower_case=False,
    lm="garden.models.gpt3.backbone:GPT3CausalLM", framing="causal")
