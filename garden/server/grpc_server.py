"""garden.serve's gRPC API: TensorFlow Serving's PredictionService and ModelService.

The services are the generated ones of the `tensorflow-serving-api` wheel
(tensorflow_serving.apis.prediction_service_pb2_grpc / model_service_pb2_grpc servicers), and
every request and response is its generated message (predict_pb2, classification_pb2,
regression_pb2, inference_pb2, get_model_metadata_pb2, get_model_status_pb2 with status_pb2,
model_pb2's ModelSpec), so any TF Serving client (the Python stubs, or stubs built from the same
protos in another language) talks to garden.serve as to tensorflow_model_server on --port:

    tensorflow.serving.PredictionService
        Predict            PredictRequest {model_spec, inputs: {alias: TensorProto},
                           output_filter} -> PredictResponse {model_spec, outputs}
        Classify, Regress  ClassificationRequest / RegressionRequest {model_spec, input:
                           tf.Examples, optionally with a context} -> results
        MultiInference     several classify / regress signatures of one model on one input
        GetModelMetadata   metadata_field ["signature_def"] -> the SignatureDefMap (in an Any)
    tensorflow.serving.ModelService
        GetModelStatus     the versions' states, as the REST status route
        HandleReloadConfigRequest   UNIMPLEMENTED (the model config is read at start-up)

Every answer comes from the ModelManager the REST API serves from (one process, the same loaded
versions; garden/server/server.py), through the same code: servable lookup (NOT_FOUND
"Servable not found for request: ..."), ServableVersion.run (shape checks, graph errors with
their code), the classify / regress method-name check and result checks. ModelSpec: `name`,
then `version` (google.protobuf.Int64Value) or `version_label` (a oneof: a client cannot set
both; a hand-made message carrying both fields on the wire is refused with INVALID_ARGUMENT, as
the REST API refuses /versions/N/labels/L, where the generated parser would keep the last one:
an interceptor reads the field numbers with protobuf's own UnknownFieldSet),
`signature_name` ("" = serving_default). Responses echo the resolved model_spec (name, version,
signature_name), as TF Serving's MakeModelSpec.

Status codes and messages follow TF Serving's sources (model_servers/prediction_service_impl.cc,
get_model_status_impl.cc, servables/tensorflow/predict_util.cc, get_model_metadata_impl.cc,
multi_inference.cc, util.cc):
    no model_spec                              INVALID_ARGUMENT "Missing ModelSpec"
    unknown model / version                    NOT_FOUND
    unknown version label                      INVALID_ARGUMENT "Unrecognized servable version
                                               label: L" (ServerCore's code; REST's too)
    Predict: unknown signature                 FAILED_PRECONDITION "Serving signature key "S"
                                               not found."
    Classify / Regress: unknown signature      INVALID_ARGUMENT
    missing or extra input                     INVALID_ARGUMENT "input size does not match
                                               signature: ..."
    wrong dtype, wrong rank or fixed size,
    an unparsable TensorProto                  INVALID_ARGUMENT
    unknown or repeated output_filter alias    INVALID_ARGUMENT
    Classify on a non-classify signature       INVALID_ARGUMENT "Expected classification
                                               signature method_name to be ..." (as REST)
    no examples                                INVALID_ARGUMENT "Input is empty."
    MultiInference: several models, a repeated
    signature, different input tensors         INVALID_ARGUMENT; a method other than classify /
                                               regress: UNIMPLEMENTED
Messages longer than 1024 characters are cut with "...TRUNCATED" (grpc_status_util.cc). An
unexpected exception is INTERNAL, logged with its traceback; the server goes on.

The message size limits are INT32_MAX both ways, as TF Serving sets them (gRPC's default
receive limit is 4 MB). SO_REUSEPORT is off, so that a --port in use is an error rather than a
second server sharing it.

This module imports only grpc at the top: garden.serve binds the port (make_server) before
TensorFlow loads, and add_services (which needs the protos, hence TensorFlow) later.
"""

