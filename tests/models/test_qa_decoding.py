"""Span decoding on hand-made logits: the NumPy decoder (garden.models.question_answering.decode)
and its in-graph twin (garden.serving.question_answering.decode_windows) pick the same answers, and
each rule (max-context windows, null score = min over windows, the threshold, end >= start,
max_answer_length, character offsets) decides a case built so that dropping it changes the
answer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from garden.models.question_answering import decode
from garden.serving.question_answering import decode_windows

CONTEXT = "alpha beta gamma delta epsilon"
# Pieces: alpha [0,5) beta [6,10) gamma [11,16) delta [17,22) epsilon [23,30); two windows of
# length 8: [CLS] q [SEP] c c c c [SEP], window 0 holds pieces 0-3, window 1 pieces 1-4.
SPANS = [(0, 5), (6, 10), (11, 16), (17, 22), (23, 30)]


def _window(first_piece, max_context):
    starts, ends = [-1] * 8, [-1] * 8
    for slot in range(4):
        starts[3 + slot], ends[3 + slot] = SPANS[first_piece + slot]
    return {"context_char_start": np.array(starts), "context_char_end": np.array(ends),
            "token_is_max_context": np.array([0, 0, 0] + max_context + [0])}


# Pieces 0-1 have their max context in window 0, pieces 2-4 in window 1.
W0, W1 = _window(0, [1, 1, 0, 0]), _window(1, [0, 1, 1, 1])


def _logits(**at):
    """start / end logits [8] that are -5 except at the given slots."""
    out = np.full(8, -5.0, np.float32)
    for slot, value in at.items():
        out[int(slot[1:])] = value
    return out


def _both(windows, logits, **kwargs):
    """(text, start, end) from the NumPy decoder and from the graph, asserted equal."""
    wins = [dict(w, start_logits=s, end_logits=e) for w, (s, e) in zip(windows, logits)]
    ours = decode(CONTEXT, wins, **kwargs)
    stacked = {k: tf.constant(np.stack([w[k] for w in windows])) for k in windows[0]}
    stacked["example_index"] = tf.zeros([len(windows)], tf.int64)
    graph = decode_windows(tf.constant([CONTEXT]), stacked,
                           tf.constant(np.stack([s for s, _ in logits])),
                           tf.constant(np.stack([e for _, e in logits])), **kwargs)
    graph_answer = (graph["answer"].numpy()[0].decode(), int(graph["start"].numpy()[0]),
                    int(graph["end"].numpy()[0]))
    assert graph_answer == (ours.text, ours.start, ours.end)
    if ours.text:
        assert float(graph["score"].numpy()[0]) == pytest.approx(ours.score)
    return ours


def test_a_start_counts_only_in_its_max_context_window():
    # Window 0 prefers "gamma" (slot 5, piece 2: its max context is window 1) at 10; window 1
    # prefers "delta" (slot 5, piece 3) at 6. Without the max-context rule: "gamma".
    w0 = (_logits(s5=5.0), _logits(s5=5.0))
    w1 = (_logits(s5=3.0), _logits(s5=3.0))
    answer = _both([W0, W1], [w0, w1])
    assert (answer.text, answer.start, answer.end) == ("delta", 17, 22)
    assert answer.score == 6.0


def test_null_score_is_the_minimum_over_windows_and_the_threshold_applies():
    # [CLS] scores 4 + 4 in window 0, -1 + -1 in window 1; best span "beta" (window 0) at 6.
    w0 = (_logits(s0=4.0, s4=3.0), _logits(s0=4.0, s4=3.0))
    w1 = (_logits(s0=-1.0), _logits(s0=-1.0))
    answer = _both([W0, W1], [w0, w1], null_threshold=0.0)
    # min null -2 - 6 = -8 <= 0: answered. With the first or the max window's null (8 - 6 = 2
    # > 0) it would be "".
    assert answer.text == "beta" and answer.null_diff == -8.0
    null = _both([W0, W1], [w0, w1], null_threshold=-8.5)
    assert (null.text, null.start, null.end) == ("", -1, -1)
    assert null.best_text == "beta"


def test_spans_must_end_after_they_start_and_be_short_enough():
    # Best pair: start "beta" (slot 4) + end "alpha" (slot 3) = 19, ends before it starts;
    # next "beta gamma delta" (4, 6) = 17, three pieces; then "alpha" (3, 3) = 15.
    w0 = (_logits(s4=9.0, s3=5.0), _logits(s3=10.0, s6=8.0))
    wins, logits = [W0, W1], [w0, (_logits(), _logits())]
    answer = _both(wins, logits)
    assert (answer.text, answer.start, answer.end) == ("beta gamma delta", 6, 22)
    short = _both(wins, logits, max_answer_length=2)
    assert (short.text, short.start, short.end) == ("alpha", 0, 5)


def test_no_candidate_answers_empty_even_without_threshold():
    # The top 2 starts and ends are question / special slots: with n_best 2 no context piece
    # is a candidate; with n_best 3 the third ("beta" .. "beta") is.
    w = (_logits(s0=9.0, s1=9.0, s4=1.0), _logits(s1=9.0, s2=9.0, s4=1.0))
    answer = _both([W0], [w], null_threshold=math.inf, n_best=2)
    assert (answer.text, answer.start, answer.end) == ("", -1, -1)
    assert _both([W0], [w], null_threshold=math.inf, n_best=3).text == "beta"


def test_graph_and_numpy_agree_on_random_logits_and_ties():
    rng = np.random.default_rng(0)
    for trial in range(30):
        # Coarse logits: many ties, broken the same way (lower position, first window).
        logits = [(rng.integers(-3, 4, 8).astype(np.float32),
                   rng.integers(-3, 4, 8).astype(np.float32)) for _ in range(2)]
        _both([W0, W1], logits, null_threshold=float(rng.integers(-3, 3)),
              n_best=int(rng.integers(1, 9)), max_answer_length=int(rng.integers(1, 5)))
