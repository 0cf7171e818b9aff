"""garden.serve's engine: the export directories, loaded and answered over TF Serving's REST API.

Two parts, under the CLI in garden/serve.py:

`ModelManager` keeps, per served model (server_config.ModelConfig), the versions under its
base path that the version policy wants: integer-named directories (the exporter's hidden
`.tmp-*` build directories and anything else are ignored), each loaded once with
tf.saved_model.load and shared by every request thread. A poll (every
--file_system_poll_wait_seconds) loads new versions before unloading the ones they replace, so
a model never goes unavailable while a new version comes up; a version that fails to load (or
whose warmup fails) is left in state END with its error and the versions already served stay.
With warmup on, each version replays assets.extra/tf_serving_warmup_requests (PredictionLog
records, garden.serving.export writes them) before it turns AVAILABLE, and logs TF Serving's
"Number of warmup records read" line. States follow TF Serving's ModelVersionStatus: START,
LOADING, AVAILABLE, UNLOADING, END.

`RestApi` is the WSGI application (Werkzeug's request/response objects; the HTTP server is
Werkzeug's threaded server, one thread per connection), with TF Serving's routes: the paths
are matched with the regular expressions of model_servers/http_rest_api_util.cc, so they are
case-insensitive and take /versions/N or /labels/L (not both):
    GET  /v1/models/NAME[/versions/N|/labels/L]            model status
    GET  /v1/models/NAME[/versions/N|/labels/L]/metadata   signature_def map
    POST /v1/models/NAME[/versions/N|/labels/L]:predict|:classify|:regress
Bodies as garden/server/server_json.py; every answer is JSON with Content-Type
application/json; errors are {"error": message} with TF Serving's HTTP status for the code.
A request that breaks a signature's in-graph checks (a scalar text, a wrong rank) comes back as
400 from the graph's InvalidArgumentError; an unexpected exception is a 500 naming it, logged
with its traceback, and the server goes on.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
import threading
import time
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf

from garden.serving.base import CLASSIFY, PREDICT, REGRESS
from garden.server.server_config import ModelConfig
from garden.server.server_json import (ServingError, classify_response, dumps, examples,
                                       invalid, parse_body, predict_inputs, predict_response,
                                       regress_response, signature_name)

log = logging.getLogger("garden.serve")

START, LOADING, AVAILABLE, UNLOADING, END = "START", "LOADING", "AVAILABLE", "UNLOADING", "END"
WARMUP_PATH = posixpath.join("assets.extra", "tf_serving_warmup_requests")

PREDICTION_API = re.compile(
    r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)",
    re.IGNORECASE)
MODEL_STATUS_API = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?",
    re.IGNORECASE)

# TF error codes (tf.errors.*) -> the status names server_json.HTTP_STATUS maps.
_CODE_NAMES = {getattr(tf.errors, name): name for name in (
    "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED")}


def _signature_defs(path: str) -> dict:
    """{name: SignatureDef} of the "serve" meta graph of saved_model.pb."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(posixpath.join(path, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    for meta_graph in saved_model.meta_graphs:
        if "serve" in meta_graph.meta_info_def.tags:
            return dict(meta_graph.signature_def)
    raise ValueError(f"{path}: no meta graph tagged \"serve\"")


