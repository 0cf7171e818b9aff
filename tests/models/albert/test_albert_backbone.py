import numpy as np
import keras
import pytest

from garden.models.albert.backbone import AlbertBackbone

VOCAB = 99
# Tiny but with every width distinct (V 99, E 16, H 32, FFN 37) so a transposed table fails.
TINY = dict(vocab_size=VOCAB, num_layers=3, hidden_size=32, num_heads=4, intermediate_size=37,
            embedding_size=16, max_sequence_length=64)
from model_testing import (assert_config_round_trip, assert_encoder_output_shapes,
                           assert_keras_file_round_trip, padded_batch)
BLOCK_VARIABLES = 16  # q, k, v, output (kernel + bias) + 2 dense (kernel + bias) + 2 LayerNorms


def _inputs(batch=2, length=10, seed=0, real_lengths=(10, 6)):
    return padded_batch(VOCAB, batch, length, seed, real_lengths)


def _block_variables(backbone):
    return [v for v in backbone.weights if v.path.startswith("transformer_layer_")]


@pytest.fixture(scope="module")
def backbone():
    keras.utils.set_random_seed(1)
    return AlbertBackbone(**TINY)


def test_output_shapes_and_dtypes(backbone):
    out = backbone(_inputs(batch=3, length=7, real_lengths=(7, 4, 1)))
    assert_encoder_output_shapes(out, 3, 7, 32)
    assert out["sequence_output"].dtype == "float32"


def test_factorized_embeddings_are_e_wide(backbone):
    shapes = {v.path: tuple(v.shape) for v in backbone.weights}
    assert shapes["embeddings/token_embedding/embeddings"] == (VOCAB, 16)
    assert shapes["embeddings/position_embedding/embeddings"] == (64, 16)
    assert shapes["embeddings/segment_embedding/embeddings"] == (2, 16)
    assert shapes["embeddings/layer_norm/gamma"] == (16,)  # LayerNorm at E, before E -> H
    assert shapes["embeddings/projection/kernel"] == (16, 32)
    assert tuple(backbone.token_embedding.embeddings.shape) == (VOCAB, 16)


def test_share_all_has_one_set_of_layer_weights(backbone):
    variables = _block_variables(backbone)
    assert len(variables) == BLOCK_VARIABLES
    assert all(v.path.startswith("transformer_layer_0/") for v in variables)
    assert len(backbone.encoder_blocks) == 1
    assert all(backbone.block_for_layer(i) is backbone.encoder_blocks[0] for i in range(3))
    # Three applications of one block are not one application: the depth is real.
    one_layer = AlbertBackbone(**dict(TINY, num_layers=1))
    one_layer.set_weights(backbone.get_weights())  # same variables, same order
    inputs = _inputs()
    a = backbone(inputs)["sequence_output"].numpy()
    b = one_layer(inputs)["sequence_output"].numpy()
    assert np.abs(a - b).max() > 1e-3


def test_num_groups_give_that_many_blocks_in_order():
    backbone = AlbertBackbone(**dict(TINY, num_layers=6, num_groups=3))
    assert len(_block_variables(backbone)) == 3 * BLOCK_VARIABLES
    # Hugging Face's rule: layer i runs group int(i / (L / G)) -> 0 0 1 1 2 2.
    assert [backbone.encoder_blocks.index(backbone.block_for_layer(i)) for i in range(6)] \
        == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("share,per_later_layer,shared_part,own_part", [
    ("attention", 6, ("attention", "attention_layer_norm"),
     ("intermediate_dense", "output_dense", "output_layer_norm")),
    ("ffn", 10, ("intermediate_dense", "output_dense", "output_layer_norm"),
     ("attention", "attention_layer_norm")),
    ("none", 16, (), ("attention", "attention_layer_norm", "intermediate_dense", "output_dense",
                      "output_layer_norm")),
])
def test_partial_sharing_shares_only_that_part(share, per_later_layer, shared_part, own_part):
    backbone = AlbertBackbone(**dict(TINY, share=share))
    assert len(_block_variables(backbone)) == BLOCK_VARIABLES + 2 * per_later_layer
    first = backbone.block_for_layer(0)
    for i in (1, 2):
        block = backbone.block_for_layer(i)
        assert block is not first
        for name in shared_part:
            assert getattr(block, name) is getattr(first, name), (share, name)
        for name in own_part:
            assert getattr(block, name) is not getattr(first, name), (share, name)
    # A shared variable is one variable: its gradient sums every layer's use of it.
    import tensorflow as tf
    with tf.GradientTape() as tape:
        out = backbone(_inputs(), training=False)
        loss = tf.reduce_sum(out["sequence_output"] ** 2) + tf.reduce_sum(out["pooled_output"])
    grads = tape.gradient(loss, backbone.trainable_variables)
    assert all(g is not None for g in grads)


def test_invalid_sharing_arguments_are_named():
    with pytest.raises(ValueError, match="share="):
        AlbertBackbone(**dict(TINY, share="heads"))
    with pytest.raises(ValueError, match="num_groups=2 must divide num_layers=3"):
        AlbertBackbone(**dict(TINY, num_groups=2))
    with pytest.raises(ValueError, match="only applies to share='all'"):
        AlbertBackbone(**dict(TINY, num_layers=4, num_groups=2, share="ffn"))


def test_padded_positions_do_not_change_real_outputs(backbone):
    inputs = _inputs()
    other = {k: v.copy() for k, v in inputs.items()}
    pad = inputs["padding_mask"] == 0
    other["token_ids"][pad] = 7
    other["segment_ids"][pad] = 1
    real = ~pad
    a = backbone(inputs)["sequence_output"].numpy()[real]
    b = backbone(other)["sequence_output"].numpy()[real]
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_v2_defaults_no_dropout_and_tanh_gelu(backbone):
    inputs = _inputs()
    a = backbone(inputs, training=False)["pooled_output"].numpy()
    b = backbone(inputs, training=True)["pooled_output"].numpy()
    np.testing.assert_array_equal(a, b)  # dropout 0: training changes nothing
    block = backbone.encoder_blocks[0]
    x = np.linspace(-3, 3, 13).astype("float32")
    tanh_gelu = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(np.asarray(block.activation(x)), tanh_gelu, atol=1e-6)


def test_config_round_trip(backbone):
    expected = dict(TINY, max_sequence_length=64, type_vocab_size=2, num_groups=1, share="all",
                    dropout=0.0, initializer_range=0.02, layer_norm_epsilon=1e-12,
                    activation="gelu_new", dtype=None)
    assert_config_round_trip(backbone, expected, _inputs())


@pytest.mark.parametrize("share", ["all", "attention"])
def test_save_and_load_keras_file(share, tmp_path):
    keras.utils.set_random_seed(3)
    backbone = AlbertBackbone(**dict(TINY, share=share))
    loaded = assert_keras_file_round_trip(backbone, tmp_path / "albert.keras", _inputs(),
                                          ("sequence_output", "pooled_output"))
    assert len(loaded.weights) == len(backbone.weights)
    if share == "attention":  # the link is rebuilt, not two copies
        assert loaded.block_for_layer(2).attention is loaded.block_for_layer(0).attention
