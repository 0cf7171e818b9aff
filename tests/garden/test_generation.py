"""garden.generation against references that recompute the whole sequence at every step.

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

from garden.generation import GenerationConfig, Generator, default_settings, generate
from garden.models.generative import GenerativeLM
from generative_testing import ToyCausalLM, ToySeq2SeqLM

V = 6
EOS, PAD = 0, 5  # pad_id is only the filler after EOS: any id will do


class Markov(GenerativeLM):
    """A toy GenerativeLM with spread, context-dependent next-token distributions: the toy's
    logits (which mostly repeat the last token) divided by `tau`, plus a fixed random bigram
    table indexed by the previous token. It honours the contract through the toy's own cache."""

    def __init__(self, inner, tau, seed=0, **kwargs):
        super().__init__(**kwargs)
        self.inner, self.tau = inner, tau
        self.table = np.random.RandomState(seed).normal(0, 1.5, (V, V)).astype("float32")
        self.is_encoder_decoder = inner.is_encoder_decoder
        self.max_decoder_length = inner.max_decoder_length
        self.key = "decoder_token_ids" if inner.is_encoder_decoder else "token_ids"

    def _mix(self, logits, previous):
        return logits / self.tau + tf.gather(self.table, previous)

    def call(self, inputs, training=False):
        return {"logits": self._mix(self.inner(inputs)["logits"], inputs[self.key])}

    def start_decoding(self, prompt, max_length):
        logits, state = self.inner.start_decoding(prompt, max_length)
        return self._mix(logits, prompt[self.key][:, -1]), state

    def decode_step(self, token_ids, index, state):
        logits, state = self.inner.decode_step(token_ids, index, state)
        return self._mix(logits, token_ids), state


@pytest.fixture(scope="module")
def causal():
    return Markov(ToyCausalLM(vocab_size=V, seed=0), tau=20.0)


@pytest.fixture(scope="module")
def seq2seq():
    return Markov(ToySeq2SeqLM(vocab_size=V, seed=1), tau=200.0)


def gen(model, prompt, config, eos=EOS, jit=False):
    """generate() without XLA: its compile time would dominate these tiny runs (the XLA path
    has its own tests below)."""
    return generate(model, prompt, config, eos_id=eos, pad_id=PAD, jit_compile=jit)


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


def reference_greedy(model, prompt, n_new, eos=EOS, min_new=0, no_repeat=0, with_steps=False):
    """Greedy decoding by full recompute at every step, one row at a time."""
    out = []
    for row in range(len(next(iter(prompt.values())))):
        tokens, score, steps = [], 0.0, []
        for step in range(n_new):
            lp = next_log_probs(model, prompt, row, [tokens])[0]
            for t in banned(decoder_sequence(model, prompt, row) + tokens, no_repeat):
                lp[t] = -np.inf
            if step < min_new:
                lp[eos] = -np.inf
            token = int(np.argmax(lp))
            tokens.append(token)
            score += lp[token]
            steps.append(lp[token])
            if token == eos:
                break
        out.append((tokens, score, steps) if with_steps else (tokens, score))
    return out


def check_against(out, reference, n_new, atol=1e-4):
    for row, (tokens, score) in enumerate(reference):
        assert out["token_ids"][row].tolist() == tokens + [PAD] * (n_new - len(tokens)), row
        assert out["lengths"][row] == len(tokens)
        assert out["scores"][row] == pytest.approx(score, abs=atol)


PROMPTS = [[3, 4], [2, 5, 3, 4, 2]]  # rows of 2 and 5 tokens: row 0 is left-padded


def prompt_for(model, rows, width=None):
    return (seq2seq_prompt if model.is_encoder_decoder else causal_prompt)(rows, width)


def truncate(reference, eos):
    """Greedy with `eos` = greedy without it, cut after the first `eos` (nothing else changes
    when min_new_tokens = 0)."""
    out = []
    for tokens, _, step_scores in reference:
        end = tokens.index(eos) + 1 if eos in tokens else len(tokens)
        out.append((tokens[:end], sum(step_scores[:end])))
    return out


@pytest.mark.parametrize("family", ["causal", "seq2seq"])
def test_greedy_is_the_argmax_of_the_full_recompute_at_every_step(family, request):
    model = request.getfixturevalue(family)
    prompt = prompt_for(model, PROMPTS)
    plain = reference_greedy(model, prompt, 5, eos=-1, with_steps=True)
    # EOS = the token row 0 produces at step 3: row 0 stops there, row 1 wherever it meets it
    eos = plain[0][0][2]
    out = gen(model, prompt, GenerationConfig(max_new_tokens=5), eos=eos)
    check_against(out, truncate(plain, eos), 5)
    assert out["lengths"][0] <= 3 and (out["token_ids"][0, 3:] == PAD).all()