from __future__ import annotations

import logging
import re
from concurrent import futures
from typing import Dict, List, Optional, Tuple

import grpc

log = logging.getLogger("garden.serve")

INT32_MAX = 2 ** 31 - 1
MESSAGE_LIMIT = 1024  # grpc_status_util.cc's kErrorMessageLimit
SERVER_OPTIONS = [("grpc.max_send_message_length", INT32_MAX),
                  ("grpc.max_receive_message_length", INT32_MAX),
                  ("grpc.so_reuseport", 0)]
# What a client needs for messages over gRPC's 4 MB default (TF Serving's own clients set them).
CLIENT_OPTIONS = [("grpc.max_send_message_length", INT32_MAX),
                  ("grpc.max_receive_message_length", INT32_MAX)]

PREDICTION_SERVICE = "tensorflow.serving.PredictionService"
MODEL_SERVICE = "tensorflow.serving.ModelService"

# The start-up line that says where the gRPC API listens (TF Serving's words); tests read the
# port from it when garden.serve runs with --port=0.
PORT_LINE = re.compile(r"Running gRPC ModelServer at ([\d.]+):(\d+)")


def port_line(host: str, port: int) -> str:
    return f"Running gRPC ModelServer at {host}:{port} ..."


class BindError(OSError):
    pass


def make_server(host: str, port: int, max_workers: int = 16) -> Tuple[grpc.Server, int]:
    """A gRPC server bound to (host, port) (0: a free port), not started and with no services
    yet; (server, port). BindError if the address cannot be bound (in use, not local)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                    thread_name_prefix="garden.serve grpc"),
                         options=SERVER_OPTIONS, interceptors=[_OneVersionChoice()])
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as e:  # grpcio raises where older versions returned 0
        server.stop(None)
        raise BindError(f"cannot bind {address}: {e}") from None
    if not bound:
        server.stop(None)
        raise BindError(f"cannot bind {address}")
    return server, bound


def add_services(server: grpc.Server, manager) -> None:
    """Registers PredictionService and ModelService over `manager` (server.ModelManager),
    each as a subclass of the generated servicer base (imported here, not at the top: the
    generated modules load TensorFlow's protos, hence TensorFlow)."""
    from tensorflow_serving.apis import model_service_pb2_grpc as ms
    from tensorflow_serving.apis import prediction_service_pb2_grpc as ps

    prediction = type("PredictionServicer", (PredictionService, ps.PredictionServiceServicer),
                      {})
    model = type("ModelServicer", (ModelService, ms.ModelServiceServicer), {})
    ps.add_PredictionServiceServicer_to_server(prediction(manager), server)
    ms.add_ModelServiceServicer_to_server(model(manager), server)


# ----------------------------------------------------------------------------------------
# Both version and version_label on the wire
# ----------------------------------------------------------------------------------------


def _wire_fields(raw: bytes):
    """The top-level fields of a serialized message as protobuf's own parser reads them: parsed
    as google.protobuf.Empty, every field is an unknown one (field_number, wire_type, data).
    DecodeError on bytes that are not a message."""
    from google.protobuf import empty_pb2, unknown_fields

    return unknown_fields.UnknownFieldSet(empty_pb2.Empty.FromString(raw))


def _payloads(raw: bytes, number: int) -> List[bytes]:
    """The bytes of every occurrence of the message field `number` (wire type 2)."""
    return [f.data for f in _wire_fields(raw) if f.field_number == number and f.wire_type == 2]


def _both_version_choices(raw: bytes, multi: bool) -> bool:
    """Whether a ModelSpec of the request carries both version (2) and version_label (4) on the
    wire: the field numbers of every occurrence of the request's model_spec (1; protobuf merges
    repeated occurrences of a message field), or per task of a MultiInferenceRequest (tasks 1,
    InferenceTask.model_spec 1). The generated parser cannot tell: it keeps the last member of
    the version_choice oneof."""
    from google.protobuf.message import DecodeError

    try:
        specs = _payloads(raw, 1)
        groups = [_payloads(task, 1) for task in specs] if multi else [specs]
        return any({2, 4} <= {f.field_number for spec in group for f in _wire_fields(spec)}
                   for group in groups)
    except DecodeError:
        return False  # not a message: the generated parser will say so


BOTH_VERSION_CHOICES = ("ModelSpec sets both version and version_label: give at most one "
                        "(they are a oneof; the REST API refuses /versions/N/labels/L too)")


class _OneVersionChoice(grpc.ServerInterceptor):
    """Refuses a ModelSpec holding both version and version_label before the generated
    deserializer silently keeps the last of the two."""

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        method = handler_call_details.method or ""
        multi = method.endswith("/MultiInference")
        deserialize, behaviour = handler.request_deserializer, handler.unary_unary

        def read(raw: bytes):
            return deserialize(raw), _both_version_choices(raw, multi)

        def answer(pair, context):
            request, both = pair
            if both:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, BOTH_VERSION_CHOICES)
            return behaviour(request, context)

        return grpc.unary_unary_rpc_method_handler(
            answer, request_deserializer=read,
            response_serializer=handler.response_serializer)


