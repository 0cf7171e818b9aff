"""docs/objectives.md section 7 (XLNet permutation LM) checked on the plain functions.

Exact invariants are checked on every generated instance (sequence lengths 64 and 128 for
speed); rates and distributions with binomial tolerances: |observed - expected| <=
5 * sqrt(p (1 - p) / n), so a correct implementation fails about once in 3.5 million runs.
"""

import argparse

import numpy as np
import pytest

from text import features
from data_pipelines.objectives import base, xlnet
from objective_testing import within
from text import vocab as text_vocab

# SentencePiece-style vocabulary: <pad>=0 </s>=1 <unk>=2 [CLS]=3 [SEP]=4 [MASK]=5 <eod>=6,
# then word starts "\u2581w*" (7..46) and continuation pieces "c*" (47..66).
PAD, EOS, UNK, CLS, SEP, MASK, EOD = range(7)
WORDS = list(range(7, 47))
CONTINUATIONS = list(range(47, 67))
TOKENS = (["<pad>", "</s>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "<eod>"]
          + ["\u2581w%d" % i for i in range(40)] + ["c%d" % i for i in range(20)])
ROLES = {"pad": "<pad>", "eos": "</s>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]",
         "eod": "<eod>"}
# p(n) = (1/n) / (1 + 1/2 + 1/3 + 1/4 + 1/5) = (1/n) / 2.2833.
SPAN_P = [0.4380, 0.2190, 0.1460, 0.1095, 0.0876]


def _vocab():
    return text_vocab.make_vocab(TOKENS, ROLES, word_start=lambda t: t.startswith("\u2581"), name="test-sp")


def _sentence(rng, words):
    """A sentence of `words` words, each a word start followed by 0-2 continuation pieces."""
    out = []
    for _ in range(words):
        out.append(int(rng.choice(WORDS)))
        out.extend(int(t) for t in rng.choice(CONTINUATIONS, size=int(rng.integers(0, 3))))
    return out


def _docs(seed, num_docs):
    rng = np.random.default_rng(seed)
    return [base.Doc("doc%04d" % k, [_sentence(rng, int(rng.integers(2, 8))) for _ in range(int(rng.integers(1, 9)))])
            for k in range(num_docs)]


def _stream(docs):
    """The pool's stream rebuilt independently: documents joined by <eod>."""
    out = []
    for k, doc in enumerate(docs):
        if k:
            out.append(EOD)
        for s in doc.segments:
            out.extend(s)
    return out


def _run(docs, opts, seed=1):
    """(key, {feature: list of its real values}) per instance of the objective's InstanceBatches."""
    ctx = base.PoolContext(seed=seed, dupe=0, vocab=_vocab(), options=opts)
    out = []
    for batch in xlnet.OBJECTIVE.create_instances(docs, ctx):
        assert isinstance(batch, base.InstanceBatch)
        for i, key in enumerate(batch.keys):
            out.append((key, {name: column[i, :batch.lengths[name][i]].tolist()
                              for name, column in batch.columns.items()}))
    return out, ctx


def _mask(f):
    """The instance's perm_mask [L, L] (0/1), expanded from its perm_rank."""
    return xlnet.perm_mask_from_rank(f["perm_rank"], f["input_q"]).astype(int)


SETUPS = {
    # 85 of 512 scaled: 11 of 64 (6 in the reuse half, 5 in the rest), 21 of 128 (11 + 10).
    64: xlnet.XLNetOptions(max_seq_length=64, reuse_len=32, num_predict=11),
    128: xlnet.XLNetOptions(max_seq_length=128, reuse_len=64, num_predict=21),
}


@pytest.fixture(scope="module", params=[64, 128])
def generated(request):
    opts = SETUPS[request.param]
    docs = _docs(request.param, 150)
    instances, ctx = _run(docs, opts)
    return opts, docs, instances, ctx


# ---------------------------------------------------------------------------------------------
# Layout.


def test_layout_and_reuse_stride(generated):
    opts, docs, instances, ctx = generated
    L, R = opts.max_seq_length, opts.reuse_len
    stream = _stream(docs)
    assert len(instances) > 50
    for k, (key, f) in enumerate(instances):
        assert key == f"{docs[0].id}|{k}"
        ids, seg = f["input_k"], f["seg_id"]
        assert len(ids) == len(seg) == L
        # Block k's reuse half is the stream at k * reuse_len; A continues the stream after it.
        assert ids[:R] == stream[k * R:(k + 1) * R]
        # reuse A <sep> | B <sep> | <cls>, <cls> last.
        n0, n1 = seg.count(0), seg.count(1)
        assert seg == [0] * n0 + [1] * n1 + [2] and n0 >= R + 2 and n1 >= 2
        assert ids[-1] == CLS and ids[n0 - 1] == SEP and ids[L - 2] == SEP
        assert [i for i, t in enumerate(ids) if t in (SEP, CLS)] == [n0 - 1, L - 2, L - 1]
        a_len = n0 - 1 - R
        assert ids[R:R + a_len] == stream[(k + 1) * R:(k + 1) * R + a_len]
    # Every block strides reuse_len; what is left after the last block's reuse half is counted.
    assert ctx.stats["dropped/tail_tokens"] == len(stream) - len(instances) * R
    assert ctx.stats["stream_tokens"] == len(stream)
    assert ctx.stats["real_tokens"] == len(instances) * L


def test_targets(generated):
    opts, _, instances, ctx = generated
    P, R = opts.num_predict, opts.reuse_len
    for _, f in instances:
        q = np.array(f["input_q"])
        positions = np.flatnonzero(q == 1)
        assert set(np.unique(q)) <= {0, 1}
        # Enough tokens everywhere here: exactly num_predict targets, split 6+5 / 11+10.
        assert len(positions) == P
        assert (positions < R).sum() == P - P // 2
        ids = np.array(f["input_k"])
        assert not np.isin(ids[positions], [SEP, CLS]).any()
        assert f["target"] == ids[positions].tolist()
        assert f["target_mask"] == [1.0] * P
    assert ctx.stats["targets"] == P * len(instances)


def _check_order(sees):
    """`sees[i, j]` (i != j) among one half's targets and <sep>/<cls> must be a strict total
    order: exactly one of i->j, j->i, and transitive (the number seen is 0, 1, ..., k-1 and
    i sees j only if j sees fewer)."""
    k = len(sees)
    off = ~np.eye(k, dtype=bool)
    assert ((sees ^ sees.T) | ~off).all(), "a pair where neither or both see each other"
    seen = (sees & off).sum(axis=1)
    assert sorted(seen) == list(range(k))
    assert ((seen[:, None] > seen[None, :]) | ~(sees & off)).all()


def test_perm_mask_invariants(generated):
    opts, _, instances, _ = generated
    L, R = opts.max_seq_length, opts.reuse_len
    for _, f in instances:
        m = _mask(f)
        ids = np.array(f["input_k"])
        target = np.array(f["input_q"]) == 1
        func = np.isin(ids, [SEP, CLS])
        context = ~target & ~func
        # The reuse half sees nothing of the second half; the second half sees all of the reuse half.
        assert (m[:R, R:] == 1).all()
        assert (m[R:, :R] == 0).all()
        for lo, hi in ((0, R), (R, L)):
            h = slice(lo, hi)
            mh, t, c, fn = m[h, h], target[h], context[h], func[h]
            # Non-targets see exactly the non-targets (targets and <sep>/<cls> hidden).
            assert (mh[c] == ~c[None, :]).all()
            # Targets and <sep>/<cls> see all non-targets of the half.
            assert (mh[~c][:, c] == 0).all()
            # No target sees itself; <sep>/<cls> do.
            d = np.diag(mh)
            assert (d[t] == 1).all() and (d[fn] == 0).all()
            ordered = np.flatnonzero(~c)
            _check_order(mh[np.ix_(ordered, ordered)] == 0)


def test_factorization_order_is_random(generated):
    """The leftmost target of a half comes before the rightmost one in the order half the time
    (a left-to-right order would always say yes)."""
    opts, _, instances, _ = generated
    R = opts.reuse_len
    yes = n = 0
    for _, f in instances:
        m = _mask(f)
        positions = np.flatnonzero(np.array(f["input_q"]) == 1)
        for half in (positions[positions < R], positions[positions >= R]):
            first, last = half[0], half[-1]
            yes += int(m[last, first] == 0)  # the rightmost sees the leftmost: leftmost earlier
            n += 1
    assert within(yes, n, 0.5)


def test_serialize_and_parse():
    opts = SETUPS[64]
    instances, _ = _run(_docs(3, 30), opts)
    spec = xlnet.OBJECTIVE.feature_spec(opts)
    assert spec["perm_rank"].length == 64 and "perm_mask" not in spec and "target_mapping" not in spec
    for _, f in instances[:3]:
        parsed = features.parse_example(spec, features.serialize_example(spec, f))
        assert parsed["perm_rank"].tolist() == f["perm_rank"]
        assert parsed["input_q"].dtype == np.int64 and parsed["target_mask"].tolist() == [1.0] * 11
    # The published sizes: [seq_len] and [num_predict] vectors only.
    big = features.xlnet_pretrain_spec(512, 85)
    assert sorted(f.length for f in big.values()) == [85, 85, 512, 512, 512, 512]


def test_deterministic_and_seeded():
    docs = _docs(5, 40)
    a, _ = _run(docs, SETUPS[64], seed=7)
    b, _ = _run(docs, SETUPS[64], seed=7)
    c, _ = _run(docs, SETUPS[64], seed=8)
    assert a == b
    assert [f["perm_rank"] for _, f in a] != [f["perm_rank"] for _, f in c]


# ---------------------------------------------------------------------------------------------
# Exact outputs on tiny inputs.


def test_build_stream_exact():
    tokens, sent = xlnet.build_stream([[[10, 11], [12]], [[]], [[13], [14, 15]]], EOD)
    # <eod> between documents (the empty one is skipped), with the id of the sentence before it.
    assert tokens.tolist() == [10, 11, 12, EOD, 13, 14, 15]
    assert sent.tolist() == [0, 0, 1, 1, 0, 1, 1]
    assert xlnet.sentence_boundaries(sent).tolist() == [2, 4, 5]


def test_local_perm_mask_exact():
    # Positions: 0 context, 1 and 2 targets, 3 <sep>; factorization ranks 3, 0, 2, 1.
    m = xlnet.local_perm_mask(np.array([False, True, True, False]), np.array([False, False, False, True]),
                              np.array([3, 0, 2, 1]))
    assert m.astype(int).tolist() == [
        [0, 1, 1, 1],  # context: sees only context
        [0, 1, 1, 1],  # first target: context only
        [0, 0, 1, 0],  # third in order: context, target 1 and <sep>, not itself
        [0, 0, 1, 0],  # <sep>, second: context, target 1, itself
    ]


def test_one_long_sentence_exact():
    """One sentence of 20 tokens (longer than the sequence): no cut point, so B is always
    "random": widened to the whole sentence, i.e. stream[0:19], then the longer side is
    trimmed (the original's loop) down to |A| = 3, |B| = 2."""
    opts = xlnet.XLNetOptions(max_seq_length=12, reuse_len=4, num_predict=0)
    s = list(range(7, 27))
    instances, ctx = _run([base.Doc("only", [s])], opts)
    # Blocks start at 0, 4, 8; at 12 the sequence would pass the end (12 + 12 > 20).
    assert [f["input_k"] for _, f in instances] == [
        s[0:4] + s[4:7] + [SEP] + s[0:2] + [SEP, CLS],
        s[4:8] + s[8:11] + [SEP] + s[0:2] + [SEP, CLS],
        s[8:12] + s[12:15] + [SEP] + s[0:2] + [SEP, CLS],
    ]
    for _, f in instances:
        assert f["seg_id"] == [0] * 8 + [1] * 3 + [2]
        assert f["target"] == [] and f["input_q"] == [0] * 12
        m = _mask(f)
        func = [7, 10, 11]
        expect = np.zeros((12, 12), dtype=int)
        expect[:4, 4:] = 1          # reuse half sees nothing of the rest
        expect[4:, func] = 1        # context hides <sep>/<cls> ...
        sub = np.ix_(func, func)
        expect[sub] = m[sub]        # ... whose order among themselves is random
        assert (m == expect).all()
        _check_order(m[sub] == 0)
    assert ctx.stats["b_random"] == 3
    assert ctx.stats["dropped/tail_tokens"] == 8


def test_trim_pair_lengths_matches_the_loop():
    def loop(a, b, tot):
        while a + b > tot:
            if a > b:
                a -= 1
            else:
                b -= 1
        return a, b
    for a in range(0, 25):
        for b in range(0, 25):
            for tot in (1, 5, 12, 30):
                assert xlnet.trim_pair_lengths(a, b, tot) == loop(a, b, tot), (a, b, tot)


# ---------------------------------------------------------------------------------------------
# A and B.


def test_split_a_and_b_real_or_random():
    # Sentences of 5 tokens: boundaries every 5; tot_len 23 from begin 10 -> cut points 15, 20, 25, 30.
    sent = np.repeat(np.arange(40) % 2, 5).astype(np.int8)
    boundaries = xlnet.sentence_boundaries(sent)
    rng = np.random.default_rng(0)
    n, real = 4000, 0
    for _ in range(n):
        a0, a1, b0, b1, is_next = xlnet.split_a_and_b(sent, boundaries, 10, 23, rng)
        assert a0 == 10 and (a1 - a0) + (b1 - b0) == 23 and a1 > a0 and b1 > b0
        if is_next:
            real += 1
            # A ends at a cut point (trimmed only if longer than B), B is what follows.
            assert b0 % 5 == 0 and b0 in (15, 20, 25, 30)
            assert a1 == b0 or a1 - a0 > b1 - b0
        else:
            # A random run of whole sentences from anywhere in the stream.
            assert b0 % 5 == 0
    # 50% real continuation: 2000 +- 5 * 32.
    assert within(real, n, 0.5)
    # No cut point (one long sentence): always random.
    one = np.zeros(100, dtype=np.int8)
    assert not any(xlnet.split_a_and_b(one, xlnet.sentence_boundaries(one), 10, 23, rng)[4] for _ in range(50))
    # Not enough stream left: None.
    assert xlnet.split_a_and_b(sent, boundaries, 180, 23, rng) is None


def test_random_b_fraction_in_instances(generated):
    _, _, instances, ctx = generated
    # Sentences are shorter than tot_len, so every block has a cut point: 50% random B.
    assert within(ctx.stats.get("b_random", 0), len(instances), 0.5)


# ---------------------------------------------------------------------------------------------
# Span sampling.


def _runs(mask):
    """(begin, end) of the maximal runs of True."""
    padded = np.concatenate([[False], mask, [False]]).astype(int)
    d = np.diff(padded)
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1)))


