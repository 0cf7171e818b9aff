"""How well a language model predicts a text: causal perplexity and masked-LM pseudo-perplexity.

causal_perplexity: a decoder-only GenerativeLM (GPT, GPT-2, GPT-3-style) on each line's pieces
    (no special tokens): every piece after the first is scored given the pieces before it, and
    perplexity = exp(total negative log-likelihood / pieces scored), over the whole file (the
    quantity Hugging Face's `model(ids, labels=ids).loss` averages per line).
pseudo_perplexity: a masked LM (a pretrainer with an `mlm_logits` output at
    `masked_lm_positions`), Salazar et al. (2020), "Masked Language Model Scoring": each piece
    of a line, one at a time, is replaced by the mask token and scored from the rest of the
    line; PPPL = exp(-sum of those log-probabilities / pieces scored). The layout's special
    tokens ([CLS], [SEP], <s>, </s>) are inputs, never scored. It costs one forward per piece.

Both are in nats per piece of the model's own tokenizer: figures of models with different
vocabularies are not comparable, and a pseudo-perplexity (both sides of the context) is not a
perplexity (left context only).
fill_mask: a masked LM's top-k pieces, with their probabilities, at each mask token of a line
    (the vocabulary's own spelling: [MASK], <mask>), as Hugging Face's fill-mask pipeline gives.
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, List, Sequence

import numpy as np
import tensorflow as tf

from garden import runs
from garden.models.instrument import run as run_model


def _log_probs_of(logits, targets: np.ndarray) -> np.ndarray:
    """log softmax(logits)[..., target] in float32, for logits [..., V] and targets [...]."""
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    return tf.gather(log_probs, tf.constant(targets, tf.int32), batch_dims=targets.ndim).numpy()


def _summary(nll: float, count: int, lines: int, what: str) -> Dict:
    if count == 0:
        raise ValueError(f"no piece to score: every line is too short for {what}")
    return {"pieces_scored": count, "lines": lines, "nll_per_piece": nll / count,
            "perplexity": math.exp(nll / count)}


def causal_perplexity(lm, rows: Sequence[Sequence[int]], batch_size: int = 8) -> Dict:
    """Perplexity of a decoder-only GenerativeLM over `rows` (each a line's piece ids, at most
    the model's positions long); rows of one piece give nothing to score and are skipped."""
    if getattr(lm, "is_encoder_decoder", False):
        raise ValueError(f"{type(lm).__name__} is an encoder-decoder model: a text file gives "
                         f"it no source and target, so its perplexity is not defined here")
    rows = [list(r) for r in rows if len(r) >= 2]
    nll, count = 0.0, 0
    for start in range(0, len(rows), batch_size):
        batch = rows[start:start + batch_size]
        width = max(map(len, batch))
        ids = np.zeros((len(batch), width), np.int32)
        mask = np.zeros_like(ids)
        for i, row in enumerate(batch):  # right-padded: a causal model never sees the pads
            ids[i, :len(row)], mask[i, :len(row)] = row, 1
        logits = lm({"token_ids": ids, "padding_mask": mask}, training=False)["logits"]
        scored = _log_probs_of(logits[:, :-1], ids[:, 1:]) * mask[:, 1:]
        nll -= float(scored.sum())
        count += int(mask[:, 1:].sum())
    return _summary(nll, count, len(rows), "a causal LM (two pieces)")


def masked_positions(inputs: Dict[str, np.ndarray], special_ids: Iterable[int]) -> List:
    """(row, position) of every piece pseudo_perplexity scores: real (padding_mask 1), not one
    of the layout's special tokens."""
    special = np.isin(inputs["token_ids"], list(special_ids))
    rows, positions = np.nonzero((inputs["padding_mask"] == 1) & ~special)
    return list(zip(rows.tolist(), positions.tolist()))


def pseudo_perplexity(mlm, inputs: Dict[str, np.ndarray], mask_id: int,
                      special_ids: Iterable[int], batch_size: int = 32) -> Dict:
    """Pseudo-perplexity of a masked LM over packed lines `inputs` (a TextPacker's arrays):
    one copy of a line per scored piece, that piece replaced by `mask_id` and named in
    masked_lm_positions; `mlm` returns {"mlm_logits": [B, 1, V], ...}."""
    pairs = masked_positions(inputs, special_ids)
    nll = 0.0
    for start in range(0, len(pairs), batch_size):
        rows, positions = map(np.array, zip(*pairs[start:start + batch_size]))
        batch = {k: v[rows] for k, v in inputs.items()}
        targets = batch["token_ids"][np.arange(len(rows)), positions].copy()
        batch["token_ids"][np.arange(len(rows)), positions] = mask_id
        batch["masked_lm_positions"] = positions[:, None].astype(np.int32)
        logits = run_model(mlm, batch)["mlm_logits"]  # the inputs it takes, inference mode
        nll -= float(_log_probs_of(logits[:, 0], targets).sum())
    lines = len({row for row, _ in pairs})
    return _summary(nll, len(pairs), lines, "a masked LM (one piece besides the specials)")


def score_model(path: str, sentences: Sequence[str], max_seq_length: int) -> Dict:
    """What `garden.analyze perplexity` reports for --model=PATH: its causal perplexity when it
    opens as a causal LM (run.lm()), else its pseudo-perplexity as a masked LM
    (run.masked_lm()), each line cut to `max_seq_length` pieces; ValueError naming the model
    when it is neither, and why."""
    try:
        run = runs.open(path, who="garden.analyze")
        try:
            lm, mlm = run.lm(), None
        except runs.RunError as not_causal:
            try:
                lm, mlm = None, run.masked_lm()
            except runs.RunError as not_masked:
                raise runs.RunError(f"{path} is neither a causal LM ({not_causal}) nor a "
                                    f"masked LM ({not_masked})") from None
    except runs.RunError as e:
        raise ValueError(f"--model={e}") from None
    print(f"[garden.analyze] perplexity: {run.description}; {len(sentences)} lines", flush=True)
    if lm is not None:
        rows = [ids[:max_seq_length] for ids in run.text.tokenizer().tokenize(list(sentences))]
        return {"measure": "perplexity (causal)", "max_pieces": max_seq_length,
                **causal_perplexity(lm, rows)}
    packer = run.packer(max_seq_length)
    mask_id = run.text.tokenizer().vocab.special("mask", "pseudo-perplexity")
    specials = {packer.cls_id, packer.sep_id, packer.pad_id} - {None}
    return {"measure": "pseudo-perplexity (masked LM)", "max_seq_length": max_seq_length,
            **pseudo_perplexity(mlm, packer.encode_numpy(list(sentences)), mask_id, specials)}


def fill_mask(mlm, lines: Sequence[Sequence[int]], mask_id: int, cls_id: int, sep_id: int,
              tokens: Sequence[str], top_k: int = 5) -> List[List[List[Dict]]]:
    """For each line (its piece ids, mask_id where a piece is asked for), one list per mask of
    the top_k {"token", "id", "probability"}, most probable first. A line is packed as
    [cls] pieces [sep] (segment 0), which the BERT and RoBERTa layouts share."""
    answers = []
    for line in lines:
        ids = np.array([[cls_id, *line, sep_id]], np.int32)
        positions = np.nonzero(ids[0] == mask_id)[0].astype(np.int32)
        if not len(positions):
            answers.append([])
            continue
        inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids),
                  "segment_ids": np.zeros_like(ids), "masked_lm_positions": positions[None]}
        logits = run_model(mlm, inputs)["mlm_logits"][0]
        probs = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1).numpy()
        answers.append([[{"token": tokens[i], "id": int(i), "probability": float(row[i])}
                         for i in np.argsort(-row, kind="stable")[:top_k]] for row in probs])
    return answers


