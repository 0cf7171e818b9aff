"""garden.layers.row_products: a few rows times a large kernel, split along the kernel's input
rows so the cores share the product. The split is the product (up to float rounding), it is
split only where the rule says (rows known when traced, kernel of at least MIN_WEIGHTS), and a
decode with the intra-op pool at one thread (garden.generate's default) gives the unsplit
decode's logits and tokens."""

from __future__ import annotations

import json
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden.layers import row_products
from garden.models.generative import tied_step_logits
from testing import run_python

def _ops(fn, *specs):
    graph = fn.get_concrete_function(*specs).graph
    return [op.type for op in graph.get_operations()]


@pytest.fixture
def one_thread_ops(monkeypatch):
    """The pools as garden.generate sets them (intra-op 1, inter-op 2), as this process's
    TensorFlow reports them; the pools themselves cannot change once TensorFlow has run (the
    fresh-process test below sets them for real)."""
    monkeypatch.setattr(tf.config.threading, "get_intra_op_parallelism_threads", lambda: 1)
    monkeypatch.setattr(tf.config.threading, "get_inter_op_parallelism_threads", lambda: 2)


def test_nothing_is_split_with_tensorflows_default_pools():
    # pytest runs with TensorFlow's default pools (the intra-op pool multi-threaded).
    assert tf.config.threading.get_intra_op_parallelism_threads() != 1
    assert {row_products.parts_for(r) for r in (1, 3, 8, 512, None)} == {1}
    kernel = tf.ones((768, 1024))
    fn = tf.function(lambda x: row_products.matmul(x, kernel), autograph=False)
    assert _ops(fn, tf.TensorSpec([1, 768], tf.float32)).count("MatMul") == 1


def test_one_thread_ops_split_every_known_row_count_in_two_per_inter_op_thread(one_thread_ops):
    assert [row_products.parts_for(r) for r in (1, 3, 8, 512, None)] == [4, 4, 4, 4, 1]


@pytest.mark.parametrize("rows", [1, 3, 5, None])
def test_a_large_kernel_is_split_for_known_rows_and_the_sum_is_the_product(rows, one_thread_ops):
    rng = np.random.default_rng(0)
    kernel = rng.normal(size=(768, 1024)).astype("float32")  # 786K values >= MIN_WEIGHTS
    assert kernel.size >= row_products.MIN_WEIGHTS
    fn = tf.function(lambda x: row_products.matmul(x, tf.constant(kernel)), autograph=False)
    types = _ops(fn, tf.TensorSpec([rows, 768], tf.float32))
    assert types.count("MatMul") == (1 if rows is None else 4)
    x = rng.normal(size=(rows or 2, 768)).astype("float32")
    np.testing.assert_allclose(fn(x), x @ kernel, rtol=1e-4, atol=1e-4)


def test_a_small_kernel_is_one_matmul(one_thread_ops):
    fn = tf.function(lambda x: row_products.matmul(x, tf.ones((64, 64))), autograph=False)
    assert _ops(fn, tf.TensorSpec([1, 64], tf.float32)).count("MatMul") == 1


def test_dense_split_equals_the_layers_own_call(one_thread_ops):
    keras.utils.set_random_seed(1)
    layer = keras.layers.Dense(1024, activation="gelu")
    layer.build((None, 768))
    x = np.random.default_rng(1).normal(size=(1, 768)).astype("float32")
    fn = tf.function(lambda v: row_products.dense(layer, v), autograph=False)
    assert _ops(fn, tf.TensorSpec([1, 768], tf.float32)).count("MatMul") == 4
    np.testing.assert_allclose(fn(x), layer(x), rtol=1e-5, atol=1e-5)


def test_a_quantized_dense_keeps_its_own_call(one_thread_ops):
    keras.utils.set_random_seed(1)
    layer = keras.layers.Dense(1024)
    layer.build((None, 768))
    layer.quantize("int8")
    x = np.random.default_rng(1).normal(size=(1, 768)).astype("float32")
    fn = tf.function(lambda v: row_products.dense(layer, v), autograph=False)
    np.testing.assert_allclose(fn(x), layer(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 5])
def test_tied_logits_over_table_slices_equal_the_product(rows, one_thread_ops):
    rng = np.random.default_rng(2)
    table = rng.normal(size=(800, 768)).astype("float32")  # 614K values: split when few rows
    fn = tf.function(lambda h: tied_step_logits(h, tf.constant(table)), autograph=False)
    types = _ops(fn, tf.TensorSpec([rows, 768], tf.float32))
    kernel = "MatMul" if rows < 4 else "Einsum"
    assert types.count(kernel) == 4 and "ConcatV2" in types, types
    hidden = rng.normal(size=(rows, 768)).astype("float32")
    np.testing.assert_allclose(fn(hidden), hidden @ table.T, rtol=1e-4, atol=1e-4)


CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    import keras
    from garden.models.decoding import GenerationConfig, Generator
    from garden.layers import row_products
    from garden.models.gpt2 import GPT2Backbone, GPT2CausalLM

    keras.utils.set_random_seed(5)
    # hidden 768: every block kernel and the 700 x 768 table are above MIN_WEIGHTS.
    lm = GPT2CausalLM(GPT2Backbone(vocab_size=700, num_layers=1, hidden_size=768, num_heads=12,
                                   intermediate_size=1024, max_sequence_length=32,
                                   dropout=0.0))
    ids = np.random.default_rng(0).integers(1, 700, (2, 6)).astype("int32")
    prompt = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    config = GenerationConfig(max_new_tokens=8)

    def run():
        step = tf.function(lm.decode_step, autograph=False)
        logits, state = lm.start_decoding(prompt, max_length=14)
        logits, _ = step(tf.constant(ids[:, 0]), tf.constant(6), state)
        graph = step.get_concrete_function(tf.constant(ids[:, 0]), tf.constant(6), state).graph
        matmuls = sum(op.type == "MatMul" for op in graph.get_operations())
        tokens = Generator(lm, eos_id=0, pad_id=0).generate(prompt, config)["token_ids"]
        return np.asarray(logits), matmuls, np.asarray(tokens)

    split = run()
    row_products.MIN_WEIGHTS = 1 << 62  # nothing is split from here on
    whole = run()
    print(json.dumps({"parts": row_products.parts_for(2), "matmuls": [split[1], whole[1]],
                      "max_abs_diff": float(np.abs(split[0] - whole[0]).max()),
                      "tokens_equal": bool((split[2] == whole[2]).all())}))
""")


def test_one_thread_intra_op_decode_splits_and_equals_the_unsplit_decode():
    """A fresh process with the pools garden.generate sets by default (intra-op 1, inter-op 2):
    every known-row product is split in 4, and the decode gives the unsplit decode's logits
    (to float rounding) and greedy tokens."""
    proc = run_python(["-c", CHILD], timeout=600)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["parts"] == 4
    # 6 block products (q, k, v, output, two feed-forward) and the logits: 7 MatMuls unsplit,
    # 4 each split.
    assert result["matmuls"] == [28, 7], result
    assert result["max_abs_diff"] < 1e-4, result
    assert result["tokens_equal"], result
