"""docs/objectives.md section 8 (T5 span corruption) checked on the plain functions and on
``OBJECTIVE.create_instances``.

Statistical tolerances are 5 standard errors of the sample size, so a correct implementation
fails about once in 3.5 million runs.
"""

import math

import numpy as np
import pytest

from text import features
from data_pipelines.objectives import base, t5
from text import vocab as text_vocab

# SentencePiece layout: <pad>=0, </s>=1, <unk>=2, control symbols, then "\u2581"-pieces.
SPECIAL = ["<pad>", "</s>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "<eod>"]
PAD, EOS = 0, 1
FIRST_WORD = len(SPECIAL)


def _vocab(num_words=3000):
    tokens = SPECIAL + ["\u2581w%d" % i for i in range(num_words)]
    roles = {"pad": "<pad>", "eos": "</s>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]",
             "mask": "[MASK]", "eod": "<eod>"}
    return text_vocab.make_vocab(tokens, roles, word_start=lambda t: t.startswith("\u2581"), name="test-sp")


def _docs(rng, num_docs, vocab, sentences=(3, 12), sentence_len=(1, 40)):
    docs = []
    for k in range(num_docs):
        segs = [list(map(int, rng.integers(FIRST_WORD, vocab.size, size=rng.integers(*sentence_len))))
                for _ in range(rng.integers(*sentences))]
        docs.append(base.Doc("doc%04d" % k, segs))
    return docs


def _run(docs, opts, vocab, seed=1, dupe=0):
    ctx = base.PoolContext(seed=seed, dupe=dupe, vocab=vocab, options=opts)
    return list(t5.OBJECTIVE.create_instances(docs, ctx)), ctx


def _uncorrupt(inputs, targets, vocab_size, num_sentinels=100):
    """The raw chunk back from (inputs, targets): each sentinel in the inputs is replaced by
    the run that follows the same sentinel in the targets. Also checks the sentinel order."""
    assert inputs[-1] == EOS and targets[-1] == EOS
    is_sentinel = lambda t: t >= vocab_size
    in_sentinels = [t for t in inputs[:-1] if is_sentinel(t)]
    tgt_sentinels = [t for t in targets[:-1] if is_sentinel(t)]
    # <extra_id_0>, <extra_id_1>, ... = the last id of the model vocabulary, counting down,
    # in the same order on both sides.
    expected = [vocab_size + num_sentinels - 1 - i for i in range(len(in_sentinels))]
    assert in_sentinels == expected and tgt_sentinels == expected
    assert is_sentinel(targets[0])
    runs, current = {}, None
    for t in targets[:-1]:
        if is_sentinel(t):
            current = t
            runs[t] = []
        else:
            runs[current].append(t)
    assert all(runs.values()), "every noise span is non-empty"
    raw = []
    for t in inputs[:-1]:
        raw.extend(runs[t] if is_sentinel(t) else [t])
    return raw, [len(runs[s]) for s in expected]


def test_random_spans_helper_gives_t5_published_lengths():
    # T5: inputs_length 512 -> raw 568 tokens, targets 114; 128 -> 141 / 29 (EOS included).
    assert t5.random_spans_helper(512, 0.15, 3.0, extra_tokens_per_span_inputs=1,
                                  extra_tokens_per_span_targets=1) == (568, 114)
    assert t5.random_spans_helper(128, 0.15, 3.0, 1, 1) == (141, 29)
    # 568 raw = 85 noise (round(85.2)) in 28 spans + 483 kept -> inputs 483 + 28 + EOS = 512.
    assert t5.noise_span_counts(568, 0.15, 3.0) == (85, 483, 28)
    # One more raw token would not fit.
    assert t5.corrupted_lengths(569, 0.15, 3.0)[0] == 513
    opts = t5.T5Options()
    assert (opts.raw_length, opts.targets_length) == (568, 114)
    assert t5.OBJECTIVE.feature_spec(opts) == {"inputs": features.Feature("int64", 512),
                                               "targets": features.Feature("int64", 114)}


def test_counts_clip_for_short_chunks():
    assert t5.noise_span_counts(2, 0.15, 3.0) == (1, 1, 1)    # round(0.3) = 0 -> clipped to 1
    assert t5.noise_span_counts(3, 0.9, 1.0) == (2, 1, 1)     # L-1 cap, spans capped at kept tokens
    with pytest.raises(ValueError, match="a chunk needs at least 2 tokens to be corrupted, got 1"):
        t5.noise_span_counts(1, 0.15, 3.0)


def test_exact_corruption_of_a_given_mask():
    tokens = [10, 11, 12, 13, 14, 15, 16, 17]
    mask = np.array([0, 0, 1, 1, 0, 1, 0, 1], dtype=bool)
    inputs, targets = t5.corrupt_chunk(tokens, mask, eos_id=EOS, vocab_size=50, num_sentinels=100)
    # <extra_id_0> = 149, <extra_id_1> = 148, <extra_id_2> = 147.
    assert inputs == [10, 11, 149, 14, 148, 16, 147, EOS]
    assert targets == [149, 12, 13, 148, 15, 147, 17, EOS]


def test_full_chunks_lengths_sentinels_and_reconstruction():
    vocab = _vocab()
    rng = np.random.default_rng(0)
    docs = _docs(rng, 120, vocab)
    opts = t5.T5Options()
    instances, ctx = _run(docs, opts, vocab)
    corpus = [t for d in docs for s in d.segments for t in s]
    # Every chunk but the last holds 568 raw tokens.
    assert len(instances) == math.ceil(len(corpus) / 568) >= 20
    rebuilt = []
    for i, (key, feats) in enumerate(instances):
        raw, _ = _uncorrupt(feats["inputs"], feats["targets"], vocab.size)
        rebuilt.extend(raw)
        if i < len(instances) - 1:
            assert len(raw) == 568
            assert len(feats["inputs"]) == 512
            assert len(feats["targets"]) <= 114
            assert len(feats["targets"]) == 114  # counts are deterministic given L
        assert PAD not in feats["inputs"] and PAD not in feats["targets"]
    # Documents concatenated in the given order, no separator, nothing lost or reordered.
    assert rebuilt == corpus
    assert ctx.stats["raw_tokens"] == len(corpus)
    assert ctx.stats.get("short_final_chunks", 0) == (1 if len(corpus) % 568 else 0)
    spec = t5.OBJECTIVE.feature_spec(opts)
    for _, f in instances:
        parsed = features.parse_example(spec, features.serialize_example(spec, f))
        assert list(parsed["inputs"][:len(f["inputs"])]) == f["inputs"]
    assert len({k for k, _ in instances}) == len(instances)
    # Instance keys name the document the chunk starts in.
    assert instances[0][0] == "doc0000|0"


def test_noise_density_span_length_and_placement_statistics():
    vocab = _vocab()
    rng = np.random.default_rng(1)
    # 400 chunks of 141 raw tokens (inputs_length 128): 21 noise tokens in 7 spans each.
    opts = t5.T5Options(inputs_length=128)
    docs = [base.Doc("d%03d" % k, [list(map(int, rng.integers(FIRST_WORD, vocab.size, size=141)))])
            for k in range(400)]
    instances, ctx = _run(docs, opts, vocab)
    assert len(instances) == 400
    span_lengths, noise, raw = [], 0, 0
    noise_by_position = np.zeros(141)
    first_kept_runs = []
    for _, f in instances:
        chunk, lengths = _uncorrupt(f["inputs"], f["targets"], vocab.size)
        assert len(f["inputs"]) == 128 and len(f["targets"]) == 29
        span_lengths.extend(lengths)
        noise += sum(lengths)
        raw += len(chunk)
        # Rebuild the noise mask: walk the inputs, a sentinel covers its run's length.
        pos, spans = 0, iter(lengths)
        for t in f["inputs"][:-1]:
            if t >= vocab.size:
                n = next(spans)
                noise_by_position[pos:pos + n] += 1
                pos += n
            else:
                pos += 1
        assert pos == 141
        first_kept_runs.append(f["inputs"].index(vocab.size + 99))
        assert f["inputs"][0] < vocab.size, "the chunk starts with non-noise"
    # round(0.15 * 141) = 21 noise tokens per chunk: the density is the recipe's up to rounding.
    assert noise / raw == pytest.approx(21 / 141)
    assert abs(noise / raw - 0.15) < 0.005
    # 21 noise tokens in round(21/3) = 7 spans: mean span length exactly 3.
    assert np.mean(span_lengths) == pytest.approx(3.0)
    assert ctx.stats["noise_spans"] == 7 * 400
    # Uniform compositions of 21 into 7 positive parts: P(part == 1) = C(19,5)/C(20,6) = 6/20.
    n = len(span_lengths)
    ones = sum(1 for x in span_lengths if x == 1)
    assert abs(ones / n - 0.3) <= 5 * math.sqrt(0.3 * 0.7 / n)
    assert max(span_lengths) > 6  # not a fixed span length
    # The first run is non-noise and the last is noise, as T5's interleaving.
    assert noise_by_position[0] == 0 and noise_by_position[-1] == 400
    # The 120 kept tokens are cut uniformly into 7 runs: a run has length j with probability
    # C(120-j-1, 5) / C(119, 6) (mean 120/7 = 17.1); the first run's sample mean is within 5 SE.
    p = np.array([math.comb(120 - j - 1, 5) for j in range(1, 115)]) / math.comb(119, 6)
    j = np.arange(1, 115)
    mean, var = (p * j).sum(), (p * j * j).sum() - (p * j).sum() ** 2
    assert mean == pytest.approx(120 / 7)
    assert abs(np.mean(first_kept_runs) - mean) <= 5 * math.sqrt(var / len(first_kept_runs))
    summary = t5.OBJECTIVE.summarize({**ctx.stats, "instances": len(instances)})
    assert summary["noise_density"] == pytest.approx(21 / 141)
    assert summary["mean_noise_span_length"] == pytest.approx(3.0)
    assert summary["model_vocab_size"] == vocab.size + 100


def test_short_final_chunk_is_corrupted_with_its_own_length():
    vocab = _vocab(200)
    rng = np.random.default_rng(2)
    # 2 * 141 + 100 raw tokens: two full chunks and a 100-token tail.
    docs = [base.Doc("a", [list(map(int, rng.integers(FIRST_WORD, vocab.size, size=200)))]),
            base.Doc("b", [list(map(int, rng.integers(FIRST_WORD, vocab.size, size=182)))])]
    instances, ctx = _run(docs, t5.T5Options(inputs_length=128), vocab)
    # Chunk 1 starts at raw token 141, inside "a"; chunk 2 at 282, inside "b".
    assert [k for k, _ in instances] == ["a|0", "a|1", "b|2"]
    tail = instances[-1][1]
    # L = 100: 15 noise tokens in 5 spans, 85 kept -> inputs 85 + 5 + 1, targets 15 + 5 + 1.
    assert (len(tail["inputs"]), len(tail["targets"])) == (91, 21)
    assert ctx.stats["short_final_chunks"] == 1
    # A one-token tail cannot be corrupted: dropped and counted.
    docs = [base.Doc("a", [list(range(FIRST_WORD, FIRST_WORD + 142))])]
    instances, ctx = _run(docs, t5.T5Options(inputs_length=128), vocab)
    assert len(instances) == 1
    assert ctx.stats["dropped/chunk_too_short"] == 1
    assert ctx.stats["dropped_tokens/chunk_too_short"] == 1


def test_bad_input_and_determinism():
    vocab = _vocab(200)
    opts = t5.T5Options(inputs_length=128)
    assert _run([], opts, vocab)[0] == []
    # A one-sentence one-token document and a sentence longer than a chunk.
    docs = [base.Doc("x", [[FIRST_WORD]]), base.Doc("y", [[FIRST_WORD + 1] * 500])]
    instances, _ = _run(docs, opts, vocab)
    spec = t5.OBJECTIVE.feature_spec(opts)
    for _, f in instances:
        features.serialize_example(spec, f)
    assert len(instances) == math.ceil(501 / 141)
    rng = np.random.default_rng(3)
    docs = _docs(rng, 20, vocab)
    a, _ = _run(docs, opts, vocab, seed=7)
    b, _ = _run(docs, opts, vocab, seed=7)
    c, _ = _run(docs, opts, vocab, seed=7, dupe=1)
    assert a == b
    assert [f for _, f in a] != [f for _, f in c], "each dupe pass draws fresh noise"


def test_options_and_flags():
    import argparse
    parser = argparse.ArgumentParser()
    t5.OBJECTIVE.add_flags(parser)
    args = parser.parse_args([])
    opts = t5.OBJECTIVE.make_options(args)
    assert opts == t5.T5Options(512, 0.15, 3.0, 100)
    assert t5.OBJECTIVE.tokenizer == "sentencepiece"
    assert t5.OBJECTIVE.defaults["dupe_factor"] == 1
    # 4096 inputs -> ~228 spans per chunk: more than 100 sentinels is refused up front.
    with pytest.raises(ValueError, match="num_sentinels"):
        t5.OBJECTIVE.make_options(parser.parse_args(["--inputs_length=4096"]))
    with pytest.raises(ValueError, match=r"noise_density must be in \(0, 1\), got 0.0"):
        t5.T5Options(noise_density=0.0)
