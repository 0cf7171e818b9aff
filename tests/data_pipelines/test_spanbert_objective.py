"""docs/objectives.md section 4 (SpanBERT: geometric span masking + span boundary objective),
checked on the objective's functions and on OBJECTIVE.create_instances as the job calls it.

Tolerances are 5 standard errors of the statistic on the sample at hand.
"""

import math

import numpy as np
import pytest

from text import features
from data_pipelines.objectives import base, spanbert
from objective_testing import objective_parser, within
from text import vocab as text_vocab

CLS, SEP, MASK = 2, 3, 4
FIRST = 5
# Corpus pieces are ids FIRST..CORPUS_END-1; REPLACEMENT ids only ever appear as unigram
# replacements (they have corpus counts but the test documents never use them).
CORPUS_END = 65
REPLACEMENT = (70, 71)


def _vocab(continuation=range(45, 65)):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [(f"##c{i}" if i in continuation else f"w{i}") for i in range(5, 80)]
    return text_vocab.make_vocab(tokens, {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                                    "mask": "[MASK]"}, word_start=lambda t: not t.startswith("##"), name="test-wp")


def _truncated_geometric(p, upper):
    """Mean and variance of P(n) proportional to p (1-p)^(n-1), n = 1..upper."""
    w = [p * (1 - p) ** (n - 1) for n in range(1, upper + 1)]
    z = sum(w)
    mean = sum(n * x for n, x in zip(range(1, upper + 1), w)) / z
    second = sum(n * n * x for n, x in zip(range(1, upper + 1), w)) / z
    return mean, second - mean * mean


def _runs(positions):
    """Maximal runs of consecutive positions, as (first, last)."""
    runs = []
    for p in positions:
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return [tuple(r) for r in runs]


def _docs(rng, num_docs, sentences, words):
    """Sentences of `words` words, each a word-start piece and 0-2 continuation pieces."""
    docs = []
    for k in range(num_docs):
        segs = []
        for _ in range(sentences):
            seg = []
            for _ in range(words):
                seg.append(int(rng.integers(5, 45)))
                seg += [int(x) for x in rng.integers(45, 65, size=int(rng.integers(0, 3)))]
            segs.append(seg)
        docs.append(base.Doc(f"doc{k:03d}", segs))
    return docs


def _unigram_counts(vocab):
    counts = np.zeros(vocab.size, dtype=np.int64)
    counts[REPLACEMENT[0]], counts[REPLACEMENT[1]] = 1, 3
    counts[[CLS, SEP, MASK]] = 1000  # specials are excluded even with counts
    return counts


def _run(docs, vocab, opts, counts=None, dupes=(0,)):
    out, stats = [], {}
    for d in dupes:
        ctx = base.PoolContext(seed=3, dupe=d, vocab=vocab, options=opts, unigram_counts=counts)
        out += [f for _, f in spanbert.OBJECTIVE.create_instances(docs, ctx)]
        for k, v in ctx.stats.items():
            stats[k] = stats.get(k, 0) + v
    return out, stats


# --- span sampling -------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.2, 0.3])
def test_first_span_length_in_words_is_truncated_geometric(p):
    # The first span of a block is neither merged nor cut when the budget (60 pieces) exceeds
    # 10 words (about 2 pieces each) and it starts 60+ pieces before the block's end; its
    # length in words is then the draw. Mean at p=0.2: about 3.8 words (p=0.3, the code default: 2.9).
    mean, var = _truncated_geometric(p, 10)
    rng = np.random.default_rng(0)
    probs = spanbert.span_length_probabilities(p, 10)
    lengths = []
    for _ in range(3000):
        starts = np.ones(600, dtype=bool)
        starts[1:] = rng.random(599) < 0.5  # words of about 2 pieces
        _, sampled = spanbert.sample_spans(starts, rng, 60, probs)
        first, last, _ = sampled[0]
        assert starts[first], "a span starts at a word start"
        if first >= 600 - 60:
            continue
        assert starts[last + 1], "a span ends at a word end"
        lengths.append(int(starts[first:last + 1].sum()))
    n = len(lengths)
    assert n > 2500
    assert abs(np.mean(lengths) - mean) <= 5 * math.sqrt(var / n), (np.mean(lengths), mean)
    assert min(lengths) == 1 and max(lengths) == 10
    # P(1 word) = p / (1 - (1-p)^10).
    assert within(lengths.count(1), n, p / (1 - (1 - p) ** 10))


