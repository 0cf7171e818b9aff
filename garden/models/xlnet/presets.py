"""XLNet architecture presets (Yang et al., 2019; the released xlnet_cased_L-12_H-768_A-12 and
L-24_H-1024_A-16): SentencePiece 32k, d_head 64, FFN 4H, the original's tanh GELU.

Parameters (backbone, without the LM bias of 32,000 that Hugging Face's LM head adds):
xlnet_base 116,718,336; xlnet_large 360,268,800. Architectures only: no weights are
downloaded (checkpoints come from garden.models.xlnet.conversion).
"""

from __future__ import annotations

from typing import Dict

from garden.models.xlnet.backbone import XLNetBackbone

_COMMON = dict(vocab_size=32000, activation="gelu_tanh", mem_len=0, reuse_len=0)


def _preset(num_layers: int, hidden_size: int, num_heads: int) -> Dict:
    return dict(num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
                intermediate_size=4 * hidden_size, head_size=hidden_size // num_heads, **_COMMON)


PRESETS: Dict[str, Dict] = {
    "xlnet_tiny": _preset(2, 128, 2),
    "xlnet_base": _preset(12, 768, 12),
    "xlnet_large": _preset(24, 1024, 16),
}


def untrained_xlnet_backbone(name: str, **overrides) -> XLNetBackbone:
    """A freshly initialised XLNetBackbone of preset `name`; keyword arguments override it."""
    return XLNetBackbone.untrained(name, **overrides)
