import numpy as np
import keras
import pytest
import tensorflow as tf

from garden.models.bert.pretrainer import BertPretrainer, bert_pretrain_loss
from garden.models.bert.presets import untrained_bert_backbone

import bert_reference as ref
from model_testing import (assert_config_round_trip, assert_keras_file_round_trip,
                           assert_pretrainer_logits, pretrain_batch, pretrain_step)

VOCAB = 100


def _inputs(batch=2, length=12, predictions=4, seed=0):
    return pretrain_batch(VOCAB, batch, length, predictions, seed)


@pytest.fixture(scope="module")
def pretrainer():
    keras.utils.set_random_seed(2)
    return BertPretrainer(untrained_bert_backbone("bert_tiny", vocab_size=VOCAB))


def test_output_shapes_and_float32(pretrainer):
    out = pretrainer(_inputs(batch=3, predictions=5))
    assert_pretrainer_logits(out, "nsp_logits", 3, 5, VOCAB)


def test_mixed_precision_logits_stay_float32():
    backbone = untrained_bert_backbone("bert_tiny", vocab_size=VOCAB, num_layers=1,
                                         dtype="mixed_bfloat16")
    inputs = _inputs()
    backbone_inputs = {k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    assert backbone(backbone_inputs)["sequence_output"].dtype == "bfloat16"
    out = BertPretrainer(backbone)(inputs)
    assert out["mlm_logits"].dtype == "float32" and out["nsp_logits"].dtype == "float32"


def test_heads_match_numpy_reference():
    pretrainer = BertPretrainer(untrained_bert_backbone("bert_tiny", vocab_size=VOCAB))
    ref.randomize_weights(pretrainer)
    inputs = _inputs()
    out = pretrainer(inputs, training=False)
    w = ref.weights_by_path(pretrainer)
    seq, pooled = ref.backbone_forward(w, 2, inputs["token_ids"], inputs["segment_ids"],
                                       inputs["padding_mask"])
    np.testing.assert_allclose(out["mlm_logits"].numpy(),
                               ref.mlm_logits(w, seq, inputs["masked_lm_positions"]), atol=2e-4)
    nsp = pooled @ w["next_sentence_head/kernel"] + w["next_sentence_head/bias"]
    np.testing.assert_allclose(out["nsp_logits"].numpy(), nsp, atol=1e-4)


def test_output_projection_is_tied_to_the_word_table(pretrainer):
    table = pretrainer.backbone.token_embedding.embeddings
    assert pretrainer.masked_lm_head.token_embedding.embeddings is table
    # Only one [V, H] variable in the whole model: no hidden copy of the table.
    assert sum(tuple(v.shape) == (VOCAB, 128) for v in pretrainer.trainable_variables) == 1

    inputs = _inputs()
    unused = sorted(set(range(VOCAB)) - set(inputs["token_ids"].ravel()))[:3]
    ids = np.asarray(unused * 3)[: 2 * 4].reshape(2, 4).astype("int32")
    with tf.GradientTape() as tape:
        metrics = bert_pretrain_loss(pretrainer(inputs, training=False), ids,
                                     np.ones((2, 4), "float32"), np.zeros((2, 1), "int32"))
    grad = tf.convert_to_tensor(tape.gradient(metrics["mlm_loss"], table)).numpy()
    # Rows of ids absent from the input only get a gradient through the output projection.
    assert np.abs(grad[unused]).sum() > 0

    # And editing one such row changes exactly that logit column.
    before = pretrainer(inputs, training=False)["mlm_logits"].numpy()
    original = table.numpy()
    try:
        edited = original.copy()
        edited[unused[0]] += 0.5
        table.assign(edited)
        after = pretrainer(inputs, training=False)["mlm_logits"].numpy()
    finally:
        table.assign(original)
    changed = np.abs(after - before).max(axis=(0, 1)) > 1e-6
    assert changed[unused[0]] and changed.sum() == 1


def test_config_and_save_load_round_trip(pretrainer, tmp_path):
    _, clone = assert_config_round_trip(pretrainer)
    assert clone.masked_lm_head.token_embedding.embeddings is clone.backbone.token_embedding.embeddings

    loaded = assert_keras_file_round_trip(pretrainer, tmp_path / "pretrainer.keras", _inputs(),
                                          ("mlm_logits", "nsp_logits"))
    assert loaded.masked_lm_head.token_embedding.embeddings is loaded.backbone.token_embedding.embeddings


def _numpy_loss(mlm_logits, ids, weights, nsp_logits, labels):
    def log_softmax(x):
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    nll = -np.take_along_axis(log_softmax(mlm_logits), ids[..., None], -1)[..., 0]
    mlm = (weights * nll).sum() / (weights.sum() + 1e-5)
    labels = labels.reshape(-1)
    nsp = -log_softmax(nsp_logits)[np.arange(len(labels)), labels].mean()
    mlm_acc = (weights * (mlm_logits.argmax(-1) == ids)).sum() / weights.sum()
    nsp_acc = (nsp_logits.argmax(-1) == labels).mean()
    return {"loss": mlm + nsp, "mlm_loss": mlm, "nsp_loss": nsp, "mlm_accuracy": mlm_acc,
            "nsp_accuracy": nsp_acc}


@pytest.mark.parametrize("label_shape", [(4, 1), (4,)])
def test_loss_matches_numpy(label_shape):
    rng = np.random.default_rng(3)
    mlm_logits = rng.normal(size=(4, 5, 11)).astype("float32") * 3
    nsp_logits = rng.normal(size=(4, 2)).astype("float32")
    ids = rng.integers(0, 11, (4, 5)).astype("int32")
    weights = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]], "float32")
    labels = rng.integers(0, 2, label_shape).astype("int64")
    got = bert_pretrain_loss({"mlm_logits": mlm_logits, "nsp_logits": nsp_logits}, ids, weights, labels)
    want = _numpy_loss(mlm_logits, ids, weights, nsp_logits, labels)
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_allclose(got[key].numpy(), want[key], rtol=1e-5, err_msg=key)

    # Padding predictions count nothing: scrambling their ids and logits changes nothing.
    mlm2, ids2 = mlm_logits.copy(), ids.copy()
    mlm2[weights == 0] = rng.normal(size=mlm2[weights == 0].shape) * 10
    ids2[weights == 0] = 0
    got2 = bert_pretrain_loss({"mlm_logits": mlm2, "nsp_logits": nsp_logits}, ids2, weights, labels)
    for key in ("mlm_loss", "mlm_accuracy"):
        np.testing.assert_allclose(got2[key].numpy(), got[key].numpy(), rtol=1e-6)


