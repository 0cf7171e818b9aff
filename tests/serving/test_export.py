"""The one exporter on a tiny BERT classifier's ClassificationServing, served from a fresh
process; a one-output regression export; bad request shapes answered with errors.

The fresh process imports only tensorflow and tensorflow_text (as a model server would link
them), with the original vocabulary file moved away, and its probabilities must match the
in-process Keras model to 1e-5.
"""

import json
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from text import tokenizers
from garden.models.bert.presets import untrained_bert_backbone
from garden.models.classification import SequenceClassifier
from garden.serving import export
from garden.serving.classification import ClassificationServing
from garden.serving.text import TextPacker
from testing import run_code, run_tool

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
         "the", "movie", "was", "good", "bad", "great", "plot", "##s", "not", ".", "!"]
LABELS = ["negative", "neutral", "positive"]
MAX_LEN = 12
PAIRS = [("The movie was good.", "Great plot!"),
         ("the plots were bad", "not good"),
         ("Great great great great great great great", "bad bad bad bad bad bad"),
         ("", "movie")]
WARMUP = [("the movie", "was good"), ("bad plot", "")]

# Runs in a process of its own (testing.run_code: forked with TensorFlow imported, from the
# repository root, where no vocab.txt lies): no garden import, only what a model server has.
SERVE_SCRIPT = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops before loading

args = json.loads(sys.argv[1])
out = {}
for name, spec in args["exports"].items():
    loaded = tf.saved_model.load(spec["dir"])
    sigs = loaded.signatures
    text = {"text_a": tf.constant(spec["text_a"])}
    if spec["text_b"] is not None:
        text["text_b"] = tf.constant(spec["text_b"])
    default = sigs["serving_default"](**text)
    ids = sigs["serving_ids"](**{k: tf.constant(v, tf.int32) for k, v in spec["ids"].items()})
    examples = []
    for i, a in enumerate(spec["text_a"]):
        feature = {"text_a": tf.train.Feature(bytes_list=tf.train.BytesList(value=[a.encode()]))}
        if spec["text_b"] is not None:
            feature["text_b"] = tf.train.Feature(
                bytes_list=tf.train.BytesList(value=[spec["text_b"][i].encode()]))
        examples.append(tf.train.Example(features=tf.train.Features(feature=feature))
                        .SerializeToString())
    classify = sigs["classify"](inputs=tf.constant(examples))
    asset = loaded.vocab_file.asset_path.numpy().decode()
    out[name] = {
        "default": {k: v.numpy().tolist() for k, v in default.items()
                    if k not in ("label",)},
        "label": [x.decode() for x in default["label"].numpy()],
        "ids": {k: v.numpy().tolist() for k, v in ids.items() if k != "label"},
        "classes": [[x.decode() for x in row] for row in classify["classes"].numpy()],
        "scores": classify["scores"].numpy().tolist(),
        "asset_path": asset,
        "asset_text": open(asset, encoding="utf-8").read(),
        "inputs": sorted(sigs["serving_default"].structured_input_signature[1]),
    }
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    vocab_path = root / "vocab.txt"
    vocab_text = "\n".join(VOCAB) + "\n"
    vocab_path.write_text(vocab_text, encoding="utf-8")
    keras.utils.set_random_seed(7)
    model = SequenceClassifier(untrained_bert_backbone("bert_tiny", vocab_size=len(VOCAB)),
                               num_classes=len(LABELS))
    packer = make_packer(str(vocab_path))
    base = str(root / "exports")
    pair_dir = export.export(
        ClassificationServing(model, packer, str(vocab_path), LABELS, text_b=True,
                              warmup_texts=WARMUP), base, "sentiment")
    single_dir = export.export(
        ClassificationServing(model, packer, str(vocab_path), LABELS, text_b=False),
        base, "sentiment")
    # The export must not need the original vocabulary file any more.
    moved = root / "vocab.moved"
    shutil.move(str(vocab_path), str(moved))
    return {"model": model, "pair_dir": pair_dir, "single_dir": single_dir, "root": root,
            "vocab_text": vocab_text, "vocab_moved": str(moved)}


