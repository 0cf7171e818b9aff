"""TF Serving's REST bodies <-> numpy arrays, as its util/json_tensor.cc defines them.

Requests (docs/tasks.md "Serving: garden.serve"; TensorFlow Serving's REST API documentation):
    :predict   {"signature_name"?, "instances": [...]}  row format: one entry per example, a
                                                         bare value (one input) or an object
                                                         {input: value} (every input named)
               {"signature_name"?, "inputs": ...}        columnar: a value (one input) or an
                                                         object {input: tensor}
    :classify / :regress  {"signature_name"?, "context"?: {feature: value},
                           "examples": [{feature: value | [values]}]}  -> tf.Example each
Responses:
    row        {"predictions": [...]}  one entry per example; an object {output: value} when
               the signature has several outputs (all must share the batch size)
    columnar   {"outputs": tensor | {output: tensor}}
    classify   {"results": [[[label, score], ...], ...]};  regress {"results": [number, ...]}
Values: a string tensor takes JSON strings or {"b64": "..."}; a string output whose name ends in
`_bytes` goes out as {"b64": ...}; NaN / Infinity are read and written as JSON tokens; float32
outputs are written with the shortest decimal that round-trips (TF Serving's WriteDecimal).
Every error is a ServingError(code, message): the code is a TF status name, mapped to the
HTTP status by HTTP_STATUS (TF Serving's ToHTTPStatusCode).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Dict, List, Sequence, Tuple

import numpy as np

# TF status code -> HTTP status (tensorflow_serving/util/net_http/... ToHTTPStatusCode).
HTTP_STATUS = {
    "OK": 200, "CANCELLED": 499, "UNKNOWN": 500, "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504, "NOT_FOUND": 404, "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429, "FAILED_PRECONDITION": 400,
    "ABORTED": 409, "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501, "INTERNAL": 500,
    "UNAVAILABLE": 503, "DATA_LOSS": 500, "UNAUTHENTICATED": 401,
}

ROW, COLUMNAR = "row", "columnar"
BYTES_SUFFIX = "_bytes"

_INT_RANGES = {np.dtype(t): (np.iinfo(t).min, np.iinfo(t).max)
               for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64)}
_FLOAT32_MAX = float(np.finfo(np.float32).max)


class ServingError(Exception):
    """A request answered with an error: code is a TF status name (INVALID_ARGUMENT, ...)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)


def invalid(message: str) -> ServingError:
    return ServingError("INVALID_ARGUMENT", message)


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 200 else text[:200] + "..."


def _json_type(value) -> str:
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        return "Number"
    return {str: "String", list: "Array", dict: "Object"}.get(type(value), type(value).__name__)


# ----------------------------------------------------------------------------------------
# Parsing requests
# ----------------------------------------------------------------------------------------


def parse_body(body: bytes) -> dict:
    """The request's JSON object (NaN and Infinity accepted, as rapidjson's kParseNanAndInfFlag)."""
    if not body:
        raise invalid("JSON Parse error: The document is empty")
    try:
        doc = json.loads(body)
    except UnicodeDecodeError as e:
        raise invalid(f"JSON Parse error: Invalid encoding in string at offset: {e.start}")
    except json.JSONDecodeError as e:
        raise invalid(f"JSON Parse error: {e.msg} at offset: {e.pos}")
    except RecursionError:
        raise invalid("JSON Parse error: the document is nested too deeply")
    if not isinstance(doc, dict):
        raise invalid(f"JSON Value: {_short(doc)} Is not object")
    return doc


def signature_name(doc: dict) -> str:
    name = doc.get("signature_name", "")
    if not isinstance(name, str):
        raise invalid(f"JSON Value: {_short(doc)} not formatted correctly. 'signature_name' "
                      f"key must be a string value.")
    return name or "serving_default"


def _is_b64(value) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _b64decode(value) -> bytes:
    try:
        return base64.b64decode(value["b64"], validate=True)
    except (binascii.Error, ValueError):
        raise invalid("Unable to base64 decode") from None


