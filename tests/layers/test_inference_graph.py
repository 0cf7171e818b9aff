"""What the serving graph of an encoder block looks like after Grappler, and that the
inference-only choices behind it keep Keras' numbers (benchmarks/serving_latency.py measures
what they are worth).

- The feed-forward layer runs on rows [B*T, H], so Grappler's remapper fuses MatMul + BiasAdd
  + exact GELU into one _FusedMatMul (oneDNN's fused MatMul at run time). On [B, T, H] Keras'
  Dense puts a Reshape between MatMul and BiasAdd and nothing fuses.
- 1/sqrt(d) multiplies the projected queries when the rows are unknown or fewer than the
  kernel's inputs (serving), the query kernel otherwise (training batches).
"""

import collections
import os

import numpy as np
import pytest
import keras
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.grappler import tf_optimizer

from garden.layers.transformer_encoder import TransformerEncoderBlock
from model_testing import keras_attention_pair

# d = 6: 1/sqrt(6) is not a power of two, so the two placements of the scale round differently.
HIDDEN, HEADS = 64, 4  # d = 16: a power-of-two scale, which may go on the rows


def _grappler_graph(concrete):
    """The function's graph as Grappler's default optimizers (remapper included) leave it."""
    meta = tf.compat.v1.train.export_meta_graph(graph_def=concrete.graph.as_graph_def(),
                                                graph=concrete.graph)
    meta.collection_def["train_op"].node_list.value.extend([t.name for t in concrete.outputs])
    return tf_optimizer.OptimizeGraph(config_pb2.ConfigProto(), meta)


def _block(rows: bool):
    keras.utils.set_random_seed(3)
    block = TransformerEncoderBlock(num_heads=2, intermediate_size=32, dropout=0.0)
    block.build((None, None, 16))
    if not rows:
        def dense_layout(x, training):  # Keras' own layout: the Dense layers on [B, T, H]
            y = block.output_dense(block.intermediate_dense(x))
            return block.output_layer_norm(x + block.output_dropout(y, training=training))

        block._feedforward = dense_layout
    return block


def _feedforward_ops(rows: bool):
    """Grappler's serving graph of an encoder block: op counts and the fused-op lists of its
    _FusedMatMul nodes. rows=False runs the feed-forward as Keras' Dense on [B, T, H] (a Reshape
    between MatMul and BiasAdd), the layout the garden's rows replace."""
    block = _block(rows)

    @tf.function(input_signature=[tf.TensorSpec([None, None, 16])])
    def serve(x):
        with tf.device("/CPU:0"):  # the remapper fuses only nodes placed on a CPU
            return block(x, training=False)

    graph = _grappler_graph(serve.get_concrete_function())
    ops = collections.Counter(n.op for n in graph.node)
    fused = [list(n.attr["fused_ops"].list.s) for n in graph.node if n.op == "_FusedMatMul"]
    return ops, fused


def onednn_on() -> bool:
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def test_feedforward_matmul_and_bias_fuse_on_every_cpu():
    # Eigen's _FusedMatMul takes BiasAdd with or without oneDNN: both feed-forward products
    # (and the attention projections) fuse their bias wherever this runs.
    ops, fused = _feedforward_ops(rows=True)
    assert fused.count([b"BiasAdd"]) + fused.count([b"BiasAdd", b"GeluExact"]) >= 2, fused
    assert ops["BiasAdd"] == 0, ops


def test_feedforward_gelu_fuses_where_onednn_is_on():
    """The exact GELU joins the fused MatMul only through oneDNN's kernels (the remapper checks
    IsMKLEnabled). The garden turns oneDNN on unless TF_ENABLE_ONEDNN_OPTS is set
    (text/onednn.py): on any x86-64 CPU with AVX2, not just where TensorFlow would
    (AVX-512 VNNI / BF16 / AMX), so the fusion holds in every garden process here."""
    if os.environ.get("TF_ENABLE_ONEDNN_OPTS") not in (None, "1"):
        pytest.skip("TF_ENABLE_ONEDNN_OPTS was set by the user: the GELU fusion needs oneDNN")
    assert onednn_on(), "the garden's processes must run with oneDNN on (text/onednn.py)"
    ops, fused = _feedforward_ops(rows=True)
    assert [b"BiasAdd", b"GeluExact"] in fused, fused
    assert ops["Erfc"] == 0 and ops["BiasAdd"] == 0, ops


def test_rows_layout_fuses_what_the_dense_layout_does_not():
    # The guarantee itself: the same outputs with fewer ops where the fusion exists. Keras'
    # [B, T, H] Dense leaves its BiasAdd (and GELU) separate on every CPU.
    x = tf.random.stateless_normal([2, 5, 16], seed=[1, 2])
    np.testing.assert_allclose(_block(True)(x, training=False), _block(False)(x, training=False),
                               atol=1e-5)
    rows_ops, rows_fused = _feedforward_ops(rows=True)
    dense_ops, dense_fused = _feedforward_ops(rows=False)
    assert len(rows_fused) > len(dense_fused), (rows_fused, dense_fused)
    assert sum(rows_ops.values()) < sum(dense_ops.values()), (rows_ops, dense_ops)


def _pair():
    return keras_attention_pair(HIDDEN, HEADS, length=3)


@pytest.mark.parametrize("length", [3, 40])  # rows 6 < 64: scaled rows; 80 > 64: scaled kernel
def test_query_scale_on_rows_or_kernel_equals_keras(length):
    ours, theirs = _pair()
    x = tf.constant(np.random.default_rng(1).normal(size=(2, length, HIDDEN)).astype("float32"))
    np.testing.assert_allclose(ours(x, x).numpy(), theirs(x, x).numpy(), atol=1e-5)


def _kernel_sized_muls(layer, spec):
    """Mul nodes of a trace whose output has the query kernel's shape [H, A*d]."""
    concrete = tf.function(lambda x: layer(x, x), input_signature=[spec]).get_concrete_function()
    x = tf.constant(np.random.default_rng(2).normal(size=(2, 40, HIDDEN)).astype("float32"))
    return concrete, [op for op in concrete.graph.get_operations() if op.type == "Mul"
                      and op.outputs[0].shape.as_list() == [HIDDEN, HIDDEN]], x


def test_serving_trace_scales_rows_and_training_trace_the_kernel():
    ours, theirs = _pair()
    serving, serving_muls, x = _kernel_sized_muls(ours, tf.TensorSpec([None, None, HIDDEN]))
    training, training_muls, _ = _kernel_sized_muls(ours, tf.TensorSpec([2, 40, HIDDEN]))
    assert serving_muls == [] and len(training_muls) == 1
    expected = theirs(x, x).numpy()
    np.testing.assert_allclose(serving(x).numpy(), expected, atol=1e-5)
    np.testing.assert_allclose(training(x).numpy(), expected, atol=1e-5)
