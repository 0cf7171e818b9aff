"""T5 relative position bias, and T5 attention (no biases, unscaled queries, additive bias)
built from garden's layers, against Hugging Face's T5Attention with the same weights."""

import numpy as np
import pytest
import tensorflow as tf

from garden.layers.attention import MultiHeadAttention
from garden.layers.masks import causal_mask
from garden.layers.position_bias import RelativePositionBias, relative_position_buckets

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402

D_MODEL, HEADS, D_KV = 16, 4, 6  # inner width 24 != d_model, as in T5 (d_kv is its own size)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 20)])
def test_buckets_equal_hugging_face(bidirectional, num_buckets, max_distance):
    relative = np.arange(-400, 401, dtype="int64")
    ours = relative_position_buckets(relative, bidirectional, num_buckets, max_distance)
    theirs = T5Attention._relative_position_bucket(
        torch.tensor(relative), bidirectional=bidirectional, num_buckets=num_buckets,
        max_distance=max_distance)
    np.testing.assert_array_equal(np.asarray(ours), theirs.numpy())
    assert np.asarray(ours).max() == num_buckets - 1  # the far buckets are reached


def test_documented_bucket_examples():
    ids = np.asarray(relative_position_buckets(np.array([0, -7, 7, -8, -127, -128, -1000, 1000])))
    np.testing.assert_array_equal(ids[:3], [0, 7, 23])
    assert 8 <= ids[3] <= ids[4] <= 15 and ids[5] == ids[6] == 15 and ids[7] == 31


def _t5_pair(is_decoder):
    config = transformers.T5Config(d_model=D_MODEL, d_kv=D_KV, num_heads=HEADS, d_ff=32,
                                   relative_attention_num_buckets=8,
                                   relative_attention_max_distance=20, dropout_rate=0.0,
                                   is_decoder=is_decoder)
    config._attn_implementation = "eager"
    theirs = T5Attention(config, has_relative_attention_bias=True, layer_idx=0).eval()
    torch.manual_seed(0)
    for p in theirs.parameters():
        torch.nn.init.normal_(p, std=0.3)
    attention = MultiHeadAttention(num_heads=HEADS, key_dim=D_KV, use_bias=False,
                                   scale_queries=False)
    attention.build((2, 7, D_MODEL), (2, 7, D_MODEL))
    weight = lambda layer: layer.weight.detach().numpy().T  # noqa: E731  torch is [out, in]
    attention.query_dense.kernel.assign(weight(theirs.q).reshape(D_MODEL, HEADS, D_KV))
    attention.key_dense.kernel.assign(weight(theirs.k).reshape(D_MODEL, HEADS, D_KV))
    attention.value_dense.kernel.assign(weight(theirs.v).reshape(D_MODEL, HEADS, D_KV))
    attention.output_dense.kernel.assign(weight(theirs.o).reshape(HEADS, D_KV, D_MODEL))
    bias = RelativePositionBias(num_heads=HEADS, num_buckets=8, max_distance=20,
                                bidirectional=not is_decoder)
    bias.build()
    bias.embeddings.assign(theirs.relative_attention_bias.weight.detach().numpy())
    return attention, bias, theirs


@pytest.mark.parametrize("is_decoder", [False, True])
def test_t5_attention_from_garden_layers_equals_hugging_face(is_decoder):
    attention, bias, theirs = _t5_pair(is_decoder)
    x = np.random.default_rng(0).normal(size=(2, 7, D_MODEL)).astype("float32")
    position_bias = bias(query_length=7, key_length=7)
    np.testing.assert_allclose(position_bias.numpy(),
                               theirs.compute_bias(7, 7).detach().numpy(), atol=1e-6)
    mask = causal_mask(7, 7) if is_decoder else None
    ours, scores = attention(x, x, attention_bias=position_bias, attention_mask=mask,
                             return_attention_scores=True)
    additive = None
    if is_decoder:  # Hugging Face takes an additive mask [B, 1, Tq, Tk]
        additive = torch.tensor(np.where(np.tril(np.ones((7, 7))), 0.0, -1e9)[None, None],
                                dtype=torch.float32)
    with torch.no_grad():
        y, _, weights = theirs(torch.tensor(x), mask=additive)
    np.testing.assert_allclose(ours.numpy(), y.numpy(), atol=1e-4)
    np.testing.assert_allclose(scores.numpy(), weights.numpy(), atol=1e-5)


def test_decoder_bias_with_an_offset_is_the_rows_of_the_full_bias():
    _, bias, theirs = _t5_pair(is_decoder=True)
    full = bias(query_length=9, key_length=9).numpy()

    @tf.function
    def step(index):
        return bias(query_length=1, key_length=9, offset=index)

    for i in range(9):
        np.testing.assert_allclose(step(tf.constant(i)).numpy(), full[:, :, i:i + 1])
        np.testing.assert_allclose(
            full[:, :, i:i + 1],
            theirs.compute_bias(1, 9, past_seen_tokens=i).detach().numpy(), atol=1e-6)


def test_config_round_trip():
    layer = RelativePositionBias(num_heads=3, num_buckets=16, max_distance=64,
                                 bidirectional=False)
    clone = RelativePositionBias.from_config(layer.get_config())
    assert (clone.num_heads, clone.num_buckets, clone.max_distance, clone.bidirectional) == \
        (3, 16, 64, False)
