"""Mask helpers: shapes, values, and that they combine as the attention layer expects."""

import numpy as np
import tensorflow as tf

from garden.layers.masks import causal_mask, merge_masks, padding_mask_to_attention


def test_padding_mask_to_attention_hides_padded_keys_from_every_query():
    mask = padding_mask_to_attention(np.array([[1, 1, 0], [1, 0, 0]], "int32")).numpy()
    assert mask.dtype == bool and mask.shape == (2, 1, 3)
    np.testing.assert_array_equal(mask[:, 0], [[True, True, False], [True, False, False]])
    assert padding_mask_to_attention(None) is None


def test_causal_mask_is_lower_triangular():
    mask = causal_mask(4, 4).numpy()
    assert mask.dtype == bool and mask.shape == (1, 4, 4)
    np.testing.assert_array_equal(mask[0], np.tril(np.ones((4, 4), bool)))


def test_causal_mask_with_an_offset_is_the_matching_rows_of_the_full_mask():
    full = np.tril(np.ones((8, 8), bool))
    for offset in range(8):
        np.testing.assert_array_equal(causal_mask(1, 8, offset=offset).numpy()[0],
                                      full[offset:offset + 1])
    np.testing.assert_array_equal(causal_mask(3, 8, offset=2).numpy()[0], full[2:5])


def test_causal_mask_takes_tensors_inside_a_graph():
    @tf.function
    def at(index):
        return causal_mask(1, tf.constant(6), offset=index)
    np.testing.assert_array_equal(at(tf.constant(3)).numpy()[0, 0], [1, 1, 1, 1, 0, 0])


def test_merge_masks_is_a_none_tolerant_logical_and():
    assert merge_masks() is None and merge_masks(None, None) is None
    padding = padding_mask_to_attention(np.array([[1, 1, 1, 0]], "int32"))
    only = merge_masks(None, np.array([[1, 0, 1, 1]], "int32")).numpy()
    assert only.dtype == bool
    np.testing.assert_array_equal(only, [[True, False, True, True]])
    merged = merge_masks(padding, None, causal_mask(4, 4)).numpy()
    assert merged.shape == (1, 4, 4)
    expected = np.tril(np.ones((4, 4), bool))
    expected[:, 3] = False
    np.testing.assert_array_equal(merged[0], expected)
