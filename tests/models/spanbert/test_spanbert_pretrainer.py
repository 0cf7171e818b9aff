"""SpanBERT's span boundary head, pretrainer and loss (docs/objectives.md section 4)."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden.models.bert.backbone import BertBackbone
from garden.models.bert.presets import PRESETS as BERT_PRESETS
from garden.models.spanbert import (PRESETS, SpanBertPretrainer, spanbert_pretrain_loss,
                                    untrained_spanbert_pretrainer)

VOCAB = 50


def _inputs(batch=2, length=16, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, (batch, length)).astype("int32")
    mask = np.ones_like(ids)
    # Two spans per example: (3..5) and (9..10); boundaries start-1 / end+1, offsets 0-based.
    positions = np.array([[3, 4, 5, 9, 10]] * batch, "int32")
    left = np.array([[2, 2, 2, 8, 8]] * batch, "int32")
    right = np.array([[6, 6, 6, 11, 11]] * batch, "int32")
    relative = np.array([[0, 1, 2, 0, 1]] * batch, "int32")
    return {"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": mask,
            "masked_lm_positions": positions, "span_left_positions": left,
            "span_right_positions": right, "span_relative_positions": relative}


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(3)
    return untrained_spanbert_pretrainer("spanbert_tiny", vocab_size=VOCAB, dropout=0.0)


def _gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _reference_sbo(model, hidden, left, right, relative):
    """The paper's f(h_{s-1}, h_{e+1}, p_{i-s+1}) in numpy from the head's weights."""
    head = model.span_boundary_head
    table = head.position_embeddings.numpy()
    offsets = np.clip(relative, 0, table.shape[0] - 1)
    b = np.arange(hidden.shape[0])[:, None]
    x = np.concatenate([hidden[b, left], hidden[b, right], table[offsets]], -1)
    x = _layer_norm(_gelu(x @ head.dense_1.kernel.numpy() + head.dense_1.bias.numpy()),
                    head.layer_norm_1.gamma.numpy(), head.layer_norm_1.beta.numpy())
    x = _layer_norm(_gelu(x @ head.dense_2.kernel.numpy() + head.dense_2.bias.numpy()),
                    head.layer_norm_2.gamma.numpy(), head.layer_norm_2.beta.numpy())
    words = model.backbone.token_embedding.embeddings.numpy()
    return x @ words.T + head.output_bias.numpy()


def test_output_shapes(model):
    out = model(_inputs(batch=3))
    assert set(out) == {"mlm_logits", "sbo_logits"}
    assert tuple(out["mlm_logits"].shape) == (3, 5, VOCAB)
    assert tuple(out["sbo_logits"].shape) == (3, 5, VOCAB)
    assert out["sbo_logits"].dtype == "float32"
    assert tuple(model.span_boundary_head.position_embeddings.shape) == (15, 200)


def test_sbo_logits_match_the_formula(model):
    inputs = _inputs()
    # Random output biases so that the bias term is checked too.
    model.span_boundary_head.output_bias.assign(np.random.default_rng(1).normal(size=VOCAB))
    hidden = model.backbone({k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")})
    expected = _reference_sbo(model, hidden["sequence_output"].numpy(),
                              inputs["span_left_positions"], inputs["span_right_positions"],
                              inputs["span_relative_positions"])
    got = model(inputs)["sbo_logits"].numpy()
    np.testing.assert_allclose(got, expected, atol=2e-4, rtol=1e-4)


def test_relative_positions_are_clipped_to_the_table(model):
    inputs = _inputs()
    at_last = dict(inputs, span_relative_positions=np.full_like(inputs["span_relative_positions"], 14))
    beyond = dict(inputs, span_relative_positions=np.full_like(inputs["span_relative_positions"], 40))
    below = dict(inputs, span_relative_positions=np.full_like(inputs["span_relative_positions"], 13))
    a, b, c = (model(x)["sbo_logits"].numpy() for x in (at_last, beyond, below))
    np.testing.assert_array_equal(a, b)  # offset 40 reads row 14
    assert np.max(np.abs(a - c)) > 1e-3  # and rows differ: the offset does matter


def test_sbo_depends_only_on_the_boundaries_not_the_span(model):
    inputs = _inputs()
    # Attention mixes every position, so compare through the head alone, on fixed states.
    hidden = model.backbone({k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")})
    h = hidden["sequence_output"].numpy()
    h2 = h.copy()
    h2[:, 3:6] += 5.0
    head = model.span_boundary_head
    args = [inputs[k] for k in ("span_left_positions", "span_right_positions",
                                "span_relative_positions")]
    np.testing.assert_allclose(head(h, *args).numpy(), head(h2, *args).numpy(), atol=1e-5)
    h3 = h.copy()
    h3[:, 2] += 5.0  # the left boundary of the first span
    diff = np.abs(head(h, *args).numpy() - head(h3, *args).numpy()).max(-1)
    assert (diff[:, :3] > 1e-3).all() and (diff[:, 3:] < 1e-5).all()


def _one_hot_logits(ids, scale):
    return tf.constant(scale * np.eye(VOCAB)[ids], tf.float32)


def test_loss_on_an_exact_example():
    ids = np.array([[7, 8, 9]])
    uniform = tf.zeros((1, 3, VOCAB))
    perfect = _one_hot_logits(ids, 100.0)
    w = np.array([[1.0, 1.0, 0.0]], np.float32)
    # MLM perfect (nll ~ 0), SBO uniform: nll = ln V for each of the 2 weighted predictions.
    m = spanbert_pretrain_loss({"mlm_logits": perfect, "sbo_logits": uniform}, ids, w, w)
    assert float(m["mlm_loss"]) < 1e-6
    assert float(m["sbo_loss"]) == pytest.approx(math.log(VOCAB) * 2 / (2 + 1e-5), rel=1e-6)
    assert float(m["loss"]) == pytest.approx(float(m["mlm_loss"]) + float(m["sbo_loss"]))
    assert float(m["mlm_accuracy"]) == 1.0
    weighted = spanbert_pretrain_loss({"mlm_logits": perfect, "sbo_logits": uniform}, ids, w, w,
                                      sbo_loss_weight=0.5)
    assert float(weighted["loss"]) == pytest.approx(0.5 * float(m["sbo_loss"]), rel=1e-5)


def test_zero_weights_remove_a_prediction_from_the_loss():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, (2, 4))
    mlm = tf.constant(rng.normal(size=(2, 4, VOCAB)), tf.float32)
    sbo = rng.normal(size=(2, 4, VOCAB)).astype(np.float32)
    w = np.ones((2, 4), np.float32)
    s = np.array([[1, 1, 0, 1], [0, 1, 1, 0]], np.float32)  # e.g. spans touching the edge
    base = spanbert_pretrain_loss({"mlm_logits": mlm, "sbo_logits": tf.constant(sbo)}, ids, w, s)
    # Whatever the head predicts where sbo_weights = 0 counts nothing...
    sbo2 = sbo.copy()
    sbo2[s == 0] = rng.normal(size=(int((s == 0).sum()), VOCAB)) * 50
    ids2 = ids.copy()
    ids2[s == 0] = (ids2[s == 0] + 1) % VOCAB
    other = spanbert_pretrain_loss({"mlm_logits": mlm, "sbo_logits": tf.constant(sbo2)}, ids2, w, s)
    assert float(other["sbo_loss"]) == pytest.approx(float(base["sbo_loss"]), rel=1e-6)
    # ...and the SBO mean is over the weighted predictions only (independent numpy reference).
    logp = sbo - np.log(np.exp(sbo).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, ids[..., None], -1)[..., 0]
    assert float(base["sbo_loss"]) == pytest.approx((nll * s).sum() / (s.sum() + 1e-5), rel=1e-5)


def test_both_heads_are_tied_to_the_word_table(model):
    inputs = _inputs()
    with tf.GradientTape() as tape:
        out = model(inputs, training=True)
        m = spanbert_pretrain_loss({"mlm_logits": tf.zeros_like(out["mlm_logits"]),
                                    "sbo_logits": out["sbo_logits"]},
                                   inputs["masked_lm_positions"], np.ones((2, 5), np.float32),
                                   np.ones((2, 5), np.float32))
    table = model.backbone.token_embedding.embeddings
    grad = tf.convert_to_tensor(tape.gradient(m["loss"], table))
    assert float(tf.reduce_max(tf.abs(grad))) > 0
    names = [w.path for w in model.weights]
    assert sum(n.endswith("token_embedding/embeddings") for n in names) == 1


def test_save_and_load_round_trip(model, tmp_path):
    path = tmp_path / "spanbert.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    inputs = _inputs()
    for key in ("mlm_logits", "sbo_logits"):
        np.testing.assert_allclose(loaded(inputs)[key].numpy(), model(inputs)[key].numpy(),
                                   atol=1e-5)
    assert loaded.span_boundary_head.max_targets == 15


def test_fits_a_fixed_batch():
    keras.utils.set_random_seed(0)
    model = SpanBertPretrainer(BertBackbone(vocab_size=VOCAB, num_layers=1, hidden_size=32,
                                            num_heads=2, intermediate_size=64, dropout=0.0),
                               position_embedding_size=8)
    inputs = _inputs()
    ids = inputs["token_ids"][:, 3:11][:, [0, 1, 2, 6, 7]]
    opt = keras.optimizers.Adam(1e-2)
    w = np.ones((2, 5), np.float32)
    losses = []
    for _ in range(60):
        with tf.GradientTape() as tape:
            m = spanbert_pretrain_loss(model(inputs, training=True), ids, w, w)
        grads = tape.gradient(m["loss"], model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        losses.append(float(m["sbo_loss"]))
    # Starts near ln 50 = 3.9 per head; a 5-target batch is memorised.
    assert losses[0] > 3.0 and losses[-1] < 0.3, (losses[0], losses[-1])


def test_presets_have_bert_sizes_and_the_paper_head():
    for size in ("base", "large"):
        config = PRESETS[f"spanbert_{size}"]
        bert = BERT_PRESETS[f"bert_{size}"]
        assert {k: v for k, v in config.items() if k != "vocab_size"} == \
            {k: v for k, v in bert.items() if k != "vocab_size"}
        assert config["vocab_size"] == 28996  # BERT's cased vocabulary


def test_spanbert_base_parameter_count():
    # One layer keeps the test fast; the heads are those of the full model.
    model = untrained_spanbert_pretrainer("spanbert_base", num_layers=1)
    h, v = 768, 28996
    backbone = BertBackbone(**{**BERT_PRESETS["bert_base"], "num_layers": 1}).count_params() \
        - (30522 - v) * h
    mlm = h * h + h + 2 * h + v
    sbo = 15 * 200 + (2 * h + 200) * h + h + 2 * h + h * h + h + 2 * h + v
    assert model.backbone.count_params() == backbone
    assert model.count_params() == backbone + mlm + sbo
