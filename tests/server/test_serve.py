"""`python -m garden.serve` started as a real process on a loopback port and checked over HTTP
against TF Serving's REST contract (docs/tasks.md, "Serving: garden.serve"): status,
metadata, :predict in row and columnar formats, :classify, :regress, /versions/N, /labels/L,
b64 in and `_bytes` out, errors with their codes, a version appearing while serving, warmup
replay; then a bounded load test with malformed requests mixed in.

Exports: two versions of a tiny BERT sentence classifier (different weights, so that routing to
a version shows in the numbers) and a hand-made ServingModule with
string / `_bytes` / numeric outputs, an output whose first dimension is not the batch and a
tf.Example regression (what other task kinds' exports may hold). Expected answers come from the Keras models in this
process.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import statistics
import threading
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from text import tokenizers
from garden.models.bert.presets import untrained_bert_backbone
from garden.models.classification import SequenceClassifier
from garden.serving import export
from garden.serving.base import PREDICT, REGRESS, ServingModule
from garden.serving.classification import ClassificationServing
from garden.server.server_config import ConfigError, parse_model_config
from garden.serving.text import TextPacker
from serve_testing import Client, example_regression, served, write_vocab

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
         "the", "movie", "was", "good", "bad", "great", "plot", "##s", "not", ".", "!"]
LABELS = ["negative", "neutral", "positive"]
MAX_LEN = 12
TEXTS = ["The movie was good.", "the plots were bad", "not great !", ""]


class EchoModule(ServingModule):
    """An export that is not a text classifier (written by the same exporter): strings out,
    `_bytes` out, numbers in and out, an output whose first dimension is not the batch, and a
    tf.Example regression."""

    task = "echo"

    def signatures(self):
        text = tf.TensorSpec([None], tf.string, name="text")

        @tf.function(input_signature=[text])
        def echo(text):
            return {"echo": text, "echo_bytes": text,
                    "length": tf.strings.length(text, unit="UTF8_CHAR")}

        @tf.function(input_signature=[text])
        def summary(text):
            return {"count": tf.reshape(tf.size(text), [1]), "texts": text}

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x"),
                                      tf.TensorSpec([None], tf.int64, name="k")])
        def scale(x, k):
            return {"y": x * tf.cast(k, tf.float32)[:, None]}

        regress = example_regression()
        self.fns = [echo, summary, scale, regress]  # saved with the module
        return {"serving_default": (echo.get_concrete_function(), PREDICT),
                "summary": (summary.get_concrete_function(), PREDICT),
                "scale": (scale.get_concrete_function(), PREDICT),
                "regress": (regress.get_concrete_function(), REGRESS)}

    def warmup_requests(self):
        return [("serving_default", {"text": np.array([b"warm", b"up"], dtype=object)})]


class BadWarmupEcho(EchoModule):
    """Its warmup request is a single string where the signature takes a batch: replaying it
    fails, so this version must never turn AVAILABLE."""

    def warmup_requests(self):
        return [("serving_default", {"text": np.array(b"not a batch", dtype=object)})]


def _packer(vocab):
    return TextPacker(tokenizers.load_tokenizer("wordpiece", vocab, lower_case=True), MAX_LEN)


def _keras(model, vocab, texts_a, texts_b=None):
    inputs = _packer(vocab).encode_numpy(texts_a, texts_b)
    logits = model({k: tf.constant(v) for k, v in inputs.items()}, training=False)["logits"]
    return inputs, tf.cast(logits, tf.float32).numpy()


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    vocab = write_vocab(root, VOCAB)
    base = str(root / "exports")
    expected = {}
    for version, seed in ((1, 7), (2, 8)):
        keras.utils.set_random_seed(seed)
        model = SequenceClassifier(untrained_bert_backbone("bert_tiny", vocab_size=len(VOCAB)),
                                   num_classes=len(LABELS))
        export.export(ClassificationServing(model, _packer(vocab), vocab, LABELS, text_b=False),
                      base, "sentiment")
        ids, logits = _keras(model, vocab, TEXTS)
        expected[version] = {"probabilities": tf.nn.softmax(logits).numpy(), "ids": ids}
    export.export(EchoModule(), base, "echo")
    export.export(BadWarmupEcho(), base, "echo")
    config = str(root / "models.config")
    with open(config, "w", encoding="utf-8") as f:
        f.write(f"""
