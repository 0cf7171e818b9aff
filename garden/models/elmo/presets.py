"""ELMo presets: the published elmo_2x4096_512_2048cnn_2xhighway (Peters et al. 2018; AllenNLP's
"original", 93.6M parameters) and a tiny one for tests. Architectures only: weights come from
AllenNLP's HDF5 files (garden.models.elmo.conversion) or from training."""

from __future__ import annotations

from typing import Dict

from garden.models.elmo.backbone import ELMO_FILTERS, ElmoBackbone

PRESETS: Dict[str, Dict] = {
    "elmo": dict(num_characters=262, max_characters=50, char_embedding_size=16,
                 filters=ELMO_FILTERS, num_highway=2, projection_size=512, lstm_units=4096,
                 num_layers=2, cell_clip=3.0, projection_clip=3.0, activation="relu",
                 dropout=0.1),
    "elmo_tiny": dict(num_characters=262, max_characters=20, char_embedding_size=8,
                      filters=((1, 8), (2, 8), (3, 16)), num_highway=1, projection_size=16,
                      lstm_units=32, num_layers=2, cell_clip=3.0, projection_clip=3.0,
                      activation="relu", dropout=0.1),
}


def untrained_elmo_backbone(name: str, **overrides) -> ElmoBackbone:
    return ElmoBackbone.untrained(name, **overrides)
