"""ELECTRA architecture presets: the published sizes (Clark et al., 2020, tables 6 and 7).

`PRESETS[name]` is a complete ElectraBackbone config of the discriminator, so
`ElectraBackbone(**PRESETS[name])` works as for BERT. `GENERATORS[name]` overrides it for the
generator: the same depth and embeddings, the hidden size, feed-forward width and heads scaled
by the published generator fraction (small 1/4, base 1/3, large 1/4; heads = hidden / 64).
`PRETRAINING[name]` holds the objective's arguments that differ by size (large masks 25%).
Architectures only: nothing here downloads weights.
"""

from __future__ import annotations

from typing import Dict, Sequence

from garden.models.electra.backbone import ElectraBackbone
from garden.models.electra.pretrainer import ElectraPretrainer

# BERT's uncased WordPiece vocabulary, 512 positions, 2 segments, as the released models.
_COMMON = dict(vocab_size=30522, max_sequence_length=512, type_vocab_size=2)


def _tower(num_layers: int, hidden_size: int, num_heads: int, intermediate_size: int,
           embedding_size: int) -> Dict:
    return dict(num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
                intermediate_size=intermediate_size, embedding_size=embedding_size, **_COMMON)


PRESETS: Dict[str, Dict] = {
    "electra_small": _tower(12, 256, 4, 1024, 128),    # 13.48M parameters
    "electra_base": _tower(12, 768, 12, 3072, 768),    # 108.9M
    "electra_large": _tower(24, 1024, 16, 4096, 1024),  # 334.1M
}

# small: 256 / 4 = 64 (1 head, FFN 256); base: 768 / 3 = 256 (4 heads, FFN 1024);
# large: 1024 / 4 = 256 (4 heads, FFN 1024), as google/electra-{base,large}-generator.
GENERATORS: Dict[str, Dict] = {
    "electra_small": dict(hidden_size=64, num_heads=1, intermediate_size=256),
    "electra_base": dict(hidden_size=256, num_heads=4, intermediate_size=1024),
    "electra_large": dict(hidden_size=256, num_heads=4, intermediate_size=1024),
}

PRETRAINING: Dict[str, Dict] = {
    "electra_small": dict(mask_prob=0.15),
    "electra_base": dict(mask_prob=0.15),
    "electra_large": dict(mask_prob=0.25),
}


def _check(name: str):
    if name not in PRESETS:
        raise ValueError(f"unknown ELECTRA preset {name!r}; choose one of {sorted(PRESETS)}")


def untrained_electra_backbone(name: str, **overrides) -> ElectraBackbone:
    """A freshly initialised discriminator ElectraBackbone of preset `name` (what fine-tuning
    uses); keyword arguments override the config.

    Example: untrained_electra_backbone("electra_small", vocab_size=1000, num_layers=2)
    """
    return ElectraBackbone.untrained(name, **overrides)


def untrained_electra_generator(name: str, embeddings=None, **overrides) -> ElectraBackbone:
    """The generator ElectraBackbone of preset `name`, sharing `embeddings` when given (pass
    the discriminator's). Keyword arguments override the config (after the generator sizes).

    Example: untrained_electra_generator("electra_small", embeddings=disc.embeddings, vocab_size=1000)
    """
    _check(name)
    return ElectraBackbone(**{**PRESETS[name], **GENERATORS[name], **overrides},
                           embeddings=embeddings)


def untrained_electra_pretrainer(name: str, mask_token_id: int,
                                   unmaskable_token_ids: Sequence[int] = (),
                                   generator_overrides: Dict | None = None,
                                   **overrides) -> ElectraPretrainer:
    """Discriminator + generator (sharing the embeddings) of preset `name` in an
    ElectraPretrainer with the preset's objective arguments. `overrides` apply to both towers
    (e.g. vocab_size, num_layers, dropout); `generator_overrides` to the generator only.

    Example: untrained_electra_pretrainer("electra_small", mask_token_id=4, unmaskable_token_ids=(2, 3), vocab_size=2000)
    """
    discriminator = untrained_electra_backbone(name, **overrides)
    generator = untrained_electra_generator(
        name, embeddings=discriminator.embeddings, **{**overrides, **(generator_overrides or {})})
    return ElectraPretrainer(generator, discriminator, mask_token_id=mask_token_id,
                             unmaskable_token_ids=unmaskable_token_ids, **PRETRAINING[name])
