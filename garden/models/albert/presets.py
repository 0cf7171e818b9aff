"""ALBERT architecture presets: the four released sizes (Lan et al., 2020, table 1).

Each entry is a complete AlbertBackbone config, so `AlbertBackbone(**PRESETS[name])` works. They
are architectures only: nothing here downloads weights (checkpoints come from the converters).
The values are the v2 releases' albert_config.json / Hugging Face config.json (dropout 0,
gelu_new); v1 differs only by dropout 0.1.

Heads: the paper's table 1 gives no head counts. The released configs use A = H / 64 for base
(12) and xxlarge (64) but 128-wide heads for large (16) and xlarge (16, not 32: the published
albert-xlarge-v1/v2 configs say num_attention_heads 16). Heads do not change the parameter count.
"""

from __future__ import annotations

from typing import Dict

from garden.models.albert.backbone import AlbertBackbone

# Shared by every released ALBERT: 30000-piece SentencePiece vocabulary, E = 128, 512
# positions, 2 segments, all layers sharing one block, no dropout (v2), tanh GELU.
_COMMON = dict(vocab_size=30000, embedding_size=128, max_sequence_length=512, type_vocab_size=2,
               num_groups=1, share="all", dropout=0.0, activation="gelu_new")


def _preset(num_layers: int, hidden_size: int, num_heads: int, intermediate_size: int) -> Dict:
    return dict(num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
                intermediate_size=intermediate_size, **_COMMON)


PRESETS: Dict[str, Dict] = {
    "albert_base": _preset(12, 768, 12, 3072),        # 11.68M parameters (paper: 12M)
    "albert_large": _preset(24, 1024, 16, 4096),      # 17.68M (18M)
    "albert_xlarge": _preset(24, 2048, 16, 8192),     # 58.72M (60M)
    "albert_xxlarge": _preset(12, 4096, 64, 16384),   # 222.60M (235M)
}


def untrained_albert_backbone(name: str, **overrides) -> AlbertBackbone:
    """A freshly initialised AlbertBackbone of preset `name`; keyword arguments override it.

    Example: untrained_albert_backbone("albert_base", vocab_size=1000, num_layers=2)
    """
    return AlbertBackbone.untrained(name, **overrides)
