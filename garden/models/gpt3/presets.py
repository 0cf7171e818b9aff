"""GPT-3-style presets: GPT-3 Small's shape (Brown et al., 2020, table 2.1: 12 layers,
d_model 768, 12 heads, context 2048) with GPT-2's 50,257-token BPE vocabulary, and a tiny twin.
Architectures only. The band width is not published: 256 (GPT-Neo's window).

gpt3_small: 125,226,240 parameters (parameter_count: GPT-2's formula, as banded attention
has the dense layer's weights).
"""

from __future__ import annotations

from typing import Dict

from garden.models.gpt2 import presets as gpt2_presets

PRESETS: Dict[str, Dict] = {
    "gpt3_small": dict(vocab_size=50257, num_layers=12, hidden_size=768, num_heads=12,
                       intermediate_size=3072, max_sequence_length=2048, band_width=256),
    "gpt3_tiny": dict(vocab_size=50257, num_layers=2, hidden_size=64, num_heads=2,
                      intermediate_size=256, max_sequence_length=128, band_width=8),
}


def parameter_count(config: Dict) -> int:
    """Parameters of GPT3Backbone(**config) (= of GPT3CausalLM: tied logits) from the sizes
    alone: GPT-2's (banded attention has the dense layer's weights; band_width is ignored)."""
    return gpt2_presets.parameter_count(config)
