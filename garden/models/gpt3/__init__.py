"""GPT-3-style decoder: GPT-2's pre-LN blocks, layers alternating dense and banded attention."""

from garden.models.family import FamilySpec

SPEC = FamilySpec(
    name="gpt3", backbone=".backbone:GPT3Backbone",
    tokenizer="bpe", layout="gpt2", lower_case=False,
    lm=".backbone:GPT3CausalLM", framing="causal")
