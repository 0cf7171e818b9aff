"""bfloat16 exports (issue 34 item 2): `train.export_precision = 'bfloat16'` (`--export_precision`)
writes a SavedModel whose matmuls run in bfloat16 behind the float32 export's signatures.

A tiny BERT classifier is fine-tuned from scratch on the sample classification task by
garden.train with a float32 export (version 1); the same command again with
--export_precision=bfloat16 trains no step and exports the same weights (version 2). A fresh
process with only tensorflow and tensorflow_text loads both and answers raw text; garden.serve
serves the bfloat16 one; `python -m garden.export` names what it computes in. Refusals come
before anything is written: an unknown precision, a module whose graphs are not in the precision
asked for, an op with no bfloat16 CPU kernel (also before garden.train's first step).
"""

from __future__ import annotations

import csv
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden import train as train_lib
from garden.serving import export
from garden.serving.precision import PrecisionError
from garden.training import setup
from serve_testing import Client, ServerProcess, tiny_classifier
from testing import read_summary, run_code, run_tool

STEPS, SEQ = 60, 64
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie", "was", "good", "bad"]

# Runs in a process of its own with only what a model server links (tensorflow and
# tensorflow_text, no garden module): testing.run_code, forked with TensorFlow imported.
SERVE = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops before loading

texts = json.loads(sys.argv[2])
out = {}
for path in json.loads(sys.argv[1]):
    sigs = tf.saved_model.load(path).signatures
    answer = sigs["serving_default"](text_a=tf.constant(texts))
    specs = {name: {"inputs": {k: [v.dtype.name, str(v.shape)]
                               for k, v in fn.structured_input_signature[1].items()},
                    "outputs": {k: [v.dtype.name, str(v.shape)]
                                for k, v in fn.structured_outputs.items()}}
             for name, fn in sigs.items()}
    out[path] = {"probabilities": answer["probabilities"].numpy().tolist(),
                 "label": [x.decode() for x in answer["label"].numpy()],
                 "dtypes": {k: v.dtype.name for k, v in answer.items()}, "specs": specs}
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(autouse=True)
def _cwd_repo(monkeypatch):
    monkeypatch.chdir(train_lib.REPO_ROOT)  # configs include each other by repo-relative paths


def _finetune_args(serving_corpus, model_dir, export_base, *extra) -> list:
    task = serving_corpus.task_dir
    return ["--config=configs/finetune/classification_tiny.gin", f"--model_dir={model_dir}",
            f"--gin_param=VOCAB='{serving_corpus.vocab['wordpiece']}'",
            f"--gin_param=TRAIN_FILE='{task}/train.tsv'",
            f"--gin_param=EVAL_FILE='{task}/dev.tsv'", "--gin_param=INIT_CHECKPOINT=None",
            f"--gin_param=EXPORT_BASE='{export_base}'", f"--gin_param=TRAIN_STEPS={STEPS}",
            f"--gin_param=garden.Classification.max_seq_length={SEQ}",
            "--strategy=one_device", "--gin_param=train.peak_flops=1e12", *extra]


@pytest.fixture(scope="module")
def exports(serving_corpus, tmp_path_factory):
    """The fine-tuned run's float32 export (version 1) and bfloat16 export (version 2), what a
    fresh process answers on the dev texts, and the run's summaries."""
    root = tmp_path_factory.mktemp("bf16")
    model_dir, base = root / "run", root / "exports"
    cwd = os.getcwd()
    os.chdir(train_lib.REPO_ROOT)  # (the autouse _cwd_repo is function-scoped)
    try:
        assert train_lib.main(_finetune_args(serving_corpus, model_dir, base)) == 0
        first = read_summary(model_dir)
        assert train_lib.main(_finetune_args(serving_corpus, model_dir, base,
                                             "--export_precision=bfloat16")) == 0
        second = read_summary(model_dir)
    finally:
        os.chdir(cwd)
    with open(os.path.join(serving_corpus.task_dir, "dev.tsv"), encoding="utf-8") as f:
        dev = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    paths = [first["export_dir"], second["export_dir"]]
    proc = run_code(SERVE, json.dumps(paths), json.dumps([row["text_a"] for row in dev]))
    answers = json.loads([ln for ln in proc.stdout.splitlines()
                          if ln.startswith("RESULT")][-1][len("RESULT"):])
    return {"float32": answers[paths[0]], "bfloat16": answers[paths[1]], "paths": paths,
            "summaries": (first, second), "model_dir": model_dir, "base": base, "dev": dev}


