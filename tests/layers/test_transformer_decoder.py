"""TransformerDecoderBlock against keras_hub.layers.TransformerDecoder with the same weights,
and cached step-by-step decoding against one full causal pass."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden.layers.transformer_decoder import TransformerDecoderBlock

keras_hub = pytest.importorskip("keras_hub")

B, T, S, H, A = 2, 6, 5, 16, 4


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, T, H)).astype("float32")
    encoder = rng.normal(size=(B, S, H)).astype("float32")
    decoder_padding = np.ones((B, T), "int32")
    decoder_padding[1, 5:] = 0
    encoder_padding = np.ones((B, S), "int32")
    encoder_padding[0, 3:] = 0
    return x, encoder, decoder_padding, encoder_padding


def _pair(normalize_first, cross):
    ours = TransformerDecoderBlock(num_heads=A, intermediate_size=32, dropout=0.0,
                                   activation="gelu", normalize_first=normalize_first)
    theirs = keras_hub.layers.TransformerDecoder(intermediate_dim=32, num_heads=A, dropout=0.0,
                                                 activation="gelu",
                                                 normalize_first=normalize_first)
    encoder_shape = (B, S, H) if cross else None
    ours.build((B, T, H), encoder_shape)
    theirs.build((B, T, H), encoder_shape)
    rng = np.random.default_rng(7)
    for w in theirs.weights:
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32") +
                 (1.0 if "gamma" in w.path else 0.0))
    assert [tuple(w.shape) for w in ours.weights] == [tuple(w.shape) for w in theirs.weights]
    ours.set_weights(theirs.get_weights())
    return ours, theirs


@pytest.mark.parametrize("normalize_first", [False, True])
@pytest.mark.parametrize("cross", [False, True])
def test_full_pass_equals_keras_hub(normalize_first, cross):
    ours, theirs = _pair(normalize_first, cross)
    x, encoder, decoder_padding, encoder_padding = _inputs()
    kwargs = dict(decoder_padding_mask=decoder_padding)
    if cross:
        kwargs.update(encoder_sequence=encoder, encoder_padding_mask=encoder_padding)
    y_ours = ours(x, **kwargs).numpy()
    y_theirs = theirs(x, **kwargs).numpy()
    np.testing.assert_allclose(y_ours, y_theirs, atol=1e-4)
    # The causal mask took effect: changing the last token leaves earlier outputs alone.
    x2 = x.copy()
    x2[:, -1] += 1.0
    y2 = ours(x2, **kwargs).numpy()
    np.testing.assert_allclose(y2[:, :-1], y_ours[:, :-1], atol=1e-5)
    assert not np.allclose(y2[:, -1], y_ours[:, -1], atol=1e-3)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_cached_decoding_equals_the_full_pass_and_keras_hub(normalize_first):
    ours, theirs = _pair(normalize_first, cross=True)
    x, encoder, _, encoder_padding = _inputs(1)
    full = ours(x, encoder_sequence=encoder, encoder_padding_mask=encoder_padding).numpy()
    width = H // A
    caches = {}
    for name, layer in (("ours", ours), ("theirs", theirs)):
        if name == "ours":  # (keys, values) pairs of [B, A, T_max, d]
            self_cache = (tf.zeros((B, A, T, width)),) * 2
            cross_cache = (tf.zeros((B, A, S, width)),) * 2
        else:  # keras-hub's [B, 2, T_max, A, d]
            self_cache = tf.zeros((B, 2, T, A, width))
            cross_cache = tf.zeros((B, 2, S, A, width))
        outputs = []
        for i in range(T):
            y, self_cache, cross_cache = layer(
                x[:, i:i + 1], encoder_sequence=encoder, encoder_padding_mask=encoder_padding,
                self_attention_cache=self_cache, self_attention_cache_update_index=i,
                cross_attention_cache=cross_cache,
                cross_attention_cache_update_index=0 if i == 0 else None)
            outputs.append(y.numpy())
        if name == "ours":  # as keras-hub stacks them, to compare
            self_cache, cross_cache = (
                np.stack([np.swapaxes(t.numpy(), 1, 2) for t in pair], axis=1)
                for pair in (self_cache, cross_cache))
        else:
            self_cache, cross_cache = self_cache.numpy(), cross_cache.numpy()
        caches[name] = (np.concatenate(outputs, 1), self_cache, cross_cache)
    np.testing.assert_allclose(caches["ours"][0], full, atol=1e-4)
    for a, b in zip(caches["ours"], caches["theirs"]):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_scores_head_masks_and_their_order_with_caches():
    ours, _ = _pair(False, cross=True)
    x, encoder, _, encoder_padding = _inputs(2)
    y, self_scores, cross_scores = ours(
        x, encoder_sequence=encoder, encoder_padding_mask=encoder_padding,
        head_mask=np.array([1, 0, 1, 1], "float32"),
        cross_head_mask=np.array([1, 1, 1, 0], "float32"), return_attention_scores=True)
    assert self_scores.shape == (B, A, T, T) and cross_scores.shape == (B, A, T, S)
    self_scores, cross_scores = self_scores.numpy(), cross_scores.numpy()
    assert np.all(self_scores[:, 1] == 0) and np.all(cross_scores[:, 3] == 0)
    upper = np.triu(np.ones((T, T), bool), 1)
    assert np.all(self_scores[:, :, upper] == 0)  # causal
    assert np.all(cross_scores[0, :, :, 3:] == 0)  # encoder padding
    np.testing.assert_allclose(self_scores[:, 0].sum(-1), 1, atol=1e-5)
    plain = ours(x, encoder_sequence=encoder, encoder_padding_mask=encoder_padding)
    assert not np.allclose(y.numpy(), plain.numpy(), atol=1e-3)
    # With caches: (y, self scores, cross scores, self cache, cross cache).
    outputs = ours(x[:, :1], encoder_sequence=encoder, encoder_padding_mask=encoder_padding,
                   self_attention_cache=(tf.zeros((B, A, T, H // A)),) * 2,
                   self_attention_cache_update_index=0,
                   cross_attention_cache=(tf.zeros((B, A, S, H // A)),) * 2,
                   cross_attention_cache_update_index=0, return_attention_scores=True)
    assert [tf.nest.map_structure(lambda t: tuple(t.shape), o) for o in outputs] == [
        (B, 1, H), (B, A, 1, T), (B, A, 1, S), ((B, A, T, H // A),) * 2,
        ((B, A, S, H // A),) * 2]


def test_inconsistent_calls_are_refused():
    ours, _ = _pair(False, cross=False)
    x, encoder, _, _ = _inputs()
    with pytest.raises(ValueError, match="without cross-attention"):
        ours(x, encoder_sequence=encoder)


def test_functional_graph_and_config_round_trip():
    tokens = keras.Input((T, H))
    block = TransformerDecoderBlock(num_heads=A, intermediate_size=32, activation="gelu_new",
                                    normalize_first=True)
    y, scores = block(tokens, return_attention_scores=True)
    assert tuple(scores.shape) == (None, A, T, T)
    model = keras.Model(tokens, [y, scores])
    x = _inputs()[0]
    np.testing.assert_allclose(model(x)[0].numpy(), block(x).numpy(), atol=1e-6)
    clone = TransformerDecoderBlock.from_config(block.get_config())
    assert clone.normalize_first and clone.activation is block.activation
