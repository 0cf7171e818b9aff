"""garden.bertology.qat (its implementation: garden.bertology.quantization_aware): Q8BERT's fake
quantization rounds the weights to int8 and the fully connected inputs to 8 bits inside its scope
and nowhere else, lets the gradient through (straight-through), keeps its ranges as a moving
average and the dropout masks moving; a garden.train classification run fine-tuned under it
through the one trainer gives a LiteRT model whose fully connected layers are int8 and whose
labels are the Keras QAT model's; what it cannot honour is refused in one line.
"""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden.bertology import qat as qat_command
from garden.bertology import quantization_aware as qa
from garden.bertology.qat_settings import QatSettings
from serve_testing import tiny_classifier
from testing import train_in_process

WORDS = ["the", "movie", "film", "plot", "was", "very", "really", "good", "great", "fun",
         "bad", "awful", "dull", "."]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
SEQ = 16


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A bert_tiny classifier (random weights), its FakeQuant, and 32 packed texts."""
    model, packer, _ = tiny_classifier(tmp_path_factory.mktemp("qat"), VOCAB, 0, SEQ)
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(3, 10))) for _ in range(32)]
    ids = {k: tf.constant(v) for k, v in packer.encode_numpy(texts).items()}
    return {"model": model, "fake_quant": qa.FakeQuant(model, model.backbone), "ids": ids}


def _big_weights(model):
    return [v for v in model.weights if v.path.endswith(("kernel", "embeddings"))]


def test_weights_read_in_the_scope_are_int8_roundings_and_float_outside(tiny):
    model, fake_quant = tiny["model"], tiny["fake_quant"]
    weights = _big_weights(model)
    # bert_tiny: the word, position and segment tables, 2 x 6 kernels, pooler and classifier.
    assert fake_quant.weight_count == len(weights) == 17
    floats = [v.numpy() for v in weights]
    with fake_quant.scope():
        rounded = [keras.ops.convert_to_numpy(v.value) for v in weights]
    for w, q in zip(floats, rounded):
        step = np.abs(w).max() / 127
        assert len(np.unique(q)) <= 255
        np.testing.assert_allclose(q / step, np.round(q / step), atol=1e-3)  # on the grid
        assert np.abs(q - w).max() <= step / 2 * 1.001
        assert np.abs(q - w).max() > 0  # rounded, not read as float
    for v, w in zip(weights, floats):  # outside the scope: the float weights, unchanged
        np.testing.assert_array_equal(v.numpy(), w)


def test_the_forward_pass_is_rounded_by_a_bounded_amount_and_only_in_the_scope(tiny):
    model, fake_quant, ids = tiny["model"], tiny["fake_quant"], tiny["ids"]
    expected = model(ids, training=False)["logits"].numpy()
    with fake_quant.scope(training=True):  # sets the ranges from this batch
        model(ids, training=False)
    # 2 x (attention, intermediate, output) + pooler + classifier: every one was called.
    assert len(fake_quant.ranges) == 8
    assert all(r.numpy()[0] < 0 < r.numpy()[1] for r in fake_quant.ranges)  # [low, high]
    with fake_quant.scope():
        rounded = model(ids, training=False)["logits"].numpy()
    np.testing.assert_array_equal(model(ids, training=False)["logits"].numpy(), expected)
    # Each rounding moves a value by at most half a step, 1/254 of its range, with random signs:
    # measured 3% of the logits' largest magnitude here; 20% would be a broken rounding.
    diff = np.abs(rounded - expected)
    assert 0 < diff.max() < 0.2 * np.abs(expected).max(), (diff.max(), np.abs(expected).max())


def test_the_gradient_passes_straight_through(tiny):
    x = tf.constant([-3.0, -0.5, 0.2, 0.9, 2.5])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(qa.fake_quant_activation(x, tf.constant(-1.0), tf.constant(1.0)))
    # 1 inside [-1, 1], 0 where the value was clipped.
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [0, 1, 1, 1, 0])

    model, fake_quant, ids = tiny["model"], tiny["fake_quant"], tiny["ids"]
    labels = tf.constant([0, 1] * 16)
    # The ranges from this batch, whatever ran before: at [0, 0] (a fresh FakeQuant) every
    # input would round to 0 and the gradient would be the all-zero one.
    with fake_quant.scope(training=True):
        model(ids, training=False)

    def gradients(scope):
        with tf.GradientTape() as tape:
            with scope:
                logits = model(ids, training=False)["logits"]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        return tape.gradient(loss, model.trainable_variables)

    rounded = gradients(fake_quant.scope())
    plain = gradients(keras.StatelessScope())
    assert all(g is not None for g in rounded)
    flat = lambda gs: np.concatenate([np.ravel(tf.convert_to_tensor(g)) for g in gs])  # noqa
    a, b = flat(rounded), flat(plain)
    assert not np.allclose(a, b)  # the rounding is in the differentiated graph
    assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) > 0.9  # and the gradient is float's


def _dense_model(dropout=0.0):
    inputs = keras.Input((4,))
    x = keras.layers.Dropout(dropout)(inputs) if dropout else inputs
    return keras.Model(inputs, keras.layers.Dense(3, name="dense")(x))


def test_the_input_range_is_a_moving_average_and_clips_at_evaluation():
    model = _dense_model()
    fake_quant = qa.FakeQuant(model, decay=0.9)
    (r,) = fake_quant.ranges
    with fake_quant.scope(training=True):
        model(tf.constant([[2.0, -1, 0, 0]]))
    np.testing.assert_allclose(r.numpy(), [-1.0, 2.0])  # the first batch's [min, max]
    with fake_quant.scope(training=True):
        model(tf.constant([[0.5, -4.0, 0, 0]]))
    expected = [0.9 * -1.0 + 0.1 * -4.0, 0.9 * 2.0 + 0.1 * 0.5]  # [-1.3, 1.85]
    np.testing.assert_allclose(r.numpy(), expected, rtol=1e-6)
    with fake_quant.scope():  # evaluation reads the range and clips to it
        clipped = model(tf.constant([[10.0, -10.0, 0, 0]])).numpy()
        at_range = model(tf.constant([[expected[1], expected[0], 0, 0]])).numpy()
    np.testing.assert_allclose(r.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(clipped, at_range, rtol=1e-5)


def test_dropout_masks_change_from_step_to_step_in_the_scope():
    """A plain keras.StatelessScope drops the dropout seed generator's update: every traced
    step would draw the same mask. The scope keeps it."""
    model = _dense_model(dropout=0.5)
    fake_quant = qa.FakeQuant(model)
    x = tf.ones((8, 4))

    @tf.function
    def step():
        with fake_quant.scope(training=True):
            return model(x, training=True)

    assert not np.allclose(step().numpy(), step().numpy())


def test_what_cannot_be_honoured_is_refused(tmp_path, capsys):
    inputs = keras.Input((5, 4))
    lstm = keras.Model(inputs, keras.layers.LSTM(8)(inputs), name="lstm_backbone")
    model = keras.Model(inputs, keras.layers.Dense(2)(lstm(inputs)))
    with pytest.raises(ValueError, match="lstm_backbone|Functional.*no Dense, EinsumDense or "
                                         "attention layer"):
        qa.FakeQuant(model, lstm)
    with pytest.raises(ValueError, match="its task is object; .*garden.Classification run"):
        qa.check_task(object(), "runs/x")
    with pytest.raises(ValueError, match="needs a directory of its own"):
        qa.run_qat(str(tmp_path), str(tmp_path), QatSettings())
    with pytest.raises(SystemExit) as e:
        qat_command.main(["--model_dir=a", "--output_dir=b", "--warmup_steps=5",
                          "--train_steps=2"])
    assert e.value.code == 2
    assert "--warmup_steps must be in [0, --train_steps], got 5" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------
# A garden.train run, fine-tuned under fake quantization by the one trainer
# ----------------------------------------------------------------------------------------

TRAIN_STEPS, QAT_STEPS = 60, 20


@pytest.fixture(scope="module")
def qat_run(tmp_path_factory):
    from benchmarks.task_distillation import tiny_task

    root = tmp_path_factory.mktemp("qat_run")
    paths = tiny_task(str(root))  # a sentiment word among filler words: 256 train, 64 dev
    model_dir = root / "float"
    train_in_process(["--config=configs/finetune/classification_tiny.gin",
                      f"--model_dir={model_dir}", f"--gin_param=VOCAB='{paths['vocab']}'",
                      f"--gin_param=TRAIN_FILE='{paths['train']}'",
                      f"--gin_param=EVAL_FILE='{paths['dev']}'", "--gin_param=INIT_CHECKPOINT=None",
                      "--gin_param=EXPORT_BASE=None", f"--gin_param=TRAIN_STEPS={TRAIN_STEPS}",
                      f"--gin_param=garden.Classification.max_seq_length={SEQ}",
                      "--gin_param=train.global_batch_size=16", "--gin_param=train.warmup_steps=6",
                      "--strategy=one_device"], str(model_dir), "classification", TRAIN_STEPS)
    settings = QatSettings(train_steps=QAT_STEPS, batch_size=16, learning_rate=1e-4,
                                       calibration_examples=32)
    report = qa.run_qat(str(model_dir), str(root / "qat"), settings)
    return {"report": report, "root": root,
            "float": json.loads((model_dir / "summary.json").read_text())}


def test_the_qat_run_is_a_trainer_run_with_its_ranges_checkpointed(qat_run):
    qat_dir = qat_run["root"] / "qat"
    summary = json.loads((qat_dir / "summary.json").read_text())
    assert summary["task"] == "quantization_aware_classification"
    assert summary["steps"] == QAT_STEPS
    reader = tf.train.load_checkpoint(str(qat_dir / "checkpoints"))
    ranges = [k for k in reader.get_variable_to_shape_map() if k.startswith("fake_quant/ranges")
              and k.endswith("VARIABLE_VALUE")]
    assert len(ranges) == 8
    assert all(reader.get_tensor(k)[0] < 0 < reader.get_tensor(k)[1] for k in ranges)
    assert "train.train_steps = 20" in (qat_dir / "operative_config.gin").read_text()


def test_the_litert_model_runs_int8_fully_connected_layers(qat_run):
    report = qat_run["report"]
    path = report["rows"]["qat_int8"]["tflite"]
    interpreter = tf.lite.Interpreter(model_path=path)
    details = interpreter.get_tensor_details()
    fully_connected = [op for op in interpreter._get_ops_details()
                       if op["op_name"] == "FULLY_CONNECTED"]
    assert len(fully_connected) == 14  # 2 x (q, k, v, attention output, 2 feed-forward) + 2
    for op in fully_connected:  # int8 input, int8 weights, int32 bias, int8 output
        dtypes = [details[i]["dtype"] for i in list(op["inputs"]) + list(op["outputs"])]
        assert dtypes == [np.int8, np.int8, np.int32, np.int8], dtypes
    assert report["qat_int8_ops"]["FULLY_CONNECTED"] == ["int8 int8 int32 int8"] * 14
    # Q8BERT keeps the attention products, softmax, LayerNorm and GELU in float.
    assert set(report["qat_int8_ops"]["BATCH_MATMUL"]) == {"float32 float32 float32"}
    assert {op["op_name"] for op in interpreter._get_ops_details()} >= {"SOFTMAX", "GELU"}


def test_litert_labels_are_the_keras_qat_models_and_accuracy_is_kept(qat_run):
    report = qat_run["report"]
    rows, n = report["rows"], report["eval_examples"]
    assert n == 64 and list(rows) == [name for name, _ in qa.ROWS]
    # The LiteRT model adds roundings the Keras model does not simulate (the fully connected
    # outputs, the attention context; calibrated): they move the logits by about 1% of their
    # scale, so only near-ties may flip: at most 3 of the 64 dev labels.
    assert report["label_agreement"]["qat_int8 vs qat_fake_quant"] >= 1 - 3 / n
    # The synthetic task is learned (a sentiment word decides it); int8 keeps it within 3 labels.
    assert rows["float"]["eval_accuracy"] > 0.9
    # The float row is the run's own evaluation (the same packer and model, packed eagerly).
    assert rows["float"]["eval_accuracy"] == qat_run["float"]["eval_accuracy"]
    for name in ("ptq_dynamic", "ptq_int8", "qat_fake_quant", "qat_int8"):
        assert rows[name]["eval_accuracy"] >= rows["float"]["eval_accuracy"] - 3 / n, name
    assert json.loads(open(report["report"]).read())["rows"] == rows
    assert all(os.path.getsize(rows[k]["tflite"]) == rows[k]["bytes"]
               for k in ("ptq_dynamic", "ptq_int8", "qat_int8"))
    assert "qat_int8" in qa.table(report) and "LiteRT MB" in qa.table(report)