# ----------------------------------------------------------------------------------------
# The services
# ----------------------------------------------------------------------------------------


def _abort(context, code: str, message: str):
    if len(message) > MESSAGE_LIMIT:
        message = message[:MESSAGE_LIMIT] + "...TRUNCATED"
    context.abort(getattr(grpc.StatusCode, code, grpc.StatusCode.UNKNOWN), message)


def _answered(method):
    """ServingErrors become their status code; anything else INTERNAL, logged."""
    import functools

    @functools.wraps(method)
    def wrapper(self, request, context):
        from garden.server.server_json import ServingError

        try:
            return method(self, request, context)
        except ServingError as e:
            _abort(context, e.code, e.message)
        except Exception as e:  # a bug, not the client's: answer INTERNAL and keep serving
            log.exception("gRPC %s failed", method.__name__)
            _abort(context, "INTERNAL", f"Internal: {type(e).__name__}: {e}")
    return wrapper


def _invalid(message: str):
    from garden.server.server_json import invalid

    return invalid(message)


def _spec(request) -> Tuple[str, Optional[int], Optional[str], str]:
    """(name, version, label, signature key) of a request's model_spec."""
    if not request.HasField("model_spec"):
        raise _invalid("Missing ModelSpec")
    return _resolve(request.model_spec)


def _resolve(spec) -> Tuple[str, Optional[int], Optional[str], str]:
    choice = spec.WhichOneof("version_choice")
    version = spec.version.value if choice == "version" else None
    label = spec.version_label if choice == "version_label" else None
    return spec.name, version, label, spec.signature_name or "serving_default"


def _echo(out_spec, name: str, version: int, key: Optional[str]) -> None:
    """TF Serving's MakeModelSpec: name, the served version, the resolved signature name."""
    out_spec.Clear()
    out_spec.name = name
    out_spec.version.value = version
    if key is not None:
        out_spec.signature_name = key


def _dtype_name(enum: int) -> str:
    from tensorflow.core.framework import types_pb2

    try:
        return types_pb2.DataType.Name(enum)
    except ValueError:
        return f"dtype {enum}"


def serialized_examples(input_proto) -> List[bytes]:
    """The serialized tf.Examples of an Input (example_list, or example_list_with_context:
    each example appended to the serialized context, so that the example's own features win,
    as TF Serving's InputToSerializedExampleTensor)."""
    kind = input_proto.WhichOneof("kind")
    if kind == "example_list":
        out = [e.SerializeToString() for e in input_proto.example_list.examples]
    elif kind == "example_list_with_context":
        with_context = input_proto.example_list_with_context
        context = with_context.context.SerializeToString()
        out = [context + e.SerializeToString() for e in with_context.examples]
    else:
        out = []
    if not out:
        raise _invalid("Input is empty.")
    return out


