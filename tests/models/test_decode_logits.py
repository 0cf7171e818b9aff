"""The decode step's tied logits (garden.models.generative.tied_step_logits, through GPT-2's
next_token_logits, T5's and BART's step logits): the kernel picked by the batch (MatMul up to 3
rows, Einsum from 4, chosen at run time when the batch is unknown) gives the training path's
logits, and cached decoding through it equals the full recompute."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden.models.bart import BartBackbone, BartSeq2SeqLM
from garden.models.gpt2 import GPT2Backbone, GPT2CausalLM
from garden.models.t5 import PRESETS, T5Backbone, T5Seq2SeqLM


@pytest.fixture(scope="module")
def lm():
    keras.utils.set_random_seed(3)
    return GPT2CausalLM(GPT2Backbone(vocab_size=101, num_layers=1, hidden_size=32, num_heads=2,
                                     max_sequence_length=16, dropout=0.0))


def _op_types(fn, batch):
    graph = fn.get_concrete_function(tf.TensorSpec([batch, 32], tf.float32)).graph
    return {op.type for op in graph.get_operations()}


@pytest.mark.parametrize("batch", [1, 2, 4, 5])
def test_static_batch_picks_its_kernel_and_gives_the_tied_logits(lm, batch):
    fn = tf.function(lm.next_token_logits, autograph=False)
    types = _op_types(fn, batch)
    assert ("Einsum" in types) == (batch >= 4) and ("MatMul" in types) == (batch < 4), types
    hidden = np.random.default_rng(batch).normal(size=(batch, 32)).astype("float32")
    np.testing.assert_allclose(fn(hidden), lm.logits(hidden), atol=1e-5, rtol=1e-5)


def test_unknown_batch_picks_at_run_time(lm):
    fn = tf.function(lm.next_token_logits, autograph=False,
                     input_signature=[tf.TensorSpec([None, 32], tf.float32)])
    assert "If" in _op_types(fn, None) or "StatelessIf" in _op_types(fn, None)
    for batch in (1, 6):
        hidden = np.random.default_rng(batch).normal(size=(batch, 32)).astype("float32")
        np.testing.assert_allclose(fn(hidden), lm.logits(hidden), atol=1e-5, rtol=1e-5)


def test_cached_decoding_at_batch_5_equals_the_full_recompute(lm):
    ids = np.random.default_rng(0).integers(1, 101, (5, 10)).astype("int32")
    mask = np.ones_like(ids)
    full = np.asarray(lm({"token_ids": ids, "padding_mask": mask})["logits"])
    step = tf.function(lm.decode_step, autograph=False)
    logits, state = lm.start_decoding({"token_ids": ids[:, :4], "padding_mask": mask[:, :4]},
                                      max_length=10)
    np.testing.assert_allclose(logits, full[:, 3], atol=1e-5)
    for t in range(4, 10):
        logits, state = step(tf.constant(ids[:, t]), tf.constant(t), state)
        np.testing.assert_allclose(logits, full[:, t], atol=1e-5)


def _t5_tied():
    lm = T5Seq2SeqLM(T5Backbone(**dict(PRESETS["t5_tiny"], vocab_size=60, num_layers=1,
                                       tie_embeddings=True, dropout=0.0)))
    return lm, lm.next_token_logits, lm.logits, lm.backbone.hidden_size


def _bart():
    lm = BartSeq2SeqLM(BartBackbone(vocab_size=60, num_layers=1, hidden_size=16, num_heads=2,
                                    intermediate_size=24, max_sequence_length=16, dropout=0.0))
    # A bias that is not zero, so that adding it to the step's logits is checked too.
    lm.final_logits_bias.assign(np.linspace(-1, 1, 60).astype("float32"))
    return lm, lm._step_logits, lm._logits, lm.backbone.hidden_size


@pytest.mark.parametrize("build", [_t5_tied, _bart], ids=["t5_tied", "bart"])
@pytest.mark.parametrize("batch", [1, 5])
def test_seq2seq_step_logits_pick_their_kernel_and_give_the_training_logits(build, batch):
    keras.utils.set_random_seed(4)
    lm, step_logits, logits, width = build()
    fn = tf.function(step_logits, autograph=False)
    graph = fn.get_concrete_function(tf.TensorSpec([batch, width], tf.float32)).graph
    types = {op.type for op in graph.get_operations()}
    assert ("Einsum" in types) == (batch >= 4), types
    hidden = np.random.default_rng(batch).normal(size=(batch, width)).astype("float32")
    np.testing.assert_allclose(fn(hidden), logits(hidden), atol=1e-5, rtol=1e-5)
