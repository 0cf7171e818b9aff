"""Dynamic masking at training time: tf.data's side of RoBERTa's objective (docs/objectives.md 3).

Liu et al. 2019 (section 4.1): BERT's masks are drawn once offline; RoBERTa draws "a new
masking pattern every time we feed a sequence to the model". make_pretrain --objective=roberta
therefore writes UNMASKED blocks, and the input pipeline masks them here.

ONE implementation: ``roberta_mask`` is a plain numpy function of token ids and an explicit
``numpy.random.Generator``; the tf.data map (``make_batch_masker`` / ``dynamic_masking``) runs
that same function through ``tf.numpy_function``, with the Generator ``element_rng(seed,
epoch, index)``. So the unit tests of ``roberta_mask`` test what training uses, and the same
(seed, epoch, index) always gives the same mask (a resumed run re-draws the masks an
uninterrupted one would), while another epoch or index gives a fresh one.

The masking, per sequence (fairseq's ``MaskTokensDataset``, as in the recipe):
* n = the sequence's real tokens (``input_mask``; <s> and </s> included, as fairseq's sz);
* num_mask = int(mask_prob * n + U[0, 1)) (randomised rounding: 15% of 512 -> 76 or 77,
  76.8 on average), capped by the number of candidates and by ``max_predictions_per_seq``;
* positions uniform without replacement among the candidates: real tokens whose id is not
  special (<s>, </s>, <pad>, <unk>, <mask>, ...: ``special_ids``) - fairseq may also pick
  <s>/</s>, we never do;
* each chosen position independently: 80% -> <mask>, 10% kept, 10% -> a token drawn uniformly
  among the non-special ids (fairseq gives special symbols zero weight too);
* positions sorted; outputs padded to ``max_predictions_per_seq`` slots (position 0, id 0,
  weight 0.0). Default slots: ``default_max_predictions(L) = int(mask_prob * L) + 1`` (512 ->
  77, 128 -> 20): the largest num_mask a full sequence can draw, so the cap never bites by
  default.

Inputs to the tf.data map: a dict with ``input_ids`` and ``input_mask`` of static length L,
either one sequence ([L]) or a batch ([B, L]); other features pass through. Output: the dict
with ``input_ids`` masked and ``masked_lm_positions`` (int64), ``masked_lm_ids`` (int64, the
original ids), ``masked_lm_weights`` (float32) of shape [P] or [B, P] added. A batch is
masked in one vectorised call from the one Generator of its (seed, epoch, index) key, index
being the batch's index (256 x 512 tokens take well under 0.1 s on one CPU core).
"""

from __future__ import annotations

from typing import Dict, Iterable, Optional

import numpy as np

MASK_PROB = 0.15


def default_max_predictions(max_seq_length: int, mask_prob: float = MASK_PROB) -> int:
    """int(mask_prob * L) + 1: num_mask = int(mask_prob * n + U[0,1)) <= this for n <= L."""
    return int(mask_prob * max_seq_length) + 1


