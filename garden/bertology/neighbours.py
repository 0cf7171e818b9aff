"""Sentence embeddings and a nearest-neighbour search over a text file.

Each line is embedded as the features export's `embed` signature embeds it
(garden.serving.features.pool: the mean of the backbone's last layer over the line's real
pieces, specials included, as sentence-transformers pools; or the first piece's), and lines are
ranked by cosine similarity. Without queries every line is a query and is left out of its own
neighbours; with queries (--query, repeated) the file's lines are the candidates. An
encoder-decoder (T5, BART) embeds a line by its encoder's states.
"""

from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np

from garden import runs
from garden.models import stack_view
from garden.models.instrument import readout, run as run_model
from garden.serving.features import pool


def embed(backbone, packer, texts: Sequence[str], pooling: str = "mean",
          batch_size: int = 32) -> np.ndarray:
    """[N, D] float32 embeddings of `texts`. The backbone is given only the packed inputs it
    takes (instrument.run): the "bert" layout packs segment_ids, which DistilBERT and the
    recurrent families do not read."""
    rows = []
    for start in range(0, len(texts), batch_size):
        inputs = packer.encode_numpy(list(texts[start:start + batch_size]))
        features = run_model(backbone, inputs)["sequence_output"]
        rows.append(pool(features, inputs["padding_mask"], pooling).numpy())
    return np.concatenate(rows).astype(np.float32)


def cosine_similarities(queries: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """[Q, N] cosine similarities (a zero vector's are 0)."""
    def unit(x):
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return unit(queries) @ unit(candidates).T


def nearest(similarities: np.ndarray, top_k: int, exclude_self: bool) -> List[List[int]]:
    """Each row's top_k column indices, most similar first (ties: the earlier line)."""
    scores = similarities.copy()
    if exclude_self:
        np.fill_diagonal(scores, -np.inf)
    order = np.argsort(-scores, axis=1, kind="stable")
    return [row[:min(top_k, scores.shape[1] - exclude_self)].tolist() for row in order]


def search(path: str, sentences: Sequence[str], queries: Sequence[str], max_seq_length: int,
           top_k: int, pooling: str = "mean") -> Dict:
    """What `garden.analyze neighbours` reports for --model=PATH (module docstring); ValueError
    naming the model when it gives no backbone."""
    if top_k < 1:
        raise ValueError(f"--top_k={top_k}: give at least 1")
    try:
        run = runs.open(path, [runs.MODEL_DIR, runs.CONVERTED], who="garden.analyze")
        backbone = run.backbone(max_seq_length=max_seq_length)
    except runs.RunError as e:
        raise ValueError(f"--model={e}") from None
    if readout(backbone).stacks:  # T5, BART: the encoder's states embed a line
        backbone = stack_view.view(backbone, "encoder")
    packer = run.packer(max_seq_length)
    print(f"[garden.analyze] neighbours: {run.description}; {len(sentences)} lines, "
          f"{len(queries) or 'every line as'} queries", flush=True)
    lines = embed(backbone, packer, sentences, pooling)
    asked = embed(backbone, packer, queries, pooling) if queries else lines
    similarities = cosine_similarities(asked, lines)
    found = nearest(similarities, top_k, exclude_self=not queries)
    return {"pooling": pooling, "top_k": top_k, "queries": [
        {"text": text, "neighbours": [{"line": int(j), "text": sentences[j],
                                       "cosine": float(similarities[q, j])} for j in found[q]]}
        for q, text in enumerate(queries or sentences)]}
