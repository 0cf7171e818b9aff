"""garden MultiHeadAttention against keras.layers.MultiHeadAttention with the same weights."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden.layers.attention import MultiHeadAttention
from model_testing import keras_attention_pair
from objective_testing import within


def _pair(hidden=16, heads=4, dropout=0.0):
    return keras_attention_pair(hidden, heads, length=7, dropout=dropout)


def test_same_weight_names_and_shapes_as_keras():
    ours, theirs = _pair()
    assert [(w.path, tuple(w.shape)) for w in ours.weights] == \
        [(w.path, tuple(w.shape)) for w in theirs.weights]


@pytest.mark.parametrize("mask_kind", ["none", "keys", "full", "cross"])
def test_outputs_and_gradients_equal_keras(mask_kind):
    ours, theirs = _pair()
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
    """Values that are one-hot over the keys and identity projections make the output the
    dropped attention probabilities themselves: 0 where dropped, p / (1 - rate) elsewhere. The
    share of zeros over n = 16,384 probabilities must fit Binomial(n, 0.1) within 5 standard
    errors (0.012; a fifth of the rate, 0.02, is 34 of them away)."""
    rate, batch, heads, length = 0.1, 8, 2, 32
    layer = MultiHeadAttention(num_heads=heads, key_dim=length, dropout=rate)
    query_shape, value_shape = (batch, length, heads * length), (batch, length, length)
    layer.build(query_shape, value_shape)
    rng = np.random.default_rng(2)
    for dense in (layer.query_dense, layer.key_dense):
        dense.kernel.assign(rng.normal(scale=0.3, size=dense.kernel.shape).astype("float32"))
    for dense in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense):
        dense.bias.assign(np.zeros(dense.bias.shape, "float32"))
    layer.value_dense.kernel.assign(np.repeat(np.eye(length, dtype="float32")[:, None], heads, 1))
    layer.output_dense.kernel.assign(np.eye(heads * length, dtype="float32").reshape(
        heads, length, heads * length))
    query = rng.normal(size=query_shape).astype("float32")
    value = np.broadcast_to(np.eye(length, dtype="float32"), value_shape)  # v_k = e_k

    keras.utils.set_random_seed(5)
    out, probabilities = layer(query, value, training=True, return_attention_scores=True)
    p = np.transpose(probabilities.numpy(), (0, 2, 1, 3)).reshape(batch, length, -1)  # as out
    out = out.numpy()
    assert p.min() > 0  # so a 0 in the output is a dropped probability
    dropped = out == 0
    n = dropped.size
    assert n == 16_384 and within(int(dropped.sum()), n, rate), dropped.mean()
    np.testing.assert_allclose(out[~dropped], p[~dropped] / (1 - rate), rtol=1e-5)
    # Inference: no dropout, the probabilities themselves.
    out, probabilities = layer(query, value, training=False, return_attention_scores=True)
    np.testing.assert_allclose(out.numpy(), np.transpose(probabilities.numpy(), (0, 2, 1, 3))
                               .reshape(batch, length, -1), rtol=1e-6)


def test_mixed_precision_runs_in_the_compute_dtype():
    layer = MultiHeadAttention(num_heads=2, key_dim=8, dtype="mixed_bfloat16")
    x = np.ones((2, 5, 16), "float32")
    y = layer(x, x, attention_mask=np.ones((2, 1, 5), bool))
    assert y.dtype == "bfloat16"
    assert all(w.dtype == "float32" for w in layer.weights)


# ---- the decoding options: separate keys, no biases, scores, bias, head mask, cache ----

def _random_weights(layer, seed=0):
    rng = np.random.default_rng(seed)
    for w in layer.weights:
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32"))


def _built_pair(heads=4, width=4, query_shape=(2, 5, 16), value_shape=(2, 7, 12),
                key_shape=(2, 7, 10), **options):
    ours = MultiHeadAttention(num_heads=heads, key_dim=width, name="attention", **options)
    theirs = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=width, name="attention",
                                             use_bias=options.get("use_bias", True))
    ours.build(query_shape, value_shape, key_shape)
    theirs.build(query_shape, value_shape, key_shape)
    _random_weights(theirs)
    ours.set_weights(theirs.get_weights())
    return ours, theirs


def _inputs(*shapes, seed=3):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s).astype("float32") for s in shapes]


@pytest.mark.parametrize("use_bias", [True, False])
def test_cross_attention_with_a_separate_key_equals_keras(use_bias):
    ours, theirs = _built_pair(use_bias=use_bias)
    assert [(w.path, tuple(w.shape)) for w in ours.weights] == \
        [(w.path, tuple(w.shape)) for w in theirs.weights]
    assert len(ours.weights) == (8 if use_bias else 4)
    query, value, key = _inputs((2, 5, 16), (2, 7, 12), (2, 7, 10))
    mask = np.ones((2, 5, 7), bool)
    mask[0, :, 4:] = False
    mask[1, 2, :3] = False
    y_ours, s_ours = ours(query, value, key=key, attention_mask=mask,
                          return_attention_scores=True)
    y_theirs, s_theirs = theirs(query, value, key=key, attention_mask=mask,
                                return_attention_scores=True)
    assert y_ours.shape == (2, 5, 16) and s_ours.shape == (2, 4, 5, 7)
    np.testing.assert_allclose(y_ours.numpy(), y_theirs.numpy(), atol=1e-5)
    np.testing.assert_allclose(s_ours.numpy(), s_theirs.numpy(), atol=1e-6)
    assert np.all(s_ours.numpy()[0, :, :, 4:] == 0)
    # The key really is read from `key`: another key tensor changes the answer (a random
    # one: a constant shift adds the same score to every key and softmax ignores it).
    other = ours(query, value, key=key[:, ::-1], attention_mask=mask)
    assert not np.allclose(other.numpy(), y_ours.numpy(), atol=1e-3)


def test_unscaled_queries_equal_keras_with_the_query_kernel_times_sqrt_d():
    width = 4
    ours, theirs = _built_pair(width=width, scale_queries=False)
    for w in theirs.query_dense.weights:
        w.assign(w.numpy() * np.sqrt(width))
    query, value, key = _inputs((2, 5, 16), (2, 7, 12), (2, 7, 10))
    np.testing.assert_allclose(ours(query, value, key=key).numpy(),
                               theirs(query, value, key=key).numpy(), atol=1e-4)


def _numpy_attention(layer, query, value, bias=None, head_mask=None):
    """The formula in the docstring, in NumPy, from the layer's weights."""
    w = {v.path.split("/", 1)[1]: v.numpy() for v in layer.weights}
    q = np.einsum("btc,cad->batd", query, w["query/kernel"]) + w["query/bias"][:, None]
    k = np.einsum("btc,cad->batd", value, w["key/kernel"]) + w["key/bias"][:, None]
    v = np.einsum("btc,cad->batd", value, w["value/kernel"]) + w["value/bias"][:, None]
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]) + (0 if bias is None else bias)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    if head_mask is not None:
        p = p * np.reshape(head_mask, (-1, p.shape[1], 1, 1))
    context = p @ v
    return np.einsum("batd,adh->bth", context, w["attention_output/kernel"]) + \
        w["attention_output/bias"], p


