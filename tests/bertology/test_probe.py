"""garden.bertology.probe: ~1.0 on a linearly separable layer, the majority baseline on random
labels, and the whole path from CoNLL files through a tiny BERT to a plot."""

from __future__ import annotations

import json

import numpy as np
import pytest

from text.finetune import tagging
from garden.bertology import probe
from representation_testing import tiny_bert


def _sd(p: float, n: int) -> float:
    return float(np.sqrt(p * (1 - p) / n))  # sd of an accuracy p measured on n words


def test_separable_layer_is_read_and_random_labels_give_the_majority():
    rng = np.random.default_rng(0)
    names = np.array(["O", "B-X", "I-X"])
    n_train, n_dev, d = 3000, 2000, 8
    y = names[rng.choice(3, n_train + n_dev, p=[0.6, 0.3, 0.1])]
    centres = rng.normal(size=(3, d)) * 3
    separable = centres[np.searchsorted(np.sort(names), y)] + rng.normal(0, 0.1, (len(y), d))
    noise = rng.normal(size=(len(y), d))  # a layer that knows nothing of the labels
    layers = np.stack([separable, noise])
    result = probe.probe_layers(layers[:, :n_train], y[:n_train], layers[:, n_train:],
                                y[n_train:])
    majority = result["majority"]
    assert majority["label"] == "O"
    assert majority["accuracy"] == pytest.approx(np.mean(y[n_train:] == "O"))
    assert result["accuracy"][0] > 0.999 and result["macro_f1"][0] > 0.999
    # random labels: the majority's accuracy within 4 sd of the dev sample (0.6: 0.044)
    assert abs(result["accuracy"][1] - majority["accuracy"]) < 4 * _sd(0.6, n_dev)
    assert result["macro_f1"][1] < 0.5  # majority-like: F1 of O only, / 3 labels = 0.25
    assert result["labels"] == ["B-X", "I-X", "O"] and result["dev_words"] == n_dev


def test_one_label_is_a_clear_error():
    with pytest.raises(ValueError, match="one label only"):
        probe.probe_layers(np.zeros((1, 3, 2)), ["O"] * 3, np.zeros((1, 1, 2)), ["O"])


def test_conll_files_through_a_tiny_bert(tmp_path):
    words = ["the", "movie", "was", "good", "bad", "plot", "it", "."]
    backbone, packer, tokenizer = tiny_bert(tmp_path, words, context_free_embeddings=True)
    tag = {"plot": "I-MISC", "movie": "I-ORG"}  # the label is a function of the word
    rng = np.random.default_rng(1)
    sentences = []
    for i in range(60):
        ws = tuple(rng.choice(words, 6))
        sentences.append(tagging.ConllSentence(ws, tuple(tag.get(w, "O") for w in ws)))
    path = tmp_path / "train.txt"
    path.write_text(tagging.format_sentences(sentences))
    result = probe.probe_conll(backbone, packer, str(path), tokenizer=tokenizer,
                               dev_fraction=0.25, seed=2)
    assert result["train_words"] == 45 * 6 and result["dev_words"] == 15 * 6
    assert len(result["accuracy"]) == 3  # embeddings + 2 layers
    assert result["accuracy"][0] == pytest.approx(1.0)  # layer 0 is the word itself
    assert result["majority"]["label"] == "O"
    typed = probe.probe_conll(backbone, packer, str(path), tokenizer=tokenizer, types=True,
                              max_train_sentences=20, seed=2)
    assert typed["labels"] == ["MISC", "O", "ORG"] and typed["train_words"] == 20 * 6
    out = probe.plot_probe({"tiny": result, "types": typed}, str(tmp_path / "p" / "probe.png"))
    assert (tmp_path / "p" / "probe.png").exists() and out.endswith("probe.png")
    json.dumps(result)  # JSON-able as garden.analyze writes it
