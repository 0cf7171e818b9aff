"""GPT-2 (Radford et al., 2019): decoder-only backbone, causal LM, presets, converters."""

from garden.models.gpt2.backbone import GPT2Backbone
from garden.models.gpt2.causal_lm import GPT2CausalLM
from garden.models.gpt2.presets import PRESETS, parameter_count

__all__ = ["GPT2Backbone", "GPT2CausalLM", "PRESETS", "parameter_count"]
