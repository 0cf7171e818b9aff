"""docs/objectives.md section 2 (ALBERT: n-gram MLM + sentence-order prediction), checked on the
objective's functions and on OBJECTIVE.create_instances as the Beam job calls it.

Tolerances are binomial: |observed - expected| <= 5 * sqrt(p (1 - p) / n).
"""


import numpy as np
import pytest

from text import features
from data_pipelines.objectives import albert, base
from objective_testing import objective_parser, originals, within
from text import vocab as text_vocab

SPECIALS = ["<pad>", "</s>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "<eod>"]
ROLES = {"pad": "<pad>", "eos": "</s>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]",
         "eod": "<eod>"}
CLS, SEP, MASK = 3, 4, 5
FIRST = len(SPECIALS)


def _vocab(num_words, continuation_every=0):
    """SentencePiece-style: "\u2581wK" starts a word; with continuation_every=k every k-th
    piece is a continuation piece "cK" (no \u2581)."""
    tokens = list(SPECIALS)
    for k in range(num_words):
        cont = continuation_every and k % continuation_every == continuation_every - 1
        tokens.append(f"c{k}" if cont else f"\u2581w{k}")
    return text_vocab.make_vocab(tokens, ROLES, word_start=lambda t: t.startswith("\u2581"), control=["<unk>", "<eod>"],
                           name="test-sp")


def _run(docs, vocab, opts, dupes=(0,), seed=1):
    out, stats = [], {}
    for d in dupes:
        ctx = base.PoolContext(seed=seed, dupe=d, vocab=vocab, options=opts)
        out += [f for _, f in albert.OBJECTIVE.create_instances(docs, ctx)]
        for k, v in ctx.stats.items():
            stats[k] = stats.get(k, 0) + v
    return out, stats


def _random_docs(rng, vocab, num_docs, sentences, length):
    return [base.Doc(f"doc{k:03d}", [[int(t) for t in rng.integers(FIRST, vocab.size, size=length)]
                                     for _ in range(sentences)]) for k in range(num_docs)]


# --- n-gram selection ----------------------------------------------------------------------


def test_first_ngram_lengths_follow_one_over_n():
    # The first n-gram of a sequence is never skipped for overlap, and with a budget of 9
    # pieces even a 3-gram of 3-piece words fits, so its length in words is the drawn n:
    # p = 6/11, 3/11, 2/11.
    rng = np.random.default_rng(0)
    trials = 4000
    counts = np.zeros(4, dtype=int)
    for _ in range(trials):
        sizes = rng.integers(1, 4, size=400)
        chosen = albert.select_ngrams(sizes, rng, 9, 3)
        first, n = chosen[0]
        if first + 3 > len(sizes):  # cut short at the end (p = 2/400): not a draw of n
            continue
        counts[n] += 1
    total = counts.sum()
    assert total > 0.98 * trials
    for n, p in ((1, 6 / 11), (2, 3 / 11), (3, 2 / 11)):
        assert within(counts[n], total, p), (n, counts[n] / total, p)


def test_over_budget_ngrams_fall_back_to_shorter_ones():
    rng = np.random.default_rng(1)
    trials = 3000
    ones = 0
    for _ in range(trials):
        # Budget 2 single-piece words: a drawn 3-gram falls back to a 2-gram.
        first, n = albert.select_ngrams([1] * 300, rng, 2, 3)[0]
        assert n in (1, 2)
        ones += n == 1
        # Budget 1: everything falls back to a unigram, and exactly one is chosen.
        chosen = albert.select_ngrams([1] * 300, rng, 1, 3)
        assert len(chosen) == 1 and chosen[0][1] == 1
    # P(n = 1) = 6/11; P(n = 2) = 3/11 + 2/11 (the 3-grams).
    assert within(ones, trials, 6 / 11)


def test_ngrams_never_overlap_and_spend_the_budget():
    rng = np.random.default_rng(2)
    for _ in range(300):
        sizes = [int(x) for x in rng.integers(1, 4, size=int(rng.integers(1, 120)))]
        budget = int(rng.integers(1, 40))
        chosen = albert.select_ngrams(sizes, rng, budget, 3)
        covered = [g for first, n in chosen for g in range(first, first + n)]
        assert len(covered) == len(set(covered))
        assert all(1 <= n <= 3 for _, n in chosen)
        assert sum(sizes[g] for g in covered) <= budget
    # Single-piece words: the fallback to unigrams always fills the budget exactly.
    for _ in range(100):
        chosen = albert.select_ngrams([1] * 100, rng, 19, 3)
        assert sum(n for _, n in chosen) == 19


# --- instances -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def default_instances():
    vocab = _vocab(60)
    docs = _random_docs(np.random.default_rng(3), vocab, 60, 40, 7)
    opts = albert.AlbertOptions(max_seq_length=128)
    instances, stats = _run(docs, vocab, opts)
    return vocab, opts, instances, stats


def test_mask_budget_and_80_10_10(default_instances):
    vocab, opts, instances, _ = default_instances
    assert len(instances) > 100
    n = masked = kept = other = 0
    for inst in instances:
        # Single-piece words: exactly BERT's budget; 15% of 128 -> 19 predictions.
        assert len(inst["masked_lm_positions"]) == min(20, max(1, round(len(inst["input_ids"]) * 0.15)))
        assert inst["masked_lm_positions"] == sorted(set(inst["masked_lm_positions"]))
        for pos, label in zip(inst["masked_lm_positions"], inst["masked_lm_ids"]):
            out = inst["input_ids"][pos]
            n += 1
            masked += out == MASK
            kept += out == label
            other += out not in (MASK, label)
    V = vocab.size
    # The random replacement is uniform over the whole vocabulary (hits [MASK] or the
    # original with probability 1/V each).
    assert within(masked, n, 0.8 + 0.1 / V)
    assert within(kept, n, 0.1 + 0.1 / V)
    assert within(other, n, 0.1 * (1 - 2 / V))


def test_layout_token_boundary_and_serialization(default_instances):
    vocab, opts, instances, _ = default_instances
    spec = albert.OBJECTIVE.feature_spec(opts)
    assert spec == features.albert_pretrain_spec(128, 20)
    for inst in instances[:50]:
        ids = originals(inst)
        assert ids[0] == CLS and ids[-1] == SEP and ids.count(SEP) == 2
        assert len(ids) <= 128 and inst["input_mask"] == [1] * len(ids)
        first_sep = ids.index(SEP)
        assert inst["segment_ids"] == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
        assert not {0, first_sep, len(ids) - 1} & set(inst["masked_lm_positions"])
        parsed = features.parse_example(spec, features.serialize_example(spec, inst))
        np.testing.assert_array_equal(parsed["token_boundary"][:len(ids)], inst["token_boundary"])
        assert not parsed["token_boundary"][len(ids):].any()


def test_whole_word_ngrams_and_token_boundary():
    vocab = _vocab(60, continuation_every=3)  # one piece in 3 continues a word
    docs = _random_docs(np.random.default_rng(4), vocab, 40, 30, 9)
    opts = albert.AlbertOptions(max_seq_length=64, max_predictions_per_seq=10)
    instances, _ = _run(docs, vocab, opts)
    multi = 0
    for inst in instances:
        ids = originals(inst)
        starts = [bool(vocab.is_word_start[t]) for t in ids]
        # token_boundary: word-start pieces and specials, of the unmasked sequence.
        assert inst["token_boundary"] == [int(s) for s in starts]
        assert inst["token_boundary"][0] == 1 and inst["token_boundary"][-1] == 1
        masked = set(inst["masked_lm_positions"])
        assert len(masked) <= min(10, max(1, round(len(ids) * 0.15)))
        word = []
        for i in range(1, len(ids)):
            if starts[i] and word:
                hit = masked.intersection(word)
                assert not hit or hit == set(word), f"partial word {word} masked {sorted(masked)}"
                multi += bool(hit) and len(word) > 1
                word = []
            if ids[i] not in (CLS, SEP):
                word.append(i)
            else:
                word = []
    assert multi > 50


def test_sentence_order_labels_and_swaps():
    # Document d's sentence k is the single piece FIRST + d * 200 + k, so a piece tells which
    # document and sentence it comes from.
    # The last 5 documents have a single sentence: their one chunk takes a random B.
    num_docs, sentences = 35, 200
    vocab = _vocab(num_docs * sentences)
    docs = [base.Doc(f"doc{d:03d}", [[FIRST + d * sentences + k] for k in range(sentences if d < 30 else 1)])
            for d in range(num_docs)]
    opts = albert.AlbertOptions(max_seq_length=32, max_predictions_per_seq=5)
    instances, stats = _run(docs, vocab, opts, dupes=range(8))
    same_doc = swapped = random_b = 0
    for inst in instances:
        ids = originals(inst)
        first_sep = ids.index(SEP)
        # (documents, sentence indices) of A and of B.
        a = [(t - FIRST) // sentences for t in ids[1:first_sep]], [(t - FIRST) % sentences for t in ids[1:first_sep]]
        b = ([(t - FIRST) // sentences for t in ids[first_sep + 1:-1]],
             [(t - FIRST) % sentences for t in ids[first_sep + 1:-1]])
        assert len(set(a[0])) == 1 and len(set(b[0])) == 1
        label = inst["next_sentence_labels"][0]
        if a[0][0] != b[0][0]:
            # B from another document happens only for single-segment chunks, labelled 1.
            random_b += 1
            assert label == 1
            continue
        same_doc += 1
        if label == 1:
            swapped += 1
            assert max(b[1]) < min(a[1]), "label 1: B's sentences come before A's"
        else:
            assert max(a[1]) < min(b[1]), "label 0: A's sentences come before B's"
        # A and B are each consecutive runs of sentences.
        for part in (a[1], b[1]):
            assert part == list(range(part[0], part[0] + len(part)))
    assert same_doc > 1000 and random_b >= 5 * 8
    # P(swap) = 0.5 for every chunk of two or more segments.
    assert within(swapped, same_doc, 0.5)
    assert stats["sop_label_1"] == swapped + random_b
    assert stats["sop_random_b"] == random_b


def test_exact_tiny_instance():
    vocab = _vocab(10)
    w = [FIRST + k for k in range(4)]
    docs = [base.Doc("a", [[w[0], w[1]], [w[2], w[3]]]), base.Doc("b", [[w[0]]])]
    opts = albert.AlbertOptions(max_seq_length=16, short_seq_prob=0.0)
    seen = set()
    for seed in range(40):
        ctx = base.PoolContext(seed=seed, dupe=0, vocab=vocab, options=opts)
        inst = dict(albert.OBJECTIVE.create_instances(docs, ctx))["a|0"]
        label = inst["next_sentence_labels"][0]
        seen.add(label)
        # A two-segment chunk is split after the first segment; label 1 swaps A and B.
        expected = [CLS, w[0], w[1], SEP, w[2], w[3], SEP] if label == 0 else [CLS, w[2], w[3], SEP, w[0], w[1], SEP]
        assert originals(inst) == expected
        assert inst["segment_ids"] == [0, 0, 0, 0, 1, 1, 1]
        assert inst["token_boundary"] == [1] * 7
        # round(7 * 0.15) = 1 prediction.
        assert len(inst["masked_lm_positions"]) == 1
    assert seen == {0, 1}


def test_bad_input_gives_instances_or_counted_skips():
    vocab = _vocab(30)
    opts = albert.AlbertOptions(max_seq_length=16, max_predictions_per_seq=3)
    assert _run([], vocab, opts) == ([], {})
    # A lone one-sentence document: B must come from a random document, and the pool has no
    # other one (counted).
    out, stats = _run([base.Doc("one", [[FIRST, FIRST + 1]])], vocab, opts)
    assert len(out) == 1 and out[0]["next_sentence_labels"] == [1]
    assert stats["random_next_same_document"] == 1
    # A sentence longer than the sequence is truncated; an empty document is counted.
    docs = [base.Doc("long", [list(range(FIRST, FIRST + 25)) * 4]), base.Doc("empty", [[]]),
            base.Doc("other", [[FIRST + 3], [FIRST + 4]])]
    out, stats = _run(docs, vocab, opts)
    assert stats["dropped/empty_document"] == 1
    spec = albert.OBJECTIVE.feature_spec(opts)
    for inst in out:
        assert len(inst["input_ids"]) <= 16
        features.serialize_example(spec, inst)


def test_flags_and_defaults():
    parser = objective_parser(albert.OBJECTIVE, dupe_factor=10)
    opts = albert.OBJECTIVE.make_options(parser.parse_args([]))
    assert (opts.max_seq_length, opts.max_predictions_per_seq, opts.ngram, opts.whole_word_mask) == (512, 20, 3, True)
    assert parser.parse_args([]).dupe_factor == 40
    assert albert.OBJECTIVE.tokenizer == "sentencepiece"
    opts = albert.OBJECTIVE.make_options(parser.parse_args(["--ngram=2", "--no-whole_word_mask"]))
    assert opts.ngram == 2 and not opts.whole_word_mask
    with pytest.raises(ValueError, match="ngram must be >= 1, got 0"):
        albert.OBJECTIVE.make_options(parser.parse_args(["--ngram=0"]))


def test_summary(default_instances):
    _, _, instances, stats = default_instances
    summary = albert.OBJECTIVE.summarize({**stats, "instances": len(instances)})
    assert 0.1 < summary["masked_token_rate"] < 0.2
    assert abs(sum(v for k, v in summary.items() if k.startswith("ngram_fraction/")) - 1) < 1e-9