class ServableVersion:
    """One loaded version: its signatures (concrete functions), their SignatureDefs, state."""

    def __init__(self, name: str, version: int, path: str):
        self.name, self.version, self.path = name, version, path
        self.state, self.error = START, None  # error: (code name, message)
        self.signature_defs: Dict[str, object] = {}
        self.functions: Dict[str, object] = {}
        self._loaded = None

    # -- loading --------------------------------------------------------------------------
    def load(self, warmup: bool) -> None:
        started = time.perf_counter()
        self.signature_defs = _signature_defs(self.path)
        self._loaded = tf.saved_model.load(self.path, tags=["serve"])
        self.functions = dict(self._loaded.signatures)
        self.input_dtypes = {
            key: {k: np.dtype(tf.as_dtype(info.dtype).as_numpy_dtype)
                  for k, info in sd.inputs.items()}
            for key, sd in self.signature_defs.items() if key in self.functions}
        log.info("Loaded model %s version %d from %s in %.1f s: signatures %s", self.name,
                 self.version, self.path, time.perf_counter() - started,
                 ", ".join(f"{k} ({self.signature_defs[k].method_name.split('/')[-1]})"
                           for k in sorted(self.functions)))
        if warmup:
            self.warmup()

    def warmup(self) -> int:
        """Replays the export's warmup requests; any failure fails the load (as TF Serving)."""
        path = posixpath.join(self.path, WARMUP_PATH)
        if not tf.io.gfile.exists(path):
            log.info("No warmup data file found at %s", path)
            return 0
        from garden.serving.export import read_warmup_requests

        started, replayed = time.perf_counter(), 0
        for i, request in enumerate(read_warmup_requests(path)):
            key = request["signature_name"] or "serving_default"
            try:
                self.run(key, request["inputs"])
            except ServingError as e:
                raise ValueError(f"{path}: warmup record {i} ({key}) failed: {e.message}") from None
            replayed += 1
        log.info("Finished reading warmup data for model at %s. Number of warmup records read: "
                 "%d. Elapsed time (microseconds): %d.", path, replayed,
                 int((time.perf_counter() - started) * 1e6))
        return replayed

    def unload(self) -> None:
        self.functions, self._loaded = {}, None

    # -- serving --------------------------------------------------------------------------
    def signature(self, key: str):
        if key not in self.functions:
            served = sorted(self.functions)
            raise invalid(f"Serving signature name: \"{key}\" not found in signature def "
                          f"(signatures of {self.name} version {self.version}: {served})")
        return self.signature_defs[key]

    def run(self, key: str, arrays: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Calls a signature on numpy inputs; graph errors become ServingErrors of their code."""
        sd = self.signature(key)
        missing = sorted(set(sd.inputs) - set(arrays))
        if missing:
            raise invalid(f"signature {key} needs inputs {sorted(sd.inputs)}; missing {missing}")
        for k in sorted(arrays):
            _check_shape(key, k, sd.inputs[k].tensor_shape, np.shape(arrays[k]))
        tensors = {k: tf.constant(v, dtype=tf.as_dtype(sd.inputs[k].dtype))
                   for k, v in arrays.items()}
        try:
            outputs = self.functions[key](**tensors)
        except tf.errors.OpError as e:
            raise ServingError(_CODE_NAMES.get(e.error_code, "UNKNOWN"), e.message) from None
        except (TypeError, ValueError) as e:
            # Raised while binding the inputs to the signature (a wrong rank or dtype).
            raise invalid(f"signature {key}: {' '.join(str(e).split())}") from None
        return {k: v.numpy() for k, v in outputs.items()}


def _check_shape(key: str, name: str, shape_proto, shape) -> None:
    """A clear 400 for an input whose rank or fixed sizes contradict the SignatureDef (the
    model server would pass it on and fail deep in the graph, e.g. "Incompatible shapes")."""
    if shape_proto.unknown_rank:
        return
    dims = [d.size for d in shape_proto.dim]
    if len(dims) != len(shape) or any(d >= 0 and d != s for d, s in zip(dims, shape)):
        raise invalid(f"signature {key}: input {name} must have shape "
                      f"[{', '.join('?' if d < 0 else str(d) for d in dims)}], got "
                      f"{list(shape)}")


class ModelManager:
    """The served versions of every configured model, kept in line with the file system."""

    def __init__(self, configs: List[ModelConfig], warmup: bool = True):
        self.configs = {c.name: c for c in configs}
        self.warmup = warmup
        self._versions: Dict[str, Dict[int, ServableVersion]] = {c.name: {} for c in configs}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- the file system ------------------------------------------------------------------
    @staticmethod
    def versions_on_disk(base_path: str) -> Dict[int, str]:
        if not tf.io.gfile.isdir(base_path):
            return {}
        found = {}
        for entry in tf.io.gfile.listdir(base_path):
            entry = entry.rstrip("/")
            if entry.isdigit() and tf.io.gfile.isdir(posixpath.join(base_path, entry)):
                found[int(entry)] = posixpath.join(base_path, entry)
        return found

    def poll(self) -> None:
        """One pass over every model: load wanted new versions, then unload the others."""
        for name, config in self.configs.items():
            try:
                self._poll_model(config)
            except Exception:  # a file system hiccup must not end the poll thread
                log.exception("polling %s failed", config.base_path)

    def _poll_model(self, config: ModelConfig) -> None:
        on_disk = self.versions_on_disk(config.base_path)
        if not on_disk and not self._versions[config.name]:
            log.warning("No versions of servable %s found under base path %s", config.name,
                        config.base_path)
        while True:
            # A version that fails to load drops out of the policy's choice, and the next one
            # down is loaded in the same pass (latest {} keeps serving the newest good one).
            with self._lock:
                known = dict(self._versions[config.name])
            failed = {v for v, s in known.items() if s.state == END and s.error}
            wanted = config.wanted([v for v in on_disk if v not in failed])
            to_load = [v for v in wanted if v not in known or known[v].state == END]
            if not to_load:
                break
            for version in to_load:
                self._load(config.name, version, on_disk[version])
        with self._lock:
            stale = [s for v, s in self._versions[config.name].items()
                     if v not in wanted and s.state == AVAILABLE]
            for servable in stale:
                servable.state = UNLOADING
        for servable in stale:
            servable.unload()
            servable.state = END
            log.info("Unloaded model %s version %d (%s)", servable.name, servable.version,
                     "removed from disk" if servable.version not in on_disk
                     else "no longer wanted by the version policy")

    def _load(self, name: str, version: int, path: str) -> None:
        servable = ServableVersion(name, version, path)
        with self._lock:
            self._versions[name][version] = servable
            servable.state = LOADING
        try:
            servable.load(self.warmup)
        except Exception as e:
            servable.unload()
            servable.error = ("UNKNOWN", f"{type(e).__name__}: {' '.join(str(e).split())}")
            servable.state = END
            log.error("Loading model %s version %d from %s failed: %s", name, version, path,
                      servable.error[1])
            return
        servable.state = AVAILABLE

    def start(self, poll_seconds: float) -> None:
        """Loads what is there now (before the port opens, as the model server waits for its
        initial load), then polls every poll_seconds (0: never again, < 0: no poll at all)."""
        if poll_seconds >= 0:
            self.poll()
        if poll_seconds > 0:
            self._thread = threading.Thread(target=self._poll_loop, args=(poll_seconds,),
                                            name="garden.serve poll", daemon=True)
            self._thread.start()

    def _poll_loop(self, seconds: float) -> None:
        while not self._stop.wait(seconds):
            self.poll()

    def stop(self) -> None:
        self._stop.set()

    # -- lookups --------------------------------------------------------------------------
    def _config(self, name: str) -> ModelConfig:
        config = self.configs.get(name)
        if config is None:
            raise ServingError("NOT_FOUND", f"Servable not found for request: Latest({name})")
        return config

    def _label_version(self, config: ModelConfig, label: str) -> int:
        version = config.label_map.get(label)
        if version is None:
            raise invalid(f"Unrecognized servable version label: {label}")
        return version

    def servable(self, name: str, version: Optional[int], label: Optional[str]) -> ServableVersion:
        config = self._config(name)
        if label is not None:
            version = self._label_version(config, label)
        with self._lock:
            served = {v: s for v, s in self._versions[name].items() if s.state == AVAILABLE}
        if version is None:
            if not served:
                raise ServingError("NOT_FOUND", f"Servable not found for request: Latest({name})")
            return served[max(served)]
        if version not in served:
            raise ServingError("NOT_FOUND",
                               f"Servable not found for request: Specific({name}, {version})")
        return served[version]

    def version_states(self, name: str, version: Optional[int],
                       label: Optional[str]) -> List[tuple]:
        """[(version, state, error or None)], newest first: every known version of a model,
        or the one asked for (by number or label). NOT_FOUND as GetModelStatus answers it.
        Shared by the REST status route and gRPC's ModelService.GetModelStatus."""
        config = self.configs.get(name)
        if config is None:
            raise ServingError("NOT_FOUND", f"Could not find any versions of model {name}")
        if label is not None:
            version = self._label_version(config, label)
        with self._lock:
            servables = dict(self._versions[name])
        if version is not None:
            if version not in servables:
                raise ServingError("NOT_FOUND", f"Could not find version {version} of model "
                                                f"{name}")
            servables = {version: servables[version]}
        if not servables:
            raise ServingError("NOT_FOUND", f"Could not find any versions of model {name}")
        return [(v, s.state, s.error) for v, s in sorted(servables.items(), reverse=True)]

    def status(self, name: str, version: Optional[int], label: Optional[str]) -> dict:
        return {"model_version_status": [
            {"version": str(v), "state": state,
             "status": {"error_code": error[0] if error else "OK",
                        "error_message": error[1] if error else ""}}
            for v, state, error in self.version_states(name, version, label)]}


def metadata(servable: ServableVersion) -> dict:
    """TF Serving's GetModelMetadata JSON: the SignatureDefMap under the doubled key."""
    from google.protobuf import json_format

    def as_dict(message):
        return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                         always_print_fields_with_no_presence=True)

    return {"model_spec": {"name": servable.name, "signature_name": "",
                           "version": str(servable.version)},
            "metadata": {"signature_def": {"signature_def": {
                key: as_dict(sd) for key, sd in sorted(servable.signature_defs.items())}}}}


