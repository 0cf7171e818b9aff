import numpy as np
import keras
import pytest

from garden.models.distilbert.backbone import DistilBertBackbone
from garden.models.distilbert.presets import PRESETS, untrained_distilbert_backbone
from garden.models.distilbert.pretrainer import DistilBertPretrainer
from model_testing import assert_config_round_trip, assert_keras_file_round_trip, padded_ids

VOCAB = 99
TINY = dict(vocab_size=VOCAB, num_layers=2, hidden_size=32, num_heads=4, intermediate_size=37,
            max_sequence_length=64)


def _inputs():
    token_ids, padding_mask = padded_ids(VOCAB, 2, 10, padded_row=1, pad_from=6)
    return {"token_ids": token_ids, "padding_mask": padding_mask}


@pytest.fixture(scope="module")
def backbone():
    keras.utils.set_random_seed(5)
    return DistilBertBackbone(**TINY)


def test_inputs_outputs_and_shapes(backbone):
    assert set(backbone.input) == {"token_ids", "padding_mask"}
    out = backbone(_inputs())
    assert set(out) == {"sequence_output"}  # no pooler
    assert tuple(out["sequence_output"].shape) == (2, 10, 32)
    # No token types: only word and position tables.
    assert backbone.embeddings.segment_embedding is None
    assert not any("segment" in w.path or "pooler" in w.path for w in backbone.weights)


def test_config_round_trip_and_keras_file(backbone, tmp_path):
    expected = dict(TINY, dropout=0.1, attention_dropout=0.1, initializer_range=0.02,
                    layer_norm_epsilon=1e-12, dtype=None)
    assert_config_round_trip(backbone, expected)
    assert backbone.encoder_blocks[0].attention_dropout == 0.1

    assert_keras_file_round_trip(backbone, tmp_path / "distilbert.keras", _inputs(),
                                 ("sequence_output",))


def test_pretrainer_shapes_tie_and_keras_file(backbone, tmp_path):
    student = DistilBertPretrainer(backbone)
    inputs = dict(_inputs(), masked_lm_positions=np.array([[1, 2], [3, 4]], "int32"))
    out = student(inputs)
    assert tuple(out["mlm_logits"].shape) == (2, 2, VOCAB)
    assert tuple(out["sequence_output"].shape) == (2, 10, 32)
    assert student.masked_lm_head.token_embedding.embeddings is backbone.token_embedding.embeddings
    assert_config_round_trip(student)
    assert_keras_file_round_trip(student, tmp_path / "student.keras", inputs, ("mlm_logits",))


def test_preset_and_parameter_count_equal_hugging_face():
    assert PRESETS["distilbert_base"] == dict(vocab_size=30522, num_layers=6, hidden_size=768,
                                              num_heads=12, intermediate_size=3072,
                                              max_sequence_length=512)
    with pytest.raises(ValueError, match="distilbert_base"):
        untrained_distilbert_backbone("distilbert_large")
    ours = untrained_distilbert_backbone("distilbert_base").count_params()
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        reference = transformers.DistilBertModel(transformers.DistilBertConfig())  # the defaults
    assert ours == sum(p.numel() for p in reference.parameters()) == 66_362_880  # "66M"