def _metadata(path) -> dict:
    with open(os.path.join(path, "assets.extra", "garden_export.json"), encoding="utf-8") as f:
        return json.load(f)


def test_the_second_run_exports_the_same_weights_in_bfloat16(exports):
    first, second = exports["summaries"]
    assert first["export_precision"] == "float32" and first["steps"] == STEPS
    assert second["export_precision"] == "bfloat16" and second["steps_this_run"] == 0
    assert second["checkpoint"] == first["checkpoint"]
    assert exports["paths"] == [str(exports["base"] / "bert_tiny_classifier" / v)
                                for v in ("1", "2")]
    f32, bf16 = (_metadata(p) for p in exports["paths"])
    assert f32["compute_dtype"] == "float32" and bf16["compute_dtype"] == "bfloat16"
    # The same graphs, matmul for matmul: every one float32 in version 1; in version 2 all but
    # the classifier head (float32 whatever the policy, one per signature that runs the model:
    # serving_default, serving_ids, classify) run in bfloat16.
    assert set(f32["matmul_dtypes"]) == {"float32"}
    assert bf16["matmul_dtypes"]["float32"] == 3
    assert sum(bf16["matmul_dtypes"].values()) == f32["matmul_dtypes"]["float32"]
    assert {k: v for k, v in bf16.items() if k not in ("compute_dtype", "matmul_dtypes",
                                                       "version")} == \
        {k: v for k, v in f32.items() if k not in ("compute_dtype", "matmul_dtypes", "version")}


def test_signatures_are_the_float32_exports(exports):
    """Inputs and outputs of every signature: same names, dtypes and shapes; every float
    output float32."""
    f32, bf16 = exports["float32"], exports["bfloat16"]
    assert bf16["specs"] == f32["specs"]
    assert set(bf16["specs"]) == {"serving_default", "serving_ids", "classify"}
    outputs = [dtype for spec in bf16["specs"].values() for dtype, _ in spec["outputs"].values()]
    assert "bfloat16" not in outputs and "float32" in outputs
    assert bf16["dtypes"] == {"probabilities": "float32", "logits": "float32",
                              "label": "string", "label_id": "int64"}


def _tolerance(model_dir) -> float:
    """A first-order bound on how far a bfloat16 export's probabilities may move from float32's.

    bfloat16 keeps 8 significant bits: each value it stores is off by at most 2^-9 relative.
    On the path to bert_tiny's pooled output, each of the 2 layers stores 10 activations in
    bfloat16 (queries, keys, values, scores, probabilities, context, attention output and its
    LayerNorm, the GELU of the feed-forward, its output and LayerNorm), plus the embeddings'
    LayerNorm, the pooler's product and its tanh: 23 roundings whose relative errors add (the
    LayerNorms keep the scale from growing): eps = 23 x 2^-9 = 0.045 of the pooled vector h,
    |h| <= 1 (tanh). The float32 head z = W h + b then moves the two logits' difference by at
    most eps x ||W_0 - W_1||_1, and a softmax probability moves by at most a quarter of that
    (dp_i/d(z_i - z_j) = p_i p_j <= 1/4). With the weights of this run (||W_0 - W_1||_1 about
    3.1 after 60 steps): about 0.035."""
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir / "checkpoints")))
    (name,) = [n for n in reader.get_variable_to_shape_map()
               if "classifier_dense/_kernel" in n and "OPTIMIZER" not in n]
    kernel = reader.get_tensor(name)
    eps = 23 * 2.0 ** -9
    return 0.25 * eps * float(np.abs(kernel[:, 0] - kernel[:, 1]).sum())