model_config_list {{
  config {{
    name: "sentiment"  base_path: "{base}/sentiment"  model_platform: "tensorflow"
    model_version_policy {{ all {{}} }}
    version_labels {{ key: "stable" value: 1 }}
    version_labels {{ key: "canary" value: 2 }}
  }}
  config {{ name: "echo"  base_path: "{base}/echo" }}
}}
""")
    return {"root": root, "base": base, "config": config, "expected": expected}


@pytest.fixture(scope="module")
def server(exports):
    yield from served(exports["config"], exports["root"], 0.5)


@pytest.fixture()
def client(server):
    c = Client(server)
    yield c
    c.close()


def _json_error(response, status, *fragments):
    code, content_type, body = response
    assert code == status, body
    assert content_type == "application/json"
    assert set(body) == {"error"}, body
    for fragment in fragments:
        assert fragment in body["error"], body["error"]


def test_status_versions_labels_and_case(client):
    code, content_type, body = client.get("/v1/models/sentiment")
    assert (code, content_type) == (200, "application/json")
    assert body == {"model_version_status": [
        {"version": v, "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        for v in ("2", "1")]}
    assert client.get("/v1/models/sentiment/versions/1")[2]["model_version_status"][0][
        "version"] == "1"
    assert client.get("/v1/models/sentiment/labels/stable")[2]["model_version_status"][0][
        "version"] == "1"
    assert client.get("/V1/MODELS/sentiment/LABELS/canary")[2]["model_version_status"][0][
        "version"] == "2"
    _json_error(client.get("/v1/models"), 400, "Missing model name in request.")
    _json_error(client.get("/v1/models/nope"), 404, "Could not find any versions of model nope")
    _json_error(client.get("/v1/models/sentiment/versions/9"), 404, "Could not find version 9")
    _json_error(client.get("/v1/models/sentiment/labels/beta"), 400,
                "Unrecognized servable version label: beta")
    _json_error(client.get("/v1/models/sentiment/versions/1/labels/stable"), 400,
                "Malformed request")
    _json_error(client.get("/healthz"), 404, "/v1/models/")


def test_metadata(client):
    code, _, body = client.get("/v1/models/sentiment/versions/1/metadata")
    assert code == 200
    assert body["model_spec"] == {"name": "sentiment", "signature_name": "", "version": "1"}
    sigs = body["metadata"]["signature_def"]["signature_def"]
    assert {"serving_default", "serving_ids", "classify"} <= set(sigs)
    text_a = sigs["serving_default"]["inputs"]["text_a"]
    assert text_a["dtype"] == "DT_STRING"
    assert text_a["tensor_shape"] == {"dim": [], "unknown_rank": True}
    assert text_a["name"].startswith("serving_default_text_a")
    assert sigs["serving_default"]["method_name"] == "tensorflow/serving/predict"
    assert sigs["serving_default"]["defaults"] == {}
    assert sigs["classify"]["method_name"] == "tensorflow/serving/classify"
    token_ids = sigs["serving_ids"]["inputs"]["token_ids"]
    assert token_ids["dtype"] == "DT_INT32"
    assert token_ids["tensor_shape"] == {"dim": [{"size": "-1", "name": ""}] * 2,
                                         "unknown_rank": False}
    assert sigs["serving_default"]["outputs"]["label"]["dtype"] == "DT_STRING"
    latest = client.get("/v1/models/sentiment/metadata")[2]
    assert latest["model_spec"]["version"] == "2"


def test_predict_row_and_columnar_per_version(client, exports):
    expected = exports["expected"]
    for path, version in (("/v1/models/sentiment:predict", 2),
                          ("/v1/models/sentiment/versions/1:predict", 1),
                          ("/v1/models/sentiment/labels/canary:predict", 2),
                          ("/v1/models/Sentiment/Labels/stable:PREDICT".replace("Sentiment",
                                                                                "sentiment"), 1)):
        code, content_type, body = client.post(path, {"instances": TEXTS})
        assert (code, content_type) == (200, "application/json"), body
        rows = body["predictions"]
        assert len(rows) == len(TEXTS)
        assert set(rows[0]) == {"probabilities", "label", "label_id", "logits"}
        np.testing.assert_allclose([r["probabilities"] for r in rows],
                                   expected[version]["probabilities"], atol=1e-5)
        assert [r["label"] for r in rows] == [
            LABELS[i] for i in expected[version]["probabilities"].argmax(-1)]
    # The two versions differ, so the routing above is visible in the numbers.
    assert np.abs(expected[1]["probabilities"] - expected[2]["probabilities"]).max() > 1e-3

    # Row format with named objects; columnar with an object and with a bare value.
    named = client.post("/v1/models/sentiment:predict",
                        {"instances": [{"text_a": t} for t in TEXTS]})[2]["predictions"]
    columnar = client.post("/v1/models/sentiment:predict", {"inputs": {"text_a": TEXTS}})[2]
    bare = client.post("/v1/models/sentiment:predict", {"inputs": TEXTS})[2]
    for outputs in (columnar["outputs"], bare["outputs"]):
        np.testing.assert_allclose(outputs["probabilities"], expected[2]["probabilities"],
                                   atol=1e-5)
        assert outputs["label_id"] == expected[2]["probabilities"].argmax(-1).tolist()
    np.testing.assert_allclose([r["probabilities"] for r in named],
                               expected[2]["probabilities"], atol=1e-5)


def test_predict_ids_signature_and_b64(client, exports):
    ids = exports["expected"][2]["ids"]
    instances = [{k: v[i].tolist() for k, v in ids.items()} for i in range(len(TEXTS))]
    body = client.post("/v1/models/sentiment:predict",
                       {"signature_name": "serving_ids", "instances": instances})[2]
    np.testing.assert_allclose([r["probabilities"] for r in body["predictions"]],
                               exports["expected"][2]["probabilities"], atol=1e-5)
    encoded = [{"b64": base64.b64encode(t.encode()).decode()} for t in TEXTS]
    body = client.post("/v1/models/sentiment:predict", {"instances": encoded})[2]
    np.testing.assert_allclose([r["probabilities"] for r in body["predictions"]],
                               exports["expected"][2]["probabilities"], atol=1e-5)


def test_string_bytes_and_numeric_outputs(client):
    texts = ["héllo", "a\u00e9b", ""]
    code, _, body = client.post("/v1/models/echo:predict", {"instances": texts})
    assert code == 200, body
    assert [r["echo"] for r in body["predictions"]] == texts
    assert [r["echo_bytes"] for r in body["predictions"]] == [
        {"b64": base64.b64encode(t.encode()).decode()} for t in texts]
    assert [r["length"] for r in body["predictions"]] == [len(t) for t in texts]
    # Binary input (not UTF-8) comes back byte for byte through the _bytes output.
    raw = bytes([0, 255, 128, 10])
    body = client.post("/v1/models/echo:predict",
                       {"inputs": [{"b64": base64.b64encode(raw).decode()}]})[2]
    assert base64.b64decode(body["outputs"]["echo_bytes"][0]["b64"]) == raw
    # An output whose first dimension is not the batch: row format refuses, columnar answers.
    _json_error(client.post("/v1/models/echo:predict",
                            {"signature_name": "summary", "instances": ["a", "b"]}), 400,
                "inconsistent batch size")
    body = client.post("/v1/models/echo:predict",
                       {"signature_name": "summary", "inputs": ["a", "b"]})[2]
    assert body == {"outputs": {"count": [2], "texts": ["a", "b"]}}
    # Numbers: float32 written as the shortest decimal; NaN and Infinity read and written.
    body = client.post("/v1/models/echo:predict", (
        '{"signature_name": "scale", "instances": [{"x": [0.1, NaN], "k": 2}, '
        '{"x": [Infinity, 3], "k": 1}]}'))[2]
    assert body["predictions"][0][0] == 0.2 and np.isnan(body["predictions"][0][1])
    assert body["predictions"][1] == [float("inf"), 3.0]
    _json_error(client.post("/v1/models/echo:predict",
                            {"signature_name": "scale", "inputs": {"x": [[1, 2]], "k": [1.5]}}),
                400, "is not of expected type: DT_INT64")


def test_classify_and_regress(client, exports):
    expected = exports["expected"]
    code, _, body = client.post("/v1/models/sentiment:classify", {
        "signature_name": "classify", "examples": [{"text_a": t} for t in TEXTS]})
    assert code == 200, body
    results = body["results"]
    assert [[label for label, _ in r] for r in results] == [LABELS] * len(TEXTS)
    np.testing.assert_allclose([[s for _, s in r] for r in results],
                               expected[2]["probabilities"], atol=1e-5)
    # /versions/1 classifies with version 1's weights.
    results = client.post("/v1/models/sentiment/versions/1:classify", {
        "signature_name": "classify", "examples": [{"text_a": t} for t in TEXTS]})[2]["results"]
    np.testing.assert_allclose([[s for _, s in r] for r in results],
                               expected[1]["probabilities"], atol=1e-5)
    # Regress: the context's features join every example; an example's own feature wins.
    code, _, body = client.post("/v1/models/echo:regress", {
        "signature_name": "regress", "context": {"w": 3},
        "examples": [{"x": [1.0, 2.0]}, {"x": [0.5, 1.5], "w": 1}]})
    assert code == 200, body
    assert body == {"results": [12.0, 2.5]}
    # Integers where the graph parses floats: the graph's InvalidArgument, as a 400.
    _json_error(client.post("/v1/models/echo:regress", {
        "signature_name": "regress", "examples": [{"x": [1, 2]}]}), 400, "Key: x")
    # serving_default is a predict signature: TF Serving's method-name check.
    _json_error(client.post("/v1/models/sentiment:classify",
                            {"examples": [{"text_a": "good"}]}), 400,
                "Expected classification signature method_name to be "
                "tensorflow/serving/classify. Was: tensorflow/serving/predict", "['classify']")
    _json_error(client.post("/v1/models/sentiment:regress",
                            {"signature_name": "classify", "examples": [{"text_a": "x"}]}), 400,
                "Expected regression signature method_name")
    _json_error(client.post("/v1/models/sentiment:classify",
                            {"signature_name": "classify", "instances": ["x"]}), 400,
                "key 'examples' is expected and was not found")
    _json_error(client.post("/v1/models/sentiment:classify",
                            {"signature_name": "classify", "examples": [{"text_a": [1, "x"]}]}),
                400, "Unexpected element type in feature: text_a")


BAD_REQUESTS = [
    # (path, body, status, fragment)
    ("/v1/models/sentiment:predict", {"instances": ["a"], "inputs": ["a"]}, 400,
     "expecting only one of 'inputs' or 'instances'"),
    ("/v1/models/sentiment:predict", {"signature_name": "serving_default"}, 400,
     "Missing 'inputs' or 'instances' key"),
    ("/v1/models/sentiment:predict", "{not json", 400, "JSON Parse error"),
    ("/v1/models/sentiment:predict", "", 400, "The document is empty"),
    ("/v1/models/sentiment:predict", [1, 2], 400, "Is not object"),
    ("/v1/models/sentiment:predict", {"instances": []}, 400, "No values in 'instances' array"),
    ("/v1/models/sentiment:predict", {"instances": "a"}, 400, "to be an list/array"),
    ("/v1/models/sentiment:predict", {"instances": [3]}, 400, "is not of expected type: DT_STRING"),
    ("/v1/models/sentiment:predict", {"instances": ["a", 1]}, 400,
     "JSON Value: 1 Type: Number is not of expected type: DT_STRING"),
    # numpy would read [1, true] as [1, 1]
    ("/v1/models/echo:predict", {"signature_name": "scale", "inputs": {"x": [[1, 2], [3, 4]],
                                                                       "k": [1, True]}}, 400,
     "Type: True is not of expected type: DT_INT64"),
    ("/v1/models/sentiment:predict", {"instances": [{"text_b": "x"}]}, 400,
     "does not have named input: text_b"),
    ("/v1/models/sentiment:predict", {"instances": [["a", "b"], ["c"]]}, 400,
     "Expecting shape [2] but got: [1]"),
    ("/v1/models/sentiment:predict", {"instances": [{"b64": "%%%"}]}, 400,
     "Unable to base64 decode"),
    # Would crash or mislead the signature: the graph's own InvalidArgument comes back.
    ("/v1/models/sentiment:predict", {"inputs": {"text_a": "one string"}}, 400,
     "text_a must be a batch of strings, shape [batch]"),
    ("/v1/models/sentiment:predict", {"instances": [["a", "b"]]}, 400,
     "must be a batch of strings"),
    ("/v1/models/sentiment:predict", {"signature_name": "serving_ids",
                                      "inputs": {"token_ids": [1, 2], "segment_ids": [0, 0],
                                                 "padding_mask": [1, 1]}}, 400,
     "signature serving_ids: input padding_mask must have shape [?, ?], got [2]"),
    ("/v1/models/sentiment:predict", {"signature_name": "serving_ids",
                                      "instances": [{"token_ids": [1.5], "segment_ids": [0],
                                                     "padding_mask": [1]}]}, 400,
     "is not of expected type: DT_INT32"),
    ("/v1/models/sentiment:predict", {"signature_name": 3, "instances": ["a"]}, 400,
     "'signature_name' key must be a string value."),
    ("/v1/models/sentiment:predict", {"signature_name": "nope", "instances": ["a"]}, 400,
     "Serving signature name: \"nope\" not found"),
    ("/v1/models/nope:predict", {"instances": ["a"]}, 404,
     "Servable not found for request: Latest(nope)"),
    ("/v1/models/sentiment/versions/7:predict", {"instances": ["a"]}, 404,
     "Servable not found for request: Specific(sentiment, 7)"),
    ("/v1/models/sentiment/labels/beta:predict", {"instances": ["a"]}, 400,
     "Unrecognized servable version label: beta"),
    ("/v1/models/sentiment:explain", {"instances": ["a"]}, 400, "Malformed request"),
]


@pytest.mark.parametrize("path,body,status,fragment", BAD_REQUESTS,
                         ids=[f"{i}" for i in range(len(BAD_REQUESTS))])
def test_bad_requests(client, path, body, status, fragment):
    _json_error(client.post(path, body), status, fragment)


def test_get_on_a_verb_is_malformed(client):
    _json_error(client.get("/v1/models/sentiment:predict"), 400, "Malformed request: GET")


def test_new_version_is_served_while_running_and_warmup_replayed(server, client, exports):
    log = server.log()
    # TF Serving's thread-pool flags reach TensorFlow before the models load.
    assert "TensorFlow thread pools: intra-op default, inter-op 1" in log, log[-3000:]
    # Warmup: each sentiment version replayed its 4 records (2 texts, their batch, the ids).
    for version in (1, 2):
        path = os.path.join(exports["base"], "sentiment", str(version), "assets.extra",
                            "tf_serving_warmup_requests")
        assert (f"Finished reading warmup data for model at {path}. Number of warmup records "
                f"read: 4.") in log, log[-3000:]
    assert "echo/1/assets.extra/tf_serving_warmup_requests. Number of warmup records read: 1." \
        in log
    # Echo's version 2 fails its warmup (the request really runs): it ends in END with the
    # error, and version 1, next under the latest-version policy, is served instead.
    status = client.get("/v1/models/echo")[2]["model_version_status"]
    assert [(s["version"], s["state"], s["status"]["error_code"]) for s in status] == [
        ("2", "END", "UNKNOWN"), ("1", "AVAILABLE", "OK")], status
    assert "warmup record 0 (serving_default) failed" in status[0]["status"]["error_message"]
    assert "input text must have shape [?], got []" in status[0]["status"]["error_message"]
    assert client.get("/v1/models/echo/metadata")[2]["model_spec"]["version"] == "1"
    # A new version appears the way the exporter writes one: built aside, renamed into place.
    model_dir = os.path.join(exports["base"], "sentiment")
    shutil.copytree(os.path.join(model_dir, "1"), os.path.join(model_dir, ".tmp-3"))
    os.rename(os.path.join(model_dir, ".tmp-3"), os.path.join(model_dir, "3"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = {s["version"]: s["state"]
                  for s in client.get("/v1/models/sentiment")[2]["model_version_status"]}
        if states.get("3") == "AVAILABLE":
            break
        time.sleep(0.25)
    assert states == {"3": "AVAILABLE", "2": "AVAILABLE", "1": "AVAILABLE"}, states
    # Latest is now version 3 (a copy of version 1's weights).
    body = client.post("/v1/models/sentiment:predict", {"instances": TEXTS})[2]
    np.testing.assert_allclose([r["probabilities"] for r in body["predictions"]],
                               exports["expected"][1]["probabilities"], atol=1e-5)
    # A version removed from disk is unloaded (state END) and no longer served.
    shutil.rmtree(os.path.join(model_dir, "3"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = client.get("/v1/models/sentiment/versions/3")[2]["model_version_status"][0]
        if status["state"] == "END":
            break
        time.sleep(0.25)
    assert status["state"] == "END", status
    body = client.post("/v1/models/sentiment:predict", {"instances": TEXTS})[2]
    np.testing.assert_allclose([r["probabilities"] for r in body["predictions"]],
                               exports["expected"][2]["probabilities"], atol=1e-5)


MALFORMED = [(b"{oops", 400), (json.dumps({"instances": [1, 2]}).encode(), 400),
             (json.dumps({"inputs": {"text_a": "x"}}).encode(), 400),
             (json.dumps({"instances": ["a"], "signature_name": "none"}).encode(), 400)]


def test_load_concurrent_clients_with_malformed_requests(server, exports):
    """8 clients for 2 s on keep-alive connections; every 4th request is malformed. Good
    requests: zero errors and the right answers; bad ones: each a 4xx; the server stays up.
    (2 s, not 5: some hundreds of requests under -n 2 on 2 cores, every client answered.)"""
    clients, seconds = 8, 2.0
    good_body = json.dumps({"instances": TEXTS[:2]}).encode()
    expected = exports["expected"][2]["probabilities"][:2]
    results = [dict(latencies=[], good_errors=[], bad_codes=[], wrong=0) for _ in range(clients)]
    stop_at = time.monotonic() + seconds

    def run(i):
        c, out, n = Client(server), results[i], 0
        try:
            while time.monotonic() < stop_at:
                if n % 4 == 3:
                    body, _ = MALFORMED[(n // 4 + i) % len(MALFORMED)]
                    code, _, _ = c.post("/v1/models/sentiment:predict", body)
                    out["bad_codes"].append(code)
                else:
                    started = time.perf_counter()
                    code, _, answer = c.post("/v1/models/sentiment:predict", good_body)
                    out["latencies"].append(time.perf_counter() - started)
                    if code != 200:
                        out["good_errors"].append((code, answer))
                    elif not np.allclose([r["probabilities"] for r in answer["predictions"]],
                                         expected, atol=1e-5):
                        out["wrong"] += 1
                n += 1
        except Exception as e:  # a dropped connection counts as an error of a good request
            out["good_errors"].append(repr(e))
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 120)
    latencies = sorted(x for r in results for x in r["latencies"])
    bad = [code for r in results for code in r["bad_codes"]]
    errors = [e for r in results for e in r["good_errors"]]
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    print(f"\nload: {clients} clients x {seconds:.0f} s: {len(latencies)} good requests "
          f"({len(latencies) / seconds:.1f}/s), {len(bad)} malformed; latency p50 "
          f"{p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms")
    assert not errors, errors[:5]
    assert sum(r["wrong"] for r in results) == 0
    assert len(latencies) >= clients  # every client got answers
    assert bad and all(400 <= code < 500 for code in bad), sorted(set(bad))
    after = Client(server)
    assert after.get("/v1/models/sentiment/versions/2")[0] == 200  # still up
    after.close()


def test_model_config_file_errors_name_the_file_and_line(tmp_path):
    configs = parse_model_config(
        'model_config_list { config { name: "a" base_path: "/x" '
        'model_version_policy { specific { versions: 3 versions: 1 } } '
        'version_labels { key: "s" value: 3 } } '
        'config { name: "b" base_path: "/y" model_version_policy { latest { num_versions: 2 } } } }')
    assert configs[0].policy == "specific" and configs[0].versions == (1, 3)
    assert configs[0].label_map == {"s": 3}
    assert configs[0].wanted([1, 2, 3, 4]) == [1, 3]
    assert configs[1].wanted([1, 2, 3, 4]) == [3, 4]
    with pytest.raises(ConfigError, match=r"models.config: 2:\d+ : .*no field named "
                                          r"\"model_versoin_policy\""):
        parse_model_config('model_config_list { config { name: "a" base_path: "/x"\n'
                           '  model_versoin_policy { all {} } } }', "models.config")
    with pytest.raises(ConfigError, match="version_labels .* point at versions the policy does "
                                          "not serve"):
        parse_model_config('model_config_list { config { name: "a" base_path: "/x" '
                           'model_version_policy { specific { versions: 1 } } '
                           'version_labels { key: "s" value: 2 } } }')
    with pytest.raises(ConfigError, match="appear more than once"):
        parse_model_config('model_config_list { config { name: "a" base_path: "/x" } '
                           'config { name: "a" base_path: "/y" } }')
    # Fields of the model server's proto that garden.serve does not act on are refused, not
    # dropped: a model's logging_config, a custom_model_config instead of the list.
    with pytest.raises(ConfigError, match="models.config: config 1: logging_config of model 'a'"):
        parse_model_config('model_config_list { config { name: "a" base_path: "/x" '
                           'logging_config { sampling_config { sampling_rate: 0.5 } } } }',
                           "models.config")
    with pytest.raises(ConfigError, match="models.config: custom_model_config"):
        parse_model_config('custom_model_config { }', "models.config")
