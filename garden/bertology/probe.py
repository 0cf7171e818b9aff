"""Linear probes per layer: how much of a word-level labelling (NER tags) a logistic
regression can read off each layer's frozen word vectors (Liu et al. 2019; Tenney et al. 2019).

Per layer (index 0: the embeddings), a scikit-learn LogisticRegression on standardised vectors
(StandardScaler: the layers' scales differ by orders of magnitude) is fitted on the train
words and scored on the dev words: accuracy and macro-F1 (over the labels the dev words have),
beside the majority baseline (the most frequent train label for every dev word). A layer
"knows" the labelling when it beats the baseline by much more than the dev sample's noise
(the sd of an accuracy p over n words is sqrt(p (1 - p) / n)).

Data: CoNLL-2003 files (text.finetune.tagging's reader; `python -m
data_pipelines.sample_tasks --kinds=conll` makes a small one from the sample corpus): a train
file and a dev file, or one file split by sentence (seeded) so that no sentence gives words to
both sides. Labels are the tags as written (types=False) or their entity types, O kept
(types=True: B-PER and I-PER are both PER). Word vectors: garden.bertology.representations.
"""

from __future__ import annotations

import os
from typing import Dict, Mapping, Optional, Sequence

import numpy as np

from text.finetune import tagging
from garden import plots
from garden.bertology import representations


def probe_layers(train_vectors: np.ndarray, train_labels: Sequence[str],
                 dev_vectors: np.ndarray, dev_labels: Sequence[str], *, c: float = 1.0,
                 max_iter: int = 500) -> Dict:
    """Fits one probe per layer of [L + 1, N, H] train vectors and scores it on the dev ones.

    Returns {"accuracy": [L + 1], "macro_f1": [L + 1], "majority": {"label", "accuracy",
    "macro_f1"}, "labels": the dev labels F1 averages over, "train_words", "dev_words"}.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    train_labels, dev_labels = np.asarray(train_labels), np.asarray(dev_labels)
    if train_vectors.shape[1] != len(train_labels) or dev_vectors.shape[1] != len(dev_labels):
        raise ValueError(f"{train_vectors.shape[1]} / {dev_vectors.shape[1]} vectors for "
                         f"{len(train_labels)} / {len(dev_labels)} labels")
    if len(set(train_labels)) < 2:
        raise ValueError(f"the train words have one label only ({set(train_labels)}): nothing "
                         f"to probe")
    labels = sorted(set(dev_labels))

    def scores(predicted) -> Dict[str, float]:
        return {"accuracy": float(accuracy_score(dev_labels, predicted)),
                "macro_f1": float(f1_score(dev_labels, predicted, labels=labels,
                                           average="macro", zero_division=0))}

    values, counts = np.unique(train_labels, return_counts=True)
    majority = str(values[np.argmax(counts)])
    result = {"accuracy": [], "macro_f1": [],
              "majority": {"label": majority, **scores(np.full(len(dev_labels), majority))},
              "labels": labels, "train_words": len(train_labels), "dev_words": len(dev_labels)}
    for train, dev in zip(train_vectors, dev_vectors):
        probe = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=max_iter))
        probe.fit(train, train_labels)
        for key, value in scores(probe.predict(dev)).items():
            result[key].append(value)
    return result


def word_labels(sentences: Sequence[tagging.ConllSentence], found, types: bool) -> np.ndarray:
    """The label of each occurrence of `found` (representations.Occurrences of `sentences`):
    its tag, or its entity type ("O" for O) when `types`."""
    tags = [sentences[s].tags[k] for s, k in zip(found.sentence_ids, found.word_index)]
    if types:
        tags = [tagging.tag_type(t) or "O" for t in tags]
    return np.asarray(tags)


def probe_conll(backbone, packer, train_path: str, dev_path: Optional[str] = None, *,
                tokenizer=None, pooling: str = "first", types: bool = False,
                dev_fraction: float = 0.2, max_train_sentences: Optional[int] = 1000,
                max_dev_sentences: Optional[int] = 1000, seed: int = 0, c: float = 1.0) -> Dict:
    """Probes of every layer of `backbone` on CoNLL-2003 tags (module docstring): the train
    and dev files, or `train_path` split by sentence (dev_fraction of them to dev, seeded).
    At most max_*_sentences sentences of each side, drawn with `seed` (memory: see
    garden.bertology.representations). Returns probe_layers's dict plus the data's origin."""
    train = tagging.read_examples(train_path)
    if dev_path:
        dev = tagging.read_examples(dev_path)
    else:
        if not 0 < dev_fraction < 1:
            raise ValueError(f"dev_fraction={dev_fraction} must lie in (0, 1)")
        order = np.random.default_rng(seed).permutation(len(train))
        cut = int(round(len(train) * dev_fraction))
        if cut == 0 or cut == len(train):
            raise ValueError(f"{train_path}: {len(train)} sentences cannot be split "
                             f"{1 - dev_fraction:.0%} / {dev_fraction:.0%}: give --dev data")
        dev = [train[i] for i in sorted(order[:cut])]
        train = [train[i] for i in sorted(order[cut:])]
    sides = []
    for name, sentences, limit in (("train", train, max_train_sentences),
                                   ("dev", dev, max_dev_sentences)):
        sentences = [sentences[i] for i in representations.sample(len(sentences), limit, seed)]
        found = representations.collect(backbone, packer, [s.words for s in sentences],
                                        tokenizer=tokenizer, pooling=pooling,
                                        name=f"probe {name}")
        sides.append((found.vectors, word_labels(sentences, found, types)))
    result = probe_layers(*sides[0], *sides[1], c=c)
    result.update(train=train_path, dev=dev_path or f"{dev_fraction:.0%} of {train_path}",
                  pooling=pooling, labelling="entity types" if types else "tags", seed=seed)
    return result


def plot_probe(results: Mapping[str, Mapping], path: str) -> str:
    """Accuracy and macro-F1 across layers, a line per model (a dict name -> probe result)
    with its majority baseline dotted, as one PNG at `path`."""
    plt = plots.pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for axis, metric in zip(axes, ("accuracy", "macro_f1")):
        for name, result in results.items():
            line, = axis.plot(range(len(result[metric])), result[metric], marker="o",
                              label=name)
            axis.axhline(result["majority"][metric], ls=":", color=line.get_color(),
                         label=f"{name}: majority ({result['majority']['label']})")
        axis.set(title=f"probe {metric.replace('_', '-')}", xlabel="layer (0: embeddings)",
                 ylim=(0, 1.02))
        axis.legend(fontsize=7)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return plots.save(figure, path)