def test_bfloat16_probabilities_and_labels_agree_with_float32(exports):
    tolerance = _tolerance(exports["model_dir"])
    assert 0.005 < tolerance < 0.1, tolerance  # the model learnt something, and is not huge
    p32 = np.array(exports["float32"]["probabilities"])
    p16 = np.array(exports["bfloat16"]["probabilities"])
    assert p16.shape == p32.shape == (len(exports["dev"]), 2)
    assert np.abs(p16 - p32).max() <= tolerance
    # A label can only flip where float32's two probabilities are within 2 x tolerance.
    labels32, labels16 = exports["float32"]["label"], exports["bfloat16"]["label"]
    clear = np.abs(p32[:, 0] - p32[:, 1]) > 2 * tolerance
    assert clear.mean() > 0.8
    assert all(a == b for a, b, c in zip(labels32, labels16, clear) if c)
    assert np.mean([a == b for a, b in zip(labels32, labels16)]) >= 0.99
    # The model learnt the task (the dev accuracy the trainer reported, ~0.8 here).
    accuracy = np.mean([label == row["label"] for label, row in zip(labels16, exports["dev"])])
    assert accuracy > exports["summaries"][0]["majority_baseline_accuracy"] + 0.05


def test_garden_serve_serves_the_bfloat16_export(exports, tmp_path):
    """garden.serve over the model directory serves its newest version, the bfloat16 one
    (its warmup requests replayed on load), answering TF Serving's :predict in float32."""
    server = ServerProcess(["--model_name=clf",
                            f"--model_base_path={exports['base'] / 'bert_tiny_classifier'}"],
                           str(tmp_path / "serve.log"))
    try:
        client = Client(server)
        texts = [row["text_a"] for row in exports["dev"][:4]]
        status, _, body = client.post("/v1/models/clf:predict", {"instances": texts})
        client.close()
    finally:
        assert server.stop() == 0
    assert status == 200, body
    expected = exports["bfloat16"]
    np.testing.assert_allclose([p["probabilities"] for p in body["predictions"]],
                               expected["probabilities"][:4], atol=1e-6)
    assert [p["label"] for p in body["predictions"]] == expected["label"][:4]


def test_inspect_command_names_the_compute_dtype(exports):
    proc = run_tool("garden.export", exports["paths"][1])
    report = json.loads(proc.stdout)
    assert report["compute_dtype"] == "bfloat16" and report["ok"]
    assert report["matmul_dtypes"] == _metadata(exports["paths"][1])["matmul_dtypes"]


# -- refusals, before anything is written ---------------------------------------------------
class Lgamma(keras.layers.Layer):
    """log |Gamma(x)|: TensorFlow's Lgamma has float, double and half CPU kernels, no bfloat16
    one: a layer of a model that cannot compute in bfloat16."""

    def call(self, x):
        return tf.math.lgamma(x)


def with_lgamma(model):
    """`model` (backbone inputs -> {"logits"}) with log |Gamma| of its logits as the logits."""
    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
              for name in model.input}
    return keras.Model(inputs, {"logits": Lgamma()(model(inputs)["logits"])})


def _classifier(root, policy: str, lgamma: bool = False):
    from garden.serving.classification import ClassificationServing

    with setup.dtype_policy(policy):
        model, packer, vocab = tiny_classifier(root, VOCAB, seed=3, max_seq_length=8)
        if lgamma:
            model = with_lgamma(model)
    return ClassificationServing(model, packer, vocab, ["a", "b"], text_b=False)


