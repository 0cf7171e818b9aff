"""Identifiability (Brunner et al., 2020, "On Identifiability in Transformers",
arXiv:1908.04211): effective attention, token identifiability and hidden token attribution.

Effective attention (sec. 3). Head h of layer l adds A T to its layer's output, where A [n, n] is
its attention over the n real tokens and T = (X W_v + b_v) W_o [n, H] its value-output transform
of the layer input X (the value bias is kept: it is part of what the head adds, and it leaves
the rank argument unchanged). T has rank at most the head width d, so when n > d its left null
space is not empty and any component of A's rows in it changes nothing. Effective attention is
A with that component removed: A_eff = A U U^T, U the left singular vectors of T with non-zero
singular values. Then A_eff T = A T, and A_eff = A when T has full rank n (n <= d).
Each family's T is read by garden.models.instrument.layer_value_transforms: garden's blocks,
XLNet's content stream, each stack of T5 and BART (X through the pre-attention norm of a pre-LN
block, T5's RMSNorm included). A causal model's (GPT, GPT-2, a T5 or BART decoder's
self-attention) query i reads only the rows 0..i of T, so its effective row is taken over the
keys it can see: A_eff[i, :i+1] = A[i, :i+1] U_i U_i^T with U_i from T[:i+1] (A_eff = A for
the first d queries when T has full rank).

Token identifiability (sec. 4). A probe g (linear, or a one-hidden-layer MLP; scikit-learn)
is fitted on held-in sentences to map each layer's hidden token e_i^l back to its input
embedding x_i (the first block's input, hidden_states[0]); on held-out sentences token i is
identified when the nearest input embedding of its sentence to g(e_i^l) is x_i.

Hidden token attribution (sec. 5). The contribution of input token i to hidden token j of layer
l is the Frobenius norm of the Jacobian d e_j^l / d x_i, normalised over i to sum to 1.

Example:
    stats = effective_attention_stats(backbone, batch, cls_id=101, sep_id=102)
    accuracy = token_identifiability(backbone, batch)["accuracy"]["linear"]
    shares = hidden_token_attribution(backbone, batch, sequence=0)["contributions"]
"""

from __future__ import annotations

from typing import Dict, Iterable, Mapping, Optional

import keras
import numpy as np
import tensorflow as tf

from garden.bertology.attention import attention_shares, query_rows
from garden.models.instrument import (ValueTransform, instrumented, layer_value_transforms,
                                      readout, require_attention, run, run_layers,
                                      self_attention)

# The [B, T] entries of a packer's batch that hidden_token_attribution cuts to one sentence.
SEQUENCE_INPUTS = ("token_ids", "segment_ids", "padding_mask")


# === Effective attention ===

def column_space_projection(transform: np.ndarray, rtol: Optional[float] = None) -> np.ndarray:
    """U U^T [n, n]: the orthogonal projection onto the column space of transform [n, H], i.e.
    the complement of its left null space. Singular values under rtol * the largest count as
    zero (default: NumPy's matrix_rank rule, max(n, H) * float eps)."""
    transform = np.asarray(transform, np.float64)
    u, s, _ = np.linalg.svd(transform, full_matrices=False)
    rtol = max(transform.shape) * np.finfo(transform.dtype).eps if rtol is None else rtol
    kept = u[:, s > rtol * (s[0] if len(s) else 0)]
    return kept @ kept.T


def effective_attention_matrix(attention: np.ndarray, transform: np.ndarray,
                               rtol: Optional[float] = None) -> np.ndarray:
    """A_eff = A U U^T for attention [..., n, n] and transform T [n, H]: A's rows without their
    component in T's left null space, so A_eff T = A T."""
    return np.asarray(attention, np.float64) @ column_space_projection(transform, rtol)


def value_transforms(block, layer_input: np.ndarray) -> np.ndarray:
    """T of each head of a garden Transformer block, [B, A, T, H] for layer_input X [B, T, H]
    (the block's input; a pre-LN block's LayerNorm is applied here): its ValueTransform's
    (garden.models.instrument). The block's attention output is then sum_h A_h T_h + b_o."""
    return ValueTransform.of(*self_attention(block))(layer_input)


