"""AWD-LSTM presets: ULMFiT's (Howard & Ruder 2018, section 4: embedding 400, 3 layers of
1152, fastai's language-model dropouts) and a tiny one for tests and the sample corpus.

Each entry is a complete AwdLstmBackbone config but the vocabulary, which comes from the task's
vocabulary file (ULMFiT's WikiText-103 vocabulary had 60,000 words).
"""

from __future__ import annotations

from typing import Dict

from garden.models.ulmfit.backbone import AwdLstmBackbone

PRESETS: Dict[str, Dict] = {
    "ulmfit": dict(vocab_size=60000, embedding_size=400, hidden_size=1152, num_layers=3,
                   embedding_dropout=0.02, input_dropout=0.25, hidden_dropout=0.15,
                   weight_dropout=0.2),
    "ulmfit_tiny": dict(vocab_size=1000, embedding_size=32, hidden_size=48, num_layers=3,
                        embedding_dropout=0.02, input_dropout=0.25, hidden_dropout=0.15,
                        weight_dropout=0.2),
}


def untrained_ulmfit_backbone(name: str, **overrides) -> AwdLstmBackbone:
    """A freshly initialised AwdLstmBackbone of preset `name`; keyword arguments override it."""
    return AwdLstmBackbone.untrained(name, **overrides)