def test_min_new_tokens_and_no_repeat_ngrams_match_the_reference(causal):
    prompt = prompt_for(causal, PROMPTS)
    plain = reference_greedy(causal, prompt, 5, eos=-1)
    eos = plain[0][0][0]  # row 0's first token: min_new_tokens must hold it back
    out = gen(causal, prompt, GenerationConfig(max_new_tokens=5, min_new_tokens=3), eos=eos)
    check_against(out, reference_greedy(causal, prompt, 5, eos=eos, min_new=3), 5)
    assert (out["token_ids"][:, :3] != eos).all() and (out["lengths"] >= 3).all()
    plain = gen(causal, prompt, GenerationConfig(max_new_tokens=5))
    for n in (1, 2, 3):
        out = gen(causal, prompt, GenerationConfig(max_new_tokens=5, no_repeat_ngram_size=n))
        check_against(out, reference_greedy(causal, prompt, 5, no_repeat=n), 5)
        assert (out["token_ids"] != plain["token_ids"]).any(), n  # the constraint bit
        for row in range(2 if n > 1 else 0):  # n = 1 bans all 6 tokens within 5 steps
            start = len(decoder_sequence(causal, prompt, row))
            seq = decoder_sequence(causal, prompt, row) + \
                out["token_ids"][row][:out["lengths"][row]].tolist()
            for end in range(max(start, n - 1), len(seq)):
                earlier = {tuple(seq[i:i + n]) for i in range(end - n + 1)}
                assert tuple(seq[end - n + 1:end + 1]) not in earlier, (n, seq)


def penalty(length, alpha, kind):
    return ((5 + length) / 6) ** alpha if kind == "gnmt" else length ** alpha


def exhaustive_best(model, prompt, row, n_new, alpha, kind, eos=EOS):
    """The best hypothesis over all continuations: ending with EOS at any step, or n_new tokens
    without EOS, by penalised score (module docstring of garden.generation)."""
    best = (-np.inf, None)
    prefixes, prefix_scores = [()], [0.0]
    for step in range(n_new):
        lps = next_log_probs(model, prompt, row, prefixes)
        grown, grown_scores = [], []
        for p, base, lp in zip(prefixes, prefix_scores, lps):
            for t in range(V):
                s = base + lp[t]
                if t == eos or step == n_new - 1:
                    best = max(best, (s / penalty(step + 1, alpha, kind), p + (t,)))
                if t != eos:
                    grown.append(p + (t,))
                    grown_scores.append(s)
        prefixes, prefix_scores = grown, grown_scores
    return best


BEAM_CASES = [(0.0, "gnmt"), (1.0, "gnmt"), (2.0, "fairseq"), (-1.0, "fairseq")]


@pytest.mark.parametrize("family", ["causal", "seq2seq"])
def test_beam_search_finds_the_exhaustive_optimum_with_a_beam_that_holds_everything(
        family, request):
    model = request.getfixturevalue(family)
    prompt = prompt_for(model, PROMPTS)
    n_new = 4 if family == "causal" else 3
    # Every candidate ranks in the first num_beams: 5 ** (n_new - 1) live prefixes * 6 tokens.
    beams = 5 ** (n_new - 1) * V
    lengths = set()
    for alpha, kind in BEAM_CASES:
        config = GenerationConfig(max_new_tokens=n_new, method="beam", num_beams=beams,
                                  length_penalty=alpha, length_penalty_kind=kind)
        out = gen(model, prompt, config)
        for row in range(2):
            score, tokens = exhaustive_best(model, prompt, row, n_new, alpha, kind)
            assert out["token_ids"][row].tolist() == list(tokens) + [PAD] * (n_new - len(tokens))
            assert out["lengths"][row] == len(tokens)
            assert out["scores"][row] == pytest.approx(score, abs=1e-4)
            lengths.add(len(tokens))
    assert len(lengths) >= 2, "every case had the same winning length: penalties untested"


def test_a_narrow_beam_scores_its_own_output_and_never_beats_the_optimum(causal):
    prompt = prompt_for(causal, PROMPTS)
    for alpha, kind in BEAM_CASES:
        config = GenerationConfig(max_new_tokens=4, method="beam", num_beams=2,
                                  length_penalty=alpha, length_penalty_kind=kind)
        out = gen(causal, prompt, config)
        for row in range(2):
            tokens = out["token_ids"][row][:out["lengths"][row]].tolist()
            lps = next_log_probs(causal, prompt, row, [tokens[:i] for i in range(len(tokens))])
            logp = sum(lps[i, t] for i, t in enumerate(tokens))
            assert out["scores"][row] == pytest.approx(logp / penalty(len(tokens), alpha, kind),
                                                       abs=1e-4)
            best = exhaustive_best(causal, prompt, row, 4, alpha, kind)[0]
            assert out["scores"][row] <= best + 1e-5