def element_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The Generator of one element (or batch) of one epoch: a function of the key only."""
    return np.random.default_rng([int(seed) % 2 ** 64, int(epoch) % 2 ** 64, int(index) % 2 ** 64])


def _non_special(draws: np.ndarray, specials: np.ndarray) -> np.ndarray:
    """Maps draws in [0, V - len(specials)) onto the ids not in ``specials`` (sorted, unique),
    in order: a uniform draw becomes a uniform non-special id."""
    out = draws.copy()
    for s in specials:
        out[out >= s] += 1
    return out


def roberta_mask(input_ids, input_mask, rng: np.random.Generator, *, vocab_size: int, mask_id: int,
                 special_ids: Iterable[int], mask_prob: float = MASK_PROB,
                 max_predictions_per_seq: Optional[int] = None,
                 mask_token_prob: float = 0.8, random_token_prob: float = 0.1) -> Dict[str, np.ndarray]:
    """Dynamic MLM masking of one sequence ([L]) or a batch ([B, L]); see the module docstring.

    Returns a dict: input_ids (masked; same shape and dtype), masked_lm_positions and
    masked_lm_ids (int64, [P] or [B, P]), masked_lm_weights (float32).
    """
    if not (0.0 <= mask_token_prob and 0.0 <= random_token_prob and mask_token_prob + random_token_prob <= 1.0):
        raise ValueError(f"mask_token_prob {mask_token_prob} + random_token_prob {random_token_prob} must be <= 1")
    ids = np.asarray(input_ids)
    real = np.asarray(input_mask).astype(bool)
    if ids.shape != real.shape or ids.ndim not in (1, 2):
        raise ValueError(f"input_ids {ids.shape} and input_mask {real.shape} must be the same [L] or [B, L]")
    single = ids.ndim == 1
    ids2, real2 = (ids[None], real[None]) if single else (ids, real)
    slots = max_predictions_per_seq or default_max_predictions(ids.shape[-1], mask_prob)
    specials = np.unique(np.fromiter((int(s) for s in special_ids), dtype=np.int64))
    specials = specials[(specials >= 0) & (specials < vocab_size)]
    num_regular = vocab_size - len(specials)
    batch, length = ids2.shape
    candidates = real2 & ~np.isin(ids2, specials)
    # Randomised rounding: E[int(x + U)] = x, so exactly 15% of the real tokens on average.
    num = (mask_prob * real2.sum(axis=1) + rng.random(batch)).astype(np.int64)
    num = np.minimum(np.minimum(num, candidates.sum(axis=1)), slots)
    # Uniform without replacement: the candidates in a uniformly random order (random keys,
    # non-candidates last), the first num of each row taken, then sorted.
    keys = rng.random((batch, length))
    keys[~candidates] = np.inf
    k = min(slots, length)
    order = np.argsort(keys, axis=1, kind="stable")[:, :k]
    chosen = np.sort(np.where(np.arange(k)[None, :] < num[:, None], order, length), axis=1)
    valid = np.zeros((batch, slots), bool)
    valid[:, :k] = chosen < length
    positions = np.zeros((batch, slots), np.int64)
    positions[:, :k] = np.where(valid[:, :k], chosen, 0)
    labels = np.where(valid, np.take_along_axis(ids2, positions, axis=1), 0).astype(np.int64)
    weights = valid.astype(np.float32)
    # Each chosen position independently: [MASK] / kept / random non-special token.
    u = rng.random((batch, slots))
    to_mask = valid & (u < mask_token_prob)
    # The rest, 1 - mask_token_prob - random_token_prob (10%), keeps its token.
    to_random = valid & (u >= 1.0 - random_token_prob)
    out = ids2.copy()
    rows = np.broadcast_to(np.arange(batch)[:, None], (batch, slots))
    out[rows[to_mask], positions[to_mask]] = mask_id
    if num_regular > 0 and to_random.any():
        draws = rng.integers(0, num_regular, size=int(to_random.sum()))
        out[rows[to_random], positions[to_random]] = _non_special(draws, specials).astype(out.dtype)
    if single:
        out, positions, labels, weights = out[0], positions[0], labels[0], weights[0]
    return {"input_ids": out, "masked_lm_positions": positions, "masked_lm_ids": labels,
            "masked_lm_weights": weights}


def make_batch_masker(*, vocab_size: int, mask_id: int, special_ids: Iterable[int], mask_prob: float = MASK_PROB,
                      max_predictions_per_seq: Optional[int] = None, mask_token_prob: float = 0.8,
                      random_token_prob: float = 0.1):
    """A tf.data map function ``mask(features, seed, index, epoch=0) -> features``: applies
    ``roberta_mask`` with ``element_rng(seed, epoch, index)`` through ``tf.numpy_function``.

    ``features``: dict with input_ids and input_mask of static last dimension L ([L] or [B, L]);
    ``seed``, ``index``, ``epoch``: Python ints or int scalar tensors (the trainer passes the
    batch's index in the whole stream). The outputs have static shapes ([B] may stay None).
    """
    import tensorflow as tf

    special_ids = tuple(int(s) for s in special_ids)

    def mask(features, seed, index, epoch=0):
        ids = features["input_ids"]
        length = ids.shape[-1]
        if length is None:
            raise ValueError("dynamic masking needs a static sequence length (parse with features.tf_parsing_spec)")
        slots = max_predictions_per_seq or default_max_predictions(length, mask_prob)

        def _np(input_ids, input_mask, seed_, epoch_, index_):
            m = roberta_mask(input_ids, input_mask, element_rng(seed_, epoch_, index_), vocab_size=vocab_size,
                             mask_id=mask_id, special_ids=special_ids, mask_prob=mask_prob,
                             max_predictions_per_seq=slots, mask_token_prob=mask_token_prob,
                             random_token_prob=random_token_prob)
            return m["input_ids"], m["masked_lm_positions"], m["masked_lm_ids"], m["masked_lm_weights"]

        key = [tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64), tf.cast(index, tf.int64)]
        masked, positions, labels, weights = tf.numpy_function(
            _np, [ids, features["input_mask"], *key], [ids.dtype, tf.int64, tf.int64, tf.float32], stateful=False)
        masked.set_shape(ids.shape)
        prediction_shape = ids.shape[:-1].concatenate([slots])
        for t in (positions, labels, weights):
            t.set_shape(prediction_shape)
        result = dict(features)
        result.update(input_ids=masked, masked_lm_positions=positions, masked_lm_ids=labels,
                      masked_lm_weights=weights)
        return result

    return mask


def dynamic_masking(dataset, *, seed: int, vocab_size: int, mask_id: int, special_ids: Iterable[int],
                    num_epochs: Optional[int] = 1, mask_prob: float = MASK_PROB,
                    max_predictions_per_seq: Optional[int] = None, num_parallel_calls=None):
    """Repeats ``dataset`` ``num_epochs`` times (None: forever) and masks element i of epoch e
    with ``element_rng(seed, e, i)``: each epoch sees fresh masks, and the same (seed, epoch,
    index) always the same mask. Elements: dicts as ``make_batch_masker`` takes (one sequence
    or a batch). Deterministic order whatever ``num_parallel_calls`` (default AUTOTUNE)."""
    import tensorflow as tf

    mask = make_batch_masker(vocab_size=vocab_size, mask_id=mask_id, special_ids=special_ids, mask_prob=mask_prob,
                             max_predictions_per_seq=max_predictions_per_seq)
    epochs = tf.data.Dataset.range(num_epochs) if num_epochs is not None else tf.data.Dataset.range(2 ** 62)
    keyed = epochs.flat_map(lambda e: dataset.enumerate().map(lambda i, x: (e, i, x)))
    return keyed.map(lambda e, i, x: mask(x, seed, i, e),
                     num_parallel_calls=num_parallel_calls or tf.data.AUTOTUNE, deterministic=True)