def test_attention_bias_and_batched_head_mask_follow_the_formula():
    ours, _ = _built_pair(value_shape=(2, 7, 16), key_shape=(2, 7, 16))
    query, value = _inputs((2, 5, 16), (2, 7, 16))
    bias = np.random.default_rng(4).normal(scale=2.0, size=(1, 4, 5, 7)).astype("float32")
    head_mask = np.array([[1, 0, 1, 0.5], [0, 1, 1, 1]], "float32")
    y, scores = ours(query, value, attention_bias=bias, head_mask=head_mask,
                     return_attention_scores=True)
    y_np, p_np = _numpy_attention(ours, query, value, bias, head_mask)
    np.testing.assert_allclose(scores.numpy(), p_np, atol=1e-5)
    np.testing.assert_allclose(y.numpy(), y_np, atol=1e-4)
    # A -1e9 bias is a mask.
    blocked = np.where(np.tril(np.ones((5, 7), bool)), 0, -1e9).astype("float32")
    np.testing.assert_allclose(
        ours(query, value, attention_bias=blocked[None, None]).numpy(),
        ours(query, value, attention_mask=np.tril(np.ones((1, 5, 7), bool))).numpy(), atol=1e-5)


@pytest.mark.parametrize("head", [0, 2])
def test_a_zero_head_mask_removes_exactly_that_heads_output(head):
    ours, _ = _built_pair(value_shape=(2, 7, 16), key_shape=(2, 7, 16))
    query, value = _inputs((2, 5, 16), (2, 7, 16))
    head_mask = np.ones(4, "float32")
    head_mask[head] = 0
    masked, scores = ours(query, value, head_mask=head_mask, return_attention_scores=True)
    assert np.all(scores.numpy()[:, head] == 0)
    assert np.allclose(scores.numpy()[:, head - 1].sum(-1), 1)
    # Without the mask but with that head's rows of the output projection zeroed.
    kernel = ours.output_dense.kernel
    saved = kernel.numpy()
    removed = saved.copy()
    removed[head] = 0
    kernel.assign(removed)
    try:
        expected = ours(query, value).numpy()
    finally:
        kernel.assign(saved)
    np.testing.assert_allclose(masked.numpy(), expected, atol=1e-5)
    assert not np.allclose(masked.numpy(), ours(query, value).numpy(), atol=1e-3)


