import numpy as np
import keras
import pytest
import tensorflow as tf

from garden.models.bert.backbone import BertBackbone
from garden.models.bert.pretrainer import BertPretrainer
from garden.models.distilbert.backbone import DistilBertBackbone
from garden.models.distilbert.distiller import (TEACHER_LAYERS, DistilBertDistiller,
                                                distillation_loss, init_student_from_teacher)
from garden.models.distilbert.pretrainer import DistilBertPretrainer
from model_testing import padded_ids

VOCAB = 50
SIZE = dict(vocab_size=VOCAB, hidden_size=16, num_heads=2, intermediate_size=24)


@pytest.fixture(scope="module")
def teacher():
    keras.utils.set_random_seed(11)
    return BertPretrainer(BertBackbone(num_layers=12, max_sequence_length=40, **SIZE))


def _student(num_layers=6):
    return DistilBertPretrainer(DistilBertBackbone(num_layers=num_layers, max_sequence_length=32,
                                                   **SIZE))


def _batch():
    token_ids, padding_mask = padded_ids(VOCAB, 2, 8, padded_row=1, pad_from=5)
    return {"token_ids": token_ids, "padding_mask": padding_mask,
            "masked_lm_positions": np.array([[1, 3, 6], [0, 2, 4]], "int32")}


def test_student_gets_exactly_teacher_layers_0_2_4_7_9_11(teacher):
    assert TEACHER_LAYERS == (0, 2, 4, 7, 9, 11)
    student = init_student_from_teacher(_student(), teacher)
    s, t = student.backbone, teacher.backbone
    teacher_blocks = [[w.numpy() for w in block.weights] for block in t.encoder_blocks]
    for i, block in enumerate(s.encoder_blocks):
        got = [w.numpy() for w in block.weights]
        assert len(got) == 16
        # Equal to teacher layer TEACHER_LAYERS[i] and to no other teacher layer.
        equal = [j for j, want in enumerate(teacher_blocks)
                 if all(np.array_equal(a, b) for a, b in zip(got, want))]
        assert equal == [TEACHER_LAYERS[i]], (i, equal)
    # Embeddings: word table, positions (first 32 of 40 rows), LayerNorm; no token types.
    np.testing.assert_array_equal(s.token_embedding.embeddings.numpy(),
                                  t.token_embedding.embeddings.numpy())
    np.testing.assert_array_equal(s.embeddings.position_embedding.position_embeddings.numpy(),
                                  t.embeddings.position_embedding.position_embeddings.numpy()[:32])
    for a, b in zip(s.embeddings.layer_norm.weights, t.embeddings.layer_norm.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # The MLM transform and bias too (the projection is the tied table).
    for a, b in zip(student.masked_lm_head.weights, teacher.masked_lm_head.weights):
        assert a.path == b.path
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_other_layer_choices_and_errors(teacher):
    student = init_student_from_teacher(_student(num_layers=2).backbone, teacher.backbone,
                                        layers=(11, 3))
    for block, j in zip(student.encoder_blocks, (11, 3)):
        for a, b in zip(block.weights, teacher.backbone.encoder_blocks[j].weights):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(ValueError, match="one teacher layer per student layer"):
        init_student_from_teacher(_student(), teacher, layers=(0, 1))
    with pytest.raises(ValueError, match=r"\[12\] do not exist"):
        init_student_from_teacher(_student(num_layers=2), teacher, layers=(0, 12))
    wide = DistilBertBackbone(num_layers=6, vocab_size=VOCAB, hidden_size=32, num_heads=2,
                              intermediate_size=24, max_sequence_length=32)
    with pytest.raises(ValueError, match="hidden_size"):
        init_student_from_teacher(wide, teacher)


def _numpy_loss(s, t, ids, w, sh, th, mask, T=2.0, a_ce=5.0, a_mlm=2.0, a_cos=1.0):
    def log_softmax(x):
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    s, t, sh, th = (np.asarray(x, np.float64) for x in (s, t, sh, th))
    p_t = np.exp(log_softmax(t / T))
    kl = (p_t * (np.log(p_t) - log_softmax(s / T))).sum(-1)
    ce = (w * kl).sum() / w.sum() * T ** 2
    nll = -np.take_along_axis(log_softmax(s), ids[..., None], -1)[..., 0]
    mlm = (w * nll).sum() / w.sum()
    cos = (sh * th).sum(-1) / (np.linalg.norm(sh, axis=-1) * np.linalg.norm(th, axis=-1))
    cos_loss = (mask * (1 - cos)).sum() / mask.sum()
    return {"loss": a_ce * ce + a_mlm * mlm + a_cos * cos_loss, "ce_loss": ce, "mlm_loss": mlm,
            "cos_loss": cos_loss}


def test_distillation_loss_matches_numpy():
    rng = np.random.default_rng(3)
    s = (2 * rng.normal(size=(2, 4, 13))).astype("float32")
    t = (2 * rng.normal(size=(2, 4, 13))).astype("float32")
    ids = rng.integers(0, 13, (2, 4)).astype("int32")
    w = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], "float32")
    sh = rng.normal(size=(2, 5, 6)).astype("float32")
    th = rng.normal(size=(2, 5, 6)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], "float32")
    got = distillation_loss(s, t, ids, w, sh, th, mask)
    want = _numpy_loss(s, t, ids, w, sh, th, mask)
    for key in want:
        np.testing.assert_allclose(got[key].numpy(), want[key], rtol=1e-5, err_msg=key)
    # The published weights are the defaults; other temperatures and weights are honoured.
    got = distillation_loss(s, t, ids, w, sh, th, mask, temperature=1.0, alpha_ce=0.5,
                            alpha_mlm=0.0, alpha_cos=3.0)
    np.testing.assert_allclose(
        got["loss"].numpy(),
        _numpy_loss(s, t, ids, w, sh, th, mask, T=1.0, a_ce=0.5, a_mlm=0.0, a_cos=3.0)["loss"],
        rtol=1e-5)
    # Padding predictions and padded tokens count nothing.
    s2, sh2 = s.copy(), sh.copy()
    s2[w == 0] = 99.0
    sh2[mask == 0] = -7.0
    again = distillation_loss(s2, t, ids, w, sh2, th, mask)
    np.testing.assert_allclose(again["loss"].numpy(), want["loss"], rtol=1e-5)
    # Identical student and teacher: no KL, no cosine loss.
    same = distillation_loss(t, t, ids, w, th, th, mask)
    assert abs(float(same["ce_loss"])) < 1e-5 and abs(float(same["cos_loss"])) < 1e-5