def effective_attention(backbone, batch: Mapping[str, np.ndarray],
                        rtol: Optional[float] = None) -> Dict[str, np.ndarray]:
    """Raw and effective attention of `backbone` on `batch`, each [L, B, A, T, T] (effective
    attention is computed over each sequence's real tokens; padding rows and columns are 0),
    and "rank" [L, B, A], the rank of each head's T. Causal models: each query over the keys
    it can see (module docstring).

    Each layer's T comes from its self-attention's ValueTransform (layer_value_transforms):
    garden's blocks, XLNet's content stream, either stack of T5 and BART (a StackView). A
    decoder's T is its self-attention's alone: the cross-attention is another sublayer, which
    reads the encoder's states and adds its own term after it."""
    causal = require_attention(backbone, "effective attention").causal
    layer_value_transforms(backbone)  # refused before any rebuilding when there are none
    model = instrumented(backbone, output_attentions=True, output_hidden_states=True)
    outputs = run(model, batch)
    raw, states = outputs["attention_probs"].astype(np.float64), outputs["hidden_states"]
    lengths = np.asarray(batch["padding_mask"]).astype(bool).sum(1)
    effective = np.zeros_like(raw)
    rank = np.zeros(raw.shape[:3], np.int64)
    for layer, value_transform in enumerate(layer_value_transforms(model)):
        transforms = value_transform(states[layer])  # [B, A, T, H]
        # A banded layer (GPT-3-style LocalMultiHeadAttention) sees only its last band_width
        # keys: a row is projected on the value transforms of those keys alone.
        band = value_transform.band_width
        for b, n in enumerate(lengths):
            for head in range(raw.shape[2]):
                projection = column_space_projection(transforms[b, head, :n], rtol)
                effective[layer, b, head, :n, :n] = raw[layer, b, head, :n, :n] @ projection
                rank[layer, b, head] = int(round(np.trace(projection)))
                for i in range(n if causal or band else 0):  # row i over the keys it sees
                    first = 0 if band is None else max(0, i - band + 1)
                    seen = column_space_projection(transforms[b, head, first:i + 1], rtol)
                    effective[layer, b, head, i, :n] = 0
                    effective[layer, b, head, i, first:i + 1] = (
                        raw[layer, b, head, i, first:i + 1] @ seen)
    return {"attention": raw, "effective": effective, "rank": rank}


def effective_attention_stats(backbone, batch: Mapping[str, np.ndarray], cls_id: int,
                              sep_id: int, punctuation_ids: Iterable[int] = (),
                              rtol: Optional[float] = None) -> Dict:
    """Brunner et al.'s comparison (their figure 3): raw and effective attention side by side.

    Returns {"raw": attention_shares of the raw attention, "effective": {"shares": [L][A] per
    target, the mean effective weight (rows need not sum to 1, weights may be negative),
    "layer_means"}, "removed": [L][A] mean L1 norm of the removed (null-space) part of a row,
    "rank": [L][A] mean rank of T over the sequences, "mean_length": n averaged over them}.
    """
    punctuation_ids = list(punctuation_ids)
    result = effective_attention(backbone, batch, rtol)
    causal = readout(backbone).causal
    token_ids, padding = batch["token_ids"], batch["padding_mask"]
    effective = attention_shares(result["effective"], token_ids, padding, cls_id, sep_id,
                                 punctuation_ids, causal)
    removed = query_rows(result["attention"] - result["effective"], padding).probs
    return {"raw": attention_shares(result["attention"], token_ids, padding, cls_id, sep_id,
                                    punctuation_ids, causal),
            "effective": {"shares": effective["shares"],
                          "layer_means": {k: v for k, v in effective["layer_means"].items()
                                          if k != "entropy"}},
            "removed": np.abs(removed).sum(-1).mean(-1).tolist(),
            "rank": result["rank"].mean(1).tolist(),
            "mean_length": float(np.asarray(padding).sum(1).mean())}


# === Token identifiability ===

def _probe(kind: str, seed: int):
    from sklearn.linear_model import Ridge
    from sklearn.neural_network import MLPRegressor
    if kind == "linear":
        return Ridge(alpha=1e-6)
    if kind == "mlp":
        return MLPRegressor(hidden_layer_sizes=(512,), max_iter=500, random_state=seed)
    raise ValueError(f"unknown probe {kind!r}; choose 'linear' or 'mlp'")


def _nearest_is_self(predicted: np.ndarray, inputs: np.ndarray, sequence: np.ndarray) -> np.ndarray:
    """For each token, whether the nearest (L2) input embedding of its own sentence to its
    predicted embedding is its own: predicted, inputs [N, H], sequence [N] sentence ids."""
    hits = np.zeros(len(predicted), bool)
    for s in np.unique(sequence):
        rows = np.nonzero(sequence == s)[0]
        d = ((predicted[rows, None, :] - inputs[None, rows, :]) ** 2).sum(-1)
        hits[rows] = d.argmin(1) == np.arange(len(rows))
    return hits