def test_loss_without_predictions_is_finite():
    got = bert_pretrain_loss({"mlm_logits": np.zeros((2, 3, 7), "float32"),
                              "nsp_logits": np.zeros((2, 2), "float32")},
                             np.zeros((2, 3), "int32"), np.zeros((2, 3), "float32"),
                             np.zeros((2,), "int32"))
    assert got["mlm_loss"].numpy() == 0.0 and got["mlm_accuracy"].numpy() == 0.0
    np.testing.assert_allclose(got["nsp_loss"].numpy(), np.log(2), rtol=1e-6)


def test_loss_runs_in_replica_context():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    rng = np.random.default_rng(4)
    outputs = {"mlm_logits": rng.normal(size=(2, 3, 7)).astype("float32"),
               "nsp_logits": rng.normal(size=(2, 2)).astype("float32")}
    args = (outputs, rng.integers(0, 7, (2, 3)), np.ones((2, 3), "float32"), np.array([[1], [0]]))

    @tf.function
    def step():
        return strategy.run(bert_pretrain_loss, args=args)

    got = strategy.experimental_local_results(step())[0]
    want = bert_pretrain_loss(*args)
    for key in want:
        np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=1e-6)


def test_tiny_pretrainer_overfits_a_fixed_batch():
    keras.utils.set_random_seed(7)
    backbone = untrained_bert_backbone("bert_tiny", vocab_size=VOCAB, max_sequence_length=32)
    model = BertPretrainer(backbone)
    rng = np.random.default_rng(8)
    inputs = _inputs(batch=8, length=16, predictions=3, seed=9)
    ids = rng.integers(1, VOCAB, (8, 3)).astype("int32")
    weights = np.ones((8, 3), "float32")
    weights[0, 2] = 0.0
    labels = rng.integers(0, 2, (8, 1)).astype("int32")
    optimizer = keras.optimizers.AdamW(learning_rate=1e-3, weight_decay=0.01)

    train_step = tf.function(pretrain_step(model, bert_pretrain_loss, inputs,
                                           (ids, weights, labels), optimizer))
    first = train_step()
    for _ in range(49):
        last = train_step()
    first_loss, last_loss = float(first["loss"]), float(last["loss"])
    # ln(100) + ln(2) = 5.3 at the start; memorising 23 predictions and 8 labels drives it down.
    assert first_loss > 4.0
    assert last_loss < 0.3 * first_loss, (first_loss, last_loss)
    assert float(last["nsp_accuracy"]) == 1.0
