"""GPT-2 architecture presets: the four released sizes (Radford et al., 2019, table 2) and a
tiny one for tests and CPUs.

Each entry is a complete GPT2Backbone config (`GPT2Backbone(**PRESETS[name])`); architectures
only, nothing is downloaded. `parameter_count(config)` counts a config's parameters from its
sizes without building it (GPT-2 XL would allocate 6 GB); tests/models/test_gpt2.py checks it
against count_params() of real models and the released sizes:

    gpt2_small   124,439,808    L12 H768  A12
    gpt2_medium  354,823,168    L24 H1024 A16
    gpt2_large   774,030,080    L36 H1280 A20
    gpt2_xl    1,557,611,200    L48 H1600 A25
"""

from __future__ import annotations

from typing import Dict

# Byte-level BPE (50,257 tokens: 256 bytes + 50,000 merges + <|endoftext|>), 1024 positions.
_COMMON = dict(vocab_size=50257, max_sequence_length=1024)


def _preset(num_layers: int, hidden_size: int, num_heads: int) -> Dict:
    return dict(num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
                intermediate_size=4 * hidden_size, **_COMMON)


PRESETS: Dict[str, Dict] = {
    "gpt2_tiny": _preset(2, 128, 2),
    "gpt2_small": _preset(12, 768, 12),
    "gpt2_medium": _preset(24, 1024, 16),
    "gpt2_large": _preset(36, 1280, 20),
    "gpt2_xl": _preset(48, 1600, 25),
}


def parameter_count(config: Dict) -> int:
    """Parameters of GPT2Backbone(**config) (= of GPT2CausalLM: its logits are tied), from
    the sizes alone: tables V*H + P*H; per block 2 LayerNorms (4H), q/k/v/output projections
    (4H^2 + 4H), feed-forward (2HF + F + H); the final LayerNorm 2H."""
    v, p, h = config["vocab_size"], config.get("max_sequence_length", 1024), config["hidden_size"]
    f = config.get("intermediate_size") or 4 * h
    block = 4 * h + 4 * h * h + 4 * h + 2 * h * f + f + h
    return v * h + p * h + config["num_layers"] * block + 2 * h