def test_spans_are_merged_whole_words_within_budget():
    rng = np.random.default_rng(1)
    probs = spanbert.span_length_probabilities(0.2, 10)
    for _ in range(500):
        length = int(rng.integers(1, 200))
        starts = np.ones(length, dtype=bool)
        starts[1:] = rng.random(length - 1) < 0.6
        budget = math.ceil(0.15 * length)
        merged, sampled = spanbert.sample_spans(starts, rng, budget, probs)
        masked = sorted(i for s, e in merged for i in range(s, e + 1))
        assert len(masked) == budget == len(set(masked))
        # Merged spans: sorted, disjoint and not even adjacent.
        for (s1, e1), (s2, e2) in zip(merged, merged[1:]):
            assert e1 + 1 < s2
        # Every span starts at a word start.
        assert all(starts[s] for s, _ in merged)
    assert spanbert.merge_spans([(5, 6), (0, 2), (3, 4), (9, 12), (10, 11)]) == [(0, 6), (9, 12)]
    assert spanbert.merge_spans([(0, 2), (4, 4)]) == [(0, 2), (4, 4)]  # a gap of one piece stays


# --- instances -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def per_span():
    vocab = _vocab()
    docs = _docs(np.random.default_rng(2), 40, 30, 10)
    opts = spanbert.SpanBertOptions(max_seq_length=128, max_predictions_per_seq=20)
    instances, stats = _run(docs, vocab, opts, _unigram_counts(vocab))
    return vocab, opts, instances, stats


def _fate(inst, pos):
    out, orig = inst["input_ids"][pos], inst["masked_lm_ids"][inst["masked_lm_positions"].index(pos)]
    if out == MASK:
        return "mask"
    if out == orig:
        return "keep"
    assert out in REPLACEMENT, f"replacement {out} is not from the unigram distribution"
    return "random"


def test_layout_and_mask_rate(per_span):
    _, opts, instances, stats = per_span
    assert len(instances) > 200
    masked = block = 0
    for inst in instances:
        ids = inst["input_ids"]
        assert ids[0] == CLS and ids[-1] == SEP and len(ids) <= 128
        assert inst["segment_ids"] == [0] * len(ids) and inst["input_mask"] == [1] * len(ids)
        n = len(ids) - 2
        # ceil(0.15 * 126) = 19 predictions for a full block.
        assert len(inst["masked_lm_positions"]) == min(20, math.ceil(0.15 * n))
        assert all(1 <= p <= n for p in inst["masked_lm_positions"])
        masked += len(inst["masked_lm_positions"])
        block += n
    assert 0.15 <= masked / block < 0.15 + len(instances) / block  # ceil adds < 1 per block
    # Anchors are uniform over the block: blocks have about as many masked pieces in their
    # first half as in their second (spans are correlated, hence the loose bound).
    halves = [0, 0]
    for inst in instances:
        n = len(inst["input_ids"]) - 2
        for p in inst["masked_lm_positions"]:
            halves[p > n / 2] += 1
    assert sum(halves) > 1000 and 0.45 < halves[0] / sum(halves) < 0.55
    assert "unigram_fallback" not in stats  # counts were given


def test_per_span_replacement_80_10_10(per_span):
    _, _, instances, stats = per_span
    spans = {"mask": 0, "keep": 0, "random": 0}
    replacements = []
    for inst in instances:
        for first, last in _runs(inst["masked_lm_positions"]):
            fates = {_fate(inst, p) for p in range(first, last + 1)}
            assert len(fates) == 1, f"pieces of one span have different fates: {fates}"
            spans[fates.pop()] += 1
            replacements += [inst["input_ids"][p] for p in range(first, last + 1)
                             if inst["input_ids"][p] in REPLACEMENT]
    n = sum(spans.values())
    assert n > 500
    assert within(spans["mask"], n, 0.8) and within(spans["random"], n, 0.1) and within(spans["keep"], n, 0.1)
    assert stats["unigram_replaced_tokens"] == len(replacements)
    # Unigram counts 1 : 3 -> the second replacement id 3/4 of the time; specials never.
    assert within(replacements.count(REPLACEMENT[1]), len(replacements), 0.75)