def test_span_lengths_proportional_to_one_over_n():
    rng = np.random.default_rng(0)
    lengths = []
    for _ in range(20):
        mask, _ = xlnet.sample_mask(np.ones(5000, dtype=bool), rng, None)
        runs = _runs(mask)
        lengths += [e - b for b, e in runs]
        # About 1/7 of the tokens: every span of n advances the cursor by exactly 7n (n + 6n context).
        assert abs(mask.mean() - 1 / 7) < 0.01
        # Consecutive spans n, n' are 1 .. 6n + 6n' - 1 tokens apart (right context >= 1).
        for (b0, e0), (b1, e1) in zip(runs, runs[1:]):
            assert 1 <= b1 - e0 <= 6 * (e0 - b0) + 6 * (e1 - b1) - 1
    lengths = np.array(lengths)
    n = len(lengths)
    assert n > 5000 and lengths.min() >= 1 and lengths.max() <= 5
    for k, p in enumerate(SPAN_P, start=1):
        assert within((lengths == k).sum(), n, p), (k, (lengths == k).mean(), p)


def _word_sequence(rng, num_words):
    ids = _sentence(rng, num_words)
    return np.array(ids), _vocab().is_word_start[np.array(ids)]


def test_piece_spans_can_end_inside_a_word():
    """The released data's behaviour: n counts pieces, spans start at a word start."""
    rng = np.random.default_rng(1)
    inside = 0
    for _ in range(10):
        _, starts = _word_sequence(rng, 1500)
        mask, spans = xlnet.sample_mask(starts, rng, None, span_unit="piece")
        for b, e in spans:
            assert starts[b] and 1 <= e - b <= 5
            inside += int(not starts[e])
    assert inside > 100


