import numpy as np
import keras
import pytest
import tensorflow as tf

from garden.models.roberta.backbone import RobertaBackbone, padding_offset_positions
from garden.models.roberta.presets import PRESETS, untrained_roberta_backbone
from model_testing import (assert_config_round_trip, assert_encoder_output_shapes,
                           assert_keras_file_round_trip)

VOCAB, PAD = 99, 1
TINY = dict(vocab_size=VOCAB, num_layers=2, hidden_size=32, num_heads=4, intermediate_size=37,
            max_sequence_length=62)


def _inputs(length=10, real_lengths=(10, 6), seed=0):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(3, VOCAB, (len(real_lengths), length)).astype("int32")
    token_ids[:, 0] = 0  # <s>
    for b, n in enumerate(real_lengths):
        token_ids[b, n:] = PAD
    return {"token_ids": token_ids, "padding_mask": (token_ids != PAD).astype("int32")}


@pytest.fixture(scope="module")
def backbone():
    keras.utils.set_random_seed(1)
    return RobertaBackbone(**TINY)


def test_inputs_outputs_and_shapes(backbone):
    assert set(backbone.input) == {"token_ids", "padding_mask"}  # no segment input
    out = backbone(_inputs())
    assert_encoder_output_shapes(out, 2, 10, 32)


def test_tables_are_robertas(backbone):
    # 62 usable positions + padding_idx + 1 = 64 rows (512 -> 514 for the released models);
    # one token type, added everywhere.
    assert tuple(backbone.embeddings.position_embedding.position_embeddings.shape) == (64, 32)
    assert tuple(backbone.embeddings.segment_embedding.embeddings.shape) == (1, 32)


def test_position_ids_start_after_padding_idx():
    ids = np.array([[0, 31, 2, PAD, PAD], [0, 5, 6, 7, 2]], "int32")
    got = keras.ops.convert_to_numpy(padding_offset_positions(ids, PAD))
    np.testing.assert_array_equal(got, [[2, 3, 4, 1, 1], [2, 3, 4, 5, 6]])
    got0 = keras.ops.convert_to_numpy(padding_offset_positions(ids, 0))  # another padding id
    np.testing.assert_array_equal(got0[1], [0, 1, 2, 3, 4])


def test_backbone_reads_the_offset_rows(backbone):
    # An unpadded sequence of 6 tokens looks up rows 2..7 only: rows 0, 1 (padding_idx) and 8+
    # get no gradient. A BERT-style lookup would use rows 0..5 instead.
    ids = _inputs(length=6, real_lengths=(6,))
    table = backbone.embeddings.position_embedding.position_embeddings
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(backbone(ids, training=False)["sequence_output"] ** 2)
    grad = tf.convert_to_tensor(tape.gradient(loss, table)).numpy()
    used = np.abs(grad).sum(-1) > 0
    assert np.flatnonzero(used).tolist() == [2, 3, 4, 5, 6, 7]


def test_padding_does_not_change_real_outputs(backbone):
    short = _inputs(length=6, real_lengths=(6,))
    padded = _inputs(length=10, real_lengths=(6,))
    padded["token_ids"][:, :6] = short["token_ids"]
    a = backbone(short, training=False)["sequence_output"].numpy()
    b = backbone(padded, training=False)["sequence_output"].numpy()[:, :6]
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_config_round_trip_and_keras_file(backbone, tmp_path):
    expected = dict(TINY, padding_idx=1, dropout=0.1, initializer_range=0.02,
                    layer_norm_epsilon=1e-5, dtype=None)
    assert_config_round_trip(backbone, expected)
    assert_keras_file_round_trip(backbone, tmp_path / "roberta.keras", _inputs(),
                                 ("sequence_output", "pooled_output"))


def test_presets_are_the_published_sizes():
    sizes = {name: (p["num_layers"], p["hidden_size"], p["num_heads"], p["intermediate_size"],
                    p["vocab_size"], p["max_sequence_length"], p["padding_idx"])
             for name, p in PRESETS.items()}
    assert sizes == {"roberta_base": (12, 768, 12, 3072, 50265, 512, 1),
                     "roberta_large": (24, 1024, 16, 4096, 50265, 512, 1)}
    with pytest.raises(ValueError, match="roberta_base"):
        untrained_roberta_backbone("roberta_huge")


def _hf_roberta_model(preset, device="meta"):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    # roberta-base / roberta-large config.json: 514 positions, one token type, eps 1e-5.
    # (RobertaConfig()'s own defaults are BERT's 512 positions and 2 types, not a release.)
    config = transformers.RobertaConfig(
        vocab_size=preset["vocab_size"], hidden_size=preset["hidden_size"],
        num_hidden_layers=preset["num_layers"], num_attention_heads=preset["num_heads"],
        intermediate_size=preset["intermediate_size"],
        max_position_embeddings=preset["max_sequence_length"] + preset["padding_idx"] + 1,
        type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=preset["padding_idx"])
    with torch.device(device):
        return transformers.RobertaModel(config)  # with its pooler


def _hf_parameter_count(preset):
    return sum(p.numel() for p in _hf_roberta_model(preset).parameters())


def _parameter_count(V, L, H, F, P):
    embeddings = V * H + (P + 2) * H + 1 * H + 2 * H   # tables (514 rows, 1 type) + LayerNorm
    block = 4 * (H * H + H) + 2 * H + (H * F + F) + (F * H + H) + 2 * H
    return embeddings + L * block + (H * H + H)        # + pooler


def test_parameter_count_formula_is_the_keras_count():
    # Checked on built tiny models, so that the published sizes can be counted without
    # allocating 355M parameters on a 2-core CI machine.
    for overrides in (dict(TINY), dict(TINY, num_layers=3, hidden_size=48, intermediate_size=20)):
        backbone = RobertaBackbone(**overrides)
        assert backbone.count_params() == _parameter_count(
            overrides["vocab_size"], overrides["num_layers"], overrides["hidden_size"],
            overrides["intermediate_size"], overrides["max_sequence_length"])


@pytest.mark.parametrize("name,expected", [("roberta_base", 124_645_632),
                                           ("roberta_large", 355_359_744)])
def test_published_parameter_counts_equal_hugging_face(name, expected):
    p = PRESETS[name]
    ours = _parameter_count(p["vocab_size"], p["num_layers"], p["hidden_size"],
                            p["intermediate_size"], p["max_sequence_length"])
    assert ours == _hf_parameter_count(p) == expected
    if name == "roberta_base":  # one real build of a published size
        assert untrained_roberta_backbone(name).count_params() == expected