def _dense_shape(value) -> List[int]:
    """The shape read along the first elements (json_tensor's GetDenseTensorShape)."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def _leaf(value, dtype: np.dtype):
    """One JSON value as an element of `dtype`, or INVALID_ARGUMENT as AddValueToTensor."""
    if dtype == object:
        if isinstance(value, str):
            try:
                return value.encode("utf-8")
            except UnicodeEncodeError:
                raise invalid(f"JSON Value: {_short(value)} is not valid UTF-8 text: send "
                              f"binary data as {{\"b64\": ...}}") from None
        if isinstance(value, dict):
            if not _is_b64(value):
                raise invalid(f"JSON Value: {_short(value)} not formatted correctly for base64 "
                              f"data")
            return _b64decode(value)
    elif isinstance(value, dict):
        raise _type_error(value, dtype)
    elif dtype == np.bool_:
        if isinstance(value, bool):
            return value
    elif dtype.kind == "f":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if dtype == np.float32 and math.isfinite(value) and abs(value) > _FLOAT32_MAX:
                raise invalid(f"Cannot convert JSON value: {_short(value)} to float without "
                              f"loss of precision.")
            return value
    elif isinstance(value, int) and not isinstance(value, bool):
        low, high = _INT_RANGES[dtype]
        if low <= value <= high:
            return value
    raise _type_error(value, dtype)


def _dtype_name(dtype: np.dtype) -> str:
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2
    return types_pb2.DataType.Name(tf.as_dtype(dtype).as_datatype_enum)


def _type_error(value, dtype) -> ServingError:
    name = "DT_STRING" if dtype == object else _dtype_name(np.dtype(dtype))
    return invalid(f"JSON Value: {_short(value)} Type: {_json_type(value)} is not of expected "
                   f"type: {name}")


def _fill(value, shape: List[int], level: int, dtype, out: list) -> None:
    """json_tensor's FillTensorProto: every leaf at depth len(shape), every list the size the
    first elements announced."""
    if not isinstance(value, list):
        if level != len(shape):
            raise invalid(f"JSON Value: {_short(value)} found at incorrect level: {level + 1} in "
                          f"the JSON DOM. Expected at level: {len(shape)}")
        out.append(_leaf(value, dtype))
        return
    if level >= len(shape):
        raise invalid(f"Encountered list at unexpected level: {level} expected < {len(shape)}")
    if len(value) != shape[level]:
        raise invalid(f"Encountered list at unexpected size: {len(value)} at level: {level} "
                      f"expected size: {shape[level]}")
    for item in value:
        _fill(item, shape, level + 1, dtype, out)


def _contains_bool(value) -> bool:
    if isinstance(value, list):
        if value and isinstance(value[0], list):
            return any(_contains_bool(v) for v in value)
        return bool in set(map(type, value))
    return type(value) is bool


def to_array(value, dtype: np.dtype) -> np.ndarray:
    """A JSON value (scalar or nested lists) as a dense array of `dtype` (object = strings).

    Numbers go through numpy in one call (ids at batch 32: 12288 values); strings, and anything
    numpy cannot take as is (ragged lists, b64 objects, a wrong type, true/false among numbers,
    which numpy would read as 1/0), are walked element by element, which also gives the precise
    error message.
    """
    dtype = np.dtype(dtype)
    shape = _dense_shape(value)
    array = None
    if dtype != object:
        try:
            array = np.array(value)
        except (ValueError, TypeError, OverflowError):
            pass
    if array is not None and list(array.shape) == shape and array.size and (
            dtype == np.bool_ or not _contains_bool(value)):
        kind = array.dtype.kind
        if dtype.kind in "iu" and kind in "iu":
            low, high = _INT_RANGES[dtype]
            if array.min() >= low and array.max() <= high:
                return array.astype(dtype)
        elif dtype.kind == "f" and kind in "iuf":
            if dtype != np.float32 or np.all(~np.isfinite(array) |
                                             (np.abs(array) <= _FLOAT32_MAX)):
                return array.astype(dtype)
        elif dtype == np.bool_ and kind == "b":
            return array
    flat: list = []
    _fill(value, shape, 0, dtype, flat)
    if dtype == object:
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(shape)
    return np.array(flat, dtype=dtype).reshape(shape)


def predict_inputs(doc: dict, input_dtypes: Dict[str, np.dtype]) -> Tuple[Dict[str, np.ndarray], str]:
    """The signature's input arrays from a :predict body, and its format (ROW or COLUMNAR)."""
    if not input_dtypes:
        raise invalid("Failed to get input map for signature")
    names = sorted(input_dtypes)
    if "instances" in doc and "inputs" in doc:
        raise invalid(f"JSON Value: {_short(doc)} Not formatted correctly expecting only one of "
                      f"'inputs' or 'instances' keys to exist ")
    if "instances" in doc:
        return _from_instances(doc["instances"], doc, input_dtypes, names), ROW
    if "inputs" in doc:
        return _from_inputs(doc["inputs"], input_dtypes, names), COLUMNAR
    raise invalid("Missing 'inputs' or 'instances' key")