def fill_mask_model(path: str, sentences: Sequence[str], max_seq_length: int,
                    top_k: int) -> Dict:
    """What `garden.analyze fill_mask` reports for --model=PATH: each line's masks filled (the
    text around a mask token tokenized on its own, so any tokenizer keeps the mask whole);
    ValueError naming the model when it has no masked-LM head, or a line without a mask."""
    if top_k < 1:
        raise ValueError(f"--top_k={top_k}: give at least 1")
    try:
        run = runs.open(path, who="garden.analyze")
        mlm = run.masked_lm()
    except runs.RunError as e:
        raise ValueError(f"--model={e}") from None
    tokenizer = run.text.tokenizer()
    vocab, packer = tokenizer.vocab, run.packer(max_seq_length)
    mask_id = vocab.special("mask", "fill_mask")
    mask = vocab.tokens[mask_id]
    lines = []
    for number, sentence in enumerate(sentences, 1):
        if mask not in sentence:
            raise ValueError(f"--input line {number} holds no {mask}: {sentence[:80]!r}")
        parts = tokenizer.tokenize([part.strip() for part in sentence.split(mask)])
        ids = [i for k, part in enumerate(parts) for i in ([mask_id] if k else []) + part]
        lines.append(ids[:max_seq_length - 2])
    print(f"[garden.analyze] fill_mask: {run.description}; {len(lines)} lines", flush=True)
    answers = fill_mask(mlm, lines, mask_id, packer.cls_id, packer.sep_id, vocab.tokens, top_k)
    return {"mask_token": mask, "top_k": top_k,
            "lines": [{"text": t, "masks": a} for t, a in zip(sentences, answers)]}