def test_uniform_head_mask_mode_spreads_a_masked_head_evenly_over_the_allowed_keys():
    ours, _ = _built_pair(value_shape=(2, 7, 16), key_shape=(2, 7, 16))
    query, value = _inputs((2, 5, 16), (2, 7, 16))
    mask = np.ones((2, 5, 7), bool)
    mask[0, :, 4:] = False  # sequence 0 has 4 keys: uniform = 1/4 on them
    head_mask = np.array([1, 0, 0.5, 1], "float32")
    scaled = ours(query, value, attention_mask=mask, head_mask=head_mask,
                  return_attention_scores=True)[1].numpy()
    unmasked = ours(query, value, attention_mask=mask, return_attention_scores=True)[1].numpy()
    ours.head_mask_mode = "uniform"
    try:
        y, scores = ours(query, value, attention_mask=mask, head_mask=head_mask,
                         return_attention_scores=True)
        kept = ours(query, value, attention_mask=mask, head_mask=np.ones(4, "float32"))
    finally:
        ours.head_mask_mode = "scale"
    scores = scores.numpy()
    even = np.where(mask, 1.0 / mask.sum(-1, keepdims=True), 0.0)
    np.testing.assert_allclose(scores[:, 1], even, atol=1e-7)   # 0: uniform, not zero
    assert np.all(scaled[:, 1] == 0)
    np.testing.assert_allclose(scores[:, 2], 0.5 * unmasked[:, 2] + 0.5 * even, atol=1e-6)
    np.testing.assert_array_equal(scores[:, [0, 3]], unmasked[:, [0, 3]])  # 1: unchanged
    # A mask of ones changes no bit in either mode; the output follows the probabilities.
    np.testing.assert_array_equal(kept.numpy(), ours(query, value, attention_mask=mask).numpy())
    w = {v.path.split("/", 1)[1]: v.numpy() for v in ours.weights}
    v = np.einsum("btc,cad->batd", value, w["value/kernel"]) + w["value/bias"][:, None]
    expected = np.einsum("batd,adh->bth", scores @ v, w["attention_output/kernel"]) + \
        w["attention_output/bias"]
    np.testing.assert_allclose(y.numpy(), expected, atol=1e-4)
    with pytest.raises(ValueError, match="head_mask_mode"):
        MultiHeadAttention(num_heads=2, key_dim=8, head_mask_mode="zero")


def _causal(length):
    return np.tril(np.ones((1, length, length), bool))


def test_cached_decoding_step_by_step_equals_one_causal_pass():
    from garden.layers.masks import causal_mask

    heads, width, length = 4, 4, 6
    ours, _ = _built_pair(heads=heads, width=width, value_shape=(2, length, 16),
                          key_shape=(2, length, 16))
    (x,) = _inputs((2, length, 16))
    full, full_scores = ours(x, x, attention_mask=_causal(length), return_attention_scores=True)

    @tf.function(jit_compile=True)  # the index is a tensor, as in a compiled decode loop
    def step(token, cache, index):
        mask = causal_mask(1, length, offset=index)
        return ours(token, token, attention_mask=mask, cache=cache, cache_update_index=index,
                    return_attention_scores=True)

    cache = (tf.zeros((2, heads, length, width)),) * 2  # (keys, values), head-major
    # Prefill the first two positions at once, then one token at a time.
    y0, s0, cache = ours(x[:, :2], x[:, :2], attention_mask=causal_mask(2, length), cache=cache,
                         cache_update_index=0, return_attention_scores=True)
    outputs, scores = [y0.numpy()], [s0.numpy()]
    for i in range(2, length):
        y, s, cache = step(x[:, i:i + 1], cache, tf.constant(i))
        outputs.append(y.numpy())
        scores.append(s.numpy())
    assert [tuple(t.shape) for t in cache] == [(2, heads, length, width)] * 2
    np.testing.assert_allclose(np.concatenate(outputs, 1), full.numpy(), atol=1e-5)
    np.testing.assert_allclose(np.concatenate(scores, 2), full_scores.numpy(), atol=1e-6)
    # The cache holds the projected keys and values of every position.
    keys = np.einsum("btc,cad->btad", x, ours.key_dense.kernel.numpy()) + \
        ours.key_dense.bias.numpy()
    np.testing.assert_allclose(np.swapaxes(cache[0].numpy(), 1, 2), keys, atol=1e-5)