N_DRAWS = 4000


def one_step_distribution(model, n):
    """One prompt repeated n times (each row draws its own noise) and the exact probabilities
    of its next token."""
    prompt = prompt_for(model, [[3, 2, 5]] * n)
    return prompt, np.exp(next_log_probs(model, prompt, 0, [[]])[0])


def assert_frequencies(tokens, probs, n):
    """Frequencies within 4 binomial standard errors sqrt(p (1 - p) / n) of probs (a false
    alarm in about 1 of 16,000 comparisons); tokens of probability 0 never drawn."""
    counts = np.bincount(tokens, minlength=V)
    for t in range(V):
        se = math.sqrt(probs[t] * (1 - probs[t]) / n)
        assert abs(counts[t] / n - probs[t]) <= 4 * se + 1e-9, (t, counts[t] / n, probs[t], se)


@pytest.fixture(scope="module")
def draws(causal):
    return one_step_distribution(causal, N_DRAWS)


def test_top_k_never_leaves_the_k_and_matches_the_renormalised_distribution(causal, draws):
    prompt, probs = draws
    assert np.sort(probs)[-3] > 0.05  # at least three likely tokens: k = 2 cuts real mass
    top = np.argsort(-probs)[:2]
    out = gen(causal, prompt, GenerationConfig(max_new_tokens=1, method="sample", top_k=2,
                                               seed=5))
    kept = np.zeros(V)
    kept[top] = probs[top] / probs[top].sum()
    assert set(out["token_ids"][:, 0].tolist()) <= set(top.tolist())
    assert_frequencies(out["token_ids"][:, 0], kept, N_DRAWS)


def test_top_k_holds_at_every_step_of_a_longer_sample(causal):
    prompt = prompt_for(causal, [[3, 2, 5]] * 8)
    out = gen(causal, prompt, GenerationConfig(max_new_tokens=4, method="sample", top_k=2,
                                               seed=1), eos=-1)
    for row in range(8):
        tokens = out["token_ids"][row].tolist()
        lps = next_log_probs(causal, prompt, row, [tokens[:i] for i in range(4)])
        for step, token in enumerate(tokens):
            assert token in np.argsort(-lps[step])[:2]


def test_top_p_stays_in_the_nucleus_and_matches_its_renormalised_mass(causal, draws):
    prompt, probs = draws
    order = np.argsort(-probs)
    p = float(probs[order[0]] + 0.5 * probs[order[1]])  # nucleus = the two most likely tokens
    nucleus = order[:2]
    out = gen(causal, prompt, GenerationConfig(max_new_tokens=1, method="sample", top_p=p,
                                               seed=2))
    kept = np.zeros(V)
    kept[nucleus] = probs[nucleus] / probs[nucleus].sum()
    assert set(out["token_ids"][:, 0].tolist()) <= set(nucleus.tolist())
    assert_frequencies(out["token_ids"][:, 0], kept, N_DRAWS)


def test_temperature_samples_from_the_tempered_distribution(causal, draws):
    prompt, probs = draws
    for temperature in (1.0, 2.5):
        out = gen(causal, prompt, GenerationConfig(max_new_tokens=1, method="sample",
                                                   temperature=temperature, seed=3), eos=-1)
        tempered = probs ** (1 / temperature)
        assert_frequencies(out["token_ids"][:, 0], tempered / tempered.sum(), N_DRAWS)
    # the two targets differ by far more than the tolerance, so temperature took effect
    assert abs(tempered.max() / tempered.sum() - probs.max()) > 0.05


def test_sampling_is_reproducible_from_the_seed(causal):
    prompt = prompt_for(causal, PROMPTS)
    draw = lambda seed: gen(causal, prompt, GenerationConfig(
        max_new_tokens=5, method="sample", seed=seed), eos=-1)["token_ids"]
    np.testing.assert_array_equal(draw(7), draw(7))
    assert any((draw(7) != draw(seed)).any() for seed in (8, 9, 10))


@pytest.mark.parametrize("config", [
    GenerationConfig(max_new_tokens=5),
    GenerationConfig(max_new_tokens=5, method="sample", top_p=0.9, seed=4),
    GenerationConfig(max_new_tokens=5, method="beam", num_beams=3, length_penalty=0.6,
                     no_repeat_ngram_size=2)], ids=["greedy", "sample", "beam"])
