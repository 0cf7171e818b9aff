"""RoBERTa architecture presets: the sizes of the fairseq release (Liu et al., 2019, table 9 /
appendix; `roberta.base` and `roberta.large`).

Each entry is a complete RobertaBackbone config, so `RobertaBackbone(**PRESETS[name])` works.
Architectures only: nothing here downloads weights (checkpoints come from the converters).
"""

from __future__ import annotations

from typing import Dict

from garden.models.roberta.backbone import RobertaBackbone

# Shared by both releases: GPT-2 byte-level BPE (50265 ids with fairseq's 4 specials),
# 512 positions (+ padding_idx + 1 = 514 rows), <pad> = 1, LayerNorm epsilon 1e-5.
_COMMON = dict(vocab_size=50265, max_sequence_length=512, padding_idx=1, layer_norm_epsilon=1e-5)


def _preset(num_layers: int, hidden_size: int, num_heads: int, intermediate_size: int) -> Dict:
    return dict(num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
                intermediate_size=intermediate_size, **_COMMON)


PRESETS: Dict[str, Dict] = {
    "roberta_base": _preset(12, 768, 12, 3072),     # 124.6M parameters (with the pooler)
    "roberta_large": _preset(24, 1024, 16, 4096),   # 355.4M parameters (with the pooler)
}


def untrained_roberta_backbone(name: str, **overrides) -> RobertaBackbone:
    """A freshly initialised RobertaBackbone of preset `name`; keyword arguments override it.

    Example: untrained_roberta_backbone("roberta_base", num_layers=2, vocab_size=1000)
    """
    return RobertaBackbone.untrained(name, **overrides)
