"""Probes per layer: how much of a word-level labelling (NER tags, POS tags, chunk tags) a
classifier can read off each layer's frozen word vectors (Liu et al. 2019; Tenney et al. 2019):
a linear probe (logistic regression) or an MLP with one hidden layer; a scalar-mix probe (one
softmax weight per layer, learnt with the linear classifier on their weighted sum, as ELMo's
and Tenney et al.'s mix); and a control task (Hewitt & Liang 2019): every word type gets a
random label drawn from the task's train label distribution, fixed for the type, and the same
probe learns it; selectivity = task accuracy - control accuracy per layer (a probe that only
memorises word identity scores as well on the control task, so its selectivity is low).

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


KINDS = ("linear", "mlp")
TASKS = ("ner", "pos", "chunk")
MLP_HIDDEN = 64  # units of the MLP probe's hidden layer (Hewitt & Liang's MLP-1 probe)


def _classifier(kind: str, c: float, max_iter: int, seed: int):
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if kind not in KINDS:
        raise ValueError(f"probe kind {kind!r}: choose one of {KINDS}")
    model = (LogisticRegression(C=c, max_iter=max_iter) if kind == "linear" else
             MLPClassifier((MLP_HIDDEN,), alpha=1.0 / c, max_iter=max_iter, random_state=seed))
    return make_pipeline(StandardScaler(), model)


def _scores(dev_labels: np.ndarray, predicted, labels: Sequence[str]) -> Dict[str, float]:
    from sklearn.metrics import accuracy_score, f1_score

    return {"accuracy": float(accuracy_score(dev_labels, predicted)),
            "macro_f1": float(f1_score(dev_labels, predicted, labels=labels, average="macro",
                                       zero_division=0))}


def probe_layers(train_vectors: np.ndarray, train_labels: Sequence[str],
                 dev_vectors: np.ndarray, dev_labels: Sequence[str], *, c: float = 1.0,
                 max_iter: int = 500, kind: str = "linear", seed: int = 0) -> Dict:
    """Fits one probe of `kind` per layer of [L + 1, N, H] train vectors and scores it on the
    dev ones.

    Returns {"accuracy": [L + 1], "macro_f1": [L + 1], "majority": {"label", "accuracy",
    "macro_f1"}, "labels": the dev labels F1 averages over, "train_words", "dev_words",
    "kind"}.
    """

    train_labels, dev_labels = np.asarray(train_labels), np.asarray(dev_labels)
    if train_vectors.shape[1] != len(train_labels) or dev_vectors.shape[1] != len(dev_labels):
        raise ValueError(f"{train_vectors.shape[1]} / {dev_vectors.shape[1]} vectors for "
                         f"{len(train_labels)} / {len(dev_labels)} labels")
    if len(set(train_labels)) < 2:
        raise ValueError(f"the train words have one label only ({set(train_labels)}): nothing "
                         f"to probe")
    labels = sorted(set(dev_labels))
    values, counts = np.unique(train_labels, return_counts=True)
    majority = str(values[np.argmax(counts)])
    result = {"accuracy": [], "macro_f1": [], "kind": kind,
              "majority": {"label": majority,
                           **_scores(dev_labels, np.full(len(dev_labels), majority), labels)},
              "labels": labels, "train_words": len(train_labels), "dev_words": len(dev_labels)}
    for train, dev in zip(train_vectors, dev_vectors):
        probe = _classifier(kind, c, max_iter, seed).fit(train, train_labels)
        for key, value in _scores(dev_labels, probe.predict(dev), labels).items():
            result[key].append(value)
    return result


def control_labels(train_words: Sequence[str], train_labels: Sequence[str],
                   dev_words: Sequence[str], seed: int = 0):
    """Hewitt & Liang's control task: each word type (as written) a label drawn once, seeded,
    from the train labels' distribution; (train control labels, dev control labels)."""
    rng = np.random.default_rng(seed)
    values, counts = np.unique(np.asarray(train_labels), return_counts=True)
    drawn: Dict[str, str] = {}
    for word in sorted(set(train_words) | set(dev_words)):
        drawn[word] = str(values[rng.choice(len(values), p=counts / counts.sum())])
    return (np.asarray([drawn[w] for w in train_words]),
            np.asarray([drawn[w] for w in dev_words]))


