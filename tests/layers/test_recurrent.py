"""garden.layers.recurrent: the LSTM against Keras' and a NumPy LSTMP, the dropouts' masks, and
the scalar mix."""

import keras
import numpy as np
import pytest

from garden.layers.recurrent import (ProjectedLSTM, RowDroppedEmbedding, ScalarMix,
                                     VariationalDropout)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _numpy_lstmp(x, kernel, recurrent, bias, projection=None, cell_clip=None, proj_clip=None):
    """One sequence [T, D] through an LSTM(P), step by step."""
    units = kernel.shape[1] // 4
    h = np.zeros(recurrent.shape[0])
    c = np.zeros(units)
    out = []
    for x_t in x:
        z = x_t @ kernel + h @ recurrent + bias
        i, f, g, o = np.split(z, 4)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        if cell_clip is not None:
            c = np.clip(c, -cell_clip, cell_clip)
        h = _sigmoid(o) * np.tanh(c)
        if projection is not None:
            h = h @ projection
            if proj_clip is not None:
                h = np.clip(h, -proj_clip, proj_clip)
        out.append(h)
    return np.stack(out)


def test_equals_keras_lstm_on_the_real_steps():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], "int32")
    ours = ProjectedLSTM(6)
    ours(x)
    reference = keras.layers.LSTM(6, return_sequences=True)
    reference(x)
    reference.set_weights(ours.get_weights())  # kernel, recurrent_kernel, bias: same layout
    got = ours(x, padding_mask=mask).numpy()
    want = reference(x, mask=mask.astype(bool)).numpy()
    np.testing.assert_allclose(got * mask[..., None], want * mask[..., None], atol=1e-5)
    assert np.all(got[mask == 0] == 0)


def test_projection_and_clipping_equal_a_numpy_lstmp():
    rng = np.random.default_rng(1)
    x = (3 * rng.normal(size=(2, 6, 5))).astype("float32")
    layer = ProjectedLSTM(8, projection_size=3, cell_clip=0.5, projection_clip=0.2)
    layer(x)
    layer.set_weights([w * 3 for w in layer.get_weights()])  # large enough to clip
    kernel, recurrent, bias, projection = (w.astype("float64") for w in layer.get_weights())
    got = layer(x).numpy()
    assert got.shape == (2, 6, 3)
    for b in range(2):
        want = _numpy_lstmp(x[b], kernel, recurrent, bias, projection, 0.5, 0.2)
        np.testing.assert_allclose(got[b], want, atol=1e-5)
    assert np.isclose(np.abs(got).max(), 0.2)  # the projection clip binds


def test_backward_reads_each_sequence_from_its_last_real_step():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 5, 3)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], "int32")
    backward = ProjectedLSTM(4, go_backwards=True)
    backward(x)
    weights = [w.astype("float64") for w in backward.get_weights()]
    got = backward(x, padding_mask=mask).numpy()
    for b, length in enumerate(mask.sum(1)):
        want = _numpy_lstmp(x[b, :length][::-1], *weights)[::-1]
        np.testing.assert_allclose(got[b, :length], want, atol=1e-5)
        assert np.all(got[b, length:] == 0)


def test_dropconnect_masks_the_recurrent_kernel_only_in_training():
    p = 0.4
    layer = ProjectedLSTM(50, recurrent_dropconnect=p)
    x = np.random.default_rng(3).normal(size=(2, 1, 7)).astype("float32")
    layer(x)
    u = layer.recurrent_kernel.numpy()
    np.testing.assert_array_equal(layer.recurrent_weights(training=False).numpy(), u)
    dropped = layer.recurrent_weights(training=True).numpy()
    kept = dropped != 0
    np.testing.assert_allclose(dropped[kept], u[kept] / (1 - p), rtol=1e-6)
    n = u.size
    assert abs((~kept).sum() - p * n) < 4 * np.sqrt(n * p * (1 - p))
    # One step from h = 0 never reads U: training = inference (no dropout on W or the input).
    np.testing.assert_allclose(layer(x, training=True).numpy(), layer(x).numpy(), atol=1e-6)
    # Later steps read U': in training they differ.
    x2 = np.repeat(x, 3, axis=1)
    assert not np.allclose(layer(x2, training=True).numpy()[:, 1:], layer(x2).numpy()[:, 1:])