def _from_instances(instances, doc, input_dtypes, names):
    if not isinstance(instances, list):
        raise invalid(f"JSON Value: {_short(doc)} Excepting 'instances' to be an list/array")
    if not instances:
        raise invalid(f"JSON Value: {_short(doc)} No values in 'instances' array")
    named = isinstance(instances[0], dict) and not _is_b64(instances[0])
    if not named and len(names) > 1:
        raise invalid(f"instances is a plain list, but expecting list of objects as multiple "
                      f"input tensors required as per tensorinfo_map ({', '.join(names)})")
    if not named:
        for i, item in enumerate(instances):
            if isinstance(item, dict) and not _is_b64(item):
                raise invalid(f"Expecting value/list but got object at item {i} of input list")
        return {names[0]: _stack(instances, names[0], input_dtypes[names[0]])}
    for i, item in enumerate(instances):
        if not isinstance(item, dict) or _is_b64(item):
            raise invalid(f"Expecting object but got list at item {i} of input list")
        if sorted(item) != names:
            unknown = sorted(set(item) - set(names))
            if unknown:
                raise invalid(f"Failed to process element: {i} key: {unknown[0]} of 'instances' "
                              f"list. Error: JSON object: does not have named input: "
                              f"{unknown[0]}")
            raise invalid(f"Failed to process element: {i} of 'instances' list. JSON object: "
                          f"{_short(item)} must only have keys: {','.join(names)}")
    return {name: _stack([item[name] for item in instances], name, input_dtypes[name])
            for name in names}


def _stack(values: list, name: str, dtype) -> np.ndarray:
    """The per-example values of one input as one [batch, ...] array; every example must have
    the same shape (json_tensor's AddInstanceItem)."""
    first = _dense_shape(values[0])
    for i, value in enumerate(values):
        shape = _dense_shape(value)
        if shape != first:
            raise invalid(f"Failed to process element: {i} key: {name} of 'instances' list. "
                          f"Error: Expecting shape [{','.join(map(str, first))}] but got: "
                          f"[{','.join(map(str, shape))}]")
    try:
        return to_array(values, dtype)
    except ServingError as e:
        raise invalid(f"Failed to process 'instances' key: {name}. Error: {e.message}") from None


def _from_inputs(inputs, input_dtypes, names):
    if not isinstance(inputs, dict) or _is_b64(inputs):
        if len(names) > 1:
            raise invalid(f"inputs is a plain value/list, but expecting an object as multiple "
                          f"input tensors required as per tensorinfo_map ({', '.join(names)})")
        return {names[0]: to_array(inputs, input_dtypes[names[0]])}
    unknown = sorted(set(inputs) - set(names))
    if unknown:
        raise invalid(f"JSON object: does not have named input: {unknown[0]} (inputs of this "
                      f"signature: {', '.join(names)})")
    arrays = {}
    for name in names:
        if name not in inputs:
            raise invalid(f"Missing named input: {name} in 'inputs' object.")
        try:
            arrays[name] = to_array(inputs[name], input_dtypes[name])
        except ServingError as e:
            raise invalid(f"'inputs' key: {name}. Error: {e.message}") from None
    return arrays


