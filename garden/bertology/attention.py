"""Where the heads look: the attention statistics of Clark et al. (2019, "What Does BERT Look
At? An Analysis of BERT's Attention", arXiv:1906.04341), with plots.

Per layer and head, averaged over the real (not padding) query tokens of a batch:
  * the share of attention to [CLS], to [SEP], to punctuation, to the token itself, to the
    previous and to the next token (previous / next averaged over the queries that have a real
    previous / next token, so a head that always looks one token back scores exactly 1);
  * the entropy of the attention distribution, in nats (uniform over n keys: ln n).
A causal model's (GPT, GPT-2: causal=True) query sees only itself and the tokens before it,
so every statistic is taken over those keys: there is no "next" share, the [CLS] and [SEP]
shares count only the ones a query can see, and the entropy of uniform attention (reported as
uniform_entropy) is ln(position + 1), not ln n. A layout without a [CLS] (GPT-2's: cls_id None)
has no "cls" share. What was left out is named, with the reason, under "not_applicable".
Head-to-head distances are the Jensen-Shannon divergence of two heads' distributions, in nats
(identical heads 0, heads that attend to disjoint tokens ln 2), averaged over the query tokens;
the paper's figure 6 embeds the same matrix. Which ids are [CLS], [SEP] and punctuation is the
vocabulary's business: the caller passes them (e.g. from the text packer).

Example:
    probs = instrumented(backbone, output_attentions=True)(batch)["attention_probs"]
    stats = attention_shares(probs, batch["token_ids"], batch["padding_mask"], cls_id=101,
                             sep_id=102, punctuation_ids={1010, 1012})
    plot_layer_shares(stats, "shares.png")
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np
from scipy import special
from scipy.cluster import hierarchy
from scipy.spatial import distance

from garden import plots
from garden.models.instrument import instrumented, require_attention, run

# The targets of attention_shares, in the order the plots draw them.
SHARES = ("cls", "sep", "punctuation", "self", "previous", "next")


@dataclasses.dataclass
class QueryRows:
    """The attention rows of the real query tokens of a batch, every sequence's rows together.

    probs: float [L, A, Q, T], row q over the keys of its own sequence (padding included).
    key_ids: int [Q, T] or None, the token ids of those keys; key_real: bool [Q, T], the keys
    the query can see: real tokens (not padding), and with causal attention not after it.
    position: int [Q], each query's position in its sequence; sequence: int [Q], its batch row.
    """
    probs: np.ndarray
    key_ids: np.ndarray
    key_real: np.ndarray
    position: np.ndarray
    sequence: np.ndarray

    def offset_mass(self, offset: int):
        """Each row's weight on the key `offset` positions away ([L, A, Q]) and whether that key
        is a real token ([Q])."""
        rows = np.arange(len(self.position))
        keys = self.position + offset
        inside = (keys >= 0) & (keys < self.key_real.shape[1])
        keys = np.clip(keys, 0, self.key_real.shape[1] - 1)
        return self.probs[:, :, rows, keys], inside & self.key_real[rows, keys]


def punctuation_ids(tokens: Sequence[str]) -> List[int]:
    """The ids of a vocabulary's punctuation pieces (no letter or digit once SentencePiece's
    ▁ and byte-level BPE's Ġ are stripped; special tokens [..] and <..> left out)."""
    return [i for i, t in enumerate(tokens)
            if t.strip("▁Ġ") and all(not c.isalnum() for c in t.strip("▁Ġ"))
            and not (t.startswith("[") or t.startswith("<"))]


def query_rows(attention: np.ndarray, padding_mask: np.ndarray,
               token_ids: Optional[np.ndarray] = None, causal: bool = False) -> QueryRows:
    """QueryRows of `attention` [L, B, A, T, T] (a backbone's attention_probs, or any matrices
    of that shape such as effective attention) for the tokens where padding_mask [B, T] is 1;
    key_ids is None without `token_ids` [B, T]; causal: a query sees no key after it."""
    attention = np.asarray(attention, np.float64)
    padding_mask = np.asarray(padding_mask).astype(bool)
    batch, length = padding_mask.shape
    if attention.ndim != 5 or (attention.shape[1], attention.shape[3],
                               attention.shape[4]) != (batch, length, length):
        raise ValueError(f"attention of shape {attention.shape} is not [L, B, A, T, T] for a "
                         f"batch of padding_mask shape {padding_mask.shape}")
    sequence, position = np.nonzero(padding_mask)
    probs = np.transpose(attention[:, sequence, :, position, :], (1, 2, 0, 3))  # [L, A, Q, T]
    visible = padding_mask[sequence]
    if causal:
        visible = visible & (np.arange(length)[None, :] <= position[:, None])
    return QueryRows(probs=probs,
                     key_ids=None if token_ids is None else np.asarray(token_ids)[sequence],
                     key_real=visible, position=position, sequence=sequence)


def _per_head(values: np.ndarray) -> list:
    """[L, A] floats as nested lists (JSON)."""
    return np.asarray(values, np.float64).tolist()