def make_packer(vocab_path):
    return TextPacker(tokenizers.load_tokenizer("wordpiece", vocab_path, lower_case=True), MAX_LEN)


def keras_probabilities(model, vocab_path, texts_a, texts_b):
    inputs = make_packer(vocab_path).encode_numpy(texts_a, texts_b)
    logits = model({k: tf.constant(v) for k, v in inputs.items()}, training=False)["logits"]
    return inputs, tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1).numpy()


@pytest.fixture(scope="module")
def served(exported):
    texts_a = [a for a, _ in PAIRS]
    texts_b = [b for _, b in PAIRS]
    ids_pair, probs_pair = keras_probabilities(exported["model"], exported["vocab_moved"],
                                               texts_a, texts_b)
    ids_single, probs_single = keras_probabilities(exported["model"], exported["vocab_moved"],
                                                   texts_a, None)
    args = {"exports": {
        "pair": {"dir": exported["pair_dir"], "text_a": texts_a, "text_b": texts_b,
                 "ids": {k: v.tolist() for k, v in ids_pair.items()}},
        "single": {"dir": exported["single_dir"], "text_a": texts_a, "text_b": None,
                   "ids": {k: v.tolist() for k, v in ids_single.items()}},
    }}
    proc = run_code(SERVE_SCRIPT, json.dumps(args), CUDA_VISIBLE_DEVICES="")
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT")][-1]
    result = json.loads(line[len("RESULT"):])
    return result, {"pair": probs_pair, "single": probs_single}


def test_version_layout_and_increment(exported):
    base = os.path.join(str(exported["root"]), "exports", "sentiment")
    assert exported["pair_dir"] == os.path.join(base, "1")
    assert exported["single_dir"] == os.path.join(base, "2")
    assert sorted(os.listdir(base)) == ["1", "2"]  # no temporary directory left behind
    for name in ("saved_model.pb", "variables", "assets/vocab.txt",
                 "assets.extra/tf_serving_warmup_requests", "assets.extra/garden_export.json"):
        assert os.path.exists(os.path.join(exported["pair_dir"], name)), name
    module = ClassificationServing(exported["model"], make_packer(exported["vocab_moved"]),
                                   exported["vocab_moved"], LABELS, text_b=False)
    with pytest.raises(export.ExportError, match="already exists"):
        export.export(module, os.path.dirname(base), "sentiment", version=2)


@pytest.mark.parametrize("kind", ["pair", "single"])
def test_fresh_process_matches_keras(served, kind):
    result, expected = served
    got, probs = result[kind], expected[kind]
    np.testing.assert_allclose(got["default"]["probabilities"], probs, atol=1e-5)
    np.testing.assert_allclose(got["ids"]["probabilities"], probs, atol=1e-5)
    np.testing.assert_allclose(got["scores"], probs, atol=1e-5)
    np.testing.assert_allclose(tf.nn.softmax(got["default"]["logits"]).numpy(), probs, atol=1e-5)
    assert got["default"]["label_id"] == probs.argmax(-1).tolist()
    assert got["label"] == [LABELS[i] for i in probs.argmax(-1)]
    assert got["classes"] == [LABELS] * len(PAIRS)
    assert got["inputs"] == (["text_a", "text_b"] if kind == "pair" else ["text_a"])


def test_vocabulary_is_an_asset_of_the_export(exported, served):
    result, _ = served
    for kind, key in (("pair", "pair_dir"), ("single", "single_dir")):
        assert result[kind]["asset_path"].startswith(exported[key])
        assert result[kind]["asset_text"] == exported["vocab_text"]