def test_cached_decoding_equals_keras_hub_cached_attention():
    keras_hub = pytest.importorskip("keras_hub")
    from garden.layers.masks import causal_mask

    heads, width, length = 2, 8, 5
    ours = MultiHeadAttention(num_heads=heads, key_dim=width)
    theirs = keras_hub.layers.CachedMultiHeadAttention(num_heads=heads, key_dim=width)
    shape = (2, length, 16)
    ours.build(shape, shape)
    theirs.build(shape, shape)
    _random_weights(theirs)
    ours.set_weights(theirs.get_weights())
    (x,) = _inputs(shape)
    cache_ours = (tf.zeros((2, heads, length, width)),) * 2  # ours: (keys, values) [B, A, T, d]
    cache_theirs = tf.zeros((2, 2, length, heads, width))  # keras-hub: [B, 2, T, A, d]
    for i in range(length):
        mask = causal_mask(1, length, offset=i)
        token = x[:, i:i + 1]
        y_ours, cache_ours = ours(token, token, attention_mask=mask, cache=cache_ours,
                                  cache_update_index=i)
        y_theirs, cache_theirs = theirs(token, token, attention_mask=mask, cache=cache_theirs,
                                        cache_update_index=i)
        np.testing.assert_allclose(y_ours.numpy(), y_theirs.numpy(), atol=1e-5)
        stacked = np.stack([np.swapaxes(t.numpy(), 1, 2) for t in cache_ours], axis=1)
        np.testing.assert_allclose(stacked, cache_theirs.numpy(), atol=1e-5)


def test_a_read_only_cache_is_used_as_the_keys_and_values():
    ours, _ = _built_pair()
    query, value, key = _inputs((2, 5, 16), (2, 7, 12), (2, 7, 10))
    direct = ours(query, value, key=key)
    heads = lambda t: tf.transpose(t, (0, 2, 1, 3))  # noqa: E731  [B, T, A, d] -> [B, A, T, d]
    cache = (heads(ours._project(ours.key_dense, key)),
             heads(ours._project(ours.value_dense, value)))
    # The inputs are ignored when the cache is read without an update index.
    y, same_cache = ours(query, value * 0, key=key * 0, cache=cache)
    np.testing.assert_allclose(y.numpy(), direct.numpy(), atol=1e-5)
    assert same_cache[0] is cache[0] and same_cache[1] is cache[1]
    with pytest.raises(ValueError, match="cache_update_index"):
        ours(query, value, cache_update_index=0)


def test_config_round_trip_keeps_the_options():
    layer = MultiHeadAttention(num_heads=2, key_dim=8, use_bias=False, scale_queries=False,
                               head_mask_mode="uniform")
    clone = MultiHeadAttention.from_config(layer.get_config())
    assert (clone.use_bias, clone.scale_queries, clone.head_mask_mode) == (False, False, "uniform")


def test_cached_decoding_and_bias_under_mixed_precision():
    from garden.layers.masks import causal_mask

    layer = MultiHeadAttention(num_heads=2, key_dim=8, dtype="mixed_bfloat16")
    (x,) = _inputs((2, 4, 16))
    full = layer(x, x, attention_mask=causal_mask(4, 4),
                 attention_bias=np.zeros((1, 2, 4, 4), "float32"))
    assert full.dtype == "bfloat16"
    cache = (tf.zeros((2, 2, 4, 8), "bfloat16"),) * 2  # (keys, values) [B, A, T, d]
    outputs = []
    for i in range(4):
        y, cache = layer(x[:, i:i + 1], x[:, i:i + 1], attention_mask=causal_mask(1, 4, offset=i),
                         cache=cache, cache_update_index=i)
        outputs.append(y)
    assert [t.dtype for t in cache] == ["bfloat16", "bfloat16"]
    np.testing.assert_allclose(tf.cast(tf.concat(outputs, 1), "float32").numpy(),
                               tf.cast(full, "float32").numpy(), atol=3e-2)