def test_variational_dropout_draws_one_mask_per_sequence():
    p, batch, steps, width = 0.5, 8, 6, 64
    out = VariationalDropout(p)(np.ones((batch, steps, width), "float32"), training=True)
    out = out.numpy()
    assert np.all(out == out[:, :1, :])  # the same features at every step
    assert set(np.unique(out)) <= {0.0, 2.0}
    dropped = (out[:, 0, :] == 0).sum()
    n = batch * width
    assert abs(dropped - p * n) < 4 * np.sqrt(n * p * (1 - p))
    assert not np.all(out[0] == out[1])  # its own mask per sequence
    np.testing.assert_array_equal(VariationalDropout(p)(np.ones((2, 3, 4))).numpy(), 1)


def test_row_dropped_embedding_drops_whole_words():
    p, vocab = 0.3, 400
    embed = RowDroppedEmbedding(vocab, 5, row_dropout=p)
    ids = np.array([np.arange(vocab), np.arange(vocab)[::-1]], "int32")
    plain = embed(ids).numpy()
    out = embed(ids, training=True).numpy()
    zero_rows = np.all(out == 0, axis=-1)
    # A word is dropped everywhere it occurs in the batch, or kept (scaled) everywhere.
    np.testing.assert_array_equal(zero_rows[0], zero_rows[1][::-1])
    np.testing.assert_allclose(out[~zero_rows], plain[~zero_rows] / (1 - p), rtol=1e-6)
    assert abs(zero_rows[0].sum() - p * vocab) < 4 * np.sqrt(vocab * p * (1 - p))
    np.testing.assert_array_equal(embed(ids, training=False).numpy(), plain)


def test_scalar_mix_is_the_mean_at_initialisation_then_a_softmax_mix():
    rng = np.random.default_rng(4)
    layers = [rng.normal(size=(2, 3, 4)).astype("float32") for _ in range(3)]
    mix = ScalarMix(3)
    np.testing.assert_allclose(mix(layers).numpy(), np.mean(layers, axis=0), atol=1e-6)
    mix.layer_weights.assign([0.0, 1.0, 2.0])
    mix.gamma.assign(2.0)
    shares = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    np.testing.assert_allclose(mix(layers).numpy(),
                               2 * sum(s * h for s, h in zip(shares, layers)), atol=1e-5)
    with pytest.raises(ValueError, match="ScalarMix of 3 layers called on 2"):
        mix(layers[:2])


def test_a_tagger_mixes_berts_layers_as_elmo_does():
    """TokenTagger(feature_layers=3, scalar_mix=True) on a BERT backbone: the frozen backbone's
    last three layers enter through a ScalarMix, so at initialisation the tagger reads their
    mean; the mix's weights train, the backbone's do not."""
    from garden.models.bert.backbone import BertBackbone
    from garden.models.tagging import TokenTagger

    backbone = BertBackbone(vocab_size=50, num_layers=3, hidden_size=16, num_heads=2,
                            intermediate_size=32, output_hidden_states=True)
    tagger = TokenTagger(backbone, num_labels=4, feature_layers=3, scalar_mix=True)
    ids = np.array([[2, 7, 8, 9, 3, 0]], "int32")
    inputs = {"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": (ids > 0).astype("int32")}
    states = backbone(inputs)["hidden_states"].numpy()
    want = tagger.tagger_dense(np.mean(states[-3:], axis=0)).numpy()
    np.testing.assert_allclose(tagger(inputs)["logits"], want, atol=1e-5)
    trainable = {v.path for v in tagger.trainable_weights}
    assert {"scalar_mix/layer_weights", "scalar_mix/gamma"} <= trainable
    assert not backbone.trainable_weights
    with pytest.raises(ValueError, match="scalar_mix are options of the feature-based"):
        TokenTagger(backbone, num_labels=4, scalar_mix=True)