@pytest.mark.parametrize("family", ["causal", "seq2seq"])
def test_left_padding_and_other_rows_do_not_change_a_row(family, config, request):
    model = request.getfixturevalue(family)
    alone = gen(model, prompt_for(model, [[3, 4]]), config)
    first = gen(model, prompt_for(model, [[3, 4], [2, 5, 3, 4, 4], [5, 5, 2, 1, 3, 2]]), config)
    second = gen(model, prompt_for(model, [[3, 4], [5, 5, 2, 1, 3, 2], [2, 5, 3, 4, 4]]), config)
    for batch in (first, second):
        for key in ("token_ids", "lengths"):
            np.testing.assert_array_equal(batch[key][0], alone[key][0])
        assert batch["scores"][0] == pytest.approx(alone["scores"][0], abs=1e-4)
    if config.method != "sample":  # a row's noise is keyed by its row number
        np.testing.assert_array_equal(first["token_ids"][1:], second["token_ids"][:0:-1])


def test_the_decode_loop_is_traced_once_per_shapes_and_method(causal):
    generator = Generator(causal, eos_id=EOS, pad_id=PAD, jit_compile=False)
    prompt = prompt_for(causal, PROMPTS)
    generator.generate(prompt, GenerationConfig(max_new_tokens=4))
    generator.generate(prompt, GenerationConfig(max_new_tokens=4, method="sample"))
    generator.generate(prompt, GenerationConfig(max_new_tokens=4, method="beam", num_beams=2))
    assert generator.tracing_count() == 3
    other = prompt_for(causal, [[5, 2, 3, 3, 1], [4]])  # same shapes, other tokens
    generator.generate(other, GenerationConfig(max_new_tokens=4, min_new_tokens=2,
                                               no_repeat_ngram_size=2))
    for seed, k, p, t in ((1, 0, 1.0, 1.0), (2, 3, 0.8, 0.7), (3, 1, 0.5, 2.0)):
        generator.generate(other, GenerationConfig(max_new_tokens=4, method="sample", seed=seed,
                                                   top_k=k, top_p=p, temperature=t))
    for alpha, kind in BEAM_CASES:
        generator.generate(other, GenerationConfig(max_new_tokens=4, method="beam", num_beams=2,
                                                   length_penalty=alpha,
                                                   length_penalty_kind=kind))
    assert generator.tracing_count() == 3
    generator.generate(prompt, GenerationConfig(max_new_tokens=5))  # a new shape: one more
    assert generator.tracing_count() == 4


def test_decode_fn_stops_at_a_runtime_max_new_tokens(causal):
    generator = Generator(causal, eos_id=-1, pad_id=PAD, jit_compile=False)
    prompt = prompt_for(causal, PROMPTS)
    full = generator.generate(prompt, GenerationConfig(max_new_tokens=5))

    @tf.function
    def serve(limit):
        return generator.decode_fn({k: tf.constant(v) for k, v in prompt.items()},
                                   dict(default_settings(5), max_new_tokens=limit),
                                   method="greedy", max_new_tokens=5)

    out = serve(tf.constant(3))
    np.testing.assert_array_equal(out["token_ids"][:, :3], full["token_ids"][:, :3])
    assert (out["token_ids"].numpy()[:, 3:] == PAD).all()
    assert out["lengths"].numpy().tolist() == [3, 3]


def test_streaming_yields_the_tokens_generate_returns(causal):
    prompt = prompt_for(causal, PROMPTS)
    eos = reference_greedy(causal, prompt, 3, eos=-1)[0][0][2]
    generator = Generator(causal, eos_id=eos, pad_id=PAD, jit_compile=False)
    for config in (GenerationConfig(max_new_tokens=5),
                   GenerationConfig(max_new_tokens=5, method="sample", seed=9)):
        streamed = np.stack(list(generator.stream(prompt, config)), 1)
        out = generator.generate(prompt, config)
        np.testing.assert_array_equal(streamed, out["token_ids"][:, :streamed.shape[1]])
        assert (out["token_ids"][:, streamed.shape[1]:] == PAD).all()


def test_xla_decodes_as_the_references(causal):
    """The default (jit_compile) path: greedy with the n-gram ban (transformers #18707 and
    #20901: no_repeat_ngram_size failing under XLA) and beam search."""
    prompt = prompt_for(causal, PROMPTS)
    out = gen(causal, prompt, GenerationConfig(max_new_tokens=5, no_repeat_ngram_size=2),
              jit=None)
    check_against(out, reference_greedy(causal, prompt, 5, no_repeat=2), 5)
    config = GenerationConfig(max_new_tokens=3, method="beam", num_beams=5 ** 2 * V,
                              length_penalty=1.0)
    out = gen(causal, prompt, config, jit=None)
    for row in range(2):
        score, tokens = exhaustive_best(causal, prompt, row, 3, 1.0, "gnmt")
        assert out["token_ids"][row][:out["lengths"][row]].tolist() == list(tokens)
        assert out["scores"][row] == pytest.approx(score, abs=1e-4)


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