def not_applicable(causal: bool, cls_id: Optional[int]) -> Dict[str, str]:
    """The SHARES that have no meaning for this attention and text layout, with why."""
    reasons = {}
    if causal:
        reasons["next"] = "a causal model's query cannot see the next token"
    if cls_id is None:
        reasons["cls"] = "the text layout has no [CLS] token"
    return reasons


def query_statistics(rows: QueryRows, cls_id: Optional[int], sep_id: Optional[int],
                     punctuation_ids: Iterable[int] = ()) -> Dict[str, np.ndarray]:
    """Each real query's statistics over the keys it can see: {name: [L, A, Q]} for the
    SHARES (NaN where a query has no such key: no previous token at position 0, no visible
    next token) and "entropy" (nats); "uniform_entropy": [Q], ln(keys the query sees)."""
    punctuation = np.isin(rows.key_ids, np.fromiter(punctuation_ids, np.int64, -1))
    targets = {"cls": rows.key_ids == cls_id, "sep": rows.key_ids == sep_id,
               "punctuation": punctuation}
    stats = {name: (rows.probs * (mask & rows.key_real)).sum(-1)
             for name, mask in targets.items()}
    for name, offset in (("self", 0), ("previous", -1), ("next", 1)):
        mass, valid = rows.offset_mass(offset)
        stats[name] = np.where(valid, mass, np.nan)
    stats["entropy"] = special.entr(np.clip(rows.probs * rows.key_real, 0, None)).sum(-1)
    stats["uniform_entropy"] = np.log(np.maximum(rows.key_real.sum(-1), 1))
    return stats


def attention_shares(attention: np.ndarray, token_ids: np.ndarray, padding_mask: np.ndarray,
                     cls_id: Optional[int], sep_id: Optional[int],
                     punctuation_ids: Iterable[int] = (), causal: bool = False) -> Dict:
    """Clark et al.'s per-head statistics of `attention` [L, B, A, T, T], each query over the
    keys it can see (causal: itself and those before it; query_statistics).

    Returns {"shares": {name: [L][A] floats for each applicable name of SHARES}, "entropy":
    [L][A] (nats), "layer_means": {name: [L] (mean over heads), "entropy": [L]}, "queries": Q
    (real query tokens averaged over), "entropy_unit": "nats", "uniform_entropy": the mean
    entropy of uniform attention over the visible keys, "attention": "causal" or
    "bidirectional", "keys": the rule in words, "not_applicable": {name: why}}. For matrices
    that are not distributions (effective attention) the "shares" are the mean weights and the
    entropy means nothing.
    """
    rows = query_rows(attention, padding_mask, token_ids, causal)
    stats = query_statistics(rows, cls_id, sep_id, punctuation_ids)
    skipped = not_applicable(causal, cls_id)
    names = [name for name in SHARES if name not in skipped]
    shares = {}
    for name in names:
        valid = ~np.isnan(stats[name][0, 0])
        shares[name] = (stats[name][:, :, valid].mean(-1) if valid.any()
                        else np.zeros(stats[name].shape[:2]))
    entropy = stats["entropy"].mean(-1)
    keys = ("causal: each query over itself and the tokens before it" if causal else
            "bidirectional: each query over every real token")
    return {"shares": {name: _per_head(shares[name]) for name in names},
            "entropy": _per_head(entropy),
            "layer_means": {**{name: shares[name].mean(-1).tolist() for name in names},
                            "entropy": entropy.mean(-1).tolist()},
            "queries": int(len(rows.position)), "entropy_unit": "nats",
            "uniform_entropy": float(stats["uniform_entropy"].mean()),
            "attention": "causal" if causal else "bidirectional", "keys": keys,
            "not_applicable": skipped}


def head_distances(attention: np.ndarray, padding_mask: np.ndarray) -> Dict:
    """Jensen-Shannon divergences (nats) between every pair of the L*A heads' attention
    distributions, averaged over the real query tokens of the batch.

    Returns {"js_divergence": [N][N] floats (N = L*A, symmetric, zero diagonal), "heads":
    ["L{l}-H{h}"], "order": the heads' order in a hierarchical clustering (average linkage,
    optimal leaf order) for the heat map, "unit": "nats"}.
    """
    rows = query_rows(attention, padding_mask)
    num_layers, num_heads = rows.probs.shape[:2]
    p = np.clip(rows.probs.reshape((num_layers * num_heads,) + rows.probs.shape[2:]), 0, None)
    own_entropy = special.entr(p).sum(-1)  # [N, Q]
    divergence = np.zeros((len(p), len(p)))
    for i in range(len(p)):
        # JS(P, Q) = H((P + Q) / 2) - (H(P) + H(Q)) / 2, per query row.
        mixed = special.entr((p[i] + p[i:]) / 2).sum(-1)
        divergence[i, i:] = (mixed - (own_entropy[i] + own_entropy[i:]) / 2).mean(-1)
    divergence = np.clip(np.triu(divergence, 1), 0, None)  # rounding can leave -1e-17
    divergence = divergence + divergence.T
    order = (hierarchy.leaves_list(hierarchy.linkage(
        distance.squareform(divergence, checks=False), "average", optimal_ordering=True))
        if len(p) > 1 else np.zeros(1, int))
    return {"js_divergence": divergence.tolist(),
            "heads": [f"L{l}-H{h}" for l in range(num_layers) for h in range(num_heads)],
            "order": order.tolist(), "unit": "nats"}


