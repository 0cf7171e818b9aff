"""SpanBERT architecture presets (Joshi et al., 2020, section 4.1): BERT-base and BERT-large
sizes with the cased WordPiece vocabulary of the released SpanBERT models (28,996 pieces), plus
the span boundary head's relative-position table (15 x 200). `spanbert_tiny` is the L2 H128 twin
used by tests.

`PRESETS[name]` is a complete BertBackbone config; `SBO[name]` the SpanBertPretrainer extras.
Architectures only: nothing here downloads weights.
"""

from __future__ import annotations

from typing import Dict

from garden.models.bert.backbone import BertBackbone
from garden.models.bert.presets import PRESETS as BERT_PRESETS
from garden.models.spanbert.pretrainer import SpanBertPretrainer

# SpanBERT was trained with BERT's cased vocabulary (spanbert-base-cased / -large-cased).
_CASED_VOCAB_SIZE = 28996

PRESETS: Dict[str, Dict] = {
    "spanbert_tiny": dict(BERT_PRESETS["bert_tiny"]),
    "spanbert_base": {**BERT_PRESETS["bert_base"], "vocab_size": _CASED_VOCAB_SIZE},
    "spanbert_large": {**BERT_PRESETS["bert_large"], "vocab_size": _CASED_VOCAB_SIZE},
}

# The SBO head of the paper for every size: offsets 0..14 (longer spans are not predicted by
# the SBO), 200-wide relative-position embeddings.
SBO: Dict[str, Dict] = {name: dict(max_targets=15, position_embedding_size=200)
                        for name in PRESETS}


def untrained_spanbert_pretrainer(name: str, **overrides) -> SpanBertPretrainer:
    """A freshly initialised SpanBertPretrainer of preset `name`; keyword arguments override
    the backbone config.

    Example: untrained_spanbert_pretrainer("spanbert_tiny", vocab_size=1000, dropout=0.0)
    """
    if name not in PRESETS:
        raise ValueError(f"unknown SpanBERT preset {name!r}; choose one of {sorted(PRESETS)}")
    return SpanBertPretrainer(BertBackbone(**{**PRESETS[name], **overrides}), **SBO[name])
