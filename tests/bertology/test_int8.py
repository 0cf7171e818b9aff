"""garden.bertology.int8 (its implementation: garden.bertology.quantization) on a tiny
fine-tuned BERT classifier: the int8 export keeps the float export's signatures and answers raw text in a fresh process and over garden.serve's REST API,
uses only ops TF Serving has, stores int8 weights (a smaller variables file), predicts as the
float model does within the int8 rounding, and the LiteRT dynamic-range model runs in
tf.lite.Interpreter close to the float logits.
"""

import json
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden.bertology import quantization as int8
from garden.serving import export
from garden.serving.classification import ClassificationServing
from testing import run_code

# The garden.serve helpers live beside the serving tests.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serving"))
from serve_testing import Client, ServerProcess, tiny_classifier  # noqa: E402

WORDS = ["the", "movie", "film", "plot", "was", "very", "really", "good", "great", "fun",
         "bad", "awful", "dull", "."]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
POSITIVE, NEGATIVE = ["good", "great", "fun"], ["bad", "awful", "dull"]
SEQ = 16


def _texts(rng, n):
    labels = rng.integers(0, 2, n)
    texts = [f"the {rng.choice(['movie', 'film', 'plot'])} was "
             f"{rng.choice(['very ', 'really ', ''])}"
             f"{rng.choice(POSITIVE if y else NEGATIVE)} ." for y in labels]
    return texts, labels


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("int8")
    model, packer, vocab = tiny_classifier(root, VOCAB, 0, SEQ)
    rng = np.random.default_rng(0)
    texts, labels = _texts(rng, 256)
    # A short fine-tuning, so that the logits are those of a trained classifier (confident,
    # not the near-ties of random weights). Not model.fit: the model would track its
    # optimizer, and the float export would save its slots. One traced step (a tf.function):
    # 24 eager steps cost 9 CPU-s, traced 5.5.
    optimizer = keras.optimizers.Adam(1e-3)
    ids = packer.encode_numpy(texts)

    @tf.function
    def train_step(inputs, targets):
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)["logits"]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                targets, logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)

    for step in range(24):
        batch = slice(32 * (step % 8), 32 * (step % 8 + 1))
        train_step({k: tf.constant(v[batch]) for k, v in ids.items()},
                   tf.constant(labels[batch]))

    def module():
        return ClassificationServing(model, packer, vocab, ["neg", "pos"], text_b=False)

    float_dir = export.export(module(), str(root / "exports"), "clf")
    int8_dir = int8.export_int8(module(), str(root / "exports"), "clf_int8")
    test_texts, test_labels = _texts(np.random.default_rng(1), 64)
    test_texts += ["", "the plot was good . the film was bad ."]  # empty and mixed
    return {"root": root, "model": model, "packer": packer, "float": float_dir,
            "int8": int8_dir, "texts": test_texts, "labels": test_labels}


def _signature_specs(path):
    loaded = tf.saved_model.load(path)
    return {name: (fn.structured_input_signature, fn.structured_outputs)
            for name, fn in loaded.signatures.items()}


def test_the_int8_export_has_the_float_exports_signatures(exports):
    assert _signature_specs(exports["int8"]) == _signature_specs(exports["float"])
    with open(os.path.join(exports["int8"], "assets.extra", "garden_export.json")) as f:
        meta = json.load(f)
    with open(os.path.join(exports["float"], "assets.extra", "garden_export.json")) as f:
        float_meta = json.load(f)
    assert meta["quantization"]["quantization"] == "int8_weight_only"
    assert meta["signatures"] == float_meta["signatures"]
    assert meta["label_names"] == ["neg", "pos"]
    # bert_tiny: 2 x (4 attention + 2 feed-forward kernels), the position table and the
    # pooler kernel are >= 4096 values; the 19 x 128 word table, the 2 x 128 segment table
    # and the 128 x 2 classifier kernel stay float32.
    assert meta["quantization"]["quantized_weights"] == 14


def test_the_int8_export_uses_only_stock_serving_ops(exports):
    report = export.check_serving_ops(exports["int8"])
    assert report["ok"], report["problems"]
    ops = export.graph_ops(exports["int8"])
    assert not [op for op in ops if op.startswith("_")], ops  # no oneDNN-internal op
    assert "Cast" in ops and "MatMul" in ops


def _variables(path):
    reader = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
    return reader.get_variable_to_dtype_map(), reader.get_variable_to_shape_map()


def _size(path):
    folder = os.path.join(path, "variables")
    return sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))


def test_the_saved_weights_are_int8_and_smaller(exports):
    dtypes, shapes = _variables(exports["int8"])
    float_dtypes, float_shapes = _variables(exports["float"])
    big = lambda s: int(np.prod(s)) >= int8.MIN_VALUES and len(s) >= 2  # noqa: E731
    # No float32 weight of a quantized size is left; each one of the float export's has an
    # int8 twin of its shape.
    assert not [k for k, s in shapes.items() if big(s) and dtypes[k] == tf.float32]
    int8_shapes = sorted(s for k, s in shapes.items() if dtypes[k] == tf.int8)
    assert int8_shapes == sorted(s for k, s in float_shapes.items()
                                 if big(s) and float_dtypes[k] == tf.float32)
    # bert_tiny's 0.47M weights, 0.44M of them quantized: about 0.28 of the float bytes.
    assert _size(exports["int8"]) < 0.35 * _size(exports["float"])