def analyze_attention(backbone, batch: Mapping[str, np.ndarray], cls_id: Optional[int],
                      sep_id: Optional[int], punctuation_ids: Iterable[int] = ()) -> Dict:
    """attention_shares and head_distances of `backbone` on `batch` (a packer's token_ids,
    segment_ids, padding_mask), with the attention probabilities switched on if need be;
    causal as the backbone's Readout says (garden.models.instrument)."""
    causal = require_attention(backbone, "attention").causal
    attention = run(instrumented(backbone, output_attentions=True), batch)["attention_probs"]
    return {"shares": attention_shares(attention, batch["token_ids"], batch["padding_mask"],
                                       cls_id, sep_id, punctuation_ids, causal),
            "distances": head_distances(attention, batch["padding_mask"])}


# === Plots (matplotlib, Agg: files only) ===

def plot_layer_shares(stats: Mapping, path: str, names: Sequence[str] = SHARES) -> str:
    """attention_shares' result as one line per target over the layers (mean over heads, each
    head a dot, as Clark et al.'s figure 2), and the entropy beside it; writes a PNG at `path`."""
    pyplot = plots.pyplot()
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(11, 4))
    for name in [n for n in names if n in stats["shares"]]:  # not the not_applicable ones
        per_head = np.asarray(stats["shares"][name])
        layers = np.arange(len(per_head))
        line, = left.plot(layers, per_head.mean(-1), marker="o", label=name)
        left.scatter(np.repeat(layers, per_head.shape[1]), per_head.ravel(), s=6, alpha=0.4,
                     color=line.get_color())
    left.set(xlabel="layer", ylabel="share of attention", ylim=(-0.02, 1.02),
             xticks=np.arange(len(per_head)))
    left.legend(fontsize="small")
    entropy = np.asarray(stats["entropy"])
    right.plot(np.arange(len(entropy)), entropy.mean(-1), marker="o", color="black")
    right.scatter(np.repeat(np.arange(len(entropy)), entropy.shape[1]), entropy.ravel(), s=6,
                  alpha=0.4, color="black")
    right.set(xlabel="layer", ylabel=f"entropy ({stats['entropy_unit']})",
              xticks=np.arange(len(entropy)))
    return plots.save(figure, path)


def plot_head_distances(distances: Mapping, path: str) -> str:
    """head_distances' matrix as a heat map in cluster order, the dendrogram above it; PNG."""
    pyplot = plots.pyplot()
    matrix, labels = np.asarray(distances["js_divergence"]), list(distances["heads"])
    order = list(distances["order"])
    size = max(4.0, 0.18 * len(labels) + 2)
    figure, (top, axes) = pyplot.subplots(2, 1, figsize=(size, size + 1.5),
                                          gridspec_kw={"height_ratios": [1, 4]})
    if len(labels) > 1:
        hierarchy.dendrogram(hierarchy.linkage(distance.squareform(matrix, checks=False),
                                               "average", optimal_ordering=True),
                             ax=top, no_labels=True, color_threshold=0)
    top.axis("off")
    image = axes.imshow(matrix[np.ix_(order, order)], cmap="viridis")
    ticks = np.arange(len(order))
    axes.set_xticks(ticks, [labels[i] for i in order], rotation=90, fontsize=6)
    axes.set_yticks(ticks, [labels[i] for i in order], fontsize=6)
    figure.colorbar(image, ax=axes, label=f"Jensen-Shannon divergence ({distances['unit']})")
    return plots.save(figure, path)


def plot_attention_maps(attention: np.ndarray, tokens: Sequence[str], path: str,
                        layers: Optional[Sequence[int]] = None) -> str:
    """One sentence's attention maps as a grid, a row per layer and a column per head.

    attention: [L, A, T, T] (one batch row of attention_probs; its first len(tokens) positions
    are drawn, so padding is left out); tokens: the sentence's token strings; layers: the rows
    to draw (all by default). Writes a PNG at `path`.
    """
    pyplot = plots.pyplot()
    attention = np.asarray(attention)
    layers = list(range(attention.shape[0]) if layers is None else layers)
    n, num_heads = len(tokens), attention.shape[1]
    cell = max(1.6, 0.16 * n)
    figure, axes = pyplot.subplots(len(layers), num_heads, squeeze=False,
                                   figsize=(cell * num_heads, cell * len(layers)))
    for row, layer in enumerate(layers):
        for head in range(num_heads):
            ax = axes[row, head]
            ax.imshow(attention[layer, head, :n, :n], cmap="Blues", vmin=0, vmax=1)
            ax.set_title(f"L{layer} H{head}", fontsize=7)
            ax.set_xticks(range(n), tokens, rotation=90, fontsize=5)
            ax.set_yticks(range(n), tokens, fontsize=5)
    figure.tight_layout()
    return plots.save(figure, path)
