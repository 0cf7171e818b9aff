"""How contextual are a model's word representations, layer by layer (Ethayarajh 2019, "How
Contextual are Contextualized Word Representations?").

For words with at least `min_contexts` occurrences in the sentences given, per layer:
  self-similarity        mean cosine between a word's occurrence vectors (pairs of different
                         occurrences), averaged over the words;
  intra-sentence sim.    mean cosine between each word occurrence of a sentence and the
                         sentence's mean vector, averaged over the sentences;
  max. explainable var.  sigma_1^2 / sum_i sigma_i^2 of a word's occurrence matrix (the share
                         of its variance the first principal direction explains; Ethayarajh
                         does not centre the matrix, nor do we), averaged over the words;
each raw and adjusted by the layer's anisotropy baseline: the same statistic of occurrences
drawn at random (seeded) across words - mean cosine of random pairs for self- and
intra-sentence similarity, the MEV of random occurrence sets of the same sizes for MEV.
A context-free layer has self-similarity 1; isotropic random vectors have baseline ~0.

A word's vector is its FIRST word piece's (Ethayarajh's models had whole-word tokens where we
may have pieces); words are split on whitespace and punctuation (punctuation marks are words
of their own) and lower-cased when the packer lower-cases.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Dict, List, Mapping, Sequence

import numpy as np

from garden.bertology import instrument, plots

_WORD = re.compile(r"\w+|[^\w\s]")
METRICS = ("self_similarity", "intra_sentence_similarity", "max_explainable_variance")


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def self_similarity(vectors: np.ndarray) -> float:
    """Mean cosine over pairs of different rows of [n, H] (n >= 2)."""
    u = _unit(vectors.astype(np.float64))
    n = len(u)
    total = np.square(u.sum(0)).sum() - n  # sum over i != j of cos(i, j)
    return float(total / (n * (n - 1)))


def max_explainable_variance(vectors: np.ndarray) -> float:
    """sigma_1^2 / sum sigma_i^2 of the [n, H] occurrence matrix."""
    s = np.linalg.svd(vectors.astype(np.float64), compute_uv=False)
    return float(s[0] ** 2 / np.maximum(np.square(s).sum(), 1e-24))


def intra_sentence_similarity(vectors: np.ndarray, sentence_ids: np.ndarray) -> float:
    """Mean over sentences of the mean cosine of its rows to the sentence's mean row."""
    scores = []
    for s in np.unique(sentence_ids):
        rows = vectors[sentence_ids == s].astype(np.float64)
        if len(rows) < 2:
            continue
        scores.append(float(np.mean(_unit(rows) @ _unit(rows.mean(0)))))
    return float(np.mean(scores)) if scores else float("nan")


def layer_metrics(vectors: np.ndarray, words: np.ndarray, sentence_ids: np.ndarray,
                  min_contexts: int = 5, seed: int = 0, baseline_pairs: int = 2000) -> Dict:
    """The metrics of one layer's occurrence vectors [N, H] with their word and sentence ids
    (self-similarity and MEV over words with >= min_contexts occurrences), raw and adjusted."""
    rng = np.random.default_rng(seed)
    kept = [w for w, n in zip(*np.unique(words, return_counts=True)) if n >= min_contexts]
    if not kept:
        raise ValueError(f"no word has {min_contexts} or more occurrences: give more text")
    groups = [np.flatnonzero(words == w) for w in kept]
    self_sim = float(np.mean([self_similarity(vectors[g]) for g in groups]))
    mev = float(np.mean([max_explainable_variance(vectors[g]) for g in groups]))
    intra = intra_sentence_similarity(vectors, sentence_ids)
    unit = _unit(vectors.astype(np.float64))
    i, j = rng.integers(0, len(vectors), (2, baseline_pairs))
    keep = words[i] != words[j]
    baseline = float(np.mean(np.sum(unit[i[keep]] * unit[j[keep]], axis=1)))
    baseline_mev = float(np.mean([max_explainable_variance(
        vectors[rng.choice(len(vectors), len(g), replace=False)]) for g in groups]))
    return {"self_similarity": self_sim, "intra_sentence_similarity": intra,
            "max_explainable_variance": mev, "anisotropy": baseline,
            "anisotropy_mev": baseline_mev,
            "adjusted_self_similarity": self_sim - baseline,
            "adjusted_intra_sentence_similarity": intra - baseline,
            "adjusted_max_explainable_variance": mev - baseline_mev,
            "words": len(kept), "occurrences": int(sum(len(g) for g in groups))}


