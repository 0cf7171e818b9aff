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

A causal model's word (GPT, GPT-2) sees only itself and the words before it, so its
intra-sentence similarity is taken over what it sees: the cosine of each word to the mean of
the words up to it (the sentence's first word, which sees only itself, left out); the
whole-sentence figure Ethayarajh reports for GPT-2 is kept beside it
(whole_sentence_intra_sentence_similarity), and "context" states the rule. A sentence cut into
several rows (longer than the row) counts its words' prefixes from the sentence's start.
A T5 or BART decoder (garden.models.stack_view) is causal in its self-attention but reads the
whole text through its cross-attention: its context is the whole sentence.

A word's vector is its first word piece's by default (Ethayarajh's ELMo had whole-word tokens;
for BERT and GPT-2 he took one vector per token), or the mean of its pieces (pooling="mean");
words are split on whitespace and punctuation (punctuation marks are words of their own) and
lower-cased when the packer lower-cases: garden.bertology.representations.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from garden import plots
from garden.bertology import representations
from garden.models.instrument import readout

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


def intra_sentence_similarity(vectors: np.ndarray, sentence_ids: np.ndarray,
                              causal: bool = False) -> float:
    """Mean over sentences of the mean cosine of its rows to the sentence's mean row; causal:
    of each row but the first to the mean of the rows up to it (rows in word order)."""
    scores = []
    for s in np.unique(sentence_ids):
        rows = vectors[sentence_ids == s].astype(np.float64)
        if len(rows) < 2:
            continue
        if causal:
            prefix_means = np.cumsum(rows, axis=0) / np.arange(1, len(rows) + 1)[:, None]
            cosines = np.sum(_unit(rows[1:]) * _unit(prefix_means[1:]), axis=1)
        else:
            cosines = _unit(rows) @ _unit(rows.mean(0))
        scores.append(float(np.mean(cosines)))
    return float(np.mean(scores)) if scores else float("nan")


def layer_metrics(vectors: np.ndarray, words: np.ndarray, sentence_ids: np.ndarray,
                  min_contexts: int = 5, seed: int = 0, baseline_pairs: int = 2000,
                  causal: bool = False) -> Dict:
    """The metrics of one layer's occurrence vectors [N, H] with their word and sentence ids
    (self-similarity and MEV over words with >= min_contexts occurrences), raw and adjusted;
    causal: the intra-sentence similarity over what each word sees (module docstring)."""
    rng = np.random.default_rng(seed)
    kept = [w for w, n in zip(*np.unique(words, return_counts=True)) if n >= min_contexts]
    if not kept:
        raise ValueError(f"no word has {min_contexts} or more occurrences: give more text")
    groups = [np.flatnonzero(words == w) for w in kept]
    self_sim = float(np.mean([self_similarity(vectors[g]) for g in groups]))
    mev = float(np.mean([max_explainable_variance(vectors[g]) for g in groups]))
    intra = intra_sentence_similarity(vectors, sentence_ids, causal)
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
            "words": len(kept), "occurrences": int(sum(len(g) for g in groups)),
            **({"whole_sentence_intra_sentence_similarity":
                intra_sentence_similarity(vectors, sentence_ids)} if causal else {})}


def contextuality(backbone, packer, sentences: Sequence[str], min_contexts: int = 5,
                  seed: int = 0, *, max_sentences: Optional[int] = None, tokenizer=None,
                  pooling: str = "first") -> Dict:
    """Every layer's metrics (index 0: the embeddings), as lists over the layers, of raw
    sentences (max_sentences of them drawn with `seed` when given; words grouped lower-cased
    when the packer lower-cases). See garden.bertology.representations for the vectors.
    "context" says what a word's context is (causal for GPT and GPT-2: the words before it),
    "layers" what layer 0..L is (the backbone's garden.models.instrument.Readout)."""
    chosen = representations.sample(len(sentences), max_sentences, seed)
    words = [representations.words_of(sentences[i], packer.lower_case) for i in chosen]
    found = representations.collect(backbone, packer, words, tokenizer=tokenizer,
                                    pooling=pooling, name="contextuality")
    view = readout(backbone)
    per_layer = [layer_metrics(v, found.words, found.sentence_ids, min_contexts, seed,
                               causal=view.causal_states) for v in found.vectors]
    context = ("causal: a word sees itself and the words before it; intra-sentence "
               "similarity to the mean of those" if view.causal_states else
               "the whole sentence; intra-sentence similarity to its mean")
    return {"context": context, "layers": view.layers,
            **{key: [layer[key] for layer in per_layer] for key in per_layer[0]}}


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
