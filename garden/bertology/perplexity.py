"""How well a language model predicts a text: causal perplexity, ELMo's biLM perplexities and
masked-LM pseudo-perplexity.

causal_perplexity: a decoder-only GenerativeLM (GPT, GPT-2, GPT-3-style) or ULMFiT's AWD-LSTM
    LM (its tied softmax) on each line's pieces (no special tokens): every piece after the
    first is scored given the pieces before it, and perplexity = exp(total negative
    log-likelihood / pieces scored), over the whole file (the quantity Hugging Face's
    `model(ids, labels=ids).loss` averages per line).
bilm_perplexity: ELMo's biLM (Peters et al. 2018, section 3.1) on the same pieces: the
    forward LM scores every piece after a line's first from its top layer at the piece
    before, the backward LM every piece before the last from its top layer at the piece
    after, both through the one shared softmax, with the pretraining loss's own code
    (garden.tasks.pretraining.elmo.bilm_metrics); each direction's perplexity, and the biLM's
    = exp(the mean of the two directions' nats per piece): the average of their
    log-perplexities. Both directions score n - 1 pieces of a line of n.
pseudo_perplexity: a masked LM (a pretrainer with an `mlm_logits` output at
    `masked_lm_positions`), Salazar et al. (2020), "Masked Language Model Scoring": each piece
    of a line, one at a time, is replaced by the mask token and scored from the rest of the
    line; PPPL = exp(-sum of those log-probabilities / pieces scored). The layout's special
    tokens ([CLS], [SEP], <s>, </s>) are inputs, never scored. It costs one forward per piece.

All are in nats per piece of the model's own tokenizer: figures of models with different
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
    """Perplexity of a decoder-only GenerativeLM, or of any model taking token_ids and
    padding_mask whose "logits" at t score piece t + 1 (ULMFiT's AwdLstmLM), over `rows` (each
    a line's piece ids, at most the model's positions long); rows of one piece give nothing to
    score and are skipped."""
    if getattr(lm, "is_encoder_decoder", False):
        raise ValueError(f"{type(lm).__name__} is an encoder-decoder model: a text file gives "
                         f"it no source and target, so its perplexity is not defined here")
    rows = [list(r) for r in rows if len(r) >= 2]
    nll, count = 0.0, 0
    for start in range(0, len(rows), batch_size):
        # right-padded: a causal model never sees the pads
        ids, mask = _right_padded(rows[start:start + batch_size])
        logits = lm({"token_ids": ids, "padding_mask": mask}, training=False)["logits"]
        scored = _log_probs_of(logits[:, :-1], ids[:, 1:]) * mask[:, 1:]
        nll -= float(scored.sum())
        count += int(mask[:, 1:].sum())
    return _summary(nll, count, len(rows), "a causal LM (two pieces)")


def _right_padded(batch: Sequence[Sequence[int]]):
    """(ids, padding_mask) int32 [B, longest] of `batch`'s rows, pads (0) on the right."""
    width = max(map(len, batch))
    ids = np.zeros((len(batch), width), np.int32)
    mask = np.zeros_like(ids)
    for i, row in enumerate(batch):
        ids[i, :len(row)], mask[i, :len(row)] = row, 1
    return ids, mask


def bilm_perplexity(bilm, char_table: np.ndarray, rows: Sequence[Sequence[int]],
                    batch_size: int = 8) -> Dict:
    """Perplexities of ELMo's biLM (an ElmoBiLM, char_ids in) over `rows` (each a line's piece
    ids; char_table [vocab size, max_characters] gives each piece's characters, as
    make_pretrain --characters wrote them for training): {"forward": ..., "backward": ...}
    and, at the top level, the mean of the two in log space; rows of one piece are skipped."""
    from garden.tasks.pretraining.elmo import bilm_metrics

    rows = [list(r) for r in rows if len(r) >= 2]
    nll = {"forward": 0.0, "backward": 0.0}
    count = 0
    for start in range(0, len(rows), batch_size):
        ids, mask = _right_padded(rows[start:start + batch_size])
        # The backward LSTMs read each row from its last real piece, so right pads are unseen.
        outputs = bilm({"char_ids": char_table[ids], "padding_mask": mask}, training=False)
        # The training loss with denominator 1: each direction's summed NLL over the pairs
        # where a piece and its neighbour are both real.
        summed = bilm_metrics(outputs, ids, mask, denominator=1.0)
        for direction in nll:
            nll[direction] += float(summed[f"{direction}_loss"])
        count += int((mask[:, 1:] * mask[:, :-1]).sum())
    what = "a biLM (two pieces)"
    directions = {d: _summary(v, count, len(rows), what) for d, v in nll.items()}
    return {**_summary((nll["forward"] + nll["backward"]) / 2, count, len(rows), what),
            **directions}


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


