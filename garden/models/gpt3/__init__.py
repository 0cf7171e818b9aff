"""GPT-3-style decoder: GPT-2's pre-LN blocks, layers alternating dense and banded attention."""

from garden.models.family import FamilySpec
from garden.models.gpt3.backbone import GPT3Backbone, GPT3CausalLM

SPEC = FamilySpec(
    name="gpt3", backbone=GPT3Backbone,
    tokenizer="bpe", layout="gpt2", lower_case=False,
    lm=GPT3CausalLM, framing="causal")