class PredictionService:
    """tensorflow.serving.PredictionService's methods over a ModelManager (add_services mixes
    them into the generated PredictionServiceServicer)."""

    def __init__(self, manager):
        self.manager = manager

    @_answered
    def Predict(self, request, context):
        import numpy as np
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2

        name, version, label, key = _spec(request)
        servable = self.manager.servable(name, version, label)
        if key not in servable.functions:
            from garden.server.server_json import ServingError

            raise ServingError("FAILED_PRECONDITION",
                               f"Serving signature key \"{key}\" not found. (signatures of "
                               f"{servable.name} version {servable.version}: "
                               f"{sorted(servable.functions)})")
        sd = servable.signature_defs[key]
        sent, wanted = set(request.inputs), set(sd.inputs)
        if sent != wanted:
            j = ",".join
            raise _invalid(
                f"input size does not match signature: {len(sent)}!={len(wanted)} "
                f"len({{{j(sorted(sent))}}}) != len({{{j(sorted(wanted))}}}). Sent extra: "
                f"{{{j(sorted(sent - wanted))}}}. Missing but required: "
                f"{{{j(sorted(wanted - sent))}}}.")
        arrays: Dict[str, np.ndarray] = {}
        for alias in sorted(sent):
            proto, info = request.inputs[alias], sd.inputs[alias]
            if proto.dtype != info.dtype:
                raise _invalid(f"Expects input {alias} of signature {key} to be "
                               f"{_dtype_name(info.dtype)} but {_dtype_name(proto.dtype)} is "
                               f"provided")
            try:
                arrays[alias] = tf.make_ndarray(proto)
            except Exception as e:  # a size that does not fit the content, a bad dtype ...
                raise _invalid(f"tensor parsing error: {alias} "
                               f"({type(e).__name__}: {' '.join(str(e).split())})") from None
        names = list(request.output_filter)
        for alias in names:
            if alias not in sd.outputs:
                raise _invalid(f"output tensor alias not found in signature: {alias} Outputs "
                               f"expected to be in the set {{{','.join(sorted(sd.outputs))}}}.")
        if len(set(names)) != len(names):
            repeated = next(a for a in names if names.count(a) > 1)
            raise _invalid(f"duplicate output tensor alias: {repeated}")
        outputs = servable.run(key, arrays)
        response = predict_pb2.PredictResponse()
        _echo(response.model_spec, name, servable.version, key)
        for alias in names or sorted(outputs):
            response.outputs[alias].CopyFrom(tf.make_tensor_proto(outputs[alias]))
        return response

    def _examples(self, request, verb: str, response, fill):
        """Classify's and Regress's answer: the request's examples run through the signature,
        the model spec echoed and the results put into ``response`` by ``fill``."""
        from garden.server.server import run_examples

        name, version, label, key = _spec(request)
        servable = self.manager.servable(name, version, label)
        serialized = serialized_examples(request.input)
        outputs = run_examples(servable, key, verb, serialized)
        _echo(response.model_spec, name, servable.version, key)
        fill(response.result, outputs, len(serialized))
        return response

    @_answered
    def Classify(self, request, context):
        from tensorflow_serving.apis import classification_pb2

        return self._examples(request, "classify", classification_pb2.ClassificationResponse(),
                              _fill_classifications)

    @_answered
    def Regress(self, request, context):
        from tensorflow_serving.apis import regression_pb2

        return self._examples(request, "regress", regression_pb2.RegressionResponse(),
                              _fill_regressions)

    @_answered
    def MultiInference(self, request, context):
        from garden.server.server import example_input, run_examples
        from garden.serving.base import CLASSIFY, REGRESS
        from tensorflow_serving.apis import inference_pb2

        first = request.tasks[0].model_spec if request.tasks else None
        name, version, label, _ = (_resolve(first) if first is not None
                                   else ("", None, None, ""))
        servable = self.manager.servable(name, version, label)
        keys, input_tensor, plan = set(), None, []
        for task in request.tasks:
            if not task.model_spec.name:
                raise _invalid("Found ModelSpec with an empty model name.")
            if task.model_spec.name != name:
                raise _invalid("All ModelSpecs in a MultiInferenceRequest must access the same "
                               "model name.")
            key = task.model_spec.signature_name or "serving_default"
            if key in keys:
                raise _invalid(f"Duplicate evaluation of signature: {key}")
            keys.add(key)
            if key not in servable.functions:
                raise _invalid(f"Requested signature not found in model graph: {key}")
            if task.method_name not in (CLASSIFY, REGRESS):
                from garden.server.server_json import ServingError

                raise ServingError("UNIMPLEMENTED",
                                   f"Unsupported signature method_name: {task.method_name}")
            verb = "classify" if task.method_name == CLASSIFY else "regress"
            alias = example_input(servable, key, verb)
            tensor = servable.signature_defs[key].inputs[alias].name
            if input_tensor is not None and tensor != input_tensor:
                raise _invalid(f"Input tensor must be the same for all Signatures. ({key} reads "
                               f"{tensor}, the first task's signature {input_tensor})")
            input_tensor = tensor
            plan.append((task, key, verb))
        serialized = serialized_examples(request.input)
        response = inference_pb2.MultiInferenceResponse()
        for task, key, verb in plan:
            outputs = run_examples(servable, key, verb, serialized)
            result = response.results.add()
            if verb == "classify":
                _fill_classifications(result.classification_result, outputs, len(serialized))
            else:
                _fill_regressions(result.regression_result, outputs, len(serialized))
            _echo(result.model_spec, task.model_spec.name, servable.version, key)
        return response

    @_answered
    def GetModelMetadata(self, request, context):
        from tensorflow_serving.apis import get_model_metadata_pb2

        name, version, label, _ = _spec(request)
        fields = list(request.metadata_field)
        if not fields:
            raise _invalid("GetModelMetadataRequest must specify at least one metadata_field")
        for field in fields:
            if field != "signature_def":
                raise _invalid(f"Metadata field {field} is not supported")
        servable = self.manager.servable(name, version, label)
        signature_defs = get_model_metadata_pb2.SignatureDefMap()
        for key, sd in servable.signature_defs.items():
            signature_defs.signature_def[key].CopyFrom(sd)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        _echo(response.model_spec, servable.name, servable.version, None)
        response.metadata["signature_def"].Pack(signature_defs)
        return response