def test_sbo_features_match_the_masked_runs(per_span):
    _, _, instances, stats = per_span
    weights = 0
    for inst in instances:
        n = len(inst["input_ids"]) - 2
        pos = inst["masked_lm_positions"]
        for first, last in _runs(pos):
            for k in range(first, last + 1):
                j = pos.index(k)
                assert inst["span_left_positions"][j] == first - 1
                assert inst["span_right_positions"][j] == last + 1
                assert inst["span_relative_positions"][j] == min(k - first, 14)
                interior = first - 1 >= 1 and last + 1 <= n and k - first < 15
                assert inst["sbo_weights"][j] == (1.0 if interior else 0.0)
                weights += interior
    assert weights == stats["sbo_targets"] > 0


def test_span_targets_exact():
    block = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    out = spanbert.span_targets(block, [(0, 1), (3, 5), (7, 7), (9, 9)])
    # [CLS] at 0, block piece k at k + 1, [SEP] at 11.
    assert out["masked_lm_positions"] == [1, 2, 4, 5, 6, 8, 10]
    assert out["masked_lm_ids"] == [10, 11, 13, 14, 15, 17, 19]
    assert out["span_left_positions"] == [0, 0, 3, 3, 3, 7, 9]
    assert out["span_right_positions"] == [3, 3, 7, 7, 7, 9, 11]
    assert out["span_relative_positions"] == [0, 1, 0, 1, 2, 0, 0]
    # Spans at the block's edges (boundary [CLS] or [SEP]) are not SBO targets.
    assert out["sbo_weights"] == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    assert out["masked_lm_weights"] == [1.0] * 7
    # Offsets from 15 on: no SBO target, offset written as 14.
    long = spanbert.span_targets(list(range(100, 130)), [(2, 20)])
    assert long["span_relative_positions"] == list(range(15)) + [14] * 4
    assert long["sbo_weights"] == [1.0] * 15 + [0.0] * 4


def test_whole_block_masked_exact():
    vocab = _vocab()
    docs = [base.Doc("d", [[5, 45, 6], [7]])]
    opts = spanbert.SpanBertOptions(max_seq_length=16, masked_lm_prob=1.0)
    (inst,), _ = _run(docs, vocab, opts, _unigram_counts(vocab))
    assert inst["masked_lm_positions"] == [1, 2, 3, 4]
    assert inst["masked_lm_ids"] == [5, 45, 6, 7]
    assert inst["span_left_positions"] == [0] * 4 and inst["span_right_positions"] == [5] * 4
    assert inst["span_relative_positions"] == [0, 1, 2, 3] and inst["sbo_weights"] == [0.0] * 4


def test_per_token_replacement_mixes_within_spans():
    vocab = _vocab()
    docs = _docs(np.random.default_rng(4), 30, 30, 10)
    opts = spanbert.SpanBertOptions(max_seq_length=128, max_predictions_per_seq=20, replacement="per_token")
    instances, stats = _run(docs, vocab, opts, _unigram_counts(vocab))
    mixed = pieces = masked = 0
    for inst in instances:
        for first, last in _runs(inst["masked_lm_positions"]):
            fates = [_fate(inst, p) for p in range(first, last + 1)]
            mixed += len(set(fates)) > 1
            pieces += len(fates)
            masked += fates.count("mask")
    assert mixed > 100 and stats["span_fate/mixed"] == mixed
    assert within(masked, pieces, 0.8)


