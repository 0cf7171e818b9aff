"""garden.serve's gRPC API (TF Serving's PredictionService / ModelService) over loopback with the
official stubs of tensorflow-serving-api, against a server started in a fresh process that
serves REST from the same loaded models: every gRPC answer is compared with the REST answer of
the same server for the same input (and the classifier's with the Keras model); malformed
requests answer their status codes and the server keeps answering; a short mixed REST + gRPC
load runs without an error.

Exports (tiny, one-layer BERTs, random weights): a raw-text sentence classifier (with its
classify signature), raw-text question answering, a raw-text word tagger, and a hand-made
module with a tf.Example regression and a numeric predict signature.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

import grpc
import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2,
                                     get_model_status_pb2, inference_pb2, model_pb2,
                                     model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc, regression_pb2)

from text import tokenizers
from garden.models.bert.presets import untrained_bert_backbone
from garden.models.classification import SequenceClassifier
from garden.models.question_answering import SpanExtractor
from garden.models.tagging import TokenTagger
from garden.serving import export
from garden.server.grpc_server import CLIENT_OPTIONS
from garden.serving.base import PREDICT, REGRESS, ServingModule
from garden.serving.classification import ClassificationServing
from garden.serving.question_answering import QuestionAnsweringServing
from garden.server.server_json import to_json_value
from garden.serving.tagging import TaggingServing, entities_of
from garden.serving.text import TextPacker
from serve_testing import Client, example_regression, served, write_vocab
from testing import REPO_ROOT

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie", "was", "good", "bad",
         "great", "plot", "##s", "not", ".", "!", "?", "who", "where", "is", "in", "paris",
         "london", "anna", "lives", "works", "and", "city", "a", "of"]
LABELS = ["negative", "neutral", "positive"]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TEXTS = ["The movie was good.", "the plots were bad", "not great !", ""]
QUESTIONS = ["who lives in paris ?", "where is the city ?", "what ?"]
CONTEXTS = ["Anna lives in Paris and works in London . " * 3,
            "the city of london is great . the movie was not bad .", ""]
SENTENCES = ["Anna lives in Paris", "the movie was good . London and Paris !", "",
             "  who  works\tin London ?"]


class ScoreModule(ServingModule):
    """A regression over tf.Examples (x: 2 floats, w: int weight) and a numeric predict."""

    task = "score"

    def signatures(self):
        regress = example_regression()

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x"),
                                      tf.TensorSpec([None], tf.int64, name="k")])
        def scale(x, k):
            return {"y": x * tf.cast(k, tf.float32)[:, None], "k2": k * 2}

        self.fns = [regress, scale]
        return {"serving_default": (scale.get_concrete_function(), PREDICT),
                "regress": (regress.get_concrete_function(), REGRESS)}


def _packer(vocab, max_len):
    return TextPacker(tokenizers.load_tokenizer("wordpiece", vocab, lower_case=True), max_len)


def _backbone():
    return untrained_bert_backbone("bert_tiny", vocab_size=len(VOCAB), num_layers=1,
                                     dropout=0.0)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc")
    vocab = write_vocab(root, VOCAB)
    base = str(root / "exports")
    keras.utils.set_random_seed(11)
    classifier = SequenceClassifier(_backbone(), num_classes=len(LABELS))
    packer = _packer(vocab, 12)
    export.export(ClassificationServing(classifier, packer, vocab, LABELS, text_b=False,
                                        warmup_texts=["good"]), base, "sentiment")
    inputs = packer.encode_numpy(TEXTS)
    logits = classifier({k: tf.constant(v) for k, v in inputs.items()}, training=False)["logits"]
    probabilities = tf.nn.softmax(tf.cast(logits, tf.float32)).numpy()
    export.export(QuestionAnsweringServing(SpanExtractor(_backbone()), _packer(vocab, 24), vocab,
                                           doc_stride=4, max_query_length=6,
                                           warmup=[("who ?", "anna")]), base, "qa")
    export.export(TaggingServing(TokenTagger(_backbone(), len(TAGS)), _packer(vocab, 8), 1, vocab,
                                 TAGS, warmup_sentences=["anna"]), base, "tagger")
    export.export(ScoreModule(), base, "score")
    config = str(root / "models.config")
    with open(config, "w", encoding="utf-8") as f:
        f.write("model_config_list {\n" + "".join(
            f'  config {{ name: "{n}" base_path: "{base}/{n}" model_platform: "tensorflow"'
            f'{extra} }}\n' for n, extra in (
                ("sentiment", ' version_labels { key: "stable" value: 1 }'), ("qa", ""),
                ("tagger", ""), ("score", ""))) + "}\n")
    return {"root": root, "config": config, "probabilities": probabilities}


@pytest.fixture(scope="module")
def server(exports):
    yield from served(exports["config"], exports["root"], 0)


@pytest.fixture(scope="module")
def channel(server):
    assert server.grpc_port, server.log()[-3000:]
    assert f"Running gRPC ModelServer at {server.host}:{server.grpc_port} ..." in server.log()
    with grpc.insecure_channel(f"{server.host}:{server.grpc_port}",
                               options=CLIENT_OPTIONS) as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel):
    return prediction_service_pb2_grpc.PredictionServiceStub(channel)


@pytest.fixture(scope="module")
def model_stub(channel):
    return model_service_pb2_grpc.ModelServiceStub(channel)


@pytest.fixture()
def client(server):
    c = Client(server)
    yield c
    c.close()


def _spec(name, signature="", version=None, label=None):
    spec = model_pb2.ModelSpec(name=name, signature_name=signature)
    if version is not None:
        spec.version.value = version
    if label is not None:
        spec.version_label = label
    return spec


def _predict(stub, name, inputs, signature="", **spec):
    request = predict_pb2.PredictRequest(model_spec=_spec(name, signature, **spec))
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(value if hasattr(value, "tensor_shape")
                                     else tf.make_tensor_proto(value))
    return stub.Predict(request, timeout=60)


def _as_json(response) -> dict:
    """gRPC outputs written as the REST API writes them (server_json.to_json_value)."""
    return {k: to_json_value(tf.make_ndarray(v), k) for k, v in response.outputs.items()}


def _same(a, b):
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True), (a, b)


def _rest(client, path, body):
    code, _, answer = client.post(path, body)
    assert code == 200, answer
    return answer


def _status_of(call, *args, **kwargs):
    with pytest.raises(grpc.RpcError) as info:
        call(*args, timeout=60, **kwargs)
    return info.value.code(), info.value.details()


def test_predict_raw_text_classify_equals_rest_and_keras(stub, client, exports):
    response = _predict(stub, "sentiment", {"text_a": TEXTS})
    assert response.model_spec.name == "sentiment"
    assert response.model_spec.version.value == 1
    assert response.model_spec.signature_name == "serving_default"
    got = _as_json(response)
    assert set(got) == {"probabilities", "label", "label_id", "logits"}
    _same(got, _rest(client, "/v1/models/sentiment:predict", {"inputs": {"text_a": TEXTS}})[
        "outputs"])
    np.testing.assert_allclose(got["probabilities"], exports["probabilities"], atol=1e-5)
    assert got["label"] == [LABELS[i] for i in exports["probabilities"].argmax(-1)]
    # output_filter, a version label, the explicit signature name, a version number.
    request = predict_pb2.PredictRequest(model_spec=_spec("sentiment", "serving_default",
                                                          label="stable"))
    request.inputs["text_a"].CopyFrom(tf.make_tensor_proto(TEXTS))
    request.output_filter.append("label")
    response = stub.Predict(request, timeout=60)
    assert list(response.outputs) == ["label"]
    assert response.model_spec.version.value == 1
    assert [x.decode() for x in tf.make_ndarray(response.outputs["label"])] == got["label"]
    by_version = _predict(stub, "sentiment", {"text_a": TEXTS[:1]}, version=1)
    np.testing.assert_array_equal(tf.make_ndarray(by_version.outputs["probabilities"]),
                                  np.float32(got["probabilities"][:1]))


def test_qa_answers_equal_rest(stub, client):
    response = _predict(stub, "qa", {"question": QUESTIONS, "context": CONTEXTS})
    got = _as_json(response)
    assert {"answer", "start", "end", "score", "null_score_diff"} <= set(got)
    _same(got, _rest(client, "/v1/models/qa:predict",
                     {"inputs": {"question": QUESTIONS, "context": CONTEXTS}})["outputs"])
    # The answer is the context's text at its character span (the graph's own contract).
    for answer, start, end, context in zip(got["answer"], got["start"], got["end"], CONTEXTS):
        assert answer == (context[start:end] if start >= 0 else "")


def test_tagged_entities_equal_rest(stub, client):
    response = _predict(stub, "tagger", {"sentences": SENTENCES})
    got = _as_json(response)
    rest = _rest(client, "/v1/models/tagger:predict", {"inputs": {"sentences": SENTENCES}})[
        "outputs"]
    _same(got, rest)
    entities = entities_of({k: tf.make_ndarray(v) for k, v in response.outputs.items()})
    assert entities == entities_of(rest)
    assert got["words"][0][:4] == ["Anna", "lives", "in", "Paris"]
    for sentence, found in zip(SENTENCES, entities):
        for _, text, start, end in found:
            assert sentence[start:end] == text


def _examples(*features):
    out = []
    for feature in features:
        example = tf.train.Example()
        for key, value in feature.items():
            if isinstance(value, str):
                example.features.feature[key].bytes_list.value.append(value.encode())
            elif isinstance(value, list):
                example.features.feature[key].float_list.value.extend(value)
            else:
                example.features.feature[key].int64_list.value.append(value)
        out.append(example)
    return out


def test_classify_and_regress_via_tf_example(stub, client, exports):
    request = classification_pb2.ClassificationRequest(model_spec=_spec("sentiment", "classify"))
    request.input.example_list.examples.extend(_examples(*({"text_a": t} for t in TEXTS)))
    response = stub.Classify(request, timeout=60)
    assert (response.model_spec.name, response.model_spec.version.value,
            response.model_spec.signature_name) == ("sentiment", 1, "classify")
    rows = [[(c.label, c.score) for c in row.classes] for row in response.result.classifications]
    assert [[label for label, _ in row] for row in rows] == [LABELS] * len(TEXTS)
    rest = _rest(client, "/v1/models/sentiment:classify", {
        "signature_name": "classify", "examples": [{"text_a": t} for t in TEXTS]})["results"]
    assert [[label for label, _ in r] for r in rest] == [LABELS] * len(TEXTS)
    np.testing.assert_array_equal(np.float32([[s for _, s in r] for r in rows]),
                                  np.float32([[s for _, s in r] for r in rest]))
    np.testing.assert_allclose([[s for _, s in r] for r in rows], exports["probabilities"],
                               atol=1e-5)

    # Regress: the context's features join every example; an example's own feature wins.
    request = regression_pb2.RegressionRequest(model_spec=_spec("score", "regress"))
    with_context = request.input.example_list_with_context
    with_context.context.CopyFrom(_examples({"w": 3})[0])
    with_context.examples.extend(_examples({"x": [1.0, 2.0]}, {"x": [0.5, 1.5], "w": 1}))
    response = stub.Regress(request, timeout=60)
    assert [r.value for r in response.result.regressions] == [12.0, 2.5]
    assert response.model_spec.signature_name == "regress"
    assert _rest(client, "/v1/models/score:regress", {
        "signature_name": "regress", "context": {"w": 3},
        "examples": [{"x": [1.0, 2.0]}, {"x": [0.5, 1.5], "w": 1}]}) == {"results": [12.0, 2.5]}

    # Classify on serving_default (a predict signature): the REST API's code and message.
    request = classification_pb2.ClassificationRequest(model_spec=_spec("sentiment"))
    request.input.example_list.examples.extend(_examples({"text_a": "good"}))
    code, details = _status_of(stub.Classify, request)
    rest_code, _, rest_body = client.post("/v1/models/sentiment:classify",
                                          {"examples": [{"text_a": "good"}]})
    assert (code, rest_code) == (grpc.StatusCode.INVALID_ARGUMENT, 400)
    assert details == rest_body["error"]
    assert details.startswith("Expected classification signature method_name to be "
                              "tensorflow/serving/classify. Was: tensorflow/serving/predict")
    # No examples; the graph's own error (integers where floats are parsed).
    request = regression_pb2.RegressionRequest(model_spec=_spec("score", "regress"))
    request.input.example_list.SetInParent()
    assert _status_of(stub.Regress, request) == (grpc.StatusCode.INVALID_ARGUMENT,
                                                 "Input is empty.")
    request.input.example_list.examples.extend(_examples({"x": 1}))
    code, details = _status_of(stub.Regress, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "Key: x" in details, details


def test_multi_inference(stub):
    def task(name, signature, method="tensorflow/serving/classify"):
        return inference_pb2.InferenceTask(model_spec=_spec(name, signature), method_name=method)

    request = inference_pb2.MultiInferenceRequest(tasks=[task("sentiment", "classify")])
    request.input.example_list.examples.extend(_examples(*({"text_a": t} for t in TEXTS)))
    response = stub.MultiInference(request, timeout=60)
    single = classification_pb2.ClassificationRequest(model_spec=_spec("sentiment", "classify"))
    single.input.CopyFrom(request.input)
    assert len(response.results) == 1
    result = response.results[0]
    assert result.classification_result == stub.Classify(single, timeout=60).result
    assert (result.model_spec.name, result.model_spec.version.value,
            result.model_spec.signature_name) == ("sentiment", 1, "classify")

    request = inference_pb2.MultiInferenceRequest(tasks=[task("score", "regress",
                                                              "tensorflow/serving/regress")])
    request.input.example_list.examples.extend(_examples({"x": [1.0, 1.0]}))
    assert [r.value for r in stub.MultiInference(request, timeout=60).results[0]
            .regression_result.regressions] == [3.0]

    for tasks, code, fragment in (
            ([task("sentiment", "classify"), task("score", "regress")],
             grpc.StatusCode.INVALID_ARGUMENT, "must access the same model name"),
            ([task("sentiment", "classify"), task("sentiment", "classify")],
             grpc.StatusCode.INVALID_ARGUMENT, "Duplicate evaluation of signature: classify"),
            ([task("sentiment", "nope")], grpc.StatusCode.INVALID_ARGUMENT,
             "Requested signature not found in model graph: nope"),
            ([task("sentiment", "classify", "tensorflow/serving/predict")],
             grpc.StatusCode.UNIMPLEMENTED, "Unsupported signature method_name"),
            ([task("sentiment", "classify", "tensorflow/serving/regress")],
             grpc.StatusCode.INVALID_ARGUMENT, "Expected regression signature method_name"),
            ([], grpc.StatusCode.NOT_FOUND, "Servable not found for request: Latest()")):
        bad = inference_pb2.MultiInferenceRequest(tasks=tasks)
        bad.input.example_list.examples.extend(_examples({"text_a": "x"}))
        got_code, details = _status_of(stub.MultiInference, bad)
        assert got_code == code and fragment in details, (got_code, details)


def test_model_metadata_and_status(stub, model_stub, client):
    request = get_model_metadata_pb2.GetModelMetadataRequest(
        model_spec=_spec("sentiment"), metadata_field=["signature_def"])
    response = stub.GetModelMetadata(request, timeout=60)
    assert (response.model_spec.name, response.model_spec.version.value) == ("sentiment", 1)
    signature_defs = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(signature_defs)
    sigs = signature_defs.signature_def
    assert {"serving_default", "serving_ids", "classify"} <= set(sigs)
    assert sigs["classify"].method_name == "tensorflow/serving/classify"
    assert sigs["serving_ids"].inputs["token_ids"].dtype == tf.int32.as_datatype_enum
    from google.protobuf import json_format
    rest = client.get("/v1/models/sentiment/metadata")[2]["metadata"]["signature_def"][
        "signature_def"]
    assert rest == {k: json_format.MessageToDict(v, preserving_proto_field_name=True,
                                                 always_print_fields_with_no_presence=True)
                    for k, v in sigs.items()}
    request.ClearField("metadata_field")
    assert _status_of(stub.GetModelMetadata, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "GetModelMetadataRequest must specify at least one metadata_field")
    request.metadata_field.append("graph")
    assert _status_of(stub.GetModelMetadata, request)[0] == grpc.StatusCode.INVALID_ARGUMENT

    status = model_stub.GetModelStatus(
        get_model_status_pb2.GetModelStatusRequest(model_spec=_spec("sentiment")), timeout=60)
    State = get_model_status_pb2.ModelVersionStatus.State
    assert [(s.version, s.state, s.status.error_code, s.status.error_message)
            for s in status.model_version_status] == [(1, State.Value("AVAILABLE"), 0, "")]
    assert client.get("/v1/models/sentiment")[2]["model_version_status"] == [
        {"version": "1", "state": "AVAILABLE",
         "status": {"error_code": "OK", "error_message": ""}}]
    labelled = model_stub.GetModelStatus(get_model_status_pb2.GetModelStatusRequest(
        model_spec=_spec("sentiment", label="stable")), timeout=60)
    assert [s.version for s in labelled.model_version_status] == [1]
    for spec, code, message in (
            (_spec("nope"), grpc.StatusCode.NOT_FOUND, "Could not find any versions of model nope"),
            (_spec("sentiment", version=9), grpc.StatusCode.NOT_FOUND,
             "Could not find version 9 of model sentiment")):
        assert _status_of(model_stub.GetModelStatus,
                          get_model_status_pb2.GetModelStatusRequest(model_spec=spec)) == (
            code, message)
    assert _status_of(model_stub.GetModelStatus, get_model_status_pb2.GetModelStatusRequest()) \
        == (grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec")
    from tensorflow_serving.apis import model_management_pb2
    assert _status_of(model_stub.HandleReloadConfigRequest,
                      model_management_pb2.ReloadConfigRequest())[0] == \
        grpc.StatusCode.UNIMPLEMENTED


def _both_version_and_label(channel):
    """A PredictRequest whose ModelSpec holds version 1 and label "stable" on the wire (the
    generated classes cannot build one: the two are a oneof, setting one clears the other)."""
    request = predict_pb2.PredictRequest(model_spec=_spec("sentiment", version=1))
    request.inputs["text_a"].CopyFrom(tf.make_tensor_proto(["good"]))
    raw = request.SerializeToString() + predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(version_label="stable")).SerializeToString()
    merged = predict_pb2.PredictRequest.FromString(raw)
    assert merged.model_spec.WhichOneof("version_choice") == "version_label"  # last one wins
    call = channel.unary_unary("/tensorflow.serving.PredictionService/Predict",
                               request_serializer=None,
                               response_deserializer=predict_pb2.PredictResponse.FromString)
    return _status_of(call, raw)


def test_malformed_requests_answer_their_codes(stub, channel, client, exports):
    ids = {"token_ids": np.array([[2, 5, 3]], np.int32),
           "segment_ids": np.zeros([1, 3], np.int32), "padding_mask": np.ones([1, 3], np.int32)}
    cases = [
        # (name, inputs, signature, spec, code, fragment)
        ("sentiment", {"text_a": np.array([1.5], np.float32)}, "", {},
         grpc.StatusCode.INVALID_ARGUMENT,
         "Expects input text_a of signature serving_default to be DT_STRING but DT_FLOAT"),
        ("sentiment", {k: v for k, v in ids.items() if k != "padding_mask"}, "serving_ids", {},
         grpc.StatusCode.INVALID_ARGUMENT,
         "input size does not match signature: 2!=3 len({segment_ids,token_ids}) != "
         "len({padding_mask,segment_ids,token_ids}). Sent extra: {}. Missing but required: "
         "{padding_mask}."),
        ("sentiment", {"text_a": ["a"], "text_b": ["b"]}, "", {},
         grpc.StatusCode.INVALID_ARGUMENT, "Sent extra: {text_b}."),
        ("sentiment", {**ids, "token_ids": ids["token_ids"][0]}, "serving_ids", {},
         grpc.StatusCode.INVALID_ARGUMENT,
         "signature serving_ids: input token_ids must have shape [?, ?], got [3]"),
        ("sentiment", {"text_a": [["a", "b"]]}, "", {}, grpc.StatusCode.INVALID_ARGUMENT,
         "must be a batch of strings"),
        ("score", {"x": np.ones([1, 3], np.float32), "k": np.array([1])}, "", {},
         grpc.StatusCode.INVALID_ARGUMENT, "input x must have shape [?, 2], got [1, 3]"),
        ("nope", {"text_a": ["a"]}, "", {}, grpc.StatusCode.NOT_FOUND,
         "Servable not found for request: Latest(nope)"),
        ("sentiment", {"text_a": ["a"]}, "", {"version": 7}, grpc.StatusCode.NOT_FOUND,
         "Servable not found for request: Specific(sentiment, 7)"),
        ("sentiment", {"text_a": ["a"]}, "", {"label": "beta"}, grpc.StatusCode.INVALID_ARGUMENT,
         "Unrecognized servable version label: beta"),
        ("sentiment", {"text_a": ["a"]}, "nope", {}, grpc.StatusCode.FAILED_PRECONDITION,
         "Serving signature key \"nope\" not found."),
    ]
    for name, inputs, signature, spec, code, fragment in cases:
        request = predict_pb2.PredictRequest(model_spec=_spec(name, signature, **spec))
        for key, value in inputs.items():
            request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
        got_code, details = _status_of(stub.Predict, request)
        assert got_code == code and fragment in details, (name, inputs, got_code, details)
    # An unknown or repeated output_filter alias; no model_spec at all; a TensorProto whose
    # content does not fill its shape.
    request = predict_pb2.PredictRequest(model_spec=_spec("sentiment"))
    request.inputs["text_a"].CopyFrom(tf.make_tensor_proto(["a"]))
    request.output_filter.extend(["label", "nope"])
    assert _status_of(stub.Predict, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "output tensor alias not found in signature: nope Outputs expected to be in the set "
        "{label,label_id,logits,probabilities}.")
    request.output_filter[:] = ["label", "label"]
    assert _status_of(stub.Predict, request) == (grpc.StatusCode.INVALID_ARGUMENT,
                                                 "duplicate output tensor alias: label")
    request.ClearField("output_filter")
    request.ClearField("model_spec")
    assert _status_of(stub.Predict, request) == (grpc.StatusCode.INVALID_ARGUMENT,
                                                 "Missing ModelSpec")
    broken = tf.make_tensor_proto(np.ones([2, 2], np.float32))
    broken.tensor_shape.dim[0].size = 5
    code, details = _status_of(stub.Predict, predict_pb2.PredictRequest(
        model_spec=_spec("score"), inputs={"x": broken,
                                           "k": tf.make_tensor_proto(np.array([1, 2]))}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "tensor parsing error: x" in details
    code, details = _both_version_and_label(channel)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "both version and version_label" in \
        details
    # Still answering, both APIs.
    after = _as_json(_predict(stub, "sentiment", {"text_a": TEXTS}))
    np.testing.assert_allclose(after["probabilities"], exports["probabilities"], atol=1e-5)
    assert client.get("/v1/models/sentiment")[0] == 200


def test_numeric_predict_and_large_message(stub, client):
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    got = _as_json(_predict(stub, "score", {"x": x, "k": np.array([1, 2, 3, 4])}))
    assert got == {"y": (x * [[1], [2], [3], [4]]).tolist(), "k2": [2, 4, 6, 8]}
    assert got == _rest(client, "/v1/models/score:predict",
                        {"inputs": {"x": x.tolist(), "k": [1, 2, 3, 4]}})["outputs"]
    # Over gRPC's 4 MB default, both ways (the server raises the limits to INT32_MAX).
    big = np.ones([600_000, 2], np.float32)
    response = _predict(stub, "score", {"x": big, "k": np.ones([600_000], np.int64)})
    assert tf.make_ndarray(response.outputs["y"]).shape == (600_000, 2)


def test_load_rest_and_grpc_clients(server, stub, exports):
    """4 threads for 1.5 s (2 REST, 2 gRPC; batch 1, raw text): zero errors, the right
    answers; p50 / p99 latency printed per API."""
    seconds, expected = 1.5, exports["probabilities"][:1]
    results = {api: dict(latencies=[], errors=[]) for api in ("rest", "grpc")}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def run(api):
        c = Client(server) if api == "rest" else None
        latencies, errors = [], []
        try:
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                try:
                    if api == "rest":
                        code, _, body = c.post("/v1/models/sentiment:predict",
                                               {"instances": TEXTS[:1]})
                        probs = ([r["probabilities"] for r in body["predictions"]]
                                 if code == 200 else None)
                    else:
                        probs = tf.make_ndarray(_predict(stub, "sentiment", {
                            "text_a": TEXTS[:1]}).outputs["probabilities"])
                except Exception as e:  # a dropped connection or an RPC error
                    errors.append(repr(e))
                    continue
                latencies.append(time.perf_counter() - started)
                if probs is None or not np.allclose(probs, expected, atol=1e-5):
                    errors.append(("wrong answer", probs))
        finally:
            if c is not None:
                c.close()
            with lock:
                results[api]["latencies"] += latencies
                results[api]["errors"] += errors

    threads = [threading.Thread(target=run, args=(api,))
               for api in ("rest", "grpc", "rest", "grpc")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 120)
    for api, r in results.items():
        latencies = sorted(r["latencies"])
        assert not r["errors"], (api, r["errors"][:5])
        assert len(latencies) >= 2, api
        p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        print(f"\nload {api}: 2 clients x {seconds:.0f} s, batch 1: {len(latencies)} requests; "
              f"latency p50 {statistics.median(latencies) * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms")


def test_grpc_port_in_use_is_one_error_line(tmp_path):
    base = tmp_path / "m"
    (base / "1").mkdir(parents=True)
    with contextlib.closing(socket.socket()) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "garden.serve", f"--model_base_path={base}",
                               "--rest_api_port=0", f"--port={port}"], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"error: --port={port} (gRPC) on 127.0.0.1: Address already "
                                   f"in use"), proc.stderr


def readme_grpc_snippet() -> str:
    """The documented Python gRPC client (docs/serving.md, section "Serving locally:
    garden.serve", where README's serving text moved)."""
    with open(os.path.join(REPO_ROOT, "docs", "serving.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("\n## Serving locally: garden.serve\n") + 1:]
    section = section[:section.index("\n## ", 4)]
    blocks = [b for b in section.split("```python\n")[1:] if "PredictionServiceStub" in b]
    assert len(blocks) == 1, "docs/serving.md's garden.serve section has one gRPC client snippet"
    return blocks[0].split("```", 1)[0]


def test_readme_grpc_client_snippet_answers_like_rest(server, client):
    # The snippet as a user copies it, pointed at this server and model, in a fresh process.
    snippet = readme_grpc_snippet()
    assert '"localhost:8500"' in snippet and '"bert_tiny_classifier"' in snippet
    code = (snippet.replace('"localhost:8500"', f'"{server.host}:{server.grpc_port}"')
            .replace('"bert_tiny_classifier"', '"sentiment"'))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rest = _rest(client, "/v1/models/sentiment:predict", {"instances": ["a fine film"]})
    label = rest["predictions"][0]["label"]
    assert proc.stdout.strip().splitlines()[-1] == f"[b'{label}'] 1", proc.stdout


# Ill-formed UTF-8 (a stray byte, a cut sequence, an encoded surrogate) in each text field.
BAD_BYTES = [b"Anna \xff lives in Paris", b"\xed\xa0\x80the movie was good \xe2\x82", b"\xf0\x9f\x98"]


def test_ill_formed_utf8_answers_as_its_replacement_decoding(stub):
    """A gRPC string tensor is bytes: every text signature answers for ill-formed UTF-8 exactly
    as for the bytes decoded with replacement characters (bytes.decode("utf-8", "replace")), and
    the server goes on serving (issue 32)."""
    decoded = [b.decode("utf-8", "replace") for b in BAD_BYTES]
    for name, inputs, fixed in (
            ("sentiment", {"text_a": BAD_BYTES}, {"text_a": decoded}),
            ("tagger", {"sentences": BAD_BYTES}, {"sentences": decoded}),
            ("qa", {"question": BAD_BYTES, "context": [b * 3 for b in BAD_BYTES]},
             {"question": decoded, "context": [d * 3 for d in decoded]})):
        got = _as_json(_predict(stub, name, inputs))
        _same(got, _as_json(_predict(stub, name, fixed)))
    # the answers are spans of the decoded text, and the server still answers
    got = _as_json(_predict(stub, "qa", {"question": BAD_BYTES, "context": BAD_BYTES}))
    for answer, start, end, context in zip(got["answer"], got["start"], got["end"], decoded):
        assert answer == (context[start:end] if start >= 0 else "")
    assert _as_json(_predict(stub, "sentiment", {"text_a": TEXTS}))["label"]