def token_identifiability(backbone, batch: Mapping[str, np.ndarray],
                          probes: Iterable[str] = ("linear",), train_fraction: float = 0.5,
                          seed: int = 0) -> Dict:
    """Per layer, the share of held-out tokens whose input embedding a probe recovers.

    Sentences (batch rows) are split at random (numpy Generator(seed)) into `train_fraction`
    for fitting and the rest for testing; a probe per layer and kind in `probes` ("linear":
    ridge least squares; "mlp": one hidden layer of 512) maps e_i^l to x_i. "identity" is the
    probe-free reference: the nearest x_j to e_i^l itself.

    Returns {"accuracy": {kind: [L+1] floats (layer 0 = the embeddings), "identity": [L+1]},
    "train_tokens": int, "test_tokens": int}.
    """
    states = run(instrumented(backbone, output_hidden_states=True), batch)["hidden_states"]
    sequence, position = np.nonzero(np.asarray(batch["padding_mask"]).astype(bool))
    tokens = states[:, sequence, position, :].astype(np.float64)  # [L+1, N, H]
    rows = len(np.asarray(batch["padding_mask"]))
    order = np.random.default_rng(seed).permutation(rows)
    held_in = order[:max(1, min(rows - 1, int(round(train_fraction * rows))))]
    train = np.isin(sequence, held_in)
    if train.all():
        raise ValueError("token_identifiability needs at least two sentences (batch rows): "
                         "one to fit the probe on and one to test it")
    inputs = tokens[0]
    accuracy = {kind: [] for kind in list(probes) + ["identity"]}
    for layer_tokens in tokens:
        for kind in probes:
            probe = _probe(kind, seed).fit(layer_tokens[train], inputs[train])
            hits = _nearest_is_self(probe.predict(layer_tokens[~train]), inputs[~train],
                                    sequence[~train])
            accuracy[kind].append(float(hits.mean()))
        hits = _nearest_is_self(layer_tokens[~train], inputs[~train], sequence[~train])
        accuracy["identity"].append(float(hits.mean()))
    return {"accuracy": accuracy, "train_tokens": int(train.sum()),
            "test_tokens": int((~train).sum())}


# === Hidden token attribution ===

def hidden_token_attribution(backbone, batch: Mapping[str, np.ndarray],
                             sequence: int = 0) -> Dict:
    """Gradient attribution of one sentence's hidden tokens to its input tokens, every layer.

    Runs the backbone's blocks from the first block's input x (hidden_states[0]) over the n
    real tokens of batch row `sequence` and takes, for each layer l and hidden token j, the
    Jacobian d e_j^l / d x [H, n, H]: n forward passes of a batch of H copies and n * L
    backward passes, meant for a few sentences.

    Returns {"contributions": [L][n][n], row j over input tokens i, each row summing to 1,
    "own": [L] mean share of a token's own input, "own_largest": [L] share of hidden tokens
    whose largest contributor is their own input, "by_distance": [L][n] the mean share from
    inputs d = 0 .. n-1 positions away (contribution_by_distance), "tokens": n}.
    """
    model = instrumented(backbone, output_hidden_states=True)
    n = int(np.asarray(batch["padding_mask"])[sequence].astype(bool).sum())
    one = {k: np.asarray(batch[k])[sequence:sequence + 1, :n] for k in SEQUENCE_INPUTS
           if k in batch}
    hidden_states = run(model, one)["hidden_states"]
    width = hidden_states.shape[-1]
    # Row k of the Jacobian d e_j / d x is the gradient of e_j's coordinate k: H copies of the
    # sentence in one batch, copy k's coordinate k summed, give all H rows in one backward pass.
    copies = tf.tile(tf.constant(hidden_states[0]), [width, 1, 1])  # [H, n, H]
    padding_mask = tf.ones((width, n), tf.int32)
    picks = tf.eye(width, dtype=copies.dtype)
    contributions = np.zeros((len(hidden_states) - 1, n, n))
    for j in range(n):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(copies)
            states = run_layers(model, copies, padding_mask)
            picked = [tf.reduce_sum(state[:, j, :] * picks) for state in states]
        # The blocks alone must be the backbone (no step of its own between them).
        if j == 0 and not np.allclose(states[-1][0].numpy(), hidden_states[-1][0], atol=1e-4):
            raise ValueError(f"{model.name}: its encoder blocks run from hidden_states[0] do "
                             "not give its last hidden state; hidden_token_attribution needs "
                             "an encoder whose layers are exactly its blocks")
        for layer, target in enumerate(picked):
            rows = tape.gradient(target, copies)  # [H, n, H]
            norms = np.sqrt(np.square(rows.numpy().astype(np.float64)).sum(axis=(0, 2)))
            contributions[layer, j] = norms / norms.sum()
        del tape
    own = np.diagonal(contributions, axis1=1, axis2=2)  # [L, n]
    return {"contributions": contributions.tolist(), "own": own.mean(1).tolist(),
            "own_largest": (contributions.argmax(-1) == np.arange(n)).mean(1).tolist(),
            "by_distance": contribution_by_distance(contributions).tolist(), "tokens": n}