def _feature_values(name: str, content) -> Tuple[str, list]:
    """(kind, values) of one tf.Example feature from a JSON value or list (AddValueToFeature)."""
    kind, values = None, []
    for value in (content if isinstance(content, list) else [content]):
        if isinstance(value, bool):
            this, value = "int64", int(value)
        elif isinstance(value, int):
            if not -2 ** 63 <= value < 2 ** 63:
                raise invalid(f"Feature: {name} has uint64 element. Only int64 is supported.")
            this = "int64"
        elif isinstance(value, float):
            if math.isfinite(value) and abs(value) > _FLOAT32_MAX:
                raise invalid(f"Cannot convert JSON value: {value} to float without loss of "
                              f"precision.")
            this = "float"
        elif isinstance(value, str):
            this, value = "bytes", value.encode("utf-8", "surrogatepass")
        elif _is_b64(value):
            this, value = "bytes", _b64decode(value)
        else:
            raise invalid(f"Feature: {name} has element with unexpected JSON type: "
                          f"{_json_type(value)}")
        if kind is not None and this != kind:
            raise invalid(f"Unexpected element type in feature: {name} expecting type: {kind}")
        kind = this
        values.append(value)
    return kind or "bytes", values


def examples(doc: dict, method: str) -> List[bytes]:
    """Serialized tf.Examples of a :classify / :regress body, each merged with the context
    (an example's own feature wins, as the serialized context + example concatenation does)."""
    from tensorflow.core.example import example_pb2

    def features(obj) -> dict:
        if not isinstance(obj, dict):
            raise invalid(f"Example must be JSON object but got JSON {_json_type(obj)}")
        return {name: _feature_values(name, value) for name, value in obj.items()}

    context = features(doc["context"]) if "context" in doc else {}
    if "examples" not in doc:
        raise invalid(f"JSON Value: {_short(doc)} When method is {method}, key 'examples' is "
                      f"expected and was not found")
    items = doc["examples"]
    if not isinstance(items, list):
        raise invalid(f"JSON Value: {_short(doc)} Expecting 'examples' value to be an list/array")
    if not items:
        raise invalid(f"JSON Value: {_short(doc)} 'examples' value is an empty array")
    serialized = []
    for item in items:
        merged = dict(context, **features(item))
        example = example_pb2.Example()
        for name, (kind, values) in merged.items():
            getattr(example.features.feature[name], kind + "_list").value.extend(values)
        serialized.append(example.SerializeToString())
    return serialized


# ----------------------------------------------------------------------------------------
# Writing responses
# ----------------------------------------------------------------------------------------


def to_json_value(array: np.ndarray, name: str):
    """An output array as nested lists of JSON values."""
    array = np.asarray(array)
    if array.dtype == object or array.dtype.kind == "S":
        if name.endswith(BYTES_SUFFIX):
            flat = [{"b64": base64.b64encode(bytes(b)).decode("ascii")} for b in array.ravel()]
        else:
            flat = [bytes(b).decode("utf-8", "replace") for b in array.ravel()]
        return _nest(flat, array.shape)
    if array.dtype == np.float32:
        # The shortest decimal that reads back as the same float32 (numpy's str), rather than
        # the float64 expansion (0.2 -> 0.20000000298023224).
        flat = [float(str(x)) for x in array.ravel()]
        return _nest(flat, array.shape)
    if array.dtype.kind in "fiub":
        return array.tolist()
    raise ServingError("UNIMPLEMENTED", f"Tensor name: {name}: cannot write dtype "
                                        f"{array.dtype} as JSON")


def _nest(flat: list, shape: Sequence[int]):
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(shape).tolist()