def test_saved_model_cli_lists_signatures_and_method_names(exported):
    # saved_model_cli's module (the console script's entry point, tensorflow.python.tools.
    # saved_model_cli:main), as `python -m`, forked with TensorFlow imported (testing.run_tool).
    proc = run_tool("tensorflow.python.tools.saved_model_cli", "show", "--all",
                    "--dir", exported["pair_dir"])
    methods = {}
    current = None
    for line in proc.stdout.splitlines():
        if line.startswith("signature_def['"):
            current = line.split("'")[1]
        elif "Method name is:" in line and current:
            methods[current] = line.split("Method name is:")[1].strip()
    assert methods["serving_default"] == "tensorflow/serving/predict"
    assert methods["serving_ids"] == "tensorflow/serving/predict"
    assert methods["classify"] == "tensorflow/serving/classify"
    assert "inputs['text_b']" in proc.stdout and "outputs['probabilities']" in proc.stdout


def test_warmup_requests_parse_back(exported):
    path = os.path.join(exported["pair_dir"], "assets.extra", "tf_serving_warmup_requests")
    requests = export.read_warmup_requests(path)
    # One request per warmup pair, the pairs as one batch, and that batch as ids.
    assert len(requests) == len(WARMUP) + 2
    assert {r["model_name"] for r in requests} == {"sentiment"}
    assert [r["signature_name"] for r in requests] == (
        ["serving_default"] * (len(WARMUP) + 1) + ["serving_ids"])
    for request, (a, b) in zip(requests, WARMUP):
        assert sorted(request["inputs"]) == ["text_a", "text_b"]
        assert request["inputs"]["text_a"].tolist() == [a.encode()]
        assert request["inputs"]["text_b"].tolist() == [b.encode()]
    assert requests[len(WARMUP)]["inputs"]["text_a"].tolist() == [a.encode() for a, _ in WARMUP]
    ids = requests[-1]["inputs"]
    assert sorted(ids) == ["padding_mask", "segment_ids", "token_ids"]
    assert ids["token_ids"].dtype == np.int32 and ids["token_ids"].shape == (len(WARMUP), MAX_LEN)
    # Single-text export: default warmup texts, text_a only.
    single = export.read_warmup_requests(
        os.path.join(exported["single_dir"], "assets.extra", "tf_serving_warmup_requests"))
    assert all(sorted(r["inputs"]) == ["text_a"] for r in single[:-1])


def test_metadata_and_serving_ops(exported):
    with open(os.path.join(exported["pair_dir"], "assets.extra", "garden_export.json")) as f:
        meta = json.load(f)
    assert meta["label_names"] == LABELS and meta["max_seq_length"] == MAX_LEN
    assert meta["lower_case"] is True and meta["text_b"] is True
    assert meta["model_name"] == "sentiment" and meta["version"] == 1
    assert meta["task"] == "classification" and meta["tokenizer"] == "wordpiece"
    assert meta["layout"] == "bert" and meta["vocab_file"] == "assets/vocab.txt"
    assert meta["signatures"] == {"serving_default": "tensorflow/serving/predict",
                                  "serving_ids": "tensorflow/serving/predict",
                                  "classify": "tensorflow/serving/classify"}
    assert meta["vocab_fingerprint"].startswith("sha256:")
    assert meta["min_tf_serving_version"] == export.min_tf_serving_version()
    # Built under the float32 policy: every matmul of every signature in float32.
    assert meta["compute_dtype"] == "float32" and set(meta["matmul_dtypes"]) == {"float32"}
    # FastBertNormalize: the fast path's FastBertTokenizer (text/wordpiece.py)
    assert meta["tf_text_ops"] == ["FastBertNormalize", "FastWordpieceTokenizeWithOffsets",
                                   "RegexSplitWithOffsets"]

    report = export.check_serving_ops(exported["pair_dir"])
    assert report["ok"], report["problems"]
    assert report["unknown_ops"] == []
    assert "TFText>RoundRobinTrim" not in export.graph_ops(exported["pair_dir"])
    # Against tensorflow-text 2.8 (before FastWordpieceTokenizer, as far as the table knows)
    # the check must fail.
    old = export.check_serving_ops(exported["pair_dir"], max_tf_text_version="2.8")
    assert not old["ok"] and any("FastWordpieceTokenizeWithOffsets" in p for p in old["problems"])


