"""What the garden.analyze tests on tiny backbones share: a ten-word vocabulary, sentences of
it, the tiny Transformer size and `shaken`, which moves a fresh backbone's weights far from
their initialisation so that its layers mix context and its heads differ (at init, a tiny
model's layers are near the identity and every head near uniform)."""

from __future__ import annotations

import json

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


def analyze_with(monkeypatch, tmp_path, opened, *args, sentences=SENTENCES):
    """`garden.analyze ANALYSIS [FLAGS]` (args) on `opened` (a garden.analyze.Opened that
    open_model answers with) over `sentences`, under tmp_path: (exit code, its JSON or None)."""
    from garden import analyze

    monkeypatch.setattr(analyze, "open_model", lambda path, length, stack="": opened)
    tmp_path.mkdir(parents=True, exist_ok=True)
    text = tmp_path / "text.txt"
    text.write_text("\n".join(sentences) + "\n")
    out = tmp_path / "report"
    code = analyze.main([args[0], f"--model={opened.description}", f"--input={text}",
                         f"--output={out}", *args[1:]])
    path = out / f"{args[0]}.json"
    return code, json.loads(path.read_text()) if path.exists() else None


def labelled_dev(path, sentences=SENTENCES) -> str:
    """A classification TSV of `sentences` at `path`: "pos" where the sentence says good."""
    path.write_text("text_a\tlabel\n" + "".join(f"{s}\t{'pos' if 'good' in s else 'neg'}\n"
                                                for s in sentences))
    return str(path)


def word_tag_conll(path, seed: int = 1) -> str:
    """A CoNLL file of 40 random 5-word sentences of WORDS at `path`, whose tag is a function
    of the word (movie I-ORG, plot I-MISC, else O): a probe reads it from any layer that
    keeps the word."""
    from text.finetune import tagging

    tag = {"movie": "I-ORG", "plot": "I-MISC"}
    rng = np.random.default_rng(seed)
    rows = [tuple(rng.choice(WORDS, 5)) for _ in range(40)]
    path.write_text(tagging.format_sentences(
        [tagging.ConllSentence(ws, tuple(tag.get(w, "O") for w in ws)) for ws in rows]))
    return str(path)