def test_word_spans_cover_whole_words():
    rng = np.random.default_rng(2)
    words = []
    for _ in range(10):
        _, starts = _word_sequence(rng, 1500)
        mask, spans = xlnet.sample_mask(starts, rng, None, span_unit="word")
        for b, e in spans:
            # From a word start up to (not including) the next word start.
            assert starts[b] and starts[e]
            words.append(int(starts[b:e].sum()))
    words = np.array(words)
    n = len(words)
    assert words.min() >= 1 and words.max() <= 5
    for k, p in enumerate(SPAN_P, start=1):
        assert within((words == k).sum(), n, p)


def test_goal_top_up_and_forbidden_positions():
    rng = np.random.default_rng(3)
    for goal in (0, 1, 6, 20, 35):
        starts = np.ones(40, dtype=bool)
        forbidden = np.zeros(40, dtype=bool)
        forbidden[[5, 6, 39]] = True
        for _ in range(30):
            mask, _ = xlnet.sample_mask(starts, rng, goal, forbidden=forbidden)
            # 35 > what spans with 6n context reach in 40 tokens: the top-up fills the rest.
            assert mask.sum() == goal and not mask[forbidden].any()
    # Fewer allowed positions than the goal: all of them, no error.
    mask, _ = xlnet.sample_mask(np.ones(5, dtype=bool), rng, 9, forbidden=np.array([1, 0, 0, 0, 0], dtype=bool))
    assert mask.tolist() == [False, True, True, True, True]


