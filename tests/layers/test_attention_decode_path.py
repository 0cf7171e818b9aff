"""The decode path of garden.layers.MultiHeadAttention that GPT-2 generation speed relies on:
the scatter that writes cache slots, the (keys, values) pair form of the cache (the only form
the layer takes; one pair per block in garden.models.gpt.causal_lm's state) and the query
scaling moved after the projection for a few rows (bit-identical only when 1/sqrt(d) is a
power of two)."""

import keras
import numpy as np
import tensorflow as tf

from garden.layers.attention import MultiHeadAttention, write_slots
from garden.models.gpt2 import GPT2Backbone, GPT2CausalLM


def test_write_slots_writes_only_the_given_slots():
    cache = tf.reshape(tf.range(2 * 6 * 3, dtype=tf.float32), (2, 6, 3))
    new = -tf.ones((2, 2, 3))
    out = write_slots(cache, new, tf.constant(3)).numpy()
    expected = cache.numpy().copy()
    expected[:, 3:5] = -1.0
    np.testing.assert_array_equal(out, expected)
    shifted = write_slots(cache[None], new[None], tf.constant(3), axis=2)  # T on axis 2
    np.testing.assert_array_equal(shifted[0].numpy(), expected)
    # And as XLA compiles it (garden.models.decoding's loop on a GPU or for small models).
    xla = tf.function(write_slots, jit_compile=True)(cache, new, tf.constant(3)).numpy()
    np.testing.assert_array_equal(xla, expected)


def _layer(key_dim, heads=2):
    keras.utils.set_random_seed(3)
    layer = MultiHeadAttention(num_heads=heads, key_dim=key_dim)
    layer.build((1, 1, heads * key_dim))
    rng = np.random.default_rng(3)
    layer.set_weights([rng.normal(0, 1, w.shape).astype("float32") for w in layer.get_weights()])
    return layer


def test_pair_cache_writes_its_slot_attends_to_it_and_stays_a_pair():
    layer = _layer(key_dim=8)
    rng = np.random.default_rng(0)
    keys, values = (tf.constant(rng.normal(size=(2, 2, 5, 8)).astype("float32"))
                    for _ in range(2))  # [B, A, T_max, d]
    x = tf.constant(rng.normal(size=(2, 1, 16)).astype("float32"))
    mask = tf.constant(np.arange(5)[None, None, :] <= 2)
    out, cache = layer(x, x, attention_mask=mask, cache=(keys, values), cache_update_index=2)
    assert isinstance(cache, tuple) and len(cache) == 2
    cache = [t.numpy() for t in cache]
    # Slot 2 holds the step's own key and value, the other slots are kept.
    for written, dense in zip(cache, (layer.key_dense, layer.value_dense)):
        np.testing.assert_array_equal(written[:, :, 2], layer._project(dense, x)[:, 0].numpy())
    for written, given in zip(cache, (keys, values)):
        np.testing.assert_array_equal(np.delete(written, 2, axis=2),
                                      np.delete(given.numpy(), 2, axis=2))
    # The output attends to slots 0..2 of the updated cache (numpy reference).
    q = layer._project(layer.query_dense, x).numpy()[:, 0] / np.sqrt(8)  # [B, A, d]
    scores = np.einsum("bad,batd->bat", q, cache[0][:, :, :3])
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    context = np.einsum("bat,batd->bad", p, cache[1][:, :, :3]).reshape(2, 16)
    expected = context @ layer.output_dense.kernel.numpy().reshape(16, 16) + \
        layer.output_dense.bias.numpy()
    np.testing.assert_allclose(out.numpy()[:, 0], expected, atol=1e-4)


def _folded_queries(layer, x, scale):
    """The documented arithmetic: 1/sqrt(d) folded into the query kernel and bias."""
    kernel = tf.reshape(layer.query_dense.kernel, (x.shape[-1], -1)) * scale
    bias = tf.reshape(layer.query_dense.bias, (-1,)) * scale
    return tf.matmul(tf.reshape(x, (-1, x.shape[-1])), kernel) + bias


def test_query_scaling_is_bit_identical_to_the_folded_kernel():
    rng = np.random.default_rng(1)
    for key_dim in (16, 12):  # 1/4 is a power of two (scaled after), 1/sqrt(12) is not
        layer = _layer(key_dim=key_dim)
        scale = 1.0 / np.sqrt(key_dim)
        x = tf.constant(rng.normal(size=(1, 1, 2 * key_dim)).astype("float32"))  # 1 row < H
        ours = layer._project(layer.query_dense, x, scale=scale)
        np.testing.assert_array_equal(tf.reshape(ours, (1, -1)).numpy(),
                                      _folded_queries(layer, x, scale).numpy())


def test_causal_lm_state_keeps_one_cache_pair_per_block():
    backbone = GPT2Backbone(vocab_size=50, num_layers=3, hidden_size=32, num_heads=4,
                            max_sequence_length=16, dropout=0.0)
    lm = GPT2CausalLM(backbone)
    ids = np.array([[5, 6, 7], [0, 8, 9]], "int32")
    mask = np.array([[1, 1, 1], [0, 1, 1]], "int32")
    _, state = lm.start_decoding({"token_ids": ids, "padding_mask": mask}, 10)
    assert len(state["cache"]) == 3
    for pair in state["cache"]:
        assert [tuple(t.shape) for t in pair] == [(2, 4, 10, 8), (2, 4, 10, 8)]
    _, stepped = lm.decode_step(tf.constant([1, 2]), tf.constant(3), state)
    for before, after in zip(state["cache"], stepped["cache"]):
        for old, new in zip(before, after):
            # The step writes slot 3 of every block and leaves the prompt's slots alone.
            np.testing.assert_array_equal(new[:, :, :3].numpy(), old[:, :, :3].numpy())
            assert np.abs(new[:, :, 3].numpy()).max() > 0
            assert np.abs(old[:, :, 3].numpy()).max() == 0