@pytest.mark.parametrize("policy, precision, message", [
    ("float32", "float16", r"export precision must be one of 'float32', 'bfloat16'; got "
                           r"'float16'"),
    ("float32", "bfloat16", r"asked in bfloat16 but its graphs run no bfloat16 matmul "
                            r"\(\d+ float32\): build its model under Keras' 'mixed_bfloat16'"),
    ("mixed_bfloat16", "float32", r"asked in float32 but its graphs run \d+ bfloat16 matmuls"),
])
def test_a_module_not_in_the_precision_asked_is_refused(tmp_path, policy, precision, message):
    with pytest.raises(PrecisionError, match=message):
        export.export(_classifier(tmp_path, policy), str(tmp_path / "exports"), "clf",
                      precision=precision)
    assert not (tmp_path / "exports").exists()


def test_an_op_without_a_bfloat16_kernel_is_refused(tmp_path):
    module = _classifier(tmp_path, "mixed_bfloat16", lgamma=True)
    with pytest.raises(PrecisionError) as refused:
        export.export(module, str(tmp_path / "exports"), "clf", precision="bfloat16")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("the classification export cannot compute in bfloat16: op Lgamma "
                              "(node '") and "has no bfloat16 CPU kernel in TensorFlow" in message
    assert not (tmp_path / "exports").exists()
    # In float32 the same model exports.
    assert export.export(_classifier(tmp_path, "float32", lgamma=True),
                         str(tmp_path / "exports"), "clf").endswith("clf/1")


def test_garden_train_refuses_it_before_the_first_step(serving_corpus, tmp_path, monkeypatch,
                                                       capsys):
    """The same op in a fine-tuning run's model: garden.train's one error line names the
    binding and the op, before any step, checkpoint or export."""
    from garden.tasks.classification import Classification

    build_model = Classification.build_model

    def build_with_lgamma(task):
        model, objects = build_model(task)
        return with_lgamma(model), objects

    monkeypatch.setattr(Classification, "build_model", build_with_lgamma)
    model_dir, base = tmp_path / "run", tmp_path / "exports"
    args = _finetune_args(serving_corpus, model_dir, base, "--export_precision=bfloat16")
    assert train_lib.main(args) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and err[0].startswith(
        "error: train.export_precision = 'bfloat16': the classification export cannot compute "
        "in bfloat16: op Lgamma"), err
    assert not (model_dir / "checkpoints").exists() and not base.exists()


def test_half_type_outputs_leave_as_float32(tmp_path):
    """A module that hands out its backbone's bfloat16 features: the saved signature casts
    them to float32, so its outputs are the float32 export's."""
    from garden.serving.base import PREDICT, ServingModule

    class Features(ServingModule):
        task = "features"

        def __init__(self, backbone):
            super().__init__()
            self.backbone = backbone

        def signatures(self):
            ids = [tf.TensorSpec([None, None], tf.int32, name=n) for n in
                   ("token_ids", "segment_ids", "padding_mask")]
            self.fn = tf.function(lambda t, s, p: {"features": self.backbone(
                {"token_ids": t, "segment_ids": s, "padding_mask": p})["sequence_output"]},
                input_signature=ids)
            return {"serving_default": (self.fn.get_concrete_function(), PREDICT)}

    from garden.models.bert.presets import untrained_bert_backbone

    with setup.dtype_policy("mixed_bfloat16"):
        module = Features(untrained_bert_backbone("bert_tiny", vocab_size=20, num_layers=1))
    assert module.signatures()["serving_default"][0].structured_outputs["features"].dtype == \
        tf.bfloat16
    path = export.export(module, str(tmp_path), "features", precision="bfloat16")
    signature = tf.saved_model.load(path).signatures["serving_default"]
    assert signature.structured_outputs["features"].dtype == tf.float32
    ones = tf.ones([1, 3], tf.int32)
    out = signature(token_ids=ones, segment_ids=0 * ones, padding_mask=ones)["features"]
    assert out.dtype == tf.float32 and out.shape == (1, 3, 128)
