"""RoBERTa dynamic masking (docs/objectives.md section 3): the numpy function and the tf.data map that
runs it (text/dynamic.py).

Statistical tolerances: 5 binomial standard errors, 5 * sqrt(p (1 - p) / n); for the number of
masks, int(x + U[0,1)) has mean x and variance <= 1/4, so a sum over R rows is within
5 * sqrt(R / 4) of its expectation.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from text import dynamic, features
from data_pipelines.objectives import base, roberta
from objective_testing import within
from text import vocab as text_vocab

BOS, PAD, EOS, UNK, MASK, EOD = 0, 1, 2, 3, 4, 5
SPECIALS = (BOS, PAD, EOS, UNK, MASK, EOD)
VOCAB = 60
KW = dict(vocab_size=VOCAB, mask_id=MASK, special_ids=SPECIALS)


def _blocks(rng, rows, length=128):
    """RoBERTa-like blocks: <s> pieces with a </s> here and there, random real lengths, zero padding."""
    ids = np.zeros((rows, length), np.int64)
    mask = np.zeros((rows, length), np.int64)
    for r in range(rows):
        n = int(rng.integers(length // 4, length + 1)) if r % 2 else length
        row = rng.integers(6, VOCAB, size=n)
        row[rng.random(n) < 0.05] = EOS
        row[0] = BOS
        ids[r, :n] = row
        mask[r, :n] = 1
    return ids, mask


def _tally(ids, mask, out):
    """(rows, real tokens, masked, [MASK], kept, random) of a batch result."""
    real = int(mask.sum())
    masked = mask_tok = kept = rand = 0
    for r in range(len(ids)):
        w = out["masked_lm_weights"][r] > 0
        pos = out["masked_lm_positions"][r][w]
        new = out["input_ids"][r][pos]
        old = ids[r][pos]
        masked += len(pos)
        mask_tok += int((new == MASK).sum())
        kept += int((new == old).sum())
        rand += int(((new != MASK) & (new != old)).sum())
    return len(ids), real, masked, mask_tok, kept, rand


def test_default_slots():
    # 15% of 512 -> 76.8 on average: int(76.8 + U) is 76 or 77, so 77 slots; 128 -> 19.2 -> 20.
    assert dynamic.default_max_predictions(512) == 77
    assert dynamic.default_max_predictions(128) == 20
    ids = np.full((400, 512), 7)
    out = dynamic.roberta_mask(ids, np.ones_like(ids), np.random.default_rng(0), **KW)
    counts = out["masked_lm_weights"].sum(axis=1)
    assert out["masked_lm_positions"].shape == (400, 77)
    assert set(counts) == {76.0, 77.0}
    assert within(int((counts == 77).sum()), 400, 0.8)  # P(int(76.8 + U) = 77) = 0.8


def test_exact_with_rate_one():
    ids = np.array([BOS, 10, 11, EOS, 12, 13, UNK, 14, EOS, 0, 0, 0])
    mask = np.array([1] * 9 + [0] * 3)
    out = dynamic.roberta_mask(ids, mask, np.random.default_rng(0), mask_prob=1.0, mask_token_prob=1.0,
                               random_token_prob=0.0, max_predictions_per_seq=8, **KW)
    # Every real non-special position (5 of them), sorted; specials and padding untouched.
    assert out["masked_lm_positions"].tolist() == [1, 2, 4, 5, 7, 0, 0, 0]
    assert out["masked_lm_ids"].tolist() == [10, 11, 12, 13, 14, 0, 0, 0]
    assert out["masked_lm_weights"].tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    assert out["input_ids"].tolist() == [BOS, MASK, MASK, EOS, MASK, MASK, UNK, MASK, EOS, 0, 0, 0]
    # Random replacement only: every chosen token becomes a non-special id.
    many = np.tile(ids, (200, 1))
    out = dynamic.roberta_mask(many, np.tile(mask, (200, 1)), np.random.default_rng(1), mask_prob=1.0,
                               mask_token_prob=0.0, random_token_prob=1.0, max_predictions_per_seq=8, **KW)
    replaced = out["input_ids"][:, [1, 2, 4, 5, 7]]
    assert not np.isin(replaced, SPECIALS).any()
    # Uniform over the 54 non-special ids: 1000 draws, every id seen (P(miss one) ~ 54 e^-18.5).
    assert set(replaced.ravel()) == set(range(6, VOCAB))
    # A cap below the candidates keeps at most that many.
    out = dynamic.roberta_mask(ids, mask, np.random.default_rng(0), mask_prob=1.0, max_predictions_per_seq=3, **KW)
    assert out["masked_lm_weights"].sum() == 3


def test_mask_statistics():
    rng = np.random.default_rng(0)
    ids, mask = _blocks(rng, 600)
    out = dynamic.roberta_mask(ids, mask, np.random.default_rng(1), **KW)
    rows, real, masked, mask_tok, kept, rand = _tally(ids, mask, out)
    # num_mask = int(0.15 n + U): 15% of the real tokens (<s>, </s> included in n), ~10k masks.
    assert abs(masked - 0.15 * real) <= 5 * math.sqrt(rows / 4)
    assert within(mask_tok, masked, 0.8) and within(kept, masked, 0.1 + 0.1 / (VOCAB - 6))
    assert within(rand, masked, 0.1 * (1 - 1 / (VOCAB - 6)))  # a random draw may hit the original
    for r in range(rows):
        w = out["masked_lm_weights"][r] > 0
        pos = out["masked_lm_positions"][r][w]
        assert list(pos) == sorted(set(pos.tolist()))
        assert mask[r][pos].all() and not np.isin(ids[r][pos], SPECIALS).any()
        assert (out["masked_lm_ids"][r][w] == ids[r][pos]).all()
        untouched = np.ones(ids.shape[1], bool)
        untouched[pos] = False
        assert (out["input_ids"][r][untouched] == ids[r][untouched]).all()
    # Positions uniform among candidates: full rows, first vs second half of the block.
    full = out["masked_lm_positions"][::2][out["masked_lm_weights"][::2] > 0]
    assert within(int((full < 64).sum()), len(full), 63 / 127, sigmas=6)  # position 0 (<s>) never


def _dataset(ids, mask):
    return tf.data.Dataset.from_tensor_slices({"input_ids": ids, "input_mask": mask, "keep": np.arange(len(ids))})


def test_tf_data_runs_the_same_function_keyed_by_seed_epoch_index():
    ids, mask = _blocks(np.random.default_rng(2), 24, length=32)
    ds = dynamic.dynamic_masking(_dataset(ids, mask), seed=7, num_epochs=2, max_predictions_per_seq=6, **KW)
    assert ds.element_spec["masked_lm_positions"].shape == (6,)
    assert ds.element_spec["input_ids"].shape == (32,)
    got = list(ds.as_numpy_iterator())
    assert len(got) == 48
    for n, element in enumerate(got):
        epoch, index = divmod(n, 24)
        assert element["keep"] == index  # other features pass through, order kept
        expected = dynamic.roberta_mask(ids[index], mask[index], dynamic.element_rng(7, epoch, index),
                                        max_predictions_per_seq=6, **KW)
        for name, value in expected.items():
            np.testing.assert_array_equal(element[name], value, err_msg=f"{name} of epoch {epoch} element {index}")
    # Two epochs: fresh masks (32 tokens, ~5 masks each: a repeat of all 24 is impossible in practice).
    same = sum(np.array_equal(got[i]["masked_lm_positions"], got[i + 24]["masked_lm_positions"]) for i in range(24))
    assert same <= 3
    # The same (seed, epoch, index) gives the same mask: a second pass over the pipeline.
    again = list(ds.as_numpy_iterator())
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(got, again))
    other_seed = list(dynamic.dynamic_masking(_dataset(ids, mask), seed=8, max_predictions_per_seq=6, **KW)
                      .as_numpy_iterator())
    assert sum(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(got, other_seed)) <= 3


def test_tf_data_and_offline_paths_have_the_same_distribution():
    ids, mask = _blocks(np.random.default_rng(3), 300)
    # tf.data path: batches of 10 (index = batch index); offline path: one direct call.
    ds = dynamic.dynamic_masking(_dataset(ids, mask).batch(10, drop_remainder=True), seed=11, **KW)
    assert ds.element_spec["masked_lm_weights"].shape == (10, 20)  # 15% of 128 -> 20 slots
    batches = list(ds.as_numpy_iterator())
    piped = {k: np.concatenate([b[k] for b in batches]) for k in ("input_ids", "masked_lm_positions",
                                                                  "masked_lm_weights")}
    offline = dynamic.roberta_mask(ids, mask, np.random.default_rng(99), **KW)
    a = _tally(ids, mask, piped)
    b = _tally(ids, mask, offline)
    # Each path on its own matches the recipe ...
    for rows, real, masked, mask_tok, kept, rand in (a, b):
        assert abs(masked - 0.15 * real) <= 5 * math.sqrt(rows / 4)
        assert within(mask_tok, masked, 0.8) and within(rand, masked, 0.1 * (1 - 1 / 54))
    # ... and the two agree with each other (difference of two proportions, 5 sigma).
    for i in (3, 4, 5):
        p = (a[i] + b[i]) / (a[2] + b[2])
        assert abs(a[i] / a[2] - b[i] / b[2]) <= 5 * math.sqrt(p * (1 - p) * (1 / a[2] + 1 / b[2]))


def test_trainer_batch_masker_and_parsed_roberta_records():
    # Blocks written by the roberta objective, parsed as the trainer parses them, then masked.
    tokens = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "<|endoftext|>"] + ["\u0120w%d" % i for i in range(6, VOCAB)]
    vocab = text_vocab.make_vocab(tokens, {"bos": "<s>", "cls": "<s>", "pad": "<pad>", "eos": "</s>", "sep": "</s>",
                                     "unk": "<unk>", "mask": "<mask>", "eod": "<|endoftext|>"},
                            word_start=lambda t: t.startswith("\u0120"))
    rng = np.random.default_rng(4)
    docs = [base.Doc("d%d" % k, [[int(t) for t in rng.integers(6, VOCAB, size=int(rng.integers(2, 20)))]
                                 for _ in range(5)]) for k in range(20)]
    opts = roberta.RobertaOptions(max_seq_length=64)
    spec = roberta.OBJECTIVE.feature_spec(opts)
    records = [features.serialize_example(spec, f)
               for _, f in roberta.OBJECTIVE.create_instances(docs, base.PoolContext(1, 0, vocab, opts))]
    ds = (tf.data.Dataset.from_tensor_slices(records).batch(4, drop_remainder=True)
          .map(lambda x: tf.io.parse_example(x, features.tf_parsing_spec(spec))))
    masker = dynamic.make_batch_masker(vocab_size=vocab.size, mask_id=vocab.special("mask"),
                                       special_ids=vocab.special_ids)
    out = list(ds.enumerate().map(lambda i, b: masker(b, 5, i)).as_numpy_iterator())
    assert out and out[0]["masked_lm_positions"].shape == (4, 10)  # int(0.15 * 64) + 1
    for i, (batch, parsed) in enumerate(zip(out, ds.as_numpy_iterator())):
        expected = dynamic.roberta_mask(parsed["input_ids"], parsed["input_mask"], dynamic.element_rng(5, 0, i),
                                        vocab_size=vocab.size, mask_id=MASK, special_ids=vocab.special_ids)
        np.testing.assert_array_equal(batch["input_ids"], expected["input_ids"])
        np.testing.assert_array_equal(batch["input_mask"], parsed["input_mask"])
        # Padding (id 0 = <s> in a BPE vocabulary, input_mask 0) is never a candidate.
        for r in range(4):
            w = batch["masked_lm_weights"][r] > 0
            assert parsed["input_mask"][r][batch["masked_lm_positions"][r][w]].all()
            assert (batch["masked_lm_positions"][r][w] > 0).all()


def test_rejects_bad_shapes_and_rates():
    with pytest.raises(ValueError, match=r"input_ids \(2, 3, 4\) and input_mask \(2, 3, 4\) must be the same \[L\] or \[B, L\]"):
        dynamic.roberta_mask(np.zeros((2, 3, 4)), np.zeros((2, 3, 4)), np.random.default_rng(0), **KW)
    with pytest.raises(ValueError, match=r"mask_token_prob 0.95 \+ random_token_prob 0.1 must be <= 1"):
        dynamic.roberta_mask(np.zeros(4), np.zeros(4), np.random.default_rng(0), mask_token_prob=0.95, **KW)
