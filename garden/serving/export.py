"""The one exporter: every task's SavedModel, in the layout TensorFlow Serving loads as is.

`export(module, export_base, model_name)` writes `<export_base>/<model_name>/<version>/`
(docs/design.md "Serving") from a task's ServingModule (garden/serving/base.py):

    saved_model.pb, variables/        the module: model + in-graph text packing
    assets/                           the vocabulary file(s) (the export is self-contained)
    assets.extra/tf_serving_warmup_requests   PredictionLog records TF Serving replays on load
    assets.extra/garden_export.json   the module's metadata (task, labels, tokenizer, ...)
                                      and the exporter's (version, method names, op check,
                                      compute_dtype and the graphs' matmul_dtypes)

The module names its signatures and their TF Serving method names (predict / classify /
regress); tf.saved_model.save writes every signature as predict, so the exporter rewrites the
method names afterwards. The version is built under a hidden name and renamed into place, so a
server polling <model_name>/ never loads half an export.

precision='bfloat16' writes a module whose model was built under Keras' mixed_bfloat16 policy:
its matmuls run in bfloat16 behind the float32 export's signatures (garden/serving/precision.py
checks the traced graphs before anything is written).

Minimum TensorFlow Serving, two constraints (both written to garden_export.json):
- tensorflow-text ops: 2.12.0. The WordPiece signatures run tensorflow-text's
  RegexSplitWithOffsets and FastWordpieceTokenizeWithOffsets kernels (BERT's normalisation is
  core TensorFlow ops: text/wordpiece.py); the model server links the tensorflow-text
  op library of its own pin, and 2.11.0 shipped without part of the Fast* kernels
  (tensorflow/serving#2064: the fix reached the nightly after the 2.11.0 release); later
  releases embed tensorflow-text 2.12 or newer (the 2.12.1 pin was still current in early 2025, tensorflow/serving#4057).
  `check_serving_ops` verifies an export uses only tensorflow-text ops of that release.
- core TensorFlow: TF promises that graphs load in the same or a newer runtime, not an older
  one (e.g. the DisableCopyOnRead op and the VarHandleOp debug_name attribute written by recent
  savers), so the guaranteed minimum is the TF Serving release of the TensorFlow that exported.
  `min_tf_serving_version()` is the larger of the two (2.20.0 with this project's TF 2.20).
Servers built without tensorflow-text can still use `serving_ids`.
"""

from __future__ import annotations

import glob
import json
import os
import posixpath
import uuid
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from garden.serving import precision as export_precision
from garden.serving.base import CLASSIFY, PREDICT, REGRESS, ServingModule

PREDICT_METHOD_NAME, CLASSIFY_METHOD_NAME, REGRESS_METHOD_NAME = PREDICT, CLASSIFY, REGRESS
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
# FastWordpieceTokenizer", v2.13.0 "Python ops for new RoundRobinTrimmer kernels", v2.0.0-rc0
# "SentencepieceTokenizer has been added": its kernels SentencepieceOp and
# SentencepieceTokenizeOp). The byte-level BPE graph is core ops only. For the
# two FastBertTokenizer kernels 2.9 is an upper bound (FastWordpiece predates it), which is
# enough to compare against 2.12. An op missing from this table is reported as unverified
# rather than assumed to be available.
TF_TEXT_OP_FIRST_RELEASE = {
    "CaseFoldUTF8": "2.0",
    "NormalizeUTF8": "2.0",
    "RegexSplitWithOffsets": "2.0",
    "WordpieceTokenizeWithOffsets": "2.0",
    "SentencepieceOp": "2.0",
    "SentencepieceTokenizeOp": "2.0",
    # Added with SentencepieceTokenizer itself (tensorflow/text commit 35d8bc0, 2019-09-23,
    # first tagged in v1.15.0 / 2.0), like SentencepieceTokenizeOp.
    "SentencepieceTokenizeWithOffsetsOp": "2.0",
    "FastBertNormalize": "2.9",
    "FastWordpieceTokenizeWithOffsets": "2.9",
    "TFText>RoundRobinTrim": "2.13",
    "TFText>RoundRobinGenerateMasks": "2.13",
}


class ExportError(RuntimeError):
    """The export directory or the exported graph does not meet the serving contract."""