# ---------------------------------------------------------------------------------------------
# Bad input, options and flags.


def test_bad_input_is_counted_not_raised():
    opts = SETUPS[64]
    instances, ctx = _run([], opts)
    assert instances == []
    # One short one-sentence document: the pool is shorter than one sequence.
    instances, ctx = _run([base.Doc("a", [[7, 8, 9]])], opts)
    assert instances == [] and ctx.stats["dropped/short_pool"] == 1
    # Documents without tokens are counted; a sentence longer than the sequence is fine.
    rng = np.random.default_rng(4)
    docs = [base.Doc("a", [[], []]), base.Doc("b", [_sentence(rng, 200)]), base.Doc("c", [[7, 8], [9]])]
    instances, ctx = _run(docs, opts)
    assert ctx.stats["dropped/empty_document"] == 1 and len(instances) > 3
    assert all(len(f["input_k"]) == 64 and len(f["target"]) == 11 for _, f in instances)


def test_options_validation():
    with pytest.raises(ValueError, match=r"reuse_len must be in \[1, max_seq_length - 5 = 59\], got 60"):
        xlnet.XLNetOptions(max_seq_length=64, reuse_len=60)
    with pytest.raises(ValueError, match="num_predict 70 does not fit"):
        xlnet.XLNetOptions(max_seq_length=64, reuse_len=32, num_predict=70)
    with pytest.raises(ValueError, match="need 1 <= mask_beta <= mask_alpha, got alpha=1 beta=2"):
        xlnet.XLNetOptions(max_seq_length=64, reuse_len=32, num_predict=10, mask_alpha=1, mask_beta=2)
    with pytest.raises(ValueError, match="span_unit must be one of .*got \'byte\'"):
        xlnet.XLNetOptions(max_seq_length=64, reuse_len=32, num_predict=10, span_unit="byte")


