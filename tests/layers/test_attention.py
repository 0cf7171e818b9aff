"""garden MultiHeadAttention against keras.layers.MultiHeadAttention with the same weights."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden.layers.attention import MultiHeadAttention


def _pair(hidden=16, heads=4, dropout=0.0):
    ours = MultiHeadAttention(num_heads=heads, key_dim=hidden // heads, dropout=dropout,
                              name="attention")
    theirs = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=hidden // heads,
                                             dropout=dropout, name="attention")
    shape = (2, 7, hidden)
    ours.build(shape, shape)
    theirs.build(shape, shape)
    rng = np.random.default_rng(0)
    for w in theirs.weights:
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32"))
    return ours, theirs


def test_same_weight_names_and_shapes_as_keras():
    ours, theirs = _pair()
    assert [(w.path, tuple(w.shape)) for w in ours.weights] == \
        [(w.path, tuple(w.shape)) for w in theirs.weights]


@pytest.mark.parametrize("mask_kind", ["none", "keys", "full", "cross"])
def test_outputs_and_gradients_equal_keras(mask_kind):
    ours, theirs = _pair()
    ours.set_weights(theirs.get_weights())
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(2, 7, 16)).astype("float32"))
    query = x[:, 2:5] if mask_kind == "cross" else x
    mask = None
    if mask_kind in ("keys", "cross"):
        keys = np.ones((2, 1, 7), bool)
        keys[1, 0, 5:] = False
        mask = keys
    elif mask_kind == "full":
        mask = np.tril(np.ones((2, 7, 7), bool))
    results = []
    for layer in (ours, theirs):
        with tf.GradientTape() as tape:
            tape.watch(x)
            q = x[:, 2:5] if mask_kind == "cross" else x
            y = layer(q, x, attention_mask=mask)
            loss = tf.reduce_sum(y * tf.cos(y))
        grads = tape.gradient(loss, [x] + layer.trainable_variables)
        results.append((y.numpy(), [g.numpy() for g in grads]))
    (y_ours, g_ours), (y_theirs, g_theirs) = results
    assert y_ours.shape == tuple(query.shape)
    np.testing.assert_allclose(y_ours, y_theirs, atol=1e-5)
    for a, b in zip(g_ours, g_theirs):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_dropout_only_in_training_and_at_its_rate():
    ours, _ = _pair(hidden=32, heads=2, dropout=0.5)
    x = np.random.default_rng(2).normal(size=(4, 64, 32)).astype("float32")
    np.testing.assert_array_equal(ours(x, x, training=False).numpy(), ours(x, x).numpy())
    assert not np.allclose(ours(x, x, training=True).numpy(), ours(x, x, training=False).numpy())


def test_mixed_precision_runs_in_the_compute_dtype():
    layer = MultiHeadAttention(num_heads=2, key_dim=8, dtype="mixed_bfloat16")
    x = np.ones((2, 5, 16), "float32")
    y = layer(x, x, attention_mask=np.ones((2, 1, 5), bool))
    assert y.dtype == "bfloat16"
    assert all(w.dtype == "float32" for w in layer.weights)