def _fill_classifications(result, outputs, batch: int) -> None:
    from garden.server.server_json import classify_results

    labels, scores = classify_results(outputs, batch)
    for row_labels, row_scores in zip(labels, scores.tolist()):
        classifications = result.classifications.add()
        for label, score in zip(row_labels, row_scores):
            classifications.classes.add(label=label, score=score)


def _fill_regressions(result, outputs, batch: int) -> None:
    from garden.server.server_json import regress_results

    for value in regress_results(outputs, batch).tolist():
        result.regressions.add(value=value)


class ModelService:
    """tensorflow.serving.ModelService's methods over a ModelManager."""

    def __init__(self, manager):
        self.manager = manager

    @_answered
    def GetModelStatus(self, request, context):
        from tensorflow_serving.apis import get_model_status_pb2, status_pb2

        name, version, label, _ = _spec(request)
        response = get_model_status_pb2.GetModelStatusResponse()
        for v, state, error in self.manager.version_states(name, version, label):
            # Enum fields take their value names: state "AVAILABLE", error_code "NOT_FOUND".
            code, message = error or ("OK", "")
            response.model_version_status.add(
                version=v, state=state,
                status=status_pb2.StatusProto(error_code=code, error_message=message))
        return response

    def HandleReloadConfigRequest(self, request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED,
                      "garden.serve reads its model config at start-up only "
                      "(HandleReloadConfigRequest is not served)")