def test_distiller_trains_the_student_only(teacher, tmp_path):
    student = init_student_from_teacher(_student(), teacher)
    distiller = DistilBertDistiller(student, teacher)
    batch = _batch()
    out = distiller(batch, training=True)
    assert tuple(out["student_logits"].shape) == tuple(out["teacher_logits"].shape) == (2, 3, VOCAB)
    assert tuple(out["student_hidden"].shape) == tuple(out["teacher_hidden"].shape) == (2, 8, 16)
    # The teacher runs in inference mode even in a training step: its outputs are fixed.
    again = distiller(batch, training=True)
    np.testing.assert_array_equal(out["teacher_logits"].numpy(), again["teacher_logits"].numpy())
    teacher_logits = teacher(dict(batch, segment_ids=np.zeros_like(batch["token_ids"])),
                             training=False)["mlm_logits"].numpy()
    np.testing.assert_allclose(out["teacher_logits"].numpy(), teacher_logits, atol=1e-5)

    student_ids = {id(v) for v in student.trainable_variables}
    assert {id(v) for v in distiller.trainable_variables} == student_ids
    teacher_before = [w.numpy() for w in teacher.weights]
    ids = np.array([[3, 4, 5], [6, 7, 8]], "int32")
    weights = np.ones((2, 3), "float32")
    optimizer = keras.optimizers.Adam(1e-2)
    losses = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            o = distiller(batch, training=False)
            metrics = distillation_loss(o["student_logits"], o["teacher_logits"], ids, weights,
                                        o["student_hidden"], o["teacher_hidden"],
                                        batch["padding_mask"])
        grads = tape.gradient(metrics["loss"], distiller.trainable_variables)
        optimizer.apply_gradients(zip(grads, distiller.trainable_variables))
        losses.append(float(metrics["loss"]))
    assert losses[-1] < losses[0]
    for before, w in zip(teacher_before, teacher.weights):
        np.testing.assert_array_equal(before, w.numpy())

    config = distiller.get_config()
    clone = DistilBertDistiller.from_config(config)
    assert isinstance(clone.teacher, BertPretrainer) and not clone.teacher.trainable