def predict_response(outputs: Dict[str, np.ndarray], fmt: str) -> dict:
    if not outputs:
        raise invalid("Cannot convert empty tensor map to JSON")
    names = sorted(outputs)
    if fmt == COLUMNAR:
        if len(names) == 1:
            return {"outputs": to_json_value(outputs[names[0]], names[0])}
        return {"outputs": {n: to_json_value(outputs[n], n) for n in names}}
    batch = None
    for name in names:
        shape = np.shape(outputs[name])
        if not shape:
            raise invalid(f"Tensor name: {name} has no shape information ")
        if shape[0] < 1:
            raise invalid(f"Tensor name: {name} has invalid batch size: {shape[0]}")
        if batch is not None and shape[0] != batch:
            raise invalid(f"Tensor name: {name} has inconsistent batch size: {shape[0]} "
                          f"expecting: {batch}")
        batch = shape[0]
    values = {n: to_json_value(outputs[n], n) for n in names}
    if len(names) == 1:
        return {"predictions": values[names[0]]}
    return {"predictions": [{n: values[n][i] for n in names} for i in range(batch)]}


def classify_results(outputs: Dict[str, np.ndarray],
                     batch: int) -> Tuple[List[List[str]], np.ndarray]:
    """(labels [batch][classes] as text, scores float32 [batch, classes]) of a classify
    signature's classes / scores outputs, checked as TF Serving's
    PostProcessClassificationResult checks them (a missing output: "" labels / 0 scores).
    Shared by the REST :classify and the gRPC Classify / MultiInference answers."""
    classes, scores = outputs.get("classes"), outputs.get("scores")
    if classes is None and scores is None:
        raise invalid(f"Expected classification signature outputs to contain classes and/or "
                      f"scores, got {sorted(outputs)}")
    for name, value in (("classes", classes), ("scores", scores)):
        if value is not None and (np.ndim(value) != 2 or np.shape(value)[0] != batch):
            raise invalid(f"Expected {name} Tensor of shape [batch_size num_classes] with "
                          f"batch_size {batch} but got {list(np.shape(value))}")
    if classes is not None and scores is not None and np.shape(classes) != np.shape(scores):
        raise invalid(f"Tensors class and score should match in shape: "
                      f"{list(np.shape(classes))} vs {list(np.shape(scores))}")
    width = np.shape(scores if scores is not None else classes)[1]
    labels = (to_json_value(classes, "classes") if classes is not None
              else [[""] * width for _ in range(batch)])
    values = (np.asarray(scores, np.float32) if scores is not None
              else np.zeros([batch, width], np.float32))
    return labels, values


def classify_response(outputs: Dict[str, np.ndarray], batch: int) -> dict:
    """[[label, score], ...] per example from a classify signature's classes / scores."""
    labels, scores = classify_results(outputs, batch)
    values = to_json_value(scores, "scores")
    return {"results": [[[label, score] for label, score in zip(row_l, row_s)]
                        for row_l, row_s in zip(labels, values)]}


def regress_results(outputs: Dict[str, np.ndarray], batch: int) -> np.ndarray:
    """The float32 [batch] values of a regress signature's `outputs` ([batch] or [batch, 1]),
    checked as TF Serving's PostProcessRegressionResult (REST :regress and gRPC Regress)."""
    value = outputs.get("outputs")
    if value is None:
        raise invalid(f"No 'outputs' output of the regression signature, got {sorted(outputs)}")
    shape = list(np.shape(value))
    if not (shape == [batch] or shape == [batch, 1]):
        raise invalid(f"Expected output Tensor shape to be either [batch_size] or "
                      f"[batch_size, 1] with batch_size {batch} but got {shape}")
    return np.asarray(value, np.float32).reshape([batch])


def regress_response(outputs: Dict[str, np.ndarray], batch: int) -> dict:
    return {"results": to_json_value(regress_results(outputs, batch), "outputs")}


def dumps(obj) -> bytes:
    """JSON text of a response (NaN / Infinity written as TF Serving writes them)."""
    return json.dumps(obj, allow_nan=True, ensure_ascii=False).encode("utf-8")
