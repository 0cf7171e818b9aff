"""garden.layers.attention.packed_projections: self-attention from one Q|K|V kernel packed
once, the inference path that `garden.serving.export(..., packed_attention=True)` traces.

- Inside the block a self-attention trace reads the packed kernel (and not the three
  projections'), its outputs equal the usual path's (power-of-two and other query scales,
  no biases and no scale as T5, padded keys; a row with every key masked stays finite).
- Grappler turns the scores' scale and mask add into one fused batch matmul and leaves one
  projection MatMul and no SelectV2.
- Anything else (cross-attention, training, a head mask) and every trace outside the block
  take the usual path.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.eager import context

from garden.layers.attention import MultiHeadAttention, packed_projections

LENGTH = 7


def _layer(hidden, heads, **kwargs):
    layer = MultiHeadAttention(num_heads=heads, key_dim=hidden // heads, **kwargs)
    layer.build((2, LENGTH, hidden), (2, LENGTH, hidden))
    rng = np.random.default_rng(0)
    for w in layer.weights:
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32"))
    return layer


def _inputs(hidden):
    x = tf.constant(np.random.default_rng(1).normal(size=(3, LENGTH, hidden)).astype("float32"))
    keys = np.ones((3, LENGTH), "int32")
    keys[1, 4:] = 0  # padded keys
    keys[2, :] = 0  # every key masked (an all-padding sequence): no meaningful output
    return x, tf.constant(keys[:, None, :])  # [B, 1, Tk]


def _trace(layer, hidden, **call_kwargs):
    spec = [tf.TensorSpec([None, None, hidden]), tf.TensorSpec([None, 1, None], tf.int32)]

    @tf.function(input_signature=spec)
    def attend(x, mask):
        with tf.device("/CPU:0"):  # the remapper fuses only nodes placed on a CPU
            return layer(x, x, attention_mask=mask, **call_kwargs)

    return attend.get_concrete_function()


def _reads(concrete, variable):
    """Whether the trace captures `variable` (a tf.Variable, or a Keras one's tf.Variable)."""
    variable = variable if isinstance(variable, tf.Variable) else variable.value
    return any(v is variable for v in concrete.variables)


@pytest.mark.parametrize("hidden,heads,kwargs", [
    (64, 4, {}),  # d = 16: 1/4 on the scores, in the fused batch matmul
    (48, 8, {}),  # d = 6: 1/sqrt(6) folded into the packed query kernel
    (64, 4, {"use_bias": False, "scale_queries": False}),  # T5's projections
])
def test_packed_self_attention_equals_the_usual_path(hidden, heads, kwargs):
    layer = _layer(hidden, heads, **kwargs)
    x, mask = _inputs(hidden)
    usual = _trace(layer, hidden)
    expected = usual(x, mask).numpy()
    with packed_projections(layer) as packed:
        assert len(packed) == (2 if layer.use_bias else 1)
        assert packed[0].shape == (hidden, 3 * hidden) and not packed[0].trainable
        concrete = _trace(layer, hidden)
        got = concrete(x, mask).numpy()
    assert _reads(concrete, packed[0]) and not _reads(concrete, layer.query_dense.kernel)
    assert not _reads(usual, packed[0])
    np.testing.assert_allclose(got[:2], expected[:2], atol=1e-5)
    # A row whose keys are all masked: finite, as on the usual path (equal only while its
    # scores lie within 32 of each other, see packed_projections).
    assert np.isfinite(got[2]).all()


def _executed_ops(concrete, *args):
    """Op types of the graph that runs the call (after Grappler and oneDNN's rewrites)."""
    ctx = context.context()
    ctx.enable_run_metadata()
    try:
        concrete(*args)
        metadata = ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()
    graphs = [g.post_optimization_graph for g in metadata.function_graphs]
    return collections.Counter(n.op for g in graphs if any(n.op == "Softmax" for n in g.node)
                               for n in g.node)


def test_packed_graph_fuses_scale_and_mask_into_the_batch_matmul():
    layer = _layer(64, 4)
    x, mask = _inputs(64)
    usual = _executed_ops(_trace(layer, 64), x, mask)
    with packed_projections(layer):
        packed = _executed_ops(_trace(layer, 64), x, mask)
    assert packed["_MklFusedBatchMatMulV2"] == 1 and packed["Mul"] == 0, packed
    assert packed["_FusedMatMul"] == 2 and packed["Transpose"] == 2, packed  # Q|K|V, output
    assert usual["_FusedMatMul"] == 4 and usual["Transpose"] == 4, usual


def test_other_calls_and_traces_outside_the_block_take_the_usual_path():
    layer = _layer(64, 4)
    x, mask = _inputs(64)
    other = tf.constant(np.random.default_rng(2).normal(size=(3, LENGTH, 64)).astype("float32"))
    with packed_projections(layer) as packed:
        cross = tf.function(lambda q, v: layer(q, v)).get_concrete_function(x, other)
        training = _trace(layer, 64, training=True)
        heads_off = _trace(layer, 64, head_mask=tf.constant([1.0, 0.0, 1.0, 1.0]))
    for concrete in (cross, training, heads_off):
        assert not _reads(concrete, packed[0]) and _reads(concrete, layer.query_dense.kernel)
    assert layer._packed is None
    # Changed weights: the usual path reads them, and a new block packs them again.
    layer.value_dense.kernel.assign(layer.value_dense.kernel * 2.0)
    expected = _trace(layer, 64)(x, mask).numpy()
    with packed_projections(layer):
        np.testing.assert_allclose(_trace(layer, 64)(x, mask).numpy(), expected, atol=1e-5)


def test_layers_with_their_own_call_are_not_packed():
    from garden.layers.local_attention import LocalMultiHeadAttention

    local = LocalMultiHeadAttention(num_heads=4, key_dim=16, band_width=2)
    local.build((2, LENGTH, 64), (2, LENGTH, 64))
    with packed_projections(local) as packed:
        assert packed == [] and local._packed is None