def scalar_mix_probe(train_vectors: np.ndarray, train_labels: Sequence[str],
                     dev_vectors: np.ndarray, dev_labels: Sequence[str], *, steps: int = 300,
                     learning_rate: float = 0.05, seed: int = 0) -> Dict:
    """A linear classifier on the softmax-weighted sum of the standardised layers (ELMo's
    scalar mix, learnt jointly by full-batch Adam with the classifier). Returns {"accuracy",
    "macro_f1", "layer_weights": [L + 1] softmax weights, summing to 1}."""
    import tensorflow as tf

    mean = train_vectors.mean(axis=1, keepdims=True)
    scale = train_vectors.std(axis=1, keepdims=True) + 1e-6
    train = tf.constant((train_vectors - mean) / scale, tf.float32)  # [L + 1, N, H]
    dev = tf.constant((dev_vectors - mean) / scale, tf.float32)
    labels = sorted(set(train_labels))
    index = {label: i for i, label in enumerate(labels)}
    targets = tf.constant([index[y] for y in train_labels])
    tf.random.set_seed(seed)
    mix = tf.Variable(tf.zeros(train.shape[0]))
    kernel = tf.Variable(tf.random.normal([train.shape[-1], len(labels)], stddev=0.01))
    bias = tf.Variable(tf.zeros(len(labels)))
    optimizer = tf.keras.optimizers.Adam(learning_rate)

    def logits(vectors):
        mixed = tf.einsum("l,lnh->nh", tf.nn.softmax(mix), vectors)
        return mixed @ kernel + bias

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                targets, logits(train)))
        variables = [mix, kernel, bias]
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))

    for _ in range(steps):
        step()
    predicted = np.asarray(labels)[tf.argmax(logits(dev), axis=-1).numpy()]
    return {**_scores(np.asarray(dev_labels), predicted, sorted(set(dev_labels))),
            "layer_weights": tf.nn.softmax(mix).numpy().tolist()}


def word_labels(sentences: Sequence[tagging.ConllSentence], found, types: bool,
                task: str = "ner") -> np.ndarray:
    """The label of each occurrence of `found` (representations.Occurrences of `sentences`):
    its NER tag (its entity type, "O" for O, when `types`), POS tag or chunk tag (`task`);
    ValueError when the file has no such column (the CoNLL-2003 columns: word POS chunk NER)."""
    column = {"ner": "tags", "pos": "pos", "chunk": "chunks"}[task]
    pairs = list(zip(found.sentence_ids, found.word_index))
    if pairs and not getattr(sentences[pairs[0][0]], column):  # a file has the column or not
        raise ValueError(f"the CoNLL sentences carry no {task} column")
    tags = [getattr(sentences[s], column)[k] for s, k in pairs]
    if types and task == "ner":
        tags = [tagging.tag_type(t) or "O" for t in tags]
    return np.asarray(tags)


def probe_conll(backbone, packer, train_path: str, dev_path: Optional[str] = None, *,
                tokenizer=None, pooling: str = "first", types: bool = False,
                dev_fraction: float = 0.2, max_train_sentences: Optional[int] = 1000,
                max_dev_sentences: Optional[int] = 1000, seed: int = 0, c: float = 1.0,
                tasks: Sequence[str] = ("ner",), kind: str = "linear", control: bool = False,
                scalar_mix: bool = False) -> Dict:
    """Probes of every layer of `backbone` on CoNLL-2003 tags (module docstring): the train
    and dev files, or `train_path` split by sentence (dev_fraction of them to dev, seeded).
    At most max_*_sentences sentences of each side, drawn with `seed` (memory: see
    garden.bertology.representations). Returns probe_layers's dict of the first task plus the
    data's origin, and "tasks": {task: probe_layers's dict, with "control" (its dict on the
    control task) and "selectivity" [L + 1] when `control`, "scalar_mix" when `scalar_mix`}."""
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown or not tasks:
        raise ValueError(f"probe tasks {list(tasks)}: choose among {TASKS}")
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
        words = [sentences[s].words[k] for s, k in zip(found.sentence_ids, found.word_index)]
        sides.append((found.vectors, sentences, found, words))
    (train_x, train_s, train_found, train_words), (dev_x, dev_s, dev_found, dev_words) = sides
    results = {}
    for task in tasks:
        train_y = word_labels(train_s, train_found, types, task)
        dev_y = word_labels(dev_s, dev_found, types, task)
        result = results[task] = probe_layers(train_x, train_y, dev_x, dev_y, c=c, kind=kind,
                                              seed=seed)
        if control:
            train_c, dev_c = control_labels(train_words, train_y, dev_words, seed)
            result["control"] = probe_layers(train_x, train_c, dev_x, dev_c, c=c, kind=kind,
                                             seed=seed)
            result["selectivity"] = (np.asarray(result["accuracy"]) -
                                     result["control"]["accuracy"]).tolist()
        if scalar_mix:
            result["scalar_mix"] = scalar_mix_probe(train_x, train_y, dev_x, dev_y, seed=seed)
    first = dict(results[tasks[0]])
    first.update(train=train_path, dev=dev_path or f"{dev_fraction:.0%} of {train_path}",
                 pooling=pooling, labelling="entity types" if types else "tags", seed=seed,
                 tasks=results)
    return first


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