# Why XLNet's pretrainer is not scored, in the refusal that names it.
PERMUTATION_LM = ("XLNet's permutation LM predicts each piece under a sampled factorization "
                  "order, so a text has no one left-to-right likelihood to take a perplexity of")


def recurrent_lm(run):
    """The run's ELMo biLM (ElmoBiLM) or ULMFiT AWD-LSTM LM (AwdLstmLM): the task model of a
    garden.train run of their pretraining; RunError saying why not otherwise."""
    from garden.models.elmo.bilm import ElmoBiLM
    from garden.models.ulmfit.lm import AwdLstmLM

    if run.kind != runs.MODEL_DIR:  # a converted ELMo release ships no softmax
        raise runs.RunError("ELMo's biLM and ULMFiT's LM are read from a garden.train run "
                            "of their pretraining")
    model = run.task_model()
    if isinstance(model, (ElmoBiLM, AwdLstmLM)):
        return model
    raise runs.RunError(f"its model ({type(model).__name__}) is not ELMo's biLM (ElmoBiLM) or "
                        f"ULMFiT's LM (AwdLstmLM)")


def _open_scored(path: str):
    """(run, "causal" | "bilm" | "masked", its model) of --model=PATH: the first of run.lm(),
    recurrent_lm(run), run.masked_lm() that it has; ValueError in one line saying why none."""
    try:
        run = runs.open(path, who="garden.analyze")
        reasons = []
        for kind, opener in (("causal", run.lm), ("recurrent", lambda: recurrent_lm(run)),
                             ("masked", run.masked_lm)):
            try:
                model = opener()
            except runs.RunError as e:
                reasons.append(str(e))
                continue
            if kind == "recurrent":
                from garden.models.elmo.bilm import ElmoBiLM

                kind = "bilm" if isinstance(model, ElmoBiLM) else "causal"
            return run, kind, model
        task_model = getattr(run, "objects", {}).get("model")  # a garden.train run's, if built
        if run.family == "xlnet" or type(task_model).__name__ == "XLNetPretrainer":
            raise runs.RunError(f"{path} is an XLNet model: {PERMUTATION_LM}")
        raise runs.RunError(f"{path} is neither a causal LM ({reasons[0]}), ELMo's or "
                            f"ULMFiT's LM ({reasons[1]}) nor a masked LM ({reasons[2]})")
    except runs.RunError as e:
        raise ValueError(f"--model={e}") from None


def score_model(path: str, sentences: Sequence[str], max_seq_length: int) -> Dict:
    """What `garden.analyze perplexity` reports for --model=PATH: its causal perplexity when it
    opens as a causal LM (run.lm()) or is ULMFiT's LM, its forward, backward and mean
    perplexities when it is ELMo's biLM (recurrent_lm), else its pseudo-perplexity as a masked
    LM (run.masked_lm()), each line cut to `max_seq_length` pieces; ValueError naming the
    model when it is none of them, and why."""
    run, kind, model = _open_scored(path)
    print(f"[garden.analyze] perplexity: {run.description}; {len(sentences)} lines", flush=True)
    if kind in ("causal", "bilm"):
        tokenizer = run.text.tokenizer()
        rows = [ids[:max_seq_length] for ids in tokenizer.tokenize(list(sentences))]
        if kind == "causal":
            return {"measure": "perplexity (causal)", "max_pieces": max_seq_length,
                    **causal_perplexity(model, rows)}
        from text.char_ids import char_table

        table = char_table(tokenizer.vocab, model.backbone.max_characters)
        return {"measure": "perplexity (biLM: forward, backward and their mean in log space)",
                "max_pieces": max_seq_length, **bilm_perplexity(model, table, rows)}
    packer = run.packer(max_seq_length)
    mask_id = run.text.tokenizer().vocab.special("mask", "pseudo-perplexity")
    specials = {packer.cls_id, packer.sep_id, packer.pad_id} - {None}
    return {"measure": "pseudo-perplexity (masked LM)", "max_seq_length": max_seq_length,
            **pseudo_perplexity(model, packer.encode_numpy(list(sentences)), mask_id, specials)}


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