def test_flags_defaults_are_the_recipe():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_seq_length", type=int, default=xlnet.OBJECTIVE.defaults["max_seq_length"])
    xlnet.OBJECTIVE.add_flags(parser.add_argument_group("xlnet"))
    opts = xlnet.OBJECTIVE.make_options(parser.parse_args([]))
    assert (opts.max_seq_length, opts.reuse_len, opts.num_predict, opts.mask_alpha, opts.mask_beta,
            opts.span_unit) == (512, 256, 85, 6, 1, "piece")
    assert (opts.num_predict_reuse, opts.num_predict_rest) == (43, 42)
    # reuse_len follows max_seq_length unless given.
    opts = xlnet.OBJECTIVE.make_options(parser.parse_args(["--max_seq_length=128", "--span_unit=word"]))
    assert opts.reuse_len == 64 and opts.span_unit == "word"
    assert xlnet.OBJECTIVE.tokenizer == "sentencepiece"


def test_summary(generated):
    opts, _, instances, ctx = generated
    summary = xlnet.OBJECTIVE.summarize({**ctx.stats, "instances": len(instances)})
    assert summary["target_rate"] == pytest.approx(opts.num_predict / opts.max_seq_length)
    assert summary["targets_per_instance"] == opts.num_predict
    assert 1.0 <= summary["mean_span_length"] <= 5.0
