"""Exact and tanh GELU against Keras and their formulas; names the families pass."""

import math

import keras
import numpy as np
import pytest

from garden.layers import activations

Z = np.linspace(-6, 6, 241).astype("float32")


def test_exact_gelu_is_keras_exact_and_the_erf_formula():
    np.testing.assert_allclose(activations.gelu(Z), keras.activations.gelu(Z, approximate=False),
                               atol=1e-7)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(activations.gelu(Z), 0.5 * Z * (1 + erf(Z / math.sqrt(2))),
                               atol=1e-6)


def test_tanh_gelu_is_keras_approximate_and_the_tanh_formula():
    np.testing.assert_allclose(activations.gelu_tanh(Z),
                               keras.activations.gelu(Z, approximate=True), atol=1e-7)
    inner = math.sqrt(2 / math.pi) * (Z + 0.044715 * Z ** 3)
    np.testing.assert_allclose(activations.gelu_tanh(Z), 0.5 * Z * (1 + np.tanh(inner)),
                               atol=1e-6)
    # They are different functions: up to ~1e-3 apart, which breaks checkpoint parity.
    assert 1e-4 < np.max(np.abs(activations.gelu_tanh(Z) - activations.gelu(Z))) < 1e-2


@pytest.mark.parametrize("name", ["gelu_new", "gelu_tanh", "gelu_approximate",
                                  "gelu_pytorch_tanh"])
def test_tanh_names(name):
    assert activations.get(name) is activations.gelu_tanh


def test_other_names_and_callables():
    assert activations.get("gelu") is keras.activations.gelu  # serializes as "gelu", as before
    np.testing.assert_allclose(activations.get("gelu")(Z), activations.gelu(Z))
    np.testing.assert_allclose(activations.get("relu")(Z), np.maximum(Z, 0))
    square = lambda x: x * x  # noqa: E731
    assert activations.get(square) is square


def test_tanh_gelu_serializes_by_name():
    assert keras.activations.get(keras.activations.serialize(activations.gelu_tanh)) is \
        activations.gelu_tanh