def _float_logits(exports, texts):
    loaded = tf.saved_model.load(exports["float"])
    return loaded.signatures["serving_default"](text_a=tf.constant(texts))["logits"].numpy()


def _check_close(int8_logits, float_logits, labels=None):
    """Rounding moves each weight by at most its scale / 2 = 1/254 of its channel's abs-max,
    with random signs, so a product over K inputs moves by about 0.4% / sqrt(K) of its scale
    and the logits by far less than 1%: measured 1.1e-4 for the export and 5.9e-4 for the
    TFLite model (activations quantized too) with logits up to 1.4. Tolerance: 1% of the
    largest logit, and the same label wherever float's margin is above twice that. The logits
    must differ (else the float weights were read)."""
    tolerance = 0.01 * np.abs(float_logits).max()
    diff = np.abs(int8_logits - float_logits)
    assert diff.max() < tolerance, (diff.max(), tolerance)
    assert diff.max() > 0, "bit-identical to float32: the int8 weights were not used"
    margin = np.abs(float_logits[:, 1] - float_logits[:, 0])
    sure = margin > 2 * tolerance
    assert sure.mean() > 0.9
    np.testing.assert_array_equal(int8_logits[sure].argmax(-1), float_logits[sure].argmax(-1))
    if labels is not None:  # within 1 point of float's accuracy on the labelled texts
        n = len(labels)
        acc = lambda logits: np.mean(logits[:n].argmax(-1) == labels)  # noqa: E731
        assert acc(int8_logits) >= acc(float_logits) - 0.01 and acc(float_logits) > 0.9


SCRIPT = """
import json, sys
import tensorflow as tf, tensorflow_text  # noqa: F401
loaded = tf.saved_model.load(sys.argv[1])
out = loaded.signatures["serving_default"](text_a=tf.constant(json.loads(sys.argv[2])))
print(json.dumps({k: v.numpy().tolist() for k, v in out.items() if v.dtype != tf.string}))
"""


def test_a_fresh_process_answers_raw_text_with_int8(exports):
    texts = exports["texts"]
    proc = run_code(SCRIPT, exports["int8"], json.dumps(texts))
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    _check_close(np.asarray(out["logits"]), _float_logits(exports, texts), exports["labels"])
    np.testing.assert_array_equal(out["label_id"], np.argmax(out["logits"], -1))


def test_garden_serve_serves_the_int8_export_over_rest(exports, tmp_path):
    base = os.path.dirname(exports["int8"])
    server = ServerProcess(["--model_name=clf", f"--model_base_path={base}"],
                           str(tmp_path / "serve.log"))
    try:
        client = Client(server)
        status, _, body = client.get("/v1/models/clf")
        assert status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE"
        texts = exports["texts"][:8]
        status, _, body = client.post("/v1/models/clf:predict", {"instances": texts})
        assert status == 200, body
        logits = np.asarray([p["logits"] for p in body["predictions"]])
        assert [p["label"] for p in body["predictions"]] == \
            [["neg", "pos"][i] for i in logits.argmax(-1)]
        _check_close(logits, _float_logits(exports, texts))
        client.close()
    finally:
        assert server.stop() == 0


def test_the_tflite_model_runs_close_to_float(exports):
    model, packer = exports["model"], exports["packer"]
    flatbuffer = int8.tflite_model(model, packer.input_names, SEQ)
    float_flatbuffer = int8.tflite_model(model, packer.input_names, SEQ, quantize=False)
    # Dynamic range: the weights of >= 1024 values stored as int8.
    assert len(flatbuffer) < 0.4 * len(float_flatbuffer)
    texts = exports["texts"]
    ids = packer.encode_numpy(texts)
    logits = int8.tflite_runner(flatbuffer)(ids)["logits"]
    expected = model({k: tf.constant(v) for k, v in ids.items()}, training=False)["logits"]
    # Activations are quantized too (per batch row at run time): the same tolerance holds.
    _check_close(logits, expected.numpy(), exports["labels"])


def test_quantize_run_scores_float_and_int8_on_the_runs_eval_file(tmp_path):
    """quantize_run on a garden.train run: the float score is the run's own final eval, and the
    int8 score is what the int8 export's raw-text signature answers on the eval file."""
    from convert_testing import scratch_classification_args
    from testing import train_in_process

    model_dir = tmp_path / "run"
    # No float export at the run's end (EXPORT_BASE=None): quantize_run is given its
    # export_base, and exports the int8 model from the run's checkpoint.
    summary = train_in_process(scratch_classification_args(tmp_path, model_dir, 8,
                                                           "--gin_param=EXPORT_BASE=None"),
                               str(model_dir), "classification", 8)
    assert "export_dir" not in summary
    out = int8.quantize_run(str(model_dir), str(tmp_path / "int8"))
    assert out["float"]["eval_accuracy"] == pytest.approx(summary["eval_accuracy"], abs=1e-9)
    rows = [line.split("\t") for line in
            (tmp_path / "data" / "dev.tsv").read_text().splitlines()[1:]]
    answer = tf.saved_model.load(out["export"]).signatures["serving_default"](
        text_a=tf.constant([text for text, _ in rows]))
    labels = [v for v in answer.values() if v.dtype == tf.string][0].numpy().reshape(-1)
    expected = np.mean([label.decode() == gold for label, (_, gold) in zip(labels, rows)])
    assert out["int8"]["eval_accuracy"] == pytest.approx(expected, abs=1e-9)
    assert json.loads(open(out["report"]).read())["int8"]["eval_accuracy"] == \
        out["int8"]["eval_accuracy"]
