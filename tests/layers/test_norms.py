"""RMSNorm against its NumPy formula and keras.layers.RMSNormalization."""

import keras
import numpy as np

from garden.layers.norms import RMSNorm


def _x(seed=0, shape=(2, 5, 16)):
    return (np.random.default_rng(seed).normal(size=shape) * 3 + 1).astype("float32")


def test_rmsnorm_is_the_t5_formula():
    x = _x()
    norm = RMSNorm(epsilon=1e-6)
    norm.build(x.shape)
    scale = np.random.default_rng(1).normal(size=16).astype("float32")
    norm.scale.assign(scale)
    expected = x / np.sqrt(np.mean(x ** 2, -1, keepdims=True) + 1e-6) * scale
    np.testing.assert_allclose(norm(x).numpy(), expected, rtol=1e-5, atol=1e-5)
    # No mean subtraction: a LayerNorm would give a different answer for non-centred x.
    layer_norm = keras.layers.LayerNormalization(epsilon=1e-6, center=False)
    layer_norm.build(x.shape)
    layer_norm.gamma.assign(scale)
    assert not np.allclose(norm(x).numpy(), layer_norm(x).numpy(), atol=1e-2)
    assert [w.path for w in norm.weights] == ["rms_norm/scale"]


def test_rmsnorm_equals_keras_rmsnormalization():
    x = _x(2)
    ours, theirs = RMSNorm(epsilon=1e-6), keras.layers.RMSNormalization(epsilon=1e-6)
    ours.build(x.shape)
    theirs.build(x.shape)
    theirs.set_weights([np.random.default_rng(3).normal(size=16).astype("float32")])
    ours.set_weights(theirs.get_weights())
    np.testing.assert_allclose(ours(x).numpy(), theirs(x).numpy(), rtol=1e-5, atol=1e-5)


def test_rmsnorm_statistics_in_float32_under_mixed_precision():
    # Values near 300 are exact enough in float16, but their squares (~9e4) overflow its
    # 65504 maximum: statistics in float16 would give rsqrt(inf) = 0 and an all-zero output.
    x = (300 + _x(4)).astype("float32")
    norm = RMSNorm(dtype="mixed_float16")
    y = norm(x)
    assert y.dtype == "float16" and norm.scale.dtype == "float32"
    rounded = x.astype("float16").astype("float64")  # the layer's input in its compute dtype
    exact = rounded / np.sqrt(np.mean(rounded ** 2, -1, keepdims=True) + 1e-6)
    # Only the final float16 rounding (relative 2^-11) remains.
    np.testing.assert_allclose(y.numpy().astype("float64"), exact, rtol=2 ** -10)
    assert keras.ops.convert_to_numpy(keras.ops.mean(
        keras.ops.square(keras.ops.cast(x, "float16")))) == np.inf


def test_rmsnorm_config_round_trip():
    assert RMSNorm.from_config(RMSNorm(epsilon=1e-5).get_config()).epsilon == 1e-5
