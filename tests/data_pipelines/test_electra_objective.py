"""docs/objectives.md section 6 (ELECTRA data): unmasked sequences as build_pretraining_dataset.py.

Tolerances are binomial: |observed - p| <= 5 * sqrt(p (1 - p) / n).
"""


import numpy as np
import pytest

from text import features
from data_pipelines.objectives import electra
from objective_testing import objective_parser, random_documents, run_documents, within
from text import vocab as text_vocab

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
FIRST_WORD = 5


def _vocab(size=200):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + ["w%d" % i for i in range(FIRST_WORD, size)]
    return text_vocab.make_vocab(tokens, {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                                    "mask": "[MASK]"}, word_start=lambda t: not t.startswith("##"), name="test")


def _run(segment_lists, opts, seed=1):
    return run_documents(electra.OBJECTIVE, segment_lists, opts, _vocab(), seed)


def _segments(inst):
    ids, seg = inst["input_ids"], inst["segment_ids"]
    a = [t for t, s in zip(ids, seg) if s == 0][1:-1]
    b = [t for t, s in zip(ids, seg) if s == 1][:-1]
    return a, b


def test_exact_two_segments_truncation_and_document_tail():
    # No random draws matter: single_segment_prob 0, fixed target 12, and the sentence lengths
    # decide every split without the 50% coin: A's target is (12 - 3) // 2 = 4.
    opts = electra.ElectraOptions(max_seq_length=12, single_segment_prob=0.0, random_length_prob=0.0)
    doc = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16, 17], [18, 19]]
    instances, stats = _run([doc], opts)
    assert [f for _, f in instances] == [
        # 4 + 3 + 6 = 13 >= 12 closes the chunk; A = the first sentence (reaches its target),
        # B = the rest, truncated to 12 - 4 - 3 = 5 pieces (the end goes).
        {"input_ids": [CLS, 5, 6, 7, 8, SEP, 9, 10, 11, 12, 13, SEP], "input_mask": [1] * 12,
         "segment_ids": [0] * 6 + [1] * 6},
        # The document's remainder is an example of its own: one sentence, one segment.
        {"input_ids": [CLS, 18, 19, SEP], "input_mask": [1] * 4, "segment_ids": [0] * 4},
    ]
    assert [k for k, _ in instances] == ["doc0000|0", "doc0000|1"]
    assert stats["truncated_tokens"] == 4 and stats["single_segment"] == 1 and "single_segment_draws" not in stats
    assert stats["real_tokens"] == 16


def test_exact_single_segment_draw():
    opts = electra.ElectraOptions(max_seq_length=8, single_segment_prob=1.0, random_length_prob=0.0)
    instances, stats = _run([[[5, 6, 7], [8, 9], [10, 11, 12]]], opts)
    # Everything goes to A, truncated to 8 - 2 pieces.
    assert [f["input_ids"] for _, f in instances] == [[CLS, 5, 6, 7, 8, 9, 10, SEP]]
    assert stats["single_segment_draws"] == 1 and stats["truncated_tokens"] == 2


@pytest.fixture(scope="module")
def default_run():
    rng = np.random.default_rng(0)
    # Short sentences (3-8 pieces) in long documents: with max_seq_length 64 a chunk holds ~12
    # sentences, so a two-segment draw always leaves B non-empty (A stops near 30 pieces).
    docs = random_documents(rng, FIRST_WORD, 200, 300, sentences=(40, 100), pieces=(3, 9))
    opts = electra.ElectraOptions(max_seq_length=64)
    instances, stats = _run(docs, opts)
    return docs, opts, instances, stats


def test_layout_and_serialization(default_run):
    docs, opts, instances, stats = default_run
    spec = features.electra_pretrain_spec(64)
    for _, f in instances:
        features.serialize_example(spec, f)
        ids, seg = f["input_ids"], f["segment_ids"]
        assert len(ids) <= 64 and ids[0] == CLS and ids[-1] == SEP
        a, b = _segments(f)
        assert ids == [CLS] + a + [SEP] + (b + [SEP] if b else [])
        assert seg == sorted(seg) and len(a) >= 1
        assert CLS not in a + b and SEP not in a + b
    assert len({k for k, _ in instances}) == len(instances)
    # Pieces are written in order; only truncation removes some (counted).
    total = sum(len(s) for d in docs for s in d)
    written = sum(len(f["input_ids"]) - 2 - (1 if any(f["segment_ids"]) else 0) for _, f in instances)
    assert written + stats["truncated_tokens"] == total
    assert stats["real_tokens"] == sum(len(f["input_ids"]) for _, f in instances)


def test_single_segment_fraction_is_ten_percent(default_run):
    _, _, instances, _ = default_run
    # A document's last example may be a one-sentence remainder: count only the others.
    last = {}
    for key, _ in instances:
        doc, index = key.split("|")
        last[doc] = max(last.get(doc, -1), int(index))
    inner = [f for key, f in instances if int(key.split("|")[1]) < last[key.split("|")[0]]]
    single = sum(not any(f["segment_ids"]) for f in inner)
    # ~1500 inner examples -> 10% +- 3.9% at 5 sigma.
    assert len(inner) > 1200
    assert within(single, len(inner), 0.1), single / len(inner)


def test_first_segment_targets_half_the_length(default_run):
    _, _, instances, _ = default_run
    two = [_segments(f) for _, f in instances if any(f["segment_ids"])]
    # A's target is (64 - 3) // 2 = 30 (or (t - 3) // 2 for a random target t): a sentence joins A
    # while A stays under 30, plus at most one more on the coin, so |A| < 30 + 8.
    assert all(len(a) < 30 + 8 for a, _ in two)
    full_target = [a for a, b in two if len(a) + len(b) >= 64 - 3]
    assert 24 <= np.mean([len(a) for a in full_target]) <= 34


def test_random_length_targets(default_run):
    _, _, instances, stats = default_run
    n = stats["random_length_targets"]
    assert within(n, len(instances), 0.05), n / len(instances)
    # A random target in [5, 64] gives shorter examples: the short ones are about that many.
    inner_lengths = np.array([len(f["input_ids"]) for _, f in instances])
    assert (inner_lengths < 40).sum() >= 0.5 * n


def test_bad_input_gives_instances_or_counted_skips():
    opts = electra.ElectraOptions(max_seq_length=8, single_segment_prob=0.0, random_length_prob=0.0)
    assert _run([], opts) == ([], {})
    instances, stats = _run([[], [[5, 6]], [[7] * 20]], opts)
    assert stats["dropped/empty_document"] == 1
    # A one-sentence document: one example; a sentence longer than the sequence: truncated.
    assert [f["input_ids"] for _, f in instances] == [[CLS, 5, 6, SEP], [CLS] + [7] * 6 + [SEP]]
    assert stats["truncated_tokens"] == 14


def test_flags_and_defaults():
    parser = objective_parser(electra.OBJECTIVE, 999)
    assert electra.OBJECTIVE.make_options(parser.parse_args([])) == electra.ElectraOptions()
    assert electra.ElectraOptions() == electra.ElectraOptions(128, 0.1, 0.05)
    assert electra.OBJECTIVE.defaults["dupe_factor"] == 1
    with pytest.raises(ValueError, match="max_seq_length must be >= 5, got 4"):
        electra.ElectraOptions(max_seq_length=4)
    with pytest.raises(ValueError, match=r"single_segment_prob must be in \[0, 1\], got 1.5"):
        electra.ElectraOptions(single_segment_prob=1.5)