# ----------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------


def existing_versions(model_dir: str) -> List[int]:
    """The version numbers under a model directory, ascending ([] when it does not exist)."""
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


def _version_dir(export_base: str, model_name: str, version: Optional[int]) -> Tuple[str, int]:
    """(<export_base>/<model_name>, version): the next integer unless one is given."""
    if not model_name or "/" in model_name:
        raise ValueError(f"model_name {model_name!r} must be a single path component")
    model_dir = posixpath.join(export_base, model_name)
    if version is None:
        existing = existing_versions(model_dir)
        version = (existing[-1] + 1) if existing else 1
    version = int(version)
    if version < 0:
        raise ValueError(f"version must be a non-negative integer, got {version}")
    if tf.io.gfile.exists(posixpath.join(model_dir, str(version))):
        raise ExportError(f"{posixpath.join(model_dir, str(version))} already exists; pass "
                          f"another version or omit it")
    return model_dir, version


def export(module: ServingModule, export_base: str, model_name: str,
           version: Optional[int] = None, precision: str = "float32") -> str:
    """Saves a task's ServingModule as <export_base>/<model_name>/<version>/ and returns that
    directory. version: default one more than the largest existing (1 for the first).
    precision: 'float32', or 'bfloat16' for a module whose model computes in bfloat16
    (garden.serving.precision: PrecisionError, before anything is written, when the graphs
    do not)."""
    export_precision.check_name(precision)
    model_dir, version = _version_dir(export_base, model_name, version)
    signatures, matmuls = export_precision.checked(module.signatures(), precision, module.task)
    methods = {name: method for name, (_, method) in signatures.items()}
    tf.io.gfile.makedirs(model_dir)
    tmp_dir = posixpath.join(model_dir, f".tmp-{version}-{uuid.uuid4().hex[:8]}")
    try:
        tf.saved_model.save(module, tmp_dir,
                            signatures={name: fn for name, (fn, _) in signatures.items()})
        _set_method_names(tmp_dir, methods)
        extra = posixpath.join(tmp_dir, "assets.extra")
        tf.io.gfile.makedirs(extra)
        write_warmup_requests(posixpath.join(extra, WARMUP_FILENAME), model_name,
                              module.warmup_requests())
        ops = check_serving_ops(tmp_dir)
        if not ops["ok"]:
            raise ExportError(f"the export uses ops that TF Serving "
                              f"{MIN_TF_SERVING_FOR_TF_TEXT_OPS} lacks: {ops['problems']}")
        metadata = dict(module.metadata(), **{
            "format_version": EXPORT_FORMAT_VERSION, "model_name": model_name,
            "version": version, "signatures": methods,
            "compute_dtype": precision, "matmul_dtypes": matmuls,
            "min_tf_serving_version": min_tf_serving_version(),
            "min_tf_serving_version_for_tf_text_ops": MIN_TF_SERVING_FOR_TF_TEXT_OPS,
            "tf_text_ops": ops["tf_text_ops"], "tensorflow_version": tf.__version__,
            "tensorflow_text_version": tf_text.__version__})
        with tf.io.gfile.GFile(posixpath.join(extra, METADATA_FILENAME), "w") as f:
            f.write(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
        tf.io.gfile.rename(tmp_dir, posixpath.join(model_dir, str(version)))
    except BaseException:
        if tf.io.gfile.exists(tmp_dir):
            tf.io.gfile.rmtree(tmp_dir)
        raise
    return posixpath.join(model_dir, str(version))


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


def _predict_log(model_name: str, signature: str, inputs: Dict[str, np.ndarray]) -> bytes:
    protos = _serving_protos()
    log = protos["PredictionLog"]()
    request = log.predict_log.request
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature
    for key, value in inputs.items():
        request.inputs[key].ParseFromString(tf.make_tensor_proto(value).SerializeToString())
    return log.SerializeToString()


def write_warmup_requests(path: str, model_name: str,
                          requests: Sequence[Tuple[str, Dict[str, np.ndarray]]]) -> int:
    """Writes one PredictionLog record per (signature name, inputs); returns the count."""
    with tf.io.TFRecordWriter(path) as writer:
        for signature, inputs in requests:
            writer.write(_predict_log(model_name, signature, inputs))
    return len(requests)


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
