"""Banded local attention: equal to dense attention under the band mask (T not a multiple of w
included), causal, and its one-token cache steps equal the full computation."""

from __future__ import annotations

import numpy as np
import pytest

import keras

from garden.layers.attention import MultiHeadAttention
from garden.layers.local_attention import LocalMultiHeadAttention, band_mask

from convert_testing import max_abs_diff


def _layer(width, hidden=16, heads=2):
    keras.utils.set_random_seed(3)
    layer = LocalMultiHeadAttention(heads, hidden // heads, band_width=width)
    layer.build((None, None, hidden))
    return layer


def _dense(layer, x, key_mask=None, **kwargs):
    """The same weights through MultiHeadAttention's dense path with the band mask."""
    length = x.shape[1]
    mask = band_mask(length, length, layer.band_width)
    if key_mask is not None:
        mask = np.logical_and(mask, key_mask[:, None, :])
    return MultiHeadAttention.call(layer, x, x, attention_mask=mask, **kwargs)


@pytest.mark.parametrize("length,width", [(8, 4), (13, 4), (5, 8), (16, 1), (11, 3), (9, 9)])
def test_banded_equals_dense_with_band_mask(length, width):
    layer = _layer(width)
    rng = np.random.default_rng(length * 10 + width)
    x = rng.normal(size=(2, length, 16)).astype("float32")
    key_mask = np.ones((2, length), bool)
    key_mask[1, :3] = False  # left padding: padded keys are never attended
    banded = layer(x, x, attention_mask=key_mask[:, None, :])
    dense = _dense(layer, x, key_mask)
    # Row 1's padded queries have no key in their band when w <= 3: both give junk there.
    real = np.ones((2, length), bool)
    real[1, :3] = False
    assert max_abs_diff(banded.numpy()[real], dense.numpy()[real]) <= 1e-5
    assert max_abs_diff(banded.numpy()[0], dense.numpy()[0]) <= 1e-5


def test_band_is_narrower_than_causal_and_nothing_from_the_future():
    layer = _layer(3)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 10, 16)).astype("float32")
    base = layer(x, x).numpy()
    future = x.copy()
    future[0, 7:] += 1.0  # changing tokens 7.. leaves outputs 0..6 unchanged
    assert max_abs_diff(layer(future, future).numpy()[0, :7], base[0, :7]) == 0.0
    old = x.copy()
    old[0, 2] += 1.0  # token 2 is outside the band of queries 5.. (keys q-2..q)
    changed = layer(old, old).numpy()
    assert max_abs_diff(changed[0, 5:], base[0, 5:]) == 0.0
    assert max_abs_diff(changed[0, 2:5], base[0, 2:5]) > 1e-3  # inside the band it matters


@pytest.mark.parametrize("slots,width", [(12, 4), (6, 8)])
def test_cached_steps_equal_the_full_computation(slots, width):
    layer = _layer(width)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, slots, 16)).astype("float32")
    key_mask = np.ones((2, slots), bool)
    key_mask[1, :2] = False
    full = layer(x, x, attention_mask=key_mask[:, None, :]).numpy()
    cache = (np.zeros((2, 2, slots, 8), "float32"),) * 2  # (keys, values) [B, A, T, d]
    prompt = 3
    out, cache = layer(x[:, :prompt], x[:, :prompt], attention_mask=key_mask[:, None, :],
                       cache=cache, cache_update_index=0)
    outputs = [out.numpy()]
    for index in range(prompt, slots):
        out, cache = layer(x[:, index:index + 1], x[:, index:index + 1],
                           attention_mask=key_mask[:, None, :], cache=cache,
                           cache_update_index=index)
        outputs.append(out.numpy())
    stepped = np.concatenate(outputs, axis=1)
    assert max_abs_diff(stepped[0], full[0]) <= 1e-5
    assert max_abs_diff(stepped[1, 2:], full[1, 2:]) <= 1e-5


def test_refuses_a_dense_mask_and_round_trips():
    layer = _layer(4)
    x = np.zeros((1, 5, 16), "float32")
    with pytest.raises(ValueError, match="key padding mask"):
        layer(x, x, attention_mask=np.ones((1, 5, 5), bool))
    clone = LocalMultiHeadAttention.from_config(layer.get_config())
    assert clone.band_width == 4
