"""GPT (2018) architecture presets: the released model (openai/finetune-transformer-lm, Hugging
Face "openai-gpt") and a tiny twin for tests and learn runs. Architectures only: weights come
from garden.models.gpt.conversion.

gpt: 40,478 BPE tokens, 512 positions, 12 layers x 768, 12 heads, 3072 feed-forward, no special
tokens: 116,534,784 parameters (= Hugging Face OpenAIGPTModel; see backbone.py for the
fine-tuning specials).
"""

from __future__ import annotations

from typing import Dict

from garden.models.gpt2 import presets as gpt2_presets

PRESETS: Dict[str, Dict] = {
    "gpt": dict(vocab_size=40478, num_layers=12, hidden_size=768, num_heads=12,
                intermediate_size=3072, max_sequence_length=512, num_special_tokens=0),
    "gpt_tiny": dict(vocab_size=40478, num_layers=2, hidden_size=64, num_heads=2,
                     intermediate_size=256, max_sequence_length=128, num_special_tokens=0),
}


def parameter_count(config: Dict) -> int:
    """Parameters of GPTBackbone(**config) from the sizes alone: GPT-2's blocks (the same
    weights, post-LN) under one [V + specials + P, H] table, without GPT-2's final LayerNorm."""
    rows = config["vocab_size"] + config.get("num_special_tokens", 0)
    return gpt2_presets.parameter_count({**config, "vocab_size": rows}) - 2 * config["hidden_size"]