def test_label_count_must_match_logits(exported, tmp_path):
    vocab = tmp_path / "v.txt"
    vocab.write_text(exported["vocab_text"], encoding="utf-8")
    with pytest.raises(ValueError, match="3 logits but 2 label_names"):
        ClassificationServing(exported["model"], make_packer(str(vocab)), str(vocab),
                              ["a", "b"], text_b=False)
    with pytest.raises(ValueError, match="3 logits but a regression needs 1"):
        ClassificationServing(exported["model"], make_packer(str(vocab)), str(vocab),
                              None, text_b=False)


# Issue 13 item 1: a scalar string used to segfault the process (FastBertTokenizer on rank 0),
# a [2, 3] batch silently gave 2 predictions. Each case must raise InvalidArgumentError, and
# the process must go on answering.
BAD_INPUT_SCRIPT = r"""
import json, sys
import tensorflow as tf
import tensorflow_text

pair = tf.saved_model.load(sys.argv[1]).signatures
single = tf.saved_model.load(sys.argv[2]).signatures
example = tf.train.Example(features=tf.train.Features(feature={
    k: tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"the movie"]))
    for k in ("text_a", "text_b")})).SerializeToString()
grid = [["a", "b", "c"], ["d", "e", "f"]]
cases = {
    "scalar": lambda: single["serving_default"](text_a=tf.constant("hi")),
    "pair_scalar": lambda: pair["serving_default"](text_a=tf.constant("hi"),
                                                   text_b=tf.constant("there")),
    "matrix": lambda: single["serving_default"](text_a=tf.constant(grid)),
    "pair_matrix": lambda: pair["serving_default"](text_a=tf.constant(grid),
                                                   text_b=tf.constant(grid)),
    "uneven_pair": lambda: pair["serving_default"](text_a=tf.constant(["a", "b"]),
                                                   text_b=tf.constant(["c"])),
    "classify_scalar": lambda: pair["classify"](inputs=tf.constant(example)),
}
out = {}
for name, call in cases.items():
    try:
        result = call()
        out[name] = "answered " + json.dumps({k: v.shape.as_list() for k, v in result.items()})
    except tf.errors.InvalidArgumentError as e:
        out[name] = "InvalidArgumentError: " + " ".join(e.message.split())
good = pair["serving_default"](text_a=tf.constant(["the movie"]), text_b=tf.constant(["good"]))
out["after"] = good["probabilities"].shape.as_list()
print("RESULT" + json.dumps(out))
"""


def test_bad_request_shapes_answer_invalid_argument_in_a_fresh_process(exported):
    proc = run_code(BAD_INPUT_SCRIPT, exported["pair_dir"], exported["single_dir"], check=False,
                    CUDA_VISIBLE_DEVICES="")
    # Exit code 0: the process survived every bad request (a segfault is -11 / 139).
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT")][-1]
    result = json.loads(line[len("RESULT"):])
    for case in ("scalar", "pair_scalar", "matrix", "pair_matrix"):
        assert result[case].startswith("InvalidArgumentError"), (case, result[case])
        assert "must be a batch of strings, shape [batch]" in result[case], result[case]
    assert "text_a" in result["scalar"] and "inputs" in result["classify_scalar"]
    assert "same number of texts" in result["uneven_pair"], result["uneven_pair"]
    assert result["after"] == [1, len(LABELS)]


