"""garden.ClassifierDistillation (issue 36 item 6): PKD, TinyBERT and Tang et al.'s logits MSE
from a fine-tuned teacher to a smaller student.

Each loss is computed again here with NumPy from its formula (docs/tasks.md, "Task-specific
distillation") on small tensors and must equal the module's (1e-5); the layer losses are 0
where the student is a copy of the teacher; the attention scores the TinyBERT loss reads give
the backbone's own attention probabilities after the softmax; a short garden.train run of each
loss (one_device, in this process) from a tiny classification teacher trained here lowers the
training loss and the student exports; what cannot be honoured is refused in one line naming it.
"""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden import train as train_lib
from garden.models import classifier_distillation as cd
from testing import train_in_process, train_refused

WORDS = {"pos": ["good", "great", "fine", "nice", "superb"],
         "neg": ["bad", "awful", "poor", "sad", "worse"]}
FILLER = ["the", "movie", "was", "a", "film", "plot", "acting", "very", "quite", "and", "it"]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SEQ = 16
TEACHER_STEPS, STUDENT_STEPS = 80, 24


@pytest.fixture(autouse=True)
def _cwd_repo(monkeypatch):
    monkeypatch.chdir(train_lib.REPO_ROOT)  # configs include each other by repo paths


def _rows(rng, n):
    rows = []
    for _ in range(n):
        label = str(rng.choice(["pos", "neg"]))
        words = list(rng.choice(FILLER, size=rng.integers(4, 9))) + \
            list(rng.choice(WORDS[label], size=rng.integers(1, 3)))
        rng.shuffle(words)
        rows.append(f"{' '.join(words)}\t{label}")
    return "text_a\tlabel\n" + "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A BERT-tiny classification run (configs/finetune/classification_tiny.gin) on a
    synthetic sentiment task: (paths dict, summary)."""
    root = tmp_path_factory.mktemp("distill")
    rng = np.random.default_rng(0)
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(SPECIALS + FILLER + WORDS["pos"] + WORDS["neg"]) + "\n")
    (root / "train.tsv").write_text(_rows(rng, 256))
    (root / "dev.tsv").write_text(_rows(rng, 64))
    paths = {"vocab": str(vocab), "train": str(root / "train.tsv"), "dev": str(root / "dev.tsv"),
             "teacher": str(root / "teacher"), "root": str(root)}
    summary = train_in_process(
        ["--config=configs/finetune/classification_tiny.gin", f"--model_dir={paths['teacher']}",
         "--strategy=one_device", *_common(paths, TEACHER_STEPS),
         "--gin_param=INIT_CHECKPOINT=None",
         f"--gin_param=garden.Classification.max_seq_length={SEQ}"],
        paths["teacher"], steps=TEACHER_STEPS)
    keras.backend.clear_session(free_memory=False)
    return paths, summary


def _common(paths, steps):
    return [f"--gin_param=VOCAB='{paths['vocab']}'", f"--gin_param=TRAIN_FILE='{paths['train']}'",
            f"--gin_param=EVAL_FILE='{paths['dev']}'", "--gin_param=EXPORT_BASE=None",
            f"--gin_param=TRAIN_STEPS={steps}", "--gin_param=train.global_batch_size=16",
            "--gin_param=train.log_every=4", "--gin_param=train.peak_flops=1e12"]


def _distill_args(paths, config, model_dir, steps=STUDENT_STEPS, *extra):
    return [f"--config=configs/distill/{config}.gin", f"--model_dir={model_dir}",
            "--strategy=one_device", *_common(paths, steps),
            f"--gin_param=TEACHER='{paths['teacher']}'",
            f"--gin_param=garden.ClassifierDistillation.max_seq_length={SEQ}", *extra]


def test_teacher_learns(teacher):
    _, summary = teacher
    assert summary["eval_accuracy"] > 0.8, summary


# ------------------------------------------------------------------------------------------
# The losses against their formulas, in NumPy
# ------------------------------------------------------------------------------------------


def _log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _soft_ce(s, t, temperature):
    p = np.exp(_log_softmax(t / temperature))
    return float(np.mean(-(p * _log_softmax(s / temperature)).sum(-1)))


def _gold_ce(z, y):
    return float(np.mean(-_log_softmax(z)[np.arange(len(y)), y]))


def test_losses_equal_their_formulas():
    rng = np.random.default_rng(3)
    b, c, k, t, a, hs, ht = 4, 3, 2, 5, 2, 6, 8
    zs, zt = rng.normal(size=(b, c)) * 2, rng.normal(size=(b, c)) * 2
    y = rng.integers(0, c, b)
    mask = np.ones((b, t), np.int32)
    mask[1, 3:], mask[2, 4:] = 0, 0
    f = lambda x: tf.constant(x, tf.float32)  # noqa: E731

    # PKD: (1 - alpha) CE + alpha T^2 SCE(T) + beta sum_layers mean_b ||s/|s| - t/|t| ||^2
    cls_s, cls_t = rng.normal(size=(k, b, hs)), rng.normal(size=(k, b, hs))
    unit = lambda v: v / np.linalg.norm(v, axis=-1, keepdims=True)  # noqa: E731
    patient = float(np.sum(np.mean(np.sum((unit(cls_s) - unit(cls_t)) ** 2, -1), -1)))
    alpha, temp, beta = 0.3, 5.0, 10.0
    expected = (1 - alpha) * _gold_ce(zs, y) + alpha * temp ** 2 * _soft_ce(zs, zt, temp) \
        + beta * patient
    got = cd.pkd_loss(f(zs), f(zt), tf.constant(y), f(cls_s), f(cls_t), alpha, temp, beta)
    assert float(got["patient"]) == pytest.approx(patient, abs=1e-5)
    assert float(got["loss"]) == pytest.approx(expected, abs=1e-5, rel=1e-6)

    # TinyBERT: attention-score MSE over real (query, key) pairs and heads, hidden MSE over
    # real tokens and the width (embedding = entry 0), summed over layers; the prediction SCE.
    ss, st = rng.normal(size=(k, b, a, t, t)), rng.normal(size=(k, b, a, t, t))
    hs_, ht_ = rng.normal(size=(k + 1, b, t, ht)), rng.normal(size=(k + 1, b, t, ht))
    pairs = (mask[:, None, :, None] * mask[:, None, None, :]).astype(float)
    attention = sum(((ss[i] - st[i]) ** 2 * pairs).sum() / (pairs.sum() * a) for i in range(k))
    real = mask[:, :, None].astype(float)
    mse = lambda i: ((hs_[i] - ht_[i]) ** 2 * real).sum() / (real.sum() * ht)  # noqa: E731
    for weight in (1.0, 0.0, 0.5):
        got = cd.tinybert_loss(f(zs), f(zt), f(ss), f(st), f(hs_), f(ht_), tf.constant(mask),
                               tf.constant(weight), temperature=2.0)
        assert float(got["attention"]) == pytest.approx(attention, abs=1e-5)
        assert float(got["embedding"]) == pytest.approx(mse(0), abs=1e-5)
        assert float(got["hidden"]) == pytest.approx(mse(1) + mse(2), abs=1e-5)
        assert float(got["prediction"]) == pytest.approx(_soft_ce(zs, zt, 2.0), abs=1e-5)
        layers = attention + mse(0) + mse(1) + mse(2)
        assert float(got["loss"]) == pytest.approx(
            weight * layers + (1 - weight) * _soft_ce(zs, zt, 2.0), abs=1e-5)

    # Tang et al.: alpha CE + (1 - alpha) mean_b ||z_s - z_t||^2
    got = cd.logits_mse_loss(f(zs), f(zt), tf.constant(y), 0.25)
    expected = 0.25 * _gold_ce(zs, y) + 0.75 * float(np.mean(((zs - zt) ** 2).sum(-1)))
    assert float(got["loss"]) == pytest.approx(expected, abs=1e-5)


def test_layer_maps():
    assert cd.layer_map("uniform", 6, 12, 5) == [2, 4, 6, 8, 10]  # PKD-Skip
    assert cd.layer_map("last", 6, 12, 5) == [7, 8, 9, 10, 11]   # PKD-Last
    assert cd.layer_map("uniform", 4, 12, 4) == [3, 6, 9, 12]    # TinyBERT g(m) = 3m
    assert cd.layer_map("uniform", 4, 6, 4) == [1, 3, 4, 6]      # floor(6m / 4)
    assert cd.layer_map([2, 5], 3, 6, 2) == [2, 5]
    with pytest.raises(ValueError, match="deeper than its teacher"):
        cd.layer_map("uniform", 7, 6, 6)
    with pytest.raises(ValueError, match=r"give 2 teacher layers in 1..6"):
        cd.layer_map([2, 7], 3, 6, 2)


def test_attention_scores_are_the_backbones_before_its_softmax():
    from garden.models.bert.presets import untrained_bert_backbone

    backbone = untrained_bert_backbone("bert_tiny", vocab_size=50, output_hidden_states=True,
                                       output_attentions=True)
    ids = np.random.default_rng(1).integers(5, 50, (3, 7)).astype("int32")
    mask = np.ones((3, 7), "int32")
    mask[0, 5:] = 0
    out = backbone({"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": mask})
    for layer, block in enumerate(cd.encoder_blocks(backbone)):
        scores = cd.attention_scores(block, out["hidden_states"][layer]).numpy()
        scores = np.where(mask[:, None, None, :] > 0, scores, -1e9)
        probs = np.exp(_log_softmax(scores))
        np.testing.assert_allclose(probs, out["attention_probs"][layer].numpy(), atol=1e-5)


def test_classifier_forward_is_the_classifier():
    from garden.models.bert.presets import untrained_bert_backbone
    from garden.models.classification import SequenceClassifier

    clf = SequenceClassifier(untrained_bert_backbone("bert_tiny", vocab_size=50,
                                                     output_hidden_states=True), num_classes=3)
    ids = np.random.default_rng(2).integers(5, 50, (2, 6)).astype("int32")
    inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids),
              "padding_mask": np.ones_like(ids)}
    logits, outputs = cd.classifier_forward(clf, inputs)
    np.testing.assert_allclose(logits.numpy(), clf(inputs)["logits"].numpy(), atol=1e-6)
    assert outputs["hidden_states"].shape == (3, 2, 6, 128)


# ------------------------------------------------------------------------------------------
# The task: a student copied from the teacher, short runs, refusals
# ------------------------------------------------------------------------------------------


def _task(paths, loss, **kwargs):
    import functools

    from garden.models.factory import backbone
    from garden.tasks.task_distillation import ClassifierDistillation

    tiny = functools.partial(backbone, preset="bert_tiny")
    task = ClassifierDistillation(teacher=paths["teacher"], teacher_backbone=tiny,
                                  vocab=paths["vocab"], train_file=paths["train"],
                                  eval_file=paths["dev"], backbone=tiny, loss=loss,
                                  max_seq_length=SEQ, **kwargs)
    task.prepare()
    return task


@pytest.mark.parametrize("loss", ["pkd", "tinybert"])
def test_layer_losses_vanish_when_the_student_is_the_teacher(teacher, loss):
    """init_layers=[1, 2] copies the teacher's embeddings, both layers and its pooler: the
    student's states are the teacher's, so PKD's patient loss and TinyBERT's attention loss are
    0, and so are its hidden and embedding losses once the projections are the identity; with
    the teacher's head copied too, the soft cross-entropy is the teacher's entropy, its
    minimum."""
    paths, _ = teacher
    task = _task(paths, loss, init_layers=[1, 2])
    model, objects = task.build_model()
    head = model.teacher.classifier_dense
    model.student.classifier_dense.set_weights(head.get_weights())
    if loss == "tinybert":
        for dense in model.projections.maps:
            dense.set_weights([np.eye(128, dtype="float32")])
        assert set(objects) == {"model", "backbone", "projections"}
    batch = next(iter(task._dataset(task.train_rows, task.train_labels, 8)))
    batch["intermediate"] = tf.ones([8])
    metrics = {k: float(v) for k, v in task.compute_metrics(model, batch, False).items()}
    inputs = {k: batch[k] for k in task.packer.input_names}
    z = cd.classifier_forward(model.teacher, inputs)[0].numpy()
    if loss == "pkd":
        # The export serves the student, from the trainer's distiller or from the student a
        # run directory's task_model() restores (garden.bertology.int8).
        for given in (model, model.student):
            assert task.serving_module(given).model is model.student
        assert metrics["patient"] < 1e-10, metrics
        assert metrics["soft_ce"] == pytest.approx(_soft_ce(z, z, 10.0), abs=1e-6)
    else:
        for part in ("attention", "hidden", "embedding"):
            assert metrics[part] < 1e-10, metrics
        assert metrics["loss"] < 1e-10  # the intermediate stage: the layers alone
        assert metrics["prediction"] == pytest.approx(_soft_ce(z, z, 1.0), abs=1e-6)
    keras.backend.clear_session(free_memory=False)


@pytest.mark.parametrize("config", ["pkd_tiny", "tinybert_tiny", "bilstm_tiny"])
def test_short_run_lowers_the_loss_and_the_student_exports(teacher, config, tmp_path):
    paths, _ = teacher
    model_dir, exports = str(tmp_path / config), str(tmp_path / "exports")
    export = config == "bilstm_tiny"  # the encoders' exports are ClassificationServing's own
    args = _distill_args(paths, config, model_dir, STUDENT_STEPS,
                         f"--gin_param=EXPORT_BASE={exports!r}" if export else "")
    summary = train_in_process([a for a in args if a], model_dir,
                               task="classifier_distillation", steps=STUDENT_STEPS)
    first, last = summary["first_logged_metrics"], summary["last_logged_metrics"]
    if config == "tinybert_tiny":
        # Two stages: the first window trains the layers, the last the prediction; the
        # layers' losses, kept in the metrics, end lower than they started.
        parts = ("embedding", "hidden", "attention")
        assert sum(last[p] for p in parts) < 0.8 * sum(first[p] for p in parts), (first, last)
    else:
        assert last["loss"] < 0.95 * first["loss"], (first, last)
    assert summary["teacher_eval_accuracy"] > 0.9
    assert summary["student_parameters"] < summary["teacher_parameters"]
    if export:
        (version,) = os.listdir(os.path.join(exports, "bilstm_tiny_classifier"))
        loaded = tf.saved_model.load(os.path.join(exports, "bilstm_tiny_classifier", version))
        rows = [r.split("\t") for r in open(paths["dev"]).read().splitlines()[1:]]
        out = loaded.signatures["serving_default"](text_a=tf.constant([r[0] for r in rows]))
        labels = [x.decode() for x in out["label"].numpy()]
        accuracy = np.mean([p == r[1] for p, r in zip(labels, rows)])
        assert accuracy == pytest.approx(summary["eval_accuracy"])
    keras.backend.clear_session(free_memory=False)


@pytest.mark.parametrize("config, bindings, expected", [
    ("bilstm_tiny", ["garden.ClassifierDistillation.loss = 'pkd'"],
     "loss = 'pkd' reads a student's intermediate layers; the BiLSTM student has none"),
    ("tinybert_tiny", ["student/backbone.num_heads = 1"],
     "compares attention scores head by head: student num_heads 1, teacher 2"),
    ("pkd_tiny", ["student/backbone.hidden_size = 64"],
     "compares normalised [CLS] states of one width: student hidden_size 64, teacher 128"),
    ("tinybert_tiny", ["garden.ClassifierDistillation.beta = 10.0"],
     "loss='tinybert' does not read beta"),
    ("pkd_tiny", ["teacher/backbone.num_layers = 1"],
     "model weights, the teacher built from teacher_backbone"),
    ("pkd_tiny", ["student/backbone.num_layers = 3"], "deeper than its teacher of 2"),
])
def test_refusals_name_what_cannot_be_honoured(teacher, config, bindings, expected, capsys,
                                               tmp_path):
    paths, _ = teacher
    line = train_refused(_distill_args(paths, config, str(tmp_path / "run"), 2,
                                       *(f"--gin_param={b}" for b in bindings)), capsys)
    assert expected in line, line
    keras.backend.clear_session(free_memory=False)


def test_a_teacher_that_is_no_classification_run_is_refused(teacher, capsys, tmp_path):
    paths, _ = teacher
    tagger = tmp_path / "tagger"
    tagger.mkdir()
    (tagger / "summary.json").write_text(json.dumps({"task": "tagging"}))
    for path, expected in ((tmp_path, "no " + str(tmp_path / "summary.json")),
                           (tagger, "is a 'tagging' run, not a classification run")):
        args = _distill_args({**paths, "teacher": str(path)}, "pkd_tiny",
                             str(tmp_path / "run"), 2)
        line = train_refused(args, capsys)
        assert expected in line, line


def test_summary_of_the_bilstm_student_counts_tang_et_al_s_layers(tmp_path, capsys):
    # bilstm_tiny.gin binds no backbone (the BiLSTM is sized by `bilstm` and the vocabulary):
    # --summary builds that model; its count is the architecture's, written out by hand.
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                 *[f"w{i}" for i in range(95)]]))
    keras.backend.clear_session(free_memory=False)
    assert train_lib.main(["--summary", "--config=configs/distill/bilstm_tiny.gin",
                           f"--gin_param=VOCAB='{vocab}'"]) == 0
    out = capsys.readouterr().out
    v, e, u, h, c = 100, 64, 32, 64, 2  # vocabulary, embedding, LSTM units, ReLU layer, classes
    expected = v * e + 2 * 4 * (e * u + u * u + u) + (2 * u * h + h) + (h * c + c)
    assert f"Total parameters: {expected:,} (" in out, out[-1500:]
    # Without a vocabulary the table cannot be sized: one line, no traceback.
    line = train_refused(["--summary", "--config=configs/distill/bilstm_tiny.gin"], capsys)
    assert "student='bilstm'" in line and "VOCAB" in line, line
