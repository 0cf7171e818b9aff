"""BERT architecture presets: the sizes of the original release (Turc et al., 2019, for the
compact models; Devlin et al., 2019, for base and large).

Each entry is a complete BertBackbone config, so `BertBackbone(**PRESETS[name])` works. They are
architectures only: nothing here downloads weights (checkpoints come from the converters).
"""

from __future__ import annotations

from typing import Dict

from garden.models.bert.backbone import BertBackbone

# Shared by every released BERT: uncased WordPiece vocabulary, 512 positions, 2 segments.
_COMMON = dict(vocab_size=30522, max_sequence_length=512, type_vocab_size=2)


def _preset(num_layers: int, hidden_size: int, num_heads: int, intermediate_size: int) -> Dict:
    return dict(num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
                intermediate_size=intermediate_size, **_COMMON)


PRESETS: Dict[str, Dict] = {
    "bert_tiny": _preset(2, 128, 2, 512),
    "bert_mini": _preset(4, 256, 4, 1024),
    "bert_small": _preset(4, 512, 8, 2048),
    "bert_medium": _preset(8, 512, 8, 2048),
    "bert_base": _preset(12, 768, 12, 3072),     # 110M parameters
    "bert_large": _preset(24, 1024, 16, 4096),   # 335M parameters
}


def untrained_bert_backbone(name: str, **overrides) -> BertBackbone:
    """A freshly initialised BertBackbone of preset `name`; keyword arguments override it.

    Example: untrained_bert_backbone("bert_tiny", vocab_size=1000, dropout=0.0)
    """
    return BertBackbone.untrained(name, **overrides)
