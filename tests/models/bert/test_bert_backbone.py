import numpy as np
import keras
import pytest

from garden.models.bert.pretrainer import BertPretrainer
from garden.models.bert.presets import PRESETS, untrained_bert_backbone

import bert_reference as ref
from model_testing import (assert_config_round_trip, assert_encoder_output_shapes,
                           assert_keras_file_round_trip, padded_batch)

VOCAB = 100


def _inputs(batch=2, length=12, seed=0, real_lengths=(12, 7)):
    return padded_batch(VOCAB, batch, length, seed, real_lengths)


@pytest.fixture(scope="module")
def backbone():
    keras.utils.set_random_seed(1)
    return untrained_bert_backbone("bert_tiny", vocab_size=VOCAB)


def test_output_shapes_and_dtypes(backbone):
    out = backbone(_inputs(batch=3, length=10, real_lengths=(10, 4, 1)))
    assert_encoder_output_shapes(out, 3, 10, 128)
    assert out["sequence_output"].dtype == "float32"


def test_matches_numpy_reference_of_bert():
    # Post-LN blocks, exact GELU, 1/sqrt(d) scaling, masked keys, tanh pooler on [CLS].
    backbone = untrained_bert_backbone("bert_tiny", vocab_size=VOCAB)
    ref.randomize_weights(backbone)
    inputs = _inputs()
    out = backbone(inputs, training=False)
    seq, pooled = ref.backbone_forward(ref.weights_by_path(backbone), 2, **inputs)
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(out["sequence_output"].numpy()[real], seq[real], atol=1e-4)
    np.testing.assert_allclose(out["pooled_output"].numpy(), pooled, atol=1e-4)


def test_padded_positions_do_not_change_real_outputs(backbone):
    inputs = _inputs()
    other = {k: v.copy() for k, v in inputs.items()}
    pad = inputs["padding_mask"] == 0
    assert pad.any()
    other["token_ids"][pad] = np.random.default_rng(5).integers(1, VOCAB, pad.sum())
    other["segment_ids"][pad] = 1
    real = ~pad
    a = backbone(inputs, training=False)["sequence_output"].numpy()[real]
    b = backbone(other, training=False)["sequence_output"].numpy()[real]
    np.testing.assert_allclose(a, b, atol=1e-5)
    # The mask is what makes it so: attending to the padding changes the real positions.
    unmasked = dict(other, padding_mask=np.ones_like(inputs["padding_mask"]))
    c = backbone(unmasked, training=False)["sequence_output"].numpy()[real]
    assert np.abs(a - c).max() > 1e-3


def test_dropout_only_in_training(backbone):
    inputs = _inputs()
    a = backbone(inputs, training=False)["pooled_output"].numpy()
    b = backbone(inputs, training=False)["pooled_output"].numpy()
    c = backbone(inputs, training=True)["pooled_output"].numpy()
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-4


def test_token_embedding_is_the_word_table(backbone):
    emb = backbone.token_embedding
    assert isinstance(emb, keras.layers.Embedding)
    assert tuple(emb.embeddings.shape) == (VOCAB, 128)


def test_config_round_trip(backbone):
    expected = dict(PRESETS["bert_tiny"], vocab_size=VOCAB, dropout=0.1, initializer_range=0.02,
                    layer_norm_epsilon=1e-12, dtype=None)
    assert_config_round_trip(backbone, expected, _inputs())


def test_save_and_load_keras_file(backbone, tmp_path):
    assert_keras_file_round_trip(backbone, tmp_path / "backbone.keras", _inputs(),
                                 ("sequence_output", "pooled_output"))


def test_initializers_truncated_normal_and_zero_biases(backbone):
    for w in backbone.weights:
        values = w.numpy()
        if w.path.endswith(("/bias", "/beta")):
            assert not values.any(), w.path
        elif w.path.endswith("/gamma"):
            assert (values == 1).all(), w.path
        else:  # kernels and tables: N(0, 0.02) cut at 2 stddev
            assert np.abs(values).max() <= 0.04 + 1e-6, w.path
            assert 0.01 < values.std() < 0.02, w.path


def _backbone_parameter_count(V, L, H, F, P=512, T=2):
    embeddings = V * H + P * H + T * H + 2 * H          # tables + LayerNorm
    attention = 4 * (H * H + H) + 2 * H                 # q, k, v, output + LayerNorm
    feed_forward = (H * F + F) + (F * H + H) + 2 * H     # two dense + LayerNorm
    pooler = H * H + H
    return embeddings + L * (attention + feed_forward) + pooler


@pytest.mark.parametrize("name,expected_millions", [("bert_base", 110), ("bert_large", 335)])
def test_parameter_counts(name, expected_millions):
    preset = PRESETS[name]
    with keras.StatelessScope(initialize_variables=False):  # shapes only: no weights drawn
        backbone = untrained_bert_backbone(name)
        pretrainer = BertPretrainer(backbone)
    expected = _backbone_parameter_count(preset["vocab_size"], preset["num_layers"],
                                         preset["hidden_size"], preset["intermediate_size"])
    assert backbone.count_params() == expected
    assert abs(expected / 1e6 - expected_millions) < 1.0  # 109.48M and 335.14M
    if name == "bert_base":
        assert expected == 109_482_240
    # The pretraining heads add the MLM transform (dense + LayerNorm), the vocabulary-sized
    # output bias (the output matrix is the tied word table) and the NSP dense(2).
    V, H = preset["vocab_size"], preset["hidden_size"]
    assert pretrainer.count_params() == expected + (H * H + H) + 2 * H + V + (2 * H + 2)