def words_of(sentence: str, lower_case: bool) -> List[str]:
    return _WORD.findall(sentence.lower() if lower_case else sentence)


def word_occurrences(backbone, packer, sentences: Sequence[str], batch_size: int = 32,
                     progress_seconds: float = 10.0):
    """(vectors [L+1, N, H], words [N], sentence ids [N]) of every word occurrence that fits
    in max_seq_length, its first piece's hidden state per layer ("bert" layout: [CLS] first).
    Sentences are re-joined from their words so that pieces align with words."""
    import tensorflow as tf

    if packer.layout != "bert":
        raise ValueError(f"contextuality reads the 'bert' text layout; the model packs "
                         f"{packer.layout!r}")
    model = instrument.instrumented(backbone, output_hidden_states=True)
    all_vectors, all_words, all_ids = [], [], []
    start = last = time.time()
    for b in range(0, len(sentences), batch_size):
        chunk = [words_of(s, packer.lower_case) for s in sentences[b:b + batch_size]]
        batch = packer.encode_numpy([" ".join(w) for w in chunk])
        states = instrument.run(model, batch)["hidden_states"]
        for r, words in enumerate(chunk):
            lengths = [int(n) for n in packer.tokenize(tf.constant(words)).row_lengths()] \
                if words else []
            position = 1
            for word, n in zip(words, lengths):
                if n == 0 or position + n > packer.max_seq_length - 1:
                    break
                all_vectors.append(states[:, r, position])
                all_words.append(word)
                all_ids.append(b + r)
                position += n
        if time.time() - last >= progress_seconds:
            last = time.time()
            print(f"[contextuality] {b + len(chunk)}/{len(sentences)} sentences, "
                  f"{(b + len(chunk)) / (last - start):.1f}/s", file=sys.stderr, flush=True)
    if not all_vectors:
        raise ValueError("no word occurrence in the sentences given")
    return (np.stack(all_vectors, axis=1).astype(np.float32), np.asarray(all_words),
            np.asarray(all_ids))


def contextuality(backbone, packer, sentences: Sequence[str], min_contexts: int = 5,
                  seed: int = 0) -> Dict:
    """Every layer's metrics (index 0: the embeddings), as lists over the layers."""
    vectors, words, ids = word_occurrences(backbone, packer, sentences)
    per_layer = [layer_metrics(v, words, ids, min_contexts, seed) for v in vectors]
    return {key: [layer[key] for layer in per_layer] for key in per_layer[0]}


def plot_contextuality(results: Mapping[str, Mapping], out_dir: str) -> List[str]:
    """One PNG per metric across layers (raw solid, adjusted dashed), a line per model."""
    import os

    plt = plots.pyplot()
    paths = []
    for metric in METRICS:
        figure, axis = plt.subplots(figsize=(6, 4))
        for name, result in results.items():
            line, = axis.plot(range(len(result[metric])), result[metric], marker="o",
                              label=f"{name}")
            axis.plot(range(len(result[metric])), result[f"adjusted_{metric}"], ls="--",
                      color=line.get_color(), label=f"{name} (adjusted)")
        axis.set(title=metric.replace("_", " "), xlabel="layer (0: embeddings)")
        axis.legend(fontsize=7)
        paths.append(plots.save(figure, os.path.join(out_dir, f"contextuality_{metric}.png")))
    return paths
