import numpy as np
import keras
import pytest

from garden.models.albert.backbone import AlbertBackbone
from garden.models.albert.pretrainer import AlbertPretrainer, albert_pretrain_loss
from garden.models.bert.pretrainer import bert_pretrain_loss
from model_testing import (assert_config_round_trip, assert_keras_file_round_trip,
                           assert_pretrainer_logits, pretrain_batch, pretrain_step)

VOCAB = 99
TINY = dict(vocab_size=VOCAB, num_layers=3, hidden_size=32, num_heads=4, intermediate_size=37,
            embedding_size=16, max_sequence_length=64)


def _inputs(batch=2, length=12, predictions=4, seed=0):
    return pretrain_batch(VOCAB, batch, length, predictions, seed)


@pytest.fixture(scope="module")
def pretrainer():
    keras.utils.set_random_seed(2)
    return AlbertPretrainer(AlbertBackbone(**TINY))


def test_output_shapes_and_float32(pretrainer):
    out = pretrainer(_inputs(batch=3, predictions=5))
    assert_pretrainer_logits(out, "sop_logits", 3, 5, VOCAB)


def test_mixed_precision_logits_stay_float32():
    backbone = AlbertBackbone(**dict(TINY, num_layers=1, dtype="mixed_bfloat16"))
    out = AlbertPretrainer(backbone)(_inputs())
    assert out["mlm_logits"].dtype == "float32" and out["sop_logits"].dtype == "float32"


def test_mlm_head_projects_to_e_and_ties_the_e_wide_table(pretrainer):
    shapes = {v.path: tuple(v.shape) for v in pretrainer.weights}
    assert shapes["masked_lm_head/transform_dense/kernel"] == (32, 16)   # H -> E
    assert shapes["masked_lm_head/layer_norm/gamma"] == (16,)
    assert shapes["masked_lm_head/output_bias"] == (VOCAB,)
    assert shapes["sentence_order_head/kernel"] == (32, 2)
    table = pretrainer.backbone.token_embedding.embeddings
    assert pretrainer.masked_lm_head.token_embedding.embeddings is table
    assert sum(tuple(v.shape) == (VOCAB, 16) for v in pretrainer.trainable_variables) == 1
    # The transform uses the backbone's activation (tanh GELU), not BERT's exact GELU.
    x = np.float32([-2.0, 0.5, 2.0])
    np.testing.assert_allclose(np.asarray(pretrainer.masked_lm_head.activation(x)),
                               np.asarray(keras.activations.gelu(x, approximate=True)))


def test_loss_is_bert_formula_with_sop():
    rng = np.random.default_rng(3)
    outputs = {"mlm_logits": rng.normal(size=(4, 5, 11)).astype("float32") * 3,
               "sop_logits": rng.normal(size=(4, 2)).astype("float32")}
    ids = rng.integers(0, 11, (4, 5)).astype("int32")
    weights = np.float32([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]])
    labels = rng.integers(0, 2, (4, 1))
    got = albert_pretrain_loss(outputs, ids, weights, labels)
    want = bert_pretrain_loss({"mlm_logits": outputs["mlm_logits"], "nsp_logits": outputs["sop_logits"]},
                              ids, weights, labels)
    assert set(got) == {"loss", "mlm_loss", "sop_loss", "mlm_accuracy", "sop_accuracy"}
    for ours, bert in [("loss", "loss"), ("mlm_loss", "mlm_loss"), ("sop_loss", "nsp_loss"),
                       ("mlm_accuracy", "mlm_accuracy"), ("sop_accuracy", "nsp_accuracy")]:
        assert float(got[ours]) == float(want[bert])
    # And the SOP part is a plain mean cross-entropy.
    logits, y = outputs["sop_logits"], labels.ravel()
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(float(got["sop_loss"]), -log_probs[np.arange(4), y].mean(), rtol=1e-5)


def test_config_and_save_load_round_trip(pretrainer, tmp_path):
    assert_config_round_trip(pretrainer)
    loaded = assert_keras_file_round_trip(pretrainer, tmp_path / "pretrainer.keras", _inputs(),
                                          ("mlm_logits", "sop_logits"))
    assert loaded.masked_lm_head.token_embedding.embeddings is loaded.backbone.token_embedding.embeddings


def test_a_few_training_steps_lower_the_loss():
    # Adam on one fixed batch: 6 steps take the loss from ~5.3 to ~3.8 (LAMB, the paper's
    # optimizer, moves each weight by ~lr of its norm per step and needs more steps).
    keras.utils.set_random_seed(4)
    model = AlbertPretrainer(AlbertBackbone(**TINY))
    inputs = _inputs(batch=4, predictions=4, seed=5)
    rng = np.random.default_rng(6)
    ids = rng.integers(1, VOCAB, (4, 4)).astype("int32")
    weights = np.ones((4, 4), "float32")
    labels = np.int32([[0], [1], [1], [0]])
    optimizer = keras.optimizers.Adam(learning_rate=1e-2)

    step = pretrain_step(model, albert_pretrain_loss, inputs, (ids, weights, labels), optimizer)
    losses = [float(step()["loss"]) for _ in range(6)]
    first = albert_pretrain_loss(model(inputs), ids, weights, labels)
    assert np.isfinite(losses).all()
    assert float(first["loss"]) < 0.8 * losses[0], losses
    assert float(first["mlm_loss"]) < losses[0]