def test_regression_export_serves_one_score(exported, tmp_path):
    """A one-output model: serving_default answers `score`, `regress` (TF Serving's Regress
    API, method tensorflow/serving/regress) answers `outputs`, both equal to the Keras logit."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text(exported["vocab_text"], encoding="utf-8")
    keras.utils.set_random_seed(11)
    model = SequenceClassifier(untrained_bert_backbone("bert_tiny", vocab_size=len(VOCAB)),
                               num_classes=1)
    packer = make_packer(str(vocab))
    path = export.export(ClassificationServing(model, packer, str(vocab), None, text_b=True),
                         str(tmp_path / "exports"), "similarity")
    texts_a, texts_b = [a for a, _ in PAIRS], [b for _, b in PAIRS]
    inputs = packer.encode_numpy(texts_a, texts_b)
    expected = model({k: tf.constant(v) for k, v in inputs.items()}, training=False)["logits"]
    code = ("import json, sys, tensorflow as tf, tensorflow_text\n"
            "s = tf.saved_model.load(sys.argv[1]).signatures\n"
            "a, b = json.loads(sys.argv[2])\n"
            "ex = [tf.train.Example(features=tf.train.Features(feature={k: tf.train.Feature(\n"
            "      bytes_list=tf.train.BytesList(value=[v.encode()])) for k, v in\n"
            "      (('text_a', x), ('text_b', y))})).SerializeToString() for x, y in zip(a, b)]\n"
            "d = s['serving_default'](text_a=tf.constant(a), text_b=tf.constant(b))\n"
            "r = s['regress'](inputs=tf.constant(ex))\n"
            "print('RESULT' + json.dumps([sorted(d), d['score'].numpy().tolist(),\n"
            "                             r['outputs'].numpy().tolist(), 'classify' in s]))\n")
    proc = run_code(code, path, json.dumps([texts_a, texts_b]), CUDA_VISIBLE_DEVICES="")
    keys, score, outputs, has_classify = json.loads(
        [l for l in proc.stdout.splitlines() if l.startswith("RESULT")][-1][len("RESULT"):])
    assert keys == ["score"] and not has_classify
    np.testing.assert_allclose(score, expected.numpy()[:, 0], atol=1e-5)
    np.testing.assert_allclose(outputs, expected.numpy()[:, 0], atol=1e-5)
    with open(os.path.join(path, "assets.extra", "garden_export.json")) as f:
        meta = json.load(f)
    assert meta["task"] == "regression" and "label_names" not in meta
    assert meta["signatures"]["regress"] == "tensorflow/serving/regress"
    from tensorflow.core.protobuf import saved_model_pb2
    saved = saved_model_pb2.SavedModel.FromString(
        open(os.path.join(path, "saved_model.pb"), "rb").read())
    assert saved.meta_graphs[0].signature_def["regress"].method_name == \
        "tensorflow/serving/regress"


def _inspect(path):
    return run_tool("garden.export", path, check=False)  # `python -m`, forked (testing.py)


def test_inspect_command_reports_the_export(exported):
    """`python -m garden.export EXPORT_DIR` (README, BUILD.md): the op report and warmup requests
    of a version directory, and one line naming the version to pass for a model directory."""
    proc = _inspect(exported["pair_dir"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["ok"] and report["tf_text_ops"] == ["FastBertNormalize",
                                                      "FastWordpieceTokenizeWithOffsets",
                                                      "RegexSplitWithOffsets"]
    assert [r["signature_name"] for r in report["warmup_requests"]] == (
        ["serving_default"] * (len(WARMUP) + 1) + ["serving_ids"])
    assert report["compute_dtype"] == "float32"
    # The model directory instead of a version (issue 13 item 8): one line naming the newest
    # version to pass, no traceback.
    model_dir = os.path.dirname(exported["pair_dir"])
    proc = _inspect(model_dir)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"{model_dir} is not a SavedModel version directory" in proc.stderr
    assert f"pass {os.path.join(model_dir, '2')}" in proc.stderr
