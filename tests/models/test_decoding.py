"""garden.models.decoding against references that recompute the whole sequence at every step.

The models are tests/generative_testing's toys over a 6-token vocabulary, made less peaked (the
causal toy's final LayerNorm scale shrunk, the seq2seq toy's tied table shrunk) so that several
tokens are likely at each step. References here never use the KV cache: greedy is the argmax of
model(prompt + tokens so far) at each step, beam search is compared with an exhaustive search
over every continuation, samplers with the exact next-token distribution.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import tensorflow as tf

from garden.models.decoding import GenerationConfig, default_settings, generate, generator_for
from garden.models.generative import GenerativeLM
from generative_testing import ToyCausalLM, ToySeq2SeqLM

V = 6
PAD = 5  # pad_id is only the filler after EOS: any id will do


class Markov(GenerativeLM):
    """A toy GenerativeLM with spread, history-dependent next-token distributions: the toy's
    logits (which mostly repeat the last token) divided by `tau`, plus random bigram and
    trigram tables indexed by the last two tokens. The token before the last lives in the
    decoding state (next to the toy's own cache), so a beam search that failed to reorder the
    state would score with the wrong history. `eos` is the id the tests use as EOS with it
    (chosen so that rows stop at various steps)."""

    def __init__(self, inner, tau, eos, seed=0, **kwargs):
        super().__init__(**kwargs)
        self.inner, self.tau, self.eos = inner, tau, eos
        rng = np.random.RandomState(seed)
        self.bigram = rng.normal(0, 1.5, (V, V)).astype("float32")
        # row V: no token before (the first position, or left padding)
        self.trigram = np.concatenate([rng.normal(0, 1.0, (V, V)), np.zeros((1, V))]).astype(
            "float32")
        self.is_encoder_decoder = inner.is_encoder_decoder
        self.max_decoder_length = inner.max_decoder_length
        self.key = "decoder_" if inner.is_encoder_decoder else ""

    def _mix(self, logits, last, before):
        return (logits / self.tau + tf.gather(self.bigram, last)
                + tf.gather(self.trigram, before))

    def call(self, inputs, training=False):
        ids = tf.cast(inputs[self.key + "token_ids"], tf.int32)
        mask = tf.cast(inputs[self.key + "padding_mask"], tf.int32)
        before = tf.where(mask[:, :-1] > 0, ids[:, :-1], V)
        before = tf.pad(before, [[0, 0], [1, 0]], constant_values=V)
        return {"logits": self._mix(self.inner(inputs)["logits"], ids, before)}

    def start_decoding(self, prompt, max_length):
        logits, state = self.inner.start_decoding(prompt, max_length)
        ids = tf.cast(prompt[self.key + "token_ids"], tf.int32)
        mask = tf.cast(prompt[self.key + "padding_mask"], tf.int32)
        last = ids[:, -1]
        before = (tf.where(mask[:, -2] > 0, ids[:, -2], V) if ids.shape[1] > 1
                  else tf.fill(tf.shape(last), V))
        return self._mix(logits, last, before), {"inner": state, "last": last}

    def decode_step(self, token_ids, index, state):
        logits, inner = self.inner.decode_step(token_ids, index, state["inner"])
        return (self._mix(logits, token_ids, state["last"]),
                {"inner": inner, "last": tf.cast(token_ids, tf.int32)})


@pytest.fixture(scope="module")
def causal():
    return Markov(ToyCausalLM(vocab_size=V, seed=0), tau=20.0, eos=2)


@pytest.fixture(scope="module")
def seq2seq():
    return Markov(ToySeq2SeqLM(vocab_size=V, seed=1), tau=200.0, eos=0)


def gen(model, prompt, config, jit=False):
    """generate() without XLA (its compile time would dominate these tiny runs; the XLA path
    has its own test). One Generator per model, so tests of the same shapes share traces."""
    return generate(model, prompt, config, eos_id=model.eos, pad_id=PAD, jit_compile=jit)


def left_pad(rows, width=None):
    width = width or max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int32)
    mask = np.zeros((len(rows), width), np.int32)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):], mask[i, width - len(r):] = r, 1
    return ids, mask


def causal_prompt(rows, width=None):
    ids, mask = left_pad(rows, width)
    return {"token_ids": ids, "padding_mask": mask}


def seq2seq_prompt(sources, width=None):
    ids, mask = left_pad(sources, width)
    starts = np.zeros((len(sources), 1), np.int32)  # T5's decoder start 0
    return {"encoder_token_ids": ids, "encoder_padding_mask": mask,
            "decoder_token_ids": starts, "decoder_padding_mask": np.ones_like(starts)}


def next_log_probs(model, prompt, row, tokens_list):
    """log_softmax of the full recompute's next-token logits after prompt row `row` followed
    by each token list in tokens_list (no cache): float [len(tokens_list), V]."""
    n = len(tokens_list)
    if model.is_encoder_decoder:
        enc = {k: np.repeat(prompt[k][row:row + 1], n, 0)
               for k in ("encoder_token_ids", "encoder_padding_mask")}
        start = list(prompt["decoder_token_ids"][row][prompt["decoder_padding_mask"][row] == 1])
        ids, mask = left_pad([start + list(t) for t in tokens_list])
        inputs = dict(enc, decoder_token_ids=ids, decoder_padding_mask=mask)
    else:
        real = list(prompt["token_ids"][row][prompt["padding_mask"][row] == 1])
        ids, mask = left_pad([real + list(t) for t in tokens_list])
        inputs = {"token_ids": ids, "padding_mask": mask}
    logits = model(inputs)["logits"].numpy()[:, -1].astype(np.float64)
    return logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)


def decoder_sequence(model, prompt, row):
    key = "decoder_" if model.is_encoder_decoder else ""
    ids, mask = prompt[key + "token_ids"][row], prompt[key + "padding_mask"][row]
    return [int(t) for t in ids[mask == 1]]


def banned(sequence, n):
    """Tokens that would complete an n-gram already in `sequence` (Hugging Face's rule)."""
    if n == 0 or len(sequence) < n - 1:
        return set()
    tail = tuple(sequence[len(sequence) - n + 1:]) if n > 1 else ()
    return {sequence[i + n - 1] for i in range(len(sequence) - n + 1)
            if tuple(sequence[i:i + n - 1]) == tail}


def reference_greedy(model, prompt, n_new, min_new=0, no_repeat=0):
    """Greedy decoding by full recompute at every step, one row at a time."""
    eos, out = model.eos, []
    for row in range(len(next(iter(prompt.values())))):
        tokens, score = [], 0.0
        for step in range(n_new):
            lp = next_log_probs(model, prompt, row, [tokens])[0]
            for t in banned(decoder_sequence(model, prompt, row) + tokens, no_repeat):
                lp[t] = -np.inf
            if step < min_new:
                lp[eos] = -np.inf
            token = int(np.argmax(lp))
            tokens.append(token)
            score += lp[token]
            if token == eos:
                break
        out.append((tokens, score))
    return out


def check_against(out, reference, n_new, atol=1e-4):
    for row, (tokens, score) in enumerate(reference):
        assert out["token_ids"][row].tolist() == tokens + [PAD] * (n_new - len(tokens)), row
        assert out["lengths"][row] == len(tokens)
        assert out["scores"][row] == pytest.approx(score, abs=atol)


def penalty(length, alpha, kind):
    return ((5 + length) / 6) ** alpha if kind == "gnmt" else length ** alpha


_HYPOTHESES = {}


def hypotheses(model, prompt, row, n_new):
    """Every finished hypothesis and its log-prob by full recompute: each continuation that ends
    with EOS at some step, and each of n_new tokens without EOS."""
    key = (id(model), tuple(tuple(prompt[k][row].tolist()) for k in sorted(prompt)), n_new)
    if key not in _HYPOTHESES:
        found, prefixes, prefix_scores = [], [()], [0.0]
        for step in range(n_new):
            lps = next_log_probs(model, prompt, row, prefixes)
            grown, grown_scores = [], []
            for p, base, lp in zip(prefixes, prefix_scores, lps):
                for t in range(V):
                    if t == model.eos or step == n_new - 1:
                        found.append((p + (t,), base + lp[t]))
                    if t != model.eos:
                        grown.append(p + (t,))
                        grown_scores.append(base + lp[t])
            prefixes, prefix_scores = grown, grown_scores
        _HYPOTHESES[key] = found
    return _HYPOTHESES[key]


def exhaustive_best(model, prompt, row, n_new, alpha, kind):
    """(penalised score, tokens) of the best hypothesis (garden.models.decoding's docstring)."""
    return max((logp / penalty(len(tokens), alpha, kind), tokens)
               for tokens, logp in hypotheses(model, prompt, row, n_new))


# One batch shape for most tests (3 rows, 5 slots, 5 new tokens), so they share traces. With
# the causal toy's EOS (2): row 0 emits EOS first, rows 1 and 2 never do unaided.
PROMPTS = [[3, 2], [4, 1, 5], [1, 4, 4, 4, 3]]
WIDTH, N_NEW = 5, 5


def prompt_for(model, rows, width=WIDTH):
    return (seq2seq_prompt if model.is_encoder_decoder else causal_prompt)(rows, width)


@pytest.mark.parametrize("family", ["causal", "seq2seq"])
def test_greedy_is_the_argmax_of_the_full_recompute_at_every_step(family, request):
    model = request.getfixturevalue(family)
    prompt = prompt_for(model, PROMPTS)
    out = gen(model, prompt, GenerationConfig(max_new_tokens=N_NEW))
    reference = reference_greedy(model, prompt, N_NEW)
    check_against(out, reference, N_NEW)
    assert any(len(t) < N_NEW for t, _ in reference), "no row stopped at EOS"
    # Rows are independent: the same rows in another order give the same outputs.
    swapped = gen(model, prompt_for(model, PROMPTS[::-1]), GenerationConfig(max_new_tokens=N_NEW))
    for key in ("token_ids", "lengths"):
        np.testing.assert_array_equal(swapped[key], out[key][::-1])


def test_min_new_tokens_holds_eos_back(causal, seq2seq):
    at_the_boundary = 0
    # causal row 0 emits EOS first; the seq2seq rows emit it a few steps in
    for model, values in ((causal, (3,)), (seq2seq, (1, 2, 3))):
        prompt = prompt_for(model, PROMPTS)
        for min_new in values:
            config = GenerationConfig(max_new_tokens=N_NEW, min_new_tokens=min_new)
            out = gen(model, prompt, config)
            check_against(out, reference_greedy(model, prompt, N_NEW, min_new=min_new), N_NEW)
            assert (out["token_ids"][:, :min_new] != model.eos).all()
            assert (out["lengths"] >= min_new).all() and out["lengths"][0] > 1
            at_the_boundary += int((out["lengths"] == min_new + 1).any())
    assert at_the_boundary, "no row emitted EOS at the first step allowed: boundary untested"


def test_no_repeat_ngrams_match_the_reference_and_never_repeat(causal):
    prompt = prompt_for(causal, PROMPTS)
    plain = gen(causal, prompt, GenerationConfig(max_new_tokens=N_NEW))
    for n in (1, 2, 3):
        out = gen(causal, prompt, GenerationConfig(max_new_tokens=N_NEW, no_repeat_ngram_size=n))
        check_against(out, reference_greedy(causal, prompt, N_NEW, no_repeat=n), N_NEW)
        assert (out["token_ids"] != plain["token_ids"]).any(), n  # the constraint bit
        for row in range(3):
            start = len(decoder_sequence(causal, prompt, row))
            seq = decoder_sequence(causal, prompt, row) + \
                out["token_ids"][row][:out["lengths"][row]].tolist()
            for end in range(max(start, n - 1), len(seq)):
                if n == 1 and end >= V:
                    break  # six tokens: a 1-gram ban runs out of tokens after six
                earlier = {tuple(seq[i:i + n]) for i in range(end - n + 1)}
                assert tuple(seq[end - n + 1:end + 1]) not in earlier, (n, seq)


BEAM_CASES = [(0.0, "gnmt"), (1.0, "gnmt"), (2.0, "fairseq"), (-1.0, "fairseq")]


@pytest.mark.parametrize("family", ["causal", "seq2seq"])
def test_beam_search_finds_the_exhaustive_optimum_with_a_beam_that_holds_everything(
        family, request):
    model = request.getfixturevalue(family)
    prompt = prompt_for(model, PROMPTS)
    n_new = 3
    # Every candidate ranks in the first num_beams: 5 ** (n_new - 1) live prefixes * 6 tokens.
    beams = 5 ** (n_new - 1) * V
    lengths = set()
    for alpha, kind in BEAM_CASES:
        config = GenerationConfig(max_new_tokens=n_new, method="beam", num_beams=beams,
                                  length_penalty=alpha, length_penalty_kind=kind)
        out = gen(model, prompt, config)
        for row in range(3):
            score, tokens = exhaustive_best(model, prompt, row, n_new, alpha, kind)
            assert out["token_ids"][row].tolist() == list(tokens) + [PAD] * (n_new - len(tokens))
            assert out["lengths"][row] == len(tokens)
            assert out["scores"][row] == pytest.approx(score, abs=1e-4)
            lengths.add(len(tokens))
    assert len(lengths) >= 2, "every case had the same winning length: penalties untested"


def reference_beam(model, prompt, row, n_new, beams, alpha, kind):
    """Beam search by full recompute that never stops early: the best `beams` of the 2 * beams
    best candidates stay alive, candidates in the first `beams` ranks that end with EOS (all of
    them at the last step) finish; the answer is the best finished one."""
    alive, finished = [((), 0.0)], []
    for step in range(n_new):
        lps = next_log_probs(model, prompt, row, [tokens for tokens, _ in alive])
        candidates = sorted(((score + lp[t], tokens + (t,))
                             for (tokens, score), lp in zip(alive, lps) for t in range(V)),
                            key=lambda c: -c[0])[:2 * beams]
        finished += [(score / penalty(step + 1, alpha, kind), tokens)
                     for score, tokens in candidates[:beams]
                     if tokens[-1] == model.eos or step == n_new - 1]
        alive = [(tokens, score) for score, tokens in candidates
                 if tokens[-1] != model.eos][:beams]
    return max(finished)


def test_a_narrow_beam_equals_a_reference_beam_that_never_stops_early(causal):
    """Pruning, the finished set's ranks and the early stop: the early stop must never change
    the answer (it fires only when no alive hypothesis can win)."""
    prompt = prompt_for(causal, PROMPTS)
    for alpha, kind in BEAM_CASES:
        config = GenerationConfig(max_new_tokens=N_NEW, method="beam", num_beams=2,
                                  length_penalty=alpha, length_penalty_kind=kind)
        out = gen(causal, prompt, config)
        for row in range(3):
            score, tokens = reference_beam(causal, prompt, row, N_NEW, 2, alpha, kind)
            assert out["token_ids"][row][:out["lengths"][row]].tolist() == list(tokens)
            assert out["scores"][row] == pytest.approx(score, abs=1e-4)
        swapped = gen(causal, prompt_for(causal, PROMPTS[::-1]), config)
        np.testing.assert_array_equal(swapped["token_ids"], out["token_ids"][::-1])


def test_beam_search_keeps_a_hypothesis_whose_prefix_was_not_the_best(causal):
    """A garden path: after prompt [0], token 1 is likeliest (0.5) but everything after it is
    uniform; token 2 (0.4) is followed by 3 almost surely, and the trigram (2, 3) by 4. The best
    3 tokens are 2 3 4, which ranks second after the first step: beam search must carry beam 1's
    state (the token before the last) into beam 0's place."""
    model = Markov(causal.inner, tau=1e6, eos=5)
    first = np.log([0.04, 0.5, 0.4, 0.03, 0.02, 0.01])
    model.bigram = np.zeros((V, V), np.float32)
    model.bigram[0] = first
    model.bigram[2] = [-5, -5, -5, 5, -5, -10]
    model.trigram = np.zeros((V + 1, V), np.float32)
    model.trigram[2] = [-3, -3, -3, -3, 3, -10]
    prompt = causal_prompt([[0]])
    out = generate(model, prompt, GenerationConfig(max_new_tokens=3, method="beam", num_beams=2),
                   eos_id=model.eos, pad_id=PAD, jit_compile=False)
    assert out["token_ids"][0].tolist() == [2, 3, 4]
    score, tokens = reference_beam(model, prompt, 0, 3, 2, 0.0, "gnmt")
    assert tokens == (2, 3, 4) and out["scores"][0] == pytest.approx(score, abs=1e-4)


def test_beam_search_stops_early_only_when_nothing_can_win(causal):
    """Two hand-made chains, beam width 1, EOS = 5. After [0]: EOS 0.6, then 1 (0.4) which
    repeats itself almost surely; with fairseq alpha = 2, [1, 1, 1, 1] (-0.92 / 16) beats
    [EOS] (-0.51), so stopping once a beam finished with a bound at the current length
    (Hugging Face's default heuristic) would be wrong. After [3]: 2 (0.6) and EOS (0.4, ranked
    second): only the first num_beams candidates may finish (Hugging Face, fairseq), so the
    answer is [2, 0, EOS] (-2.22) with alpha = 0, not [EOS] (-0.92)."""
    model = Markov(causal.inner, tau=1e6, eos=5)
    model.bigram = np.full((V, V), -20.0, np.float32)
    model.bigram[0, [1, 5]] = np.log([0.4, 0.6])
    model.bigram[1, 1] = 10.0
    model.bigram[3, [2, 5]] = np.log([0.6, 0.4])
    model.bigram[2] = np.log([0.3, 0.2, 0.1, 0.1, 0.1, 0.2])
    model.trigram = np.zeros((V + 1, V), np.float32)
    for start, alpha, kind, expected in ((0, 2.0, "fairseq", [1, 1, 1, 1]),
                                         (3, 0.0, "gnmt", [2, 0, 5])):
        prompt = causal_prompt([[start]])
        config = GenerationConfig(max_new_tokens=4, method="beam", num_beams=1,
                                  length_penalty=alpha, length_penalty_kind=kind)
        out = generate(model, prompt, config, eos_id=model.eos, pad_id=PAD, jit_compile=False)
        assert out["token_ids"][0][:out["lengths"][0]].tolist() == expected
        score, tokens = reference_beam(model, prompt, 0, 4, 1, alpha, kind)
        assert list(tokens) == expected and out["scores"][0] == pytest.approx(score, abs=1e-4)


N_DRAWS = 4000


@pytest.fixture(scope="module")
def draws(causal):
    """One prompt repeated N_DRAWS times (each row draws its own noise) and the exact
    probabilities of its next token."""
    prompt = prompt_for(causal, [[3, 2, 5]] * N_DRAWS, 3)
    return prompt, np.exp(next_log_probs(causal, prompt, 0, [[]])[0])


def assert_frequencies(tokens, probs, n):
    """Frequencies within 4 binomial standard errors sqrt(p (1 - p) / n) of probs (a false
    alarm in about 1 of 16,000 comparisons); tokens of probability 0 never drawn."""
    counts = np.bincount(tokens, minlength=V)
    for t in range(V):
        se = math.sqrt(probs[t] * (1 - probs[t]) / n)
        assert abs(counts[t] / n - probs[t]) <= 4 * se + 1e-9, (t, counts[t] / n, probs[t], se)


def sample_once(model, prompt, **settings):
    config = GenerationConfig(max_new_tokens=1, method="sample", **settings)
    return gen(model, prompt, config)["token_ids"][:, 0]


def test_samplers_draw_from_the_filtered_renormalised_distribution(causal, draws):
    prompt, probs = draws
    order = np.argsort(-probs)
    assert probs[order[2]] > 0.05  # at least three likely tokens: the filters cut real mass
    # top-k: never outside the k, frequencies of the renormalised top k
    tokens = sample_once(causal, prompt, top_k=2, seed=5)
    kept = np.zeros(V)
    kept[order[:2]] = probs[order[:2]] / probs[order[:2]].sum()
    assert set(tokens.tolist()) <= set(order[:2].tolist())
    assert_frequencies(tokens, kept, N_DRAWS)
    # top-p: p between the first token's mass and the first two's -> the nucleus is two tokens
    tokens = sample_once(causal, prompt, top_p=float(probs[order[0]] + 0.5 * probs[order[1]]),
                         seed=2)
    assert set(tokens.tolist()) <= set(order[:2].tolist())
    assert_frequencies(tokens, kept, N_DRAWS)
    # temperature: frequencies of softmax(logits / T)
    for temperature in (1.0, 2.5):
        tempered = probs ** (1 / temperature)
        tokens = sample_once(causal, prompt, temperature=temperature, seed=3)
        assert_frequencies(tokens, tempered / tempered.sum(), N_DRAWS)
    # the two temperature targets differ by far more than the tolerance
    assert abs(tempered.max() / tempered.sum() - probs.max()) > 0.05


def test_sampling_is_reproducible_and_top_k_holds_at_every_step(causal):
    prompt = prompt_for(causal, PROMPTS)
    draw = lambda seed, k=0: gen(causal, prompt, GenerationConfig(
        max_new_tokens=N_NEW, method="sample", seed=seed, top_k=k))
    np.testing.assert_array_equal(draw(7)["token_ids"], draw(7)["token_ids"])
    assert any((draw(7)["token_ids"] != draw(seed)["token_ids"]).any() for seed in (8, 9, 10))
    out = draw(1, k=2)
    for row in range(3):
        tokens = out["token_ids"][row][:out["lengths"][row]].tolist()
        lps = next_log_probs(causal, prompt, row, [tokens[:i] for i in range(len(tokens))])
        for step, token in enumerate(tokens):
            assert token in np.argsort(-lps[step])[:2]
        assert out["scores"][row] == pytest.approx(
            sum(lps[i, t] for i, t in enumerate(tokens)), abs=1e-4)


@pytest.mark.parametrize("family", ["causal", "seq2seq"])
def test_a_sampled_row_does_not_depend_on_the_other_rows(family, request):
    model = request.getfixturevalue(family)
    config = GenerationConfig(max_new_tokens=N_NEW, method="sample", top_p=0.9, seed=4)
    first = gen(model, prompt_for(model, PROMPTS), config)
    second = gen(model, prompt_for(model, [PROMPTS[0], [5, 5], [2]]), config)
    np.testing.assert_array_equal(first["token_ids"][0], second["token_ids"][0])
    assert first["scores"][0] == pytest.approx(second["scores"][0], abs=1e-5)


def test_the_decode_loop_is_traced_once_per_shapes_and_method(causal):
    prompt = prompt_for(causal, PROMPTS)
    other = prompt_for(causal, [[5, 2, 3, 3, 1], [4], [1, 1]])  # same shapes, other tokens
    generator = generator_for(causal, eos_id=causal.eos, pad_id=PAD, jit_compile=False)
    configs = [GenerationConfig(max_new_tokens=N_NEW, min_new_tokens=2, no_repeat_ngram_size=2)]
    configs += [GenerationConfig(max_new_tokens=N_NEW, method="sample", seed=seed, top_k=k,
                                 top_p=p, temperature=t)
                for seed, k, p, t in ((1, 0, 1.0, 1.0), (2, 3, 0.8, 0.7), (3, 1, 0.5, 2.0))]
    configs += [GenerationConfig(max_new_tokens=N_NEW, method="beam", num_beams=2,
                                 length_penalty=alpha, length_penalty_kind=kind)
                for alpha, kind in BEAM_CASES]
    for config in configs[:1] + configs[1:2] + configs[4:5]:
        generator.generate(prompt, config)  # traced here unless an earlier test did
    traced = generator.tracing_count()
    for config in configs:
        generator.generate(other, config)
    assert generator.tracing_count() == traced
    generator.generate(prompt, GenerationConfig(max_new_tokens=N_NEW - 1))  # new shape
    assert generator.tracing_count() == traced + 1


def test_decode_fn_stops_at_a_runtime_max_new_tokens(causal):
    generator = generator_for(causal, eos_id=causal.eos, pad_id=PAD, jit_compile=False)
    prompt = prompt_for(causal, PROMPTS)
    full = generator.generate(prompt, GenerationConfig(max_new_tokens=N_NEW))

    @tf.function
    def serve(limit):
        return generator.decode_fn({k: tf.constant(v) for k, v in prompt.items()},
                                   dict(default_settings(N_NEW), max_new_tokens=limit),
                                   method="greedy", max_new_tokens=N_NEW)

    out = serve(tf.constant(3))
    np.testing.assert_array_equal(out["token_ids"][:, :3], full["token_ids"][:, :3])
    assert (out["token_ids"].numpy()[:, 3:] == PAD).all()
    assert out["lengths"].numpy().tolist() == np.minimum(full["lengths"], 3).tolist()


def test_streaming_yields_the_tokens_generate_returns(causal):
    generator = generator_for(causal, eos_id=causal.eos, pad_id=PAD, jit_compile=False)
    prompt = prompt_for(causal, PROMPTS)
    for config in (GenerationConfig(max_new_tokens=N_NEW),
                   GenerationConfig(max_new_tokens=N_NEW, method="sample", seed=9)):
        streamed = np.stack(list(generator.stream(prompt, config)), 1)
        out = generator.generate(prompt, config)
        np.testing.assert_array_equal(streamed, out["token_ids"][:, :streamed.shape[1]])
        assert (out["token_ids"][:, streamed.shape[1]:] == PAD).all()


def test_xla_decodes_as_the_references(causal):
    """The default path (jit_compile): greedy with the n-gram ban (transformers #18707 and
    #20901: no_repeat_ngram_size failing under XLA) and beam search."""
    prompt = prompt_for(causal, PROMPTS)
    out = gen(causal, prompt, GenerationConfig(max_new_tokens=N_NEW, no_repeat_ngram_size=2,
                                               min_new_tokens=2), jit=None)
    check_against(out, reference_greedy(causal, prompt, N_NEW, min_new=2, no_repeat=2), N_NEW)
    config = GenerationConfig(max_new_tokens=N_NEW, method="beam", num_beams=2,
                              length_penalty=1.0)
    for key, value in gen(causal, prompt, config, jit=None).items():
        np.testing.assert_allclose(value, gen(causal, prompt, config)[key], atol=1e-5)


@pytest.mark.parametrize("prompt, message", [
    ({"token_ids": np.array([[1, 2, 0]]), "padding_mask": np.array([[1, 1, 0]])},
     "row 0 is not left-padded"),
    ({"token_ids": np.array([[0, 0]]), "padding_mask": np.array([[0, 0]])}, "no real token"),
    ({"token_ids": np.array([[1, 2]])}, "lacks ['padding_mask']"),
    ({"token_ids": np.ones((1, 60), np.int32), "padding_mask": np.ones((1, 60), np.int32)},
     "more than the model's 64"),
])
def test_bad_prompts_are_refused_with_the_culprit_named(causal, prompt, message):
    with pytest.raises(ValueError) as e:
        gen(causal, prompt, GenerationConfig(max_new_tokens=6))
    assert message in str(e.value)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="method 'topk' is not one of"):
        GenerationConfig(method="topk")
    with pytest.raises(ValueError, match="top_p=0 must be in"):
        GenerationConfig(top_p=0)