def test_unigram_fallback_is_uniform_over_non_special_ids_and_counted():
    vocab = _vocab()
    docs = _docs(np.random.default_rng(5), 30, 20, 10)
    opts = spanbert.SpanBertOptions(max_seq_length=64, max_predictions_per_seq=10)
    instances, stats = _run(docs, vocab, opts, counts=None)
    assert stats["unigram_fallback"] == stats["unigram_replaced_tokens"] > 0
    sampler = spanbert.UnigramSampler(None, vocab.size, vocab.special_ids)
    draws = sampler.sample(np.random.default_rng(6), 20000)
    assert not set(draws) & set(vocab.special_ids)
    assert set(draws) == set(range(5, vocab.size))
    assert sampler.fallback
    # All-zero counts (a corpus of specials only) fall back too.
    assert spanbert.UnigramSampler(np.zeros(vocab.size), vocab.size, vocab.special_ids).fallback


def test_blocks():
    rng = np.random.default_rng(0)
    seg = lambda n, base=100: list(range(base, base + n))  # noqa: E731
    assert spanbert.make_blocks([seg(3), seg(4), seg(5)], rng, 8) == [seg(3) + seg(4), seg(5)]
    # A sentence longer than a block is cut into block-sized pieces.
    assert spanbert.make_blocks([seg(20), seg(3, 200)], rng, 8) == [seg(8), seg(8, 108), seg(4, 116) + seg(3, 200)]
    assert spanbert.make_blocks([[], seg(2)], rng, 8) == [seg(2)]
    assert spanbert.make_blocks([], rng, 8) == []


def test_bad_input_gives_instances_or_counted_skips():
    vocab = _vocab()
    opts = spanbert.SpanBertOptions(max_seq_length=16, max_predictions_per_seq=3)
    assert _run([], vocab, opts) == ([], {})
    docs = [base.Doc("one-piece", [[7]]), base.Doc("empty", [[]]), base.Doc("long", [list(range(5, 45)) * 2])]
    out, stats = _run(docs, vocab, opts, _unigram_counts(vocab))
    assert stats["dropped/empty_document"] == 1
    spec = spanbert.OBJECTIVE.feature_spec(opts)
    # One-piece document: 1 block, ceil(0.15) = 1 prediction; 80 pieces: 6 blocks of <= 14.
    assert len(out) == 1 + 6
    assert out[0]["masked_lm_positions"] == [1] and out[0]["sbo_weights"] == [0.0]
    for inst in out:
        assert len(inst["input_ids"]) <= 16
        parsed = features.parse_example(spec, features.serialize_example(spec, inst))
        np.testing.assert_array_equal(parsed["span_left_positions"][:len(inst["span_left_positions"])],
                                      inst["span_left_positions"])


def test_flags_defaults_and_spec():
    parser = objective_parser(spanbert.OBJECTIVE)
    opts = spanbert.OBJECTIVE.make_options(parser.parse_args([]))
    assert opts == spanbert.SpanBertOptions(max_seq_length=512, max_predictions_per_seq=80, masked_lm_prob=0.15,
                                            geometric_p=0.2, max_span_length=10, replacement="per_span",
                                            short_seq_prob=0.0)
    assert spanbert.OBJECTIVE.wants_unigram
    spec = spanbert.OBJECTIVE.feature_spec(opts)
    assert spec == features.spanbert_pretrain_spec(512, 80)
    assert {n for n in spec if spec[n].length == 80} == {
        "masked_lm_positions", "masked_lm_ids", "masked_lm_weights", "span_left_positions",
        "span_right_positions", "span_relative_positions", "sbo_weights"}
    assert spec["sbo_weights"].dtype == "float32"
    with pytest.raises(ValueError, match=r"geometric_p must be in \(0, 1\], got 0.0"):
        spanbert.OBJECTIVE.make_options(parser.parse_args(["--geometric_p=0"]))
    assert spanbert.OBJECTIVE.make_options(parser.parse_args(["--replacement=per_token"])).replacement == "per_token"


def test_summary(per_span):
    _, _, instances, stats = per_span
    summary = spanbert.OBJECTIVE.summarize({**stats, "instances": len(instances)})
    assert 0.15 <= summary["masked_block_rate"] < 0.17
    assert abs(summary["span_fate_fraction/mask"] - 0.8) < 0.1