class RestApi:
    """The WSGI application: TF Serving's REST routes over a ModelManager."""

    def __init__(self, manager: ModelManager):
        self.manager = manager

    def __call__(self, environ, start_response):
        from werkzeug.wrappers import Request, Response

        request = Request(environ)
        try:
            status, body = 200, self.handle(request.method, request.path, request.get_data())
        except ServingError as e:
            status, body = e.http_status, {"error": e.message}
        except Exception as e:  # a bug, not the client's: answer 500 and keep serving
            log.exception("%s %s failed", request.method, request.path)
            status, body = 500, {"error": f"Internal: {type(e).__name__}: {e}"}
        response = Response(dumps(body), status=status, content_type="application/json")
        return response(environ, start_response)

    def handle(self, method: str, path: str, body: bytes) -> dict:
        if not path.lower().startswith("/v1/"):
            raise ServingError("NOT_FOUND", f"No handler for {method} {path}: the API is under "
                                            f"/v1/models/")
        if method == "POST":
            match = PREDICTION_API.fullmatch(path)
            if match:
                name, version, label, verb = match.groups()
                return self._infer(verb.lower(), name, _version(version), label, body)
        elif method == "GET":
            match = MODEL_STATUS_API.fullmatch(path)
            if match:
                name, version, label, subresource = match.groups()
                if not name:
                    raise invalid("Missing model name in request.")
                if subresource:
                    return metadata(self.manager.servable(name, _version(version), label))
                return self.manager.status(name, _version(version), label)
        raise invalid(f"Malformed request: {method} {path}")

    def _infer(self, verb: str, name: str, version: Optional[int], label: Optional[str],
               body: bytes) -> dict:
        doc = parse_body(body)
        key = signature_name(doc)
        if verb == "predict":
            # As FillPredictRequestFromJson: the servable and signature are looked up before
            # the instances are read (their dtypes come from the SignatureDef).
            servable = self.manager.servable(name, version, label)
            servable.signature(key)
            arrays, fmt = predict_inputs(doc, servable.input_dtypes[key])
            return predict_response(servable.run(key, arrays), fmt)
        serialized = examples(doc, verb)
        servable = self.manager.servable(name, version, label)
        outputs = run_examples(servable, key, verb, serialized)
        if verb == "classify":
            return classify_response(outputs, len(serialized))
        return regress_response(outputs, len(serialized))


