"""TransformerEncoderBlock's head mask and attention-probability output."""

import keras
import numpy as np
import pytest

from garden.layers.transformer_encoder import TransformerEncoderBlock


def _block_and_inputs(**options):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    block = TransformerEncoderBlock(num_heads=4, intermediate_size=32, **options)
    x = rng.normal(size=(2, 6, 16)).astype("float32")
    padding = np.ones((2, 6), "int32")
    padding[1, 4:] = 0
    block(x, padding_mask=padding)
    return block, x, padding


@pytest.mark.parametrize("normalize_first", [False, True])
def test_scores_are_the_attention_layers_probabilities(normalize_first):
    block, x, padding = _block_and_inputs(normalize_first=normalize_first)
    y, scores = block(x, padding_mask=padding, return_attention_scores=True)
    np.testing.assert_array_equal(y.numpy(), block(x, padding_mask=padding).numpy())
    assert scores.shape == (2, 4, 6, 6)
    np.testing.assert_allclose(scores.numpy().sum(-1), 1, atol=1e-5)
    assert np.all(scores.numpy()[1, :, :, 4:] == 0)  # padded keys get nothing
    keys = block.attention_layer_norm(x) if normalize_first else x
    _, expected = block.attention(keys, keys, attention_mask=padding[:, None, :].astype(bool),
                                  return_attention_scores=True)
    np.testing.assert_allclose(scores.numpy(), expected.numpy(), atol=1e-6)


def test_head_mask_reaches_the_attention_and_changes_the_output():
    block, x, padding = _block_and_inputs()
    head_mask = np.array([[1, 0, 1, 1], [1, 1, 1, 1]], "float32")  # [B, A]: example 0, head 1
    y, scores = block(x, padding_mask=padding, head_mask=head_mask, return_attention_scores=True)
    assert np.all(scores.numpy()[0, 1] == 0) and np.all(scores.numpy()[1, 1].sum(-1) > 0.99)
    plain = block(x, padding_mask=padding).numpy()
    assert not np.allclose(y.numpy()[0], plain[0], atol=1e-4)
    np.testing.assert_allclose(y.numpy()[1], plain[1], atol=1e-6)
    # All ones is no mask at all.
    np.testing.assert_allclose(block(x, padding_mask=padding, head_mask=np.ones(4, "float32")),
                               plain, atol=1e-6)


def test_scores_with_output_positions_are_those_query_rows():
    block, x, padding = _block_and_inputs()
    positions = np.array([[0, 3], [5, 1]], "int32")
    _, full = block(x, padding_mask=padding, return_attention_scores=True)
    rows, scores = block(x, padding_mask=padding, output_positions=positions,
                         return_attention_scores=True)
    assert rows.shape == (2, 2, 16) and scores.shape == (2, 4, 2, 6)
    expected = np.take_along_axis(full.numpy(), positions[:, None, :, None], axis=2)
    np.testing.assert_allclose(scores.numpy(), expected, atol=1e-6)


def test_albert_style_shared_blocks_return_scores_and_take_a_head_mask():
    first, x, padding = _block_and_inputs()
    second = TransformerEncoderBlock(num_heads=4, intermediate_size=32, share_attention_with=first,
                                     share_feedforward_with=first)
    head_mask = np.array([0, 1, 1, 1], "float32")
    y1, s1 = first(x, padding_mask=padding, head_mask=head_mask, return_attention_scores=True)
    y2, s2 = second(x, padding_mask=padding, head_mask=head_mask, return_attention_scores=True)
    np.testing.assert_allclose(y1.numpy(), y2.numpy(), atol=1e-6)
    np.testing.assert_allclose(s1.numpy(), s2.numpy(), atol=1e-6)
    assert np.all(s2.numpy()[:, 0] == 0)


def test_functional_graph_with_scores_output():
    """The models engineer builds backbones functionally: scores must come out of the graph."""
    tokens = keras.Input((6, 16))
    padding = keras.Input((6,), dtype="int32")
    head_mask = keras.Input((4,))
    block = TransformerEncoderBlock(num_heads=4, intermediate_size=32)
    y, scores = block(tokens, padding_mask=padding, head_mask=head_mask,
                      return_attention_scores=True)
    assert tuple(scores.shape) == (None, 4, 6, 6) and tuple(y.shape) == (None, 6, 16)
    model = keras.Model([tokens, padding, head_mask], [y, scores])
    _, x, mask = _block_and_inputs()
    off = np.array([[1, 1, 0, 1], [1, 1, 1, 1]], "float32")
    y_value, scores_value = model([x, mask, off])
    assert np.all(scores_value.numpy()[0, 2] == 0)
    np.testing.assert_allclose(y_value.numpy(),
                               block(x, padding_mask=mask, head_mask=off).numpy(), atol=1e-6)


def test_tanh_gelu_by_name_and_config_round_trip():
    exact, _, _ = _block_and_inputs(activation="gelu")
    tanh, _, _ = _block_and_inputs(activation="gelu_new")
    assert exact.get_config()["activation"] == "gelu"
    clone = TransformerEncoderBlock.from_config(tanh.get_config())
    z = np.linspace(-3, 3, 7).astype("float32")
    np.testing.assert_allclose(clone.activation(z), keras.activations.gelu(z, approximate=True))
    assert not np.allclose(clone.activation(z), exact.activation(z), atol=1e-4)
