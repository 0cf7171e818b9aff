"""The one KV-cache form of every decoder (garden.layers.MultiHeadAttention): a (keys, values)
pair of head-major [B, A, T, d] tensors per layer. T5's and BART's decode state keeps one
self-attention and one cross-attention pair per decoder layer, never an array stacked over
layers; a step writes its slot in every layer's self pair and reads the cross pairs as they
were projected; the stacked [B, 2, T, A, d] array form is refused."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden.layers import MultiHeadAttention
from garden.layers.local_attention import LocalMultiHeadAttention
from garden.models.bart import BartBackbone, BartSeq2SeqLM
from garden.models.t5 import PRESETS, T5Backbone, T5Seq2SeqLM

BATCH, SOURCE, SLOTS = 2, 5, 6


def _t5():
    keras.utils.set_random_seed(0)
    return T5Seq2SeqLM(T5Backbone(**dict(PRESETS["t5_tiny"], vocab_size=50, num_layers=3,
                                         dropout=0.0))), [0]


def _bart():
    keras.utils.set_random_seed(0)
    return BartSeq2SeqLM(BartBackbone(vocab_size=50, num_layers=3, hidden_size=16, num_heads=2,
                                      intermediate_size=24, max_sequence_length=16,
                                      dropout=0.0)), [2, 0]


@pytest.mark.parametrize("build", [_t5, _bart], ids=["t5", "bart"])
def test_state_keeps_one_pair_per_layer_and_a_step_writes_only_its_slot(build):
    lm, start = build()
    heads = 2
    width = lm.backbone.head_size if isinstance(lm, T5Seq2SeqLM) else 8
    rng = np.random.default_rng(0)
    prompt = {"encoder_token_ids": rng.integers(3, 50, (BATCH, SOURCE)).astype("int32"),
              "encoder_padding_mask": np.ones((BATCH, SOURCE), "int32"),
              "decoder_token_ids": np.array([start] * BATCH, "int32"),
              "decoder_padding_mask": np.ones((BATCH, len(start)), "int32")}
    _, state = lm.start_decoding(prompt, SLOTS)
    for name, slots in (("self_cache", SLOTS), ("cross_cache", SOURCE)):
        assert isinstance(state[name], list) and len(state[name]) == 3, name
        for pair in state[name]:
            assert isinstance(pair, tuple)
            assert [tuple(t.shape) for t in pair] == [(BATCH, heads, slots, width)] * 2, name
    index = len(start)
    _, stepped = lm.decode_step(np.array([4, 5], "int32"), np.int32(index), state)
    for before, after in zip(state["self_cache"], stepped["self_cache"]):
        for old, new in zip(before, after):
            old, new = old.numpy(), new.numpy()
            np.testing.assert_array_equal(new[:, :, :index], old[:, :, :index])  # the prompt
            assert np.abs(new[:, :, index]).min() > 0 and np.abs(old[:, :, index]).max() == 0
            assert np.abs(new[:, :, index + 1:]).max() == 0  # later slots not written yet
    # The cross pairs are the start's tensors, read as is (projected once per generate call).
    for before, after in zip(tf.nest.flatten(state["cross_cache"]),
                             tf.nest.flatten(stepped["cross_cache"])):
        assert after is before


def test_the_stacked_array_cache_is_refused():
    x = tf.zeros((1, 2, 8))
    dense = MultiHeadAttention(num_heads=2, key_dim=4)
    local = LocalMultiHeadAttention(num_heads=2, key_dim=4, band_width=2)
    for layer in (dense, local):
        layer(x, x)  # built
        with pytest.raises(ValueError, match=r"\(keys, values\) pair.*\[B, 2, T_max, A, d\]"):
            layer(x, x, cache=tf.zeros((1, 2, 3, 2, 4)), cache_update_index=0)
    pair = (tf.zeros((1, 2, 3, 4)),) * 2
    _, written = dense(x, x, cache=pair, cache_update_index=0)
    assert [tuple(t.shape) for t in written] == [(1, 2, 3, 4)] * 2
