"""A tiny BERT with a vocabulary of whole words for the word-representation analyses
(garden.bertology.representations, contextuality, probe, wsd)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tiny_bert(tmp_path, words: Sequence[str], max_seq_length: int = 16,
              context_free_embeddings: bool = False, seed: int = 4):
    """(backbone, packer, tokenizer) of BERT "bert_tiny" (2 layers) over SPECIALS + words.

    context_free_embeddings: zero the position and segment embeddings, so that layer 0 of a
    word depends on the word alone; the encoder kernels are then drawn far from the 0.02
    initialisation (sd 0.3), so that the layers above visibly mix in the context."""
    from text import tokenizers
    from garden.models.bert.presets import untrained_bert_backbone
    from garden.serving.text import TextPacker

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(SPECIALS + list(words)) + "\n")
    backbone = untrained_bert_backbone("bert_tiny", vocab_size=len(SPECIALS) + len(words),
                                         dropout=0.0)
    if context_free_embeddings:
        init = np.random.default_rng(seed)
        for w in backbone.weights:
            if "position" in w.path or "segment" in w.path:
                w.assign(np.zeros(w.shape, "float32"))
            elif "transformer_layer" in w.path and "kernel" in w.path:
                w.assign(init.normal(0, 0.3, w.shape).astype("float32"))
    tokenizer = tokenizers.load_tokenizer("wordpiece", str(vocab), lower_case=True)
    packer = TextPacker(tokenizer, max_seq_length)
    return backbone, packer, tokenizer
