"""SavedModel export of fine-tuned classifiers in the layout TensorFlow Serving loads as is.

`export_classifier` writes `<export_base>/<model_name>/<version>/` (DESIGN.md "Serving"):

    saved_model.pb, variables/        the Keras classifier and the in-graph TextEncoder
    assets/<vocab file>               the WordPiece vocabulary (the export is self-contained)
    assets.extra/tf_serving_warmup_requests   PredictionLog records TF Serving replays on load
    assets.extra/garden_export.json   labels, max_seq_length, lower_case, vocab fingerprint, ...

Signatures (`saved_model_cli show --all` lists them with these method names):
    serving_default  tensorflow/serving/predict   text_a (, text_b): string [batch]
    serving_ids      tensorflow/serving/predict   token_ids, segment_ids, padding_mask: int32
    classify         tensorflow/serving/classify  inputs: serialized tf.Example [batch]
                                                  with bytes features text_a (, text_b)
The two predict signatures return probabilities float32 [batch, C], label string [batch],
label_id int64 [batch] and logits float32 [batch, C]; classify returns what TF Serving's
Classify API reads: classes string [batch, C] and scores float32 [batch, C].

Minimum TensorFlow Serving, two constraints (both written to garden_export.json):
- tensorflow-text ops: 2.12.0. The text signatures run tensorflow-text's FastBertNormalize and
  FastWordpieceTokenizeWithOffsets kernels; the model server links the tensorflow-text op
  library of its own pin, and 2.11.0 shipped without FastBertNormalize (tensorflow/serving#2064:
  the fix reached the nightly after the 2.11.0 release); later releases embed tensorflow-text
  2.12 or newer (the 2.12.1 pin was still current in early 2025, tensorflow/serving#4057).
  `check_serving_ops` verifies an export uses only tensorflow-text ops of that release.
- core TensorFlow: TF promises that graphs load in the same or a newer runtime, not an older
  one (e.g. the DisableCopyOnRead op and the VarHandleOp debug_name attribute written by recent
  savers), so the guaranteed minimum is the TF Serving release of the TensorFlow that exported.
  `min_tf_serving_version()` is the larger of the two (2.20.0 with this project's TF 2.20).
Servers built without tensorflow-text can still use `serving_ids`.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import posixpath
import uuid
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from data_pipelines import tokenizers
from garden.tasks.preprocessing import INPUT_NAMES, TextEncoder

PREDICT_METHOD_NAME = "tensorflow/serving/predict"
CLASSIFY_METHOD_NAME = "tensorflow/serving/classify"
WARMUP_FILENAME = "tf_serving_warmup_requests"
METADATA_FILENAME = "garden_export.json"
EXPORT_FORMAT_VERSION = 1

# First TF Serving release whose model server has the tensorflow-text ops of our encoders, and
# the tensorflow-text release it links (see the module docstring for the sources).
MIN_TF_SERVING_FOR_TF_TEXT_OPS = "2.12.0"
MIN_SERVING_TF_TEXT_VERSION = "2.12"

# First tensorflow-text release that registers each op an encoder of this garden can emit.
# Source: the tensorflow/text GitHub release notes (v2.0.0 "New BertTokenizer", v2.9.0 "New
# FastBertNormalizer ... New FastBertTokenizer that combines FastBertNormalizer and
# FastWordpieceTokenizer", v2.13.0 "Python ops for new RoundRobinTrimmer kernels"). For the
# two FastBertTokenizer kernels 2.9 is an upper bound (FastWordpiece predates it), which is
# enough to compare against 2.12. An op missing from this table is reported as unverified
# rather than assumed to be available.
TF_TEXT_OP_FIRST_RELEASE = {
    "CaseFoldUTF8": "2.0",
    "NormalizeUTF8": "2.0",
    "RegexSplitWithOffsets": "2.0",
    "WordpieceTokenizeWithOffsets": "2.0",
    "FastBertNormalize": "2.9",
    "FastWordpieceTokenizeWithOffsets": "2.9",
    "TFText>RoundRobinTrim": "2.13",
    "TFText>RoundRobinGenerateMasks": "2.13",
}


class ExportError(RuntimeError):
    """The export directory or the exported graph does not meet the serving contract."""


# ----------------------------------------------------------------------------------------
# The serving module
# ----------------------------------------------------------------------------------------


class ClassifierServing(tf.Module):
    """Holds the Keras classifier, the TextEncoder, the label names and the vocabulary asset.

    Keras 3 models are callable inside tf.function and are tracked as children of a tf.Module,
    so `tf.saved_model.save` writes their variables under variables/.
    """

    def __init__(self, model, encoder: TextEncoder, label_names: Sequence[str],
                 vocab_path: str, text_b: bool):
        super().__init__(name="classifier_serving")
        self.model = model
        self.encoder = encoder
        self.text_b = bool(text_b)
        self.num_classes = len(label_names)
        # A tracked Asset: saving copies the file into assets/ and the loaded object's
        # vocab_file.asset_path points at that copy.
        self.vocab_file = tf.saved_model.Asset(vocab_path)
        self._label_names = list(label_names)

    def predict_ids(self, inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        logits = self.model({k: tf.cast(inputs[k], tf.int32) for k in INPUT_NAMES},
                            training=False)["logits"]
        logits = tf.cast(logits, tf.float32)  # the head may run in a mixed-precision policy
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int64)
        return {
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "label": tf.gather(tf.constant(self._label_names, tf.string), label_id),
            "label_id": label_id,
            "logits": logits,
        }

    def predict_text(self, text_a: tf.Tensor, text_b: Optional[tf.Tensor] = None):
        return self.predict_ids(self.encoder(text_a, text_b))

    def build_signatures(self) -> Dict[str, tf.types.experimental.ConcreteFunction]:
        """Traces the three signatures; they are also kept on the module so they get saved."""
        text = lambda name: tf.TensorSpec([None], tf.string, name=name)  # noqa: E731
        ids = lambda name: tf.TensorSpec([None, None], tf.int32, name=name)  # noqa: E731

        if self.text_b:
            @tf.function(input_signature=[text("text_a"), text("text_b")])
            def serve_text(text_a, text_b):
                return self.predict_text(text_a, text_b)
        else:
            @tf.function(input_signature=[text("text_a")])
            def serve_text(text_a):
                return self.predict_text(text_a)

        @tf.function(input_signature=[ids(n) for n in INPUT_NAMES])
        def serve_ids(token_ids, segment_ids, padding_mask):
            return self.predict_ids({"token_ids": token_ids, "segment_ids": segment_ids,
                                     "padding_mask": padding_mask})

        feature_spec = {"text_a": tf.io.FixedLenFeature([], tf.string)}
        if self.text_b:
            feature_spec["text_b"] = tf.io.FixedLenFeature([], tf.string)

        @tf.function(input_signature=[text("inputs")])
        def classify(inputs):
            features = tf.io.parse_example(inputs, feature_spec)
            out = self.predict_text(features["text_a"], features.get("text_b"))
            batch = tf.shape(inputs)[0]
            classes = tf.tile(tf.constant([self._label_names], tf.string), [batch, 1])
            return {"classes": classes, "scores": out["probabilities"]}

        self.serve_text, self.serve_ids, self.classify = serve_text, serve_ids, classify
        return {"serving_default": serve_text.get_concrete_function(),
                "serving_ids": serve_ids.get_concrete_function(),
                "classify": classify.get_concrete_function()}


# ----------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------


def _existing_versions(model_dir: str) -> List[int]:
    if not tf.io.gfile.isdir(model_dir):
        return []
    return sorted(int(n.rstrip("/")) for n in tf.io.gfile.listdir(model_dir)
                  if n.rstrip("/").isdigit())


def _set_method_names(export_dir: str, method_names: Dict[str, str]) -> None:
    """Rewrites SignatureDef.method_name in saved_model.pb.

    tf.saved_model.save (TF2) writes every signature as tensorflow/serving/predict and has no
    argument for another method (save.py `_generate_signatures`); TF Serving's Classify API
    refuses a signature whose method_name is not tensorflow/serving/classify. The proto field
    is the only thing that differs, so it is set after saving and the fingerprint rewritten.
    """
    from tensorflow.core.protobuf import saved_model_pb2

    path = posixpath.join(export_dir, "saved_model.pb")
    saved_model = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(path, "rb") as f:
        saved_model.ParseFromString(f.read())
    for meta_graph in saved_model.meta_graphs:
        for key, method in method_names.items():
            if key not in meta_graph.signature_def:
                raise ExportError(f"{path}: no signature {key!r} to set method {method}")
            meta_graph.signature_def[key].method_name = method
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(saved_model.SerializeToString(deterministic=True))
    # fingerprint.pb holds a checksum of saved_model.pb: recompute it (loaders only log it,
    # so if this TF has no writer, drop the stale file instead of leaving a wrong one).
    try:
        from tensorflow.python.saved_model import fingerprinting_utils
        fingerprinting_utils.write_fingerprint(export_dir)
    except (ImportError, AttributeError):
        stale = posixpath.join(export_dir, "fingerprint.pb")
        if tf.io.gfile.exists(stale):
            tf.io.gfile.remove(stale)


def export_classifier(model, *, vocab_path: str, lower_case: bool, max_seq_length: int,
                      label_names: Sequence[str], export_base: str, model_name: str,
                      version: Optional[int] = None, text_b: bool = False,
                      warmup_texts: Optional[Sequence[Union[str, Tuple[str, str]]]] = None
                      ) -> str:
    """Exports a classifier (dict inputs token_ids/segment_ids/padding_mask -> {"logits"}).

    Args:
        model: a Keras model with the SequenceClassifier contract.
        vocab_path: the WordPiece vocabulary the model was trained with (copied into assets/).
        lower_case, max_seq_length: the encoder settings used in fine-tuning.
        label_names: names of the logits' classes, in order.
        export_base, model_name: the export goes to <export_base>/<model_name>/<version>.
        version: integer version; default one more than the largest existing (1 for the first).
        text_b: whether the task takes sentence pairs (adds the text_b input/feature).
        warmup_texts: a few texts (or (text_a, text_b) pairs) recorded as warmup requests;
            a bare string for a pair task gets an empty text_b.

    Returns:
        The version directory.
    """
    label_names = [str(n) for n in label_names]
    if len(label_names) < 2 or len(set(label_names)) != len(label_names):
        raise ValueError(f"label_names must name two or more distinct classes, got {label_names}")
    if not model_name or "/" in model_name:
        raise ValueError(f"model_name {model_name!r} must be a single path component")
    model_dir = posixpath.join(export_base, model_name)
    existing = _existing_versions(model_dir)
    if version is None:
        version = (existing[-1] + 1) if existing else 1
    version = int(version)
    if version < 0:
        raise ValueError(f"version must be a non-negative integer, got {version}")
    final_dir = posixpath.join(model_dir, str(version))
    if tf.io.gfile.exists(final_dir):
        raise ExportError(f"{final_dir} already exists; pass another version or omit it")

    encoder = TextEncoder(vocab_path, lower_case=lower_case, max_seq_length=max_seq_length)
    serving = ClassifierServing(model, encoder, label_names, vocab_path, text_b)
    signatures = serving.build_signatures()
    logits_dim = signatures["serving_ids"].structured_outputs["logits"].shape[-1]
    if logits_dim is not None and logits_dim != len(label_names):
        raise ValueError(f"the model has {logits_dim} logits but {len(label_names)} "
                         f"label_names were given: {label_names}")

    # TF Serving polls <model_dir> for integer-named children: build the version under a
    # hidden name and rename it when complete, so a server never loads half an export.
    tf.io.gfile.makedirs(model_dir)
    tmp_dir = posixpath.join(model_dir, f".tmp-{version}-{uuid.uuid4().hex[:8]}")
    try:
        tf.saved_model.save(serving, tmp_dir, signatures=signatures)
        _set_method_names(tmp_dir, {"serving_default": PREDICT_METHOD_NAME,
                                    "serving_ids": PREDICT_METHOD_NAME,
                                    "classify": CLASSIFY_METHOD_NAME})
        extra = posixpath.join(tmp_dir, "assets.extra")
        tf.io.gfile.makedirs(extra)
        write_warmup_requests(posixpath.join(extra, WARMUP_FILENAME), encoder, model_name,
                              _warmup_pairs(warmup_texts, text_b))
        ops = check_serving_ops(tmp_dir)
        if not ops["ok"]:
            raise ExportError(f"the export uses ops that TF Serving "
                              f"{MIN_TF_SERVING_FOR_TF_TEXT_OPS} lacks: {ops['problems']}")
        metadata = {
            "format_version": EXPORT_FORMAT_VERSION,
            "model_name": model_name,
            "version": version,
            "task": "classification",
            "label_names": label_names,
            "max_seq_length": int(max_seq_length),
            "lower_case": bool(lower_case),
            "text_b": bool(text_b),
            "vocab_file": "assets/" + posixpath.basename(vocab_path),
            "vocab_size": encoder.vocab_size,
            "vocab_fingerprint": tokenizers.vocab_fingerprint(vocab_path),
            "signatures": {"serving_default": PREDICT_METHOD_NAME,
                           "serving_ids": PREDICT_METHOD_NAME,
                           "classify": CLASSIFY_METHOD_NAME},
            "min_tf_serving_version": min_tf_serving_version(),
            "min_tf_serving_version_for_tf_text_ops": MIN_TF_SERVING_FOR_TF_TEXT_OPS,
            "tf_text_ops": ops["tf_text_ops"],
            "tensorflow_version": tf.__version__,
            "tensorflow_text_version": tf_text.__version__,
        }
        with tf.io.gfile.GFile(posixpath.join(extra, METADATA_FILENAME), "w") as f:
            f.write(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
        tf.io.gfile.rename(tmp_dir, final_dir)
    except BaseException:
        if tf.io.gfile.exists(tmp_dir):
            tf.io.gfile.rmtree(tmp_dir)
        raise
    return final_dir


# ----------------------------------------------------------------------------------------
# Warmup requests (tensorflow_serving.apis protos built at runtime)
# ----------------------------------------------------------------------------------------

_SERVING_PROTOS = None


def _serving_protos():
    """PredictionLog / PredictLog / PredictRequest / ModelSpec classes without
    tensorflow-serving-api (which would pull a second TensorFlow).

    Field numbers as in tensorflow/serving's apis/*.proto: PredictionLog.predict_log = 6
    (prediction_log.proto), PredictLog.request = 1, PredictRequest.model_spec = 1 and
    inputs = 2 (map<string, TensorProto>, predict.proto), ModelSpec.name = 1 and
    signature_name = 3 (model.proto; version = 2 is left unset: the server picks the loaded
    one). The messages live in a private descriptor pool so that they cannot clash with a
    tensorflow_serving package imported in the same process.
    """
    global _SERVING_PROTOS
    if _SERVING_PROTOS is not None:
        return _SERVING_PROTOS
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from tensorflow.core.framework import tensor_pb2

    pool = descriptor_pool.DescriptorPool()
    added = set()

    def add_file(file_descriptor):
        if file_descriptor.name in added:
            return
        for dep in file_descriptor.dependencies:
            add_file(dep)
        proto = descriptor_pb2.FileDescriptorProto()
        file_descriptor.CopyToProto(proto)
        pool.Add(proto)
        added.add(file_descriptor.name)

    add_file(tensor_pb2.DESCRIPTOR)
    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(
        name="garden/tensorflow_serving_apis_subset.proto", package="tensorflow.serving",
        syntax="proto3", dependency=[tensor_pb2.DESCRIPTOR.name])

    def message(name, fields, nested=()):
        m = f.message_type.add(name=name)
        for nested_message in nested:
            m.nested_type.add().CopyFrom(nested_message)
        for field_name, number, ftype, type_name, label in fields:
            fd = m.field.add(name=field_name, number=number, type=ftype,
                             label=label or F.LABEL_OPTIONAL)
            if type_name:
                fd.type_name = type_name
        return m

    message("ModelSpec", [("name", 1, F.TYPE_STRING, None, None),
                          ("signature_name", 3, F.TYPE_STRING, None, None)])
    inputs_entry = descriptor_pb2.DescriptorProto(name="InputsEntry")
    inputs_entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    inputs_entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE,
                           type_name=".tensorflow.TensorProto", label=F.LABEL_OPTIONAL)
    inputs_entry.options.map_entry = True
    message("PredictRequest",
            [("model_spec", 1, F.TYPE_MESSAGE, ".tensorflow.serving.ModelSpec", None),
             ("inputs", 2, F.TYPE_MESSAGE, ".tensorflow.serving.PredictRequest.InputsEntry",
              F.LABEL_REPEATED)],
            nested=[inputs_entry])
    message("PredictLog",
            [("request", 1, F.TYPE_MESSAGE, ".tensorflow.serving.PredictRequest", None)])
    log = message("PredictionLog",
                  [("predict_log", 6, F.TYPE_MESSAGE, ".tensorflow.serving.PredictLog", None)])
    log.oneof_decl.add(name="log_type")
    log.field[0].oneof_index = 0
    pool.Add(f)
    _SERVING_PROTOS = {name: message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving." + name))
        for name in ("ModelSpec", "PredictRequest", "PredictLog", "PredictionLog")}
    return _SERVING_PROTOS


def _warmup_pairs(warmup_texts, text_b: bool) -> List[Tuple[str, Optional[str]]]:
    if not warmup_texts:
        warmup_texts = ["This is a warmup request.", "A second, slightly longer warmup text."]
    pairs = []
    for item in warmup_texts:
        a, b = (item, "") if isinstance(item, str) else (item[0], item[1])
        pairs.append((a, b if text_b else None))
    return pairs


def _predict_log(model_name: str, signature: str, inputs: Dict[str, np.ndarray]) -> bytes:
    protos = _serving_protos()
    log = protos["PredictionLog"]()
    request = log.predict_log.request
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature
    for key, value in inputs.items():
        request.inputs[key].ParseFromString(tf.make_tensor_proto(value).SerializeToString())
    return log.SerializeToString()


def write_warmup_requests(path: str, encoder: TextEncoder, model_name: str,
                          pairs: Sequence[Tuple[str, Optional[str]]]) -> int:
    """Writes PredictionLog records: one serving_default request per text, one with all the
    texts as a batch, and the batch again through serving_ids. Returns the record count."""
    records = []
    for a, b in pairs:
        inputs = {"text_a": np.array([a.encode("utf-8")], dtype=object)}
        if b is not None:
            inputs["text_b"] = np.array([b.encode("utf-8")], dtype=object)
        records.append(_predict_log(model_name, "serving_default", inputs))
    batch = {"text_a": np.array([a.encode("utf-8") for a, _ in pairs], dtype=object)}
    has_b = pairs[0][1] is not None
    if has_b:
        batch["text_b"] = np.array([b.encode("utf-8") for _, b in pairs], dtype=object)
    records.append(_predict_log(model_name, "serving_default", batch))
    ids = encoder.encode_numpy([a for a, _ in pairs], [b for _, b in pairs] if has_b else None)
    records.append(_predict_log(model_name, "serving_ids", ids))
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    return len(records)


def read_warmup_requests(path: str) -> List[dict]:
    """Parses a warmup file back: [{model_name, signature_name, inputs: {key: ndarray}}]."""
    from tensorflow.core.framework import tensor_pb2

    protos = _serving_protos()
    requests = []
    for raw in tf.data.TFRecordDataset(path).as_numpy_iterator():
        log = protos["PredictionLog"].FromString(raw)
        if log.WhichOneof("log_type") != "predict_log":
            raise ValueError(f"{path}: record {len(requests)} is not a predict_log")
        request = log.predict_log.request
        inputs = {}
        for key, value in request.inputs.items():
            # Re-read into TF's own TensorProto class (ours lives in the private pool).
            tensor = tensor_pb2.TensorProto.FromString(value.SerializeToString())
            inputs[key] = tf.make_ndarray(tensor)
        requests.append({"model_name": request.model_spec.name,
                         "signature_name": request.model_spec.signature_name,
                         "inputs": inputs})
    return requests


def min_tf_serving_version() -> str:
    """The TF Serving release an export of this process is guaranteed to load in."""
    exporter = ".".join(tf.__version__.split(".")[:2]) + ".0"
    return max(MIN_TF_SERVING_FOR_TF_TEXT_OPS, exporter, key=_version_tuple)


# ----------------------------------------------------------------------------------------
# Op check against the minimum TF Serving release
# ----------------------------------------------------------------------------------------


def _tf_text_op_names() -> Dict[str, str]:
    """Every op the installed tensorflow-text registers -> the library that registers it.

    Reads the op lists of tensorflow_text's kernel libraries with the call that
    tf.load_op_library itself uses (the libraries are already loaded by `import
    tensorflow_text`, so this registers nothing new).
    """
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session as py_tf

    names = {}
    root = os.path.dirname(tf_text.__file__)
    for library in sorted(glob.glob(os.path.join(root, "python", "**", "_*.so"), recursive=True)):
        handle = py_tf.TF_LoadLibrary(library)
        try:
            for op in op_def_pb2.OpList.FromString(py_tf.TF_GetOpList(handle)).op:
                names[op.name] = os.path.basename(library)
        finally:
            py_tf.TF_DeleteLibraryHandle(handle)
    return names


def _version_tuple(version: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())


def graph_ops(export_dir: str) -> List[str]:
    """Op types in the SavedModel's graphs: top-level nodes and every library function."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(posixpath.join(export_dir, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    ops, function_names = set(), set()
    for meta_graph in saved_model.meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            function_names.add(function.signature.name)
            ops.update(node.op for node in function.node_def)
    return sorted(ops - function_names)  # calls to library functions appear as node ops