def contribution_by_distance(contributions: np.ndarray) -> np.ndarray:
    """Brunner et al.'s context contribution by distance: contributions [L, n, n] (row j over
    input tokens i) -> [L, n], entry d the mean over hidden tokens j of the share of j's
    contributions from the inputs at |i - j| = d; each row sums to 1."""
    contributions = np.asarray(contributions, np.float64)
    n = contributions.shape[-1]
    distance = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    return np.stack([np.bincount(distance.ravel(), weights=layer.ravel(), minlength=n) / n
                     for layer in contributions])


# === The report of garden.analyze identifiability ===

def report(backbone, batch: Mapping[str, np.ndarray], cls_id: Optional[int],
           sep_id: Optional[int], punctuation_ids: Iterable[int], attribution_sentences: int,
           out_dir: str) -> Dict:
    """The three analyses on `batch` (a packer's rows), each where it applies, and their plot
    out_dir/identifiability.png: effective attention needs each layer's self-attention
    probabilities and value transform (not ELMo's LSTMs; XLNet's content stream and T5's and
    BART's stacks have them), token identifiability only hidden states, hidden token
    attribution the blocks alone (garden.models.instrument.run_layers: not XLNet's layers, T5's
    blocks or a decoder's). What does not apply is named under "not_applicable" with why;
    "layers" says what layer 0..L is."""
    from garden.models.instrument import cannot_switch, family_name
    from text.progress import Eta

    view = readout(backbone)
    skipped = {}
    unreadable = cannot_switch(backbone, "output_attentions")
    if view.attention is None or unreadable:
        skipped["effective_attention"] = view.no_attention if view.attention is None else unreadable
    if not view.blocks:
        why = view.no_blocks or (f"the {family_name(backbone)} backbone's layers do not run "
                                 f"one by one as garden's Transformer blocks, which this needs")
        skipped["hidden_token_attribution"] = why
        if not hasattr(backbone, "value_transforms"):
            skipped.setdefault("effective_attention", why)
    result = {"layers": view.layers, "attention": view.attention, "not_applicable": skipped,
              "effective_attention": None, "hidden_token_attribution": []}
    if "effective_attention" not in skipped:
        result["effective_attention"] = effective_attention_stats(
            backbone, batch, cls_id, sep_id, punctuation_ids)
    result["token_identifiability"] = token_identifiability(backbone, batch)
    if "hidden_token_attribution" not in skipped:
        count = min(attribution_sentences, len(batch["token_ids"]))
        eta = Eta("[garden.analyze] identifiability: attribution of sentences", count)
        result["hidden_token_attribution"] = [hidden_token_attribution(backbone, batch, s)
                                              for s in eta.wrap(range(count))]
    result["plots"] = [plot_report(result, out_dir)]
    return result


def plot_report(result: Mapping, out_dir: str) -> str:
    """report()'s figure: token identifiability per layer; the own token's attribution share
    beside raw and effective attention to [CLS] and [SEP]; context contribution by distance
    (sentence 0). A panel whose analysis did not apply says so. Returns the PNG's path."""
    import os

    from garden import plots

    os.makedirs(out_dir, exist_ok=True)
    plt = plots.pyplot()
    figure, axes = plt.subplots(1, 3, figsize=(16, 4))
    for name, values in result["token_identifiability"]["accuracy"].items():
        axes[0].plot(range(len(values)), values, marker="o", label=name)
    axes[0].set(title="token identifiability (nearest input embedding)", xlabel="layer",
                ylabel="accuracy", ylim=(0, 1.05))
    axes[0].legend()
    attribution, effective = result["hidden_token_attribution"], result["effective_attention"]
    if attribution:
        own = np.mean([a["own"] for a in attribution], axis=0)
        axes[1].plot(range(1, len(own) + 1), own, marker="o", label="own token's share")
    for key in ("cls", "sep") if effective else ():
        if key in effective["raw"]["layer_means"]:
            axes[1].plot(range(len(effective["raw"]["layer_means"][key])),
                         effective["raw"]["layer_means"][key], ls="--", label=f"raw -> {key}")
            axes[1].plot(range(len(effective["effective"]["layer_means"][key])),
                         effective["effective"]["layer_means"][key],
                         label=f"effective -> {key}")
    axes[1].set(title="attribution and effective attention", xlabel="layer")
    for layer, shares in enumerate(attribution[0]["by_distance"] if attribution else []):
        axes[2].plot(range(len(shares)), shares, marker=".", label=f"layer {layer + 1}")
    axes[2].set(title="context contribution by token distance (sentence 0)",
                xlabel="|input - hidden| positions", ylabel="share")
    for axis in axes[1:]:
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7)
        else:
            axis.text(0.5, 0.5, "\n".join(result["not_applicable"].values()) or "no data",
                      ha="center", va="center", wrap=True, fontsize=7,
                      transform=axis.transAxes)
    return plots.save(figure, os.path.join(out_dir, "identifiability.png"))