def example_input(servable: ServableVersion, key: str, verb: str) -> str:
    """The one (serialized tf.Example) input of signature `key`, checked to be a `verb`
    ("classify" / "regress") signature with TF Serving's method-name check: the REST
    :classify / :regress and gRPC Classify / Regress / MultiInference give the same errors."""
    sd = servable.signature(key)
    expected = CLASSIFY if verb == "classify" else REGRESS
    if sd.method_name != expected:
        fitting = sorted(k for k, s in servable.signature_defs.items()
                         if s.method_name == expected)
        kind = "classification" if verb == "classify" else "regression"
        raise invalid(f"Expected {kind} signature method_name to be {expected}. Was: "
                      f"{sd.method_name or PREDICT} (signature {key}; this model's {verb} "
                      f"signatures: {fitting}: pass \"signature_name\")")
    if len(sd.inputs) != 1:
        raise invalid(f"Expected one input Tensor in signature {key}, got {sorted(sd.inputs)}")
    (input_name,) = sd.inputs
    return input_name


def run_examples(servable: ServableVersion, key: str, verb: str,
                 serialized: List[bytes]) -> Dict[str, np.ndarray]:
    """Signature `key` (checked by example_input) on serialized tf.Examples."""
    input_name = example_input(servable, key, verb)
    array = np.empty(len(serialized), dtype=object)
    array[:] = serialized
    return servable.run(key, {input_name: array})


def _version(text: Optional[str]) -> Optional[int]:
    if not text:
        return None
    version = int(text)
    if version >= 2 ** 63:
        raise invalid(f"Failed to convert version: {text} to numeric.")
    return version


def make_server(manager: ModelManager, host: str, port: int, fd: Optional[int] = None):
    """Werkzeug's threaded WSGI server on (host, port); port 0 picks a free one (server.port).
    fd: a socket already bound to them and listening (garden.serve binds before loading)."""
    from werkzeug.serving import make_server as werkzeug_server

    return werkzeug_server(host, port, RestApi(manager), threaded=True, fd=fd)


def quiet_request_log() -> None:
    """Werkzeug logs one line per request at INFO; a served model under load would drown the
    log in them."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)


# The start-up line that says where the API listens (TF Serving logs the same words); tests and
# the latency benchmark start garden.serve with --rest_api_port=0 and read the port from it.
PORT_LINE = re.compile(r"Exporting HTTP/REST API at:([\d.]+):(\d+)")


def pid_and_port_line(host: str, port: int) -> str:
    return (f"Exporting HTTP/REST API at:{host}:{port} ... (pid {os.getpid()}; "
            f"try: curl http://{host}:{port}/v1/models/NAME)")
