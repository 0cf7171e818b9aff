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


def test_the_mlp_probe_reads_what_a_linear_one_cannot():
    """XOR of two coordinates: no line separates it (a linear probe stays near chance, 0.5),
    a one-hidden-layer MLP does (> 0.95)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, size=(3000, 2))
    y = np.where((x[:, 0] > 0) ^ (x[:, 1] > 0), "A", "B")
    layers = x[None]
    linear = probe.probe_layers(layers[:, :2000], y[:2000], layers[:, 2000:], y[2000:])
    mlp = probe.probe_layers(layers[:, :2000], y[:2000], layers[:, 2000:], y[2000:],
                             kind="mlp", max_iter=1000)
    assert linear["accuracy"][0] < 0.5 + 4 * _sd(0.5, 1000)
    assert mlp["accuracy"][0] > 0.95 and mlp["kind"] == "mlp"
    with pytest.raises(ValueError, match="probe kind 'tree'"):
        probe.probe_layers(layers[:, :20], y[:20], layers[:, 20:40], y[20:40], kind="tree")


def test_control_labels_are_a_seeded_function_of_the_word_with_the_task_distribution():
    rng = np.random.default_rng(4)
    vocabulary = [f"w{i}" for i in range(400)]
    train_words = list(rng.choice(vocabulary, 5000))
    train_labels = rng.choice(["O", "X", "Y"], 5000, p=[0.7, 0.2, 0.1])
    dev_words = list(rng.choice(vocabulary, 1000))
    train_c, dev_c = probe.control_labels(train_words, train_labels, dev_words, seed=5)
    seen = {}
    for word, label in zip(train_words + dev_words, list(train_c) + list(dev_c)):
        assert seen.setdefault(word, label) == label  # one label per word type
    types = np.asarray([seen[w] for w in vocabulary])
    # 400 types drawn from (0.7, 0.2, 0.1): the share of O within 4 sd of 0.7
    assert abs(np.mean(types == "O") - 0.7) < 4 * _sd(0.7, 400)
    again = probe.control_labels(train_words, train_labels, dev_words, seed=5)
    assert list(again[0]) == list(train_c)


def test_scalar_mix_weights_the_informative_layer():
    rng = np.random.default_rng(6)
    y = rng.choice(["A", "B", "C"], 2400)
    centres = rng.normal(size=(3, 8)) * 2
    informative = centres[np.searchsorted(["A", "B", "C"], y)] + rng.normal(0, 0.5, (2400, 8))
    layers = np.stack([rng.normal(size=(2400, 8)), informative, rng.normal(size=(2400, 8))])
    result = probe.scalar_mix_probe(layers[:, :1800], y[:1800], layers[:, 1800:], y[1800:])
    assert result["accuracy"] > 0.9
    assert sum(result["layer_weights"]) == pytest.approx(1, abs=1e-6)
    assert result["layer_weights"][1] > 0.6, result["layer_weights"]


def test_conll_tasks_with_control_and_scalar_mix(tmp_path):
    words = ["the", "movie", "was", "good", "bad", "plot", "it", "."]
    backbone, packer, tokenizer = tiny_bert(tmp_path, words, context_free_embeddings=True)
    pos = {"the": "DT", "movie": "NN", "plot": "NN", "was": "VBD", "it": "PRP", ".": "."}
    rng = np.random.default_rng(7)
    sentences = []
    for _ in range(60):
        ws = tuple(rng.choice(words, 6))
        sentences.append(tagging.ConllSentence(
            ws, tuple("I-ORG" if w == "movie" else "O" for w in ws),
            tuple(pos.get(w, "JJ") for w in ws), tuple("I-NP" for _ in ws)))
    path = tmp_path / "train.txt"
    path.write_text(tagging.format_sentences(sentences))
    result = probe.probe_conll(backbone, packer, str(path), tokenizer=tokenizer, seed=2,
                               tasks=("pos", "ner"), control=True, scalar_mix=True)
    assert set(result["tasks"]) == {"pos", "ner"}
    task = result["tasks"]["pos"]
    assert result["accuracy"] == task["accuracy"]  # the first task's figures on top
    assert task["accuracy"][0] == pytest.approx(1.0)  # POS is a function of the word here
    np.testing.assert_allclose(task["selectivity"], np.asarray(task["accuracy"]) -
                               task["control"]["accuracy"])
    assert len(task["scalar_mix"]["layer_weights"]) == 3
    with pytest.raises(ValueError, match="probe tasks"):
        probe.probe_conll(backbone, packer, str(path), tokenizer=tokenizer, tasks=("srl",))
    json.dumps(result)
