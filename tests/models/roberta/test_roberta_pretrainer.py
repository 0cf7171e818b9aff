import numpy as np
import keras
import pytest

from garden.models.roberta.backbone import RobertaBackbone
from garden.models.roberta.pretrainer import RobertaPretrainer, roberta_pretrain_loss
from model_testing import assert_config_round_trip, assert_keras_file_round_trip

VOCAB, PAD = 99, 1
TINY = dict(vocab_size=VOCAB, num_layers=2, hidden_size=32, num_heads=4, intermediate_size=37,
            max_sequence_length=30)


def _inputs():
    rng = np.random.default_rng(0)
    token_ids = rng.integers(3, VOCAB, (2, 10)).astype("int32")
    token_ids[:, 0] = 0
    token_ids[1, 6:] = PAD
    return {"token_ids": token_ids, "padding_mask": (token_ids != PAD).astype("int32"),
            "masked_lm_positions": np.array([[1, 4, 8], [2, 3, 5]], "int32")}


@pytest.fixture(scope="module")
def pretrainer():
    keras.utils.set_random_seed(3)
    return RobertaPretrainer(RobertaBackbone(**TINY))


def test_mlm_only_outputs(pretrainer):
    assert set(pretrainer.input) == {"token_ids", "padding_mask", "masked_lm_positions"}
    out = pretrainer(_inputs())
    assert set(out) == {"mlm_logits"}  # no NSP head
    assert tuple(out["mlm_logits"].shape) == (2, 3, VOCAB)
    assert out["mlm_logits"].dtype == "float32"


def test_output_projection_is_the_word_table(pretrainer):
    table = pretrainer.backbone.token_embedding.embeddings
    assert pretrainer.masked_lm_head.token_embedding.embeddings is table
    assert sum(tuple(v.shape) == (VOCAB, 32) for v in pretrainer.trainable_variables) == 1
    # MLM head: dense(H) -> LayerNorm -> table + bias; its LayerNorm has RoBERTa's 1e-5.
    assert pretrainer.masked_lm_head.layer_norm.epsilon == 1e-5


def test_config_and_keras_file_round_trip(pretrainer, tmp_path):
    assert_config_round_trip(pretrainer)
    loaded = assert_keras_file_round_trip(pretrainer, tmp_path / "roberta_pretrainer.keras",
                                          _inputs(), ("mlm_logits",))
    assert loaded.masked_lm_head.token_embedding.embeddings is loaded.backbone.token_embedding.embeddings


def test_loss_matches_numpy():
    rng = np.random.default_rng(4)
    logits = (3 * rng.normal(size=(3, 4, 11))).astype("float32")
    ids = rng.integers(0, 11, (3, 4)).astype("int32")
    weights = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], "float32")
    got = roberta_pretrain_loss({"mlm_logits": logits}, ids, weights)
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_p, ids[..., None], -1)[..., 0]
    want = (weights * nll).sum() / (weights.sum() + 1e-5)
    np.testing.assert_allclose(got["loss"].numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(got["mlm_loss"].numpy(), want, rtol=1e-5)
    acc = (weights * (logits.argmax(-1) == ids)).sum() / weights.sum()
    np.testing.assert_allclose(got["mlm_accuracy"].numpy(), acc, rtol=1e-6)
