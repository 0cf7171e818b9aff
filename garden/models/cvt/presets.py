"""CVT encoder presets: the paper's sequence-tagging sizes (Clark et al. 2018, section 4:
300-d word vectors, BiLSTM layers of 1024 and 512 units per direction) and a tiny one."""

from __future__ import annotations

from typing import Dict

from garden.models.cvt.backbone import CvtBackbone

PRESETS: Dict[str, Dict] = {
    "cvt": dict(vocab_size=30000, embedding_size=300, layer_units=(1024, 512), dropout=0.5),
    "cvt_tiny": dict(vocab_size=1000, embedding_size=32, layer_units=(32, 24), dropout=0.1),
}


def untrained_cvt_backbone(name: str, **overrides) -> CvtBackbone:
    return CvtBackbone.untrained(name, **overrides)