def check_serving_ops(export_dir: str,
                      max_tf_text_version: str = MIN_SERVING_TF_TEXT_VERSION) -> dict:
    """Lists the non-core ops of an export and checks them against a tensorflow-text release.

    Returns {"ok", "tf_text_ops", "unknown_ops", "problems"}: ok is False when an op comes
    from tensorflow-text newer than `max_tf_text_version` (the release linked into
    MIN_TF_SERVING_FOR_TF_TEXT_OPS's model server), from tensorflow-text but not in
    TF_TEXT_OP_FIRST_RELEASE (unverified), or is registered by neither TF nor tensorflow-text.
    """
    from tensorflow.python.framework import op_def_registry

    text_ops = _tf_text_op_names()
    used = graph_ops(export_dir)
    tf_text_used = sorted(op for op in used if op in text_ops)
    unknown = sorted(op for op in used if op not in text_ops and op_def_registry.get(op) is None)
    problems = [f"{op}: not registered by TensorFlow {tf.__version__} or tensorflow-text"
                for op in unknown]
    limit = _version_tuple(max_tf_text_version)
    for op in tf_text_used:
        since = TF_TEXT_OP_FIRST_RELEASE.get(op)
        if since is None:
            problems.append(f"{op}: tensorflow-text op of unknown first release "
                            f"(add it to TF_TEXT_OP_FIRST_RELEASE with a source)")
        elif _version_tuple(since) > limit:
            problems.append(f"{op}: first in tensorflow-text {since}, newer than "
                            f"{max_tf_text_version}")
    return {"ok": not problems, "tf_text_ops": tf_text_used, "unknown_ops": unknown,
            "problems": problems}


# ----------------------------------------------------------------------------------------
# CLI: inspect an export
# ----------------------------------------------------------------------------------------


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m garden.export",
        description="Inspect a classifier export: the tensorflow-text ops it uses, whether TF "
                    f"Serving >= {MIN_TF_SERVING_FOR_TF_TEXT_OPS} has them, and its warmup "
                    "requests. "
                    "Exports are written by the trainer (garden.train) via export_classifier.")
    parser.add_argument("export_dir", help="a version directory <export_base>/<name>/<version>")
    args = parser.parse_args(list(argv) if argv is not None else None)
    report = check_serving_ops(args.export_dir)
    warmup = posixpath.join(args.export_dir, "assets.extra", WARMUP_FILENAME)
    if tf.io.gfile.exists(warmup):
        report["warmup_requests"] = [
            {"signature_name": r["signature_name"], "inputs": sorted(r["inputs"])}
            for r in read_warmup_requests(warmup)]
    report["min_tf_serving_version"] = min_tf_serving_version()
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
