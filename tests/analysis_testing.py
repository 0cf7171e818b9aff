"""What the garden.analyze tests on tiny backbones share: a ten-word vocabulary, sentences of
it, the tiny Transformer size and `shaken`, which moves a fresh backbone's weights far from
their initialisation so that its layers mix context and its heads differ (at init, a tiny
model's layers are near the identity and every head near uniform)."""

from __future__ import annotations

import numpy as np

TINY = dict(num_layers=2, hidden_size=16, num_heads=2, dropout=0.0)
WORDS = ["the", "movie", "film", "was", "good", "bad", "plot", "great", "dull", "."]
SENTENCES = ["the movie was good .", "the film was bad .", "the plot was great .",
             "the movie was dull .", "the film was good ."]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def shaken(backbone, seed: int = 0, scale: float = 0.3):
    """`backbone` with normal noise of `scale` added to every weight (seeded)."""
    rng = np.random.default_rng(seed)
    backbone.set_weights([w + rng.normal(scale=scale, size=w.shape).astype(w.dtype)
                          for w in backbone.get_weights()])
    return backbone


def write_vocab(path) -> str:
    """A WordPiece vocabulary file of the BERT specials and WORDS at `path` (a pathlib.Path)."""
    path.write_text("\n".join(SPECIALS + WORDS) + "\n")
    return str(path)
