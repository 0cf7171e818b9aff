"""DistilBERT architecture preset: the released distilbert-base-uncased (Sanh et al., 2019):
6 layers of BERT-base width, 66.4M parameters.

The entry is a complete DistilBertBackbone config: `DistilBertBackbone(**PRESETS[name])`.
Architectures only: nothing here downloads weights (checkpoints come from the converters).
"""

from __future__ import annotations

from typing import Dict

from garden.models.distilbert.backbone import DistilBertBackbone

PRESETS: Dict[str, Dict] = {
    # BERT-base uncased vocabulary and width, half the layers; 66,362,880 parameters.
    "distilbert_base": dict(vocab_size=30522, num_layers=6, hidden_size=768, num_heads=12,
                            intermediate_size=3072, max_sequence_length=512),
}


def untrained_distilbert_backbone(name: str, **overrides) -> DistilBertBackbone:
    """A freshly initialised DistilBertBackbone of preset `name`; keyword arguments override it.

    Example: untrained_distilbert_backbone("distilbert_base", num_layers=2, vocab_size=1000)
    """
    return DistilBertBackbone.untrained(name, **overrides)
