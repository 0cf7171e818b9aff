"""CoVe presets: the published MT-LSTM (McCann et al. 2017: GloVe 300d, a 2-layer biLSTM of 300
per direction, GloVe fixed) and a tiny one for tests and the sample corpus. Architectures
only: weights come from training (garden.CovePretraining, configs/cove_tiny.gin)."""

from __future__ import annotations

from typing import Dict

from garden.models.cove.backbone import CoveBackbone

PRESETS: Dict[str, Dict] = {
    "cove": dict(vocab_size=30522, embedding_size=300, lstm_units=300, num_layers=2,
                 dropout=0.2, freeze_embeddings=True),
    "cove_tiny": dict(vocab_size=1000, embedding_size=16, lstm_units=16, num_layers=2,
                      dropout=0.1, freeze_embeddings=False),
}


def untrained_cove_backbone(name: str, **overrides) -> CoveBackbone:
    """A freshly initialised CoveBackbone of preset `name`; keyword arguments override it."""
    return CoveBackbone.untrained(name, **overrides)
