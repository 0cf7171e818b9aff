"""int8 post-training quantization: what `python -m garden.bertology.int8` runs (its module
docstring says what it does and what was measured). Kept apart from the command so that the
command parses its flags before TensorFlow and Keras load: this module imports both.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import tempfile
from typing import Dict, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from garden.serving import export as serving_export
from garden.serving.base import ServingModule

# Weights with fewer values stay float32: biases, LayerNorm, the 2 x H segment table (a few KB;
# their int8 savings would not pay for the extra scale variable and ops). BERT-base: every
# kernel and the word and position tables (99.9% of its 110M values) are quantized.
MIN_VALUES = 4096
QUANTIZATION = "int8_weight_only"


def _quantize(values: np.ndarray, axis):
    """Symmetric int8 of `values`: scale = abs-max over `axis` / 127 (kept as size-1 axes),
    values rounded to [-127, 127]; an all-zero slice gets scale 1."""
    scale = np.max(np.abs(values), axis=axis, keepdims=True) / 127.0
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    return np.clip(np.round(values / scale), -127, 127).astype(np.int8), scale


class Int8Weights(tf.Module):
    """The int8 copies of a Keras model's large float weights, and float copies of the rest.

    `scope()` is a keras.StatelessScope in which the model's variables read as these: the
    quantized ones as Cast(int8) * scale, built once in each graph that reads them. A kernel
    [..., out] has a scale per last-axis (output) channel; a table whose path ends in
    "embeddings" [rows, width] one per row, as a gather reads it.

    Args:
        model: a built Keras model with float32 weights.
        min_values: weights of fewer values are kept as float32 copies.
    """

    def __init__(self, model: keras.Model, min_values: int = MIN_VALUES):
        super().__init__(name="int8_weights")
        self._reads = {}  # id(Keras variable) -> () -> its value in the current graph
        self.quantized, self.scales, self.kept = [], [], []
        float_bytes = quantized_bytes = 0
        for variable in model.weights:
            values = np.asarray(variable.numpy())
            float_bytes += values.nbytes
            if values.dtype != np.float32 or values.ndim < 2 or values.size < min_values:
                kept = tf.Variable(values, trainable=False, name=_name(variable))
                self.kept.append(kept)
                self._reads[id(variable)] = lambda kept=kept: kept.read_value()
                quantized_bytes += values.nbytes
                continue
            # A table is read by rows (a gather): a scale per row. A kernel [..., out]: a scale
            # per last-axis channel, the abs-max over the rest: per output channel of a Dense
            # [in, out] and of the attention output [heads, width, out]; the query, key and
            # value kernels [in, heads, width] share one per width index across heads (one
            # per slice of axis 0 would be finer for them, but would give the output kernel
            # a scale per (width, out): half its size again).
            embeddings = variable.path.endswith("embeddings")
            axes = -1 if embeddings else tuple(range(values.ndim - 1))
            q, scale = _quantize(values, axes)
            q = tf.Variable(q, trainable=False, name=_name(variable) + "_int8")
            scale = tf.Variable(scale, trainable=False, name=_name(variable) + "_scale")
            self.quantized.append(q)
            self.scales.append(scale)
            self._reads[id(variable)] = lambda q=q, s=scale: tf.cast(q, tf.float32) * s
            quantized_bytes += q.shape.num_elements() + 4 * scale.shape.num_elements()
        self.summary = {"quantization": QUANTIZATION, "min_values": int(min_values),
                        "quantized_weights": len(self.quantized), "float_weights": len(self.kept),
                        "float32_bytes": int(float_bytes),
                        "quantized_bytes": int(quantized_bytes)}

    def scope(self) -> keras.StatelessScope:
        return DequantizingScope(self._reads)


def _name(variable) -> str:
    return variable.path.replace("/", "_")


class DequantizingScope(keras.StatelessScope):
    """A StatelessScope whose variable values are made on first read in each graph (a value
    made outside a tf.function would be captured into it as a float constant)."""

    def __init__(self, reads: Dict[int, object]):
        super().__init__()
        self._make, self._made = reads, {}

    def get_current_value(self, variable):
        make = self._make.get(id(variable))
        if make is None:
            return super().get_current_value(variable)
        graph = tf.compat.v1.get_default_graph()
        key = (id(variable), id(graph))
        if key not in self._made:  # the graph is kept with its value, so its id stays unique
            self._made[key] = (graph, make())
        return self._made[key][1]


class Int8Serving(ServingModule):
    """A task's ServingModule with int8 weights: the same signatures, warmup requests and
    metadata (plus a "quantization" entry), traced on the dequantized int8 variables.

    The module's float variables are untracked, so exporting this module saves the int8
    variables and not the float ones (export it with export_int8, which saves inside the
    dequantizing scope); once wrapped, the float module exports without its float weights
    (export it before, or make another).

    Args:
        module: the float ServingModule (ClassificationServing, TaggingServing, ...), holding
            the Keras model as `model`.
        min_values: see Int8Weights.
    """

    def __init__(self, module: ServingModule, min_values: int = MIN_VALUES):
        super().__init__(name="int8_serving")
        model = getattr(module, "model", None)
        if not isinstance(model, keras.Model):
            raise ValueError(f"{type(module).__name__} holds no Keras model as `model`; "
                             f"int8 export quantizes the weights of that model")
        self.task = module.task
        self.weights = Int8Weights(model, min_values)
        with self.weights.scope():
            signatures = module.signatures()
        # The traced graphs read only self.weights: untrack the float model's variables (the
        # module holds the model itself untracked, ServingModule._hold; saving saves what is
        # tracked) and keep the module's other children (assets, the text packer).
        delattr(module, "model_variables")
        self.module = module
        self.__dict__["_signatures"] = signatures  # set through __dict__: not tracked

    def signatures(self):
        return self._signatures

    def warmup_requests(self):
        return self.module.warmup_requests()

    def metadata(self) -> dict:
        return dict(self.module.metadata(), quantization=self.weights.summary)


def export_int8(module: ServingModule, export_base: str, model_name: str,
                version: Optional[int] = None, min_values: int = MIN_VALUES) -> str:
    """Exports `module` with int8 weights through the one exporter (garden.serving.export):
    <export_base>/<model_name>/<version>/, garden_export.json with a "quantization" entry.
    Returns the version directory. The module's model is untracked from it (Int8Serving)."""
    int8_module = Int8Serving(module, min_values)
    # Inside the scope anything saving traces again reads the int8 variables too.
    with int8_module.weights.scope():
        return serving_export.export(int8_module, export_base, model_name, version)


# ----------------------------------------------------------------------------------------
# LiteRT / TFLite
# ----------------------------------------------------------------------------------------


def tflite_model(model: keras.Model, input_names: Sequence[str], max_seq_length: int,
                 output: str = "logits", quantize: bool = True) -> bytes:
    """The LiteRT flatbuffer of `model` on int32 [B, max_seq_length] ids -> `output`.

    quantize: dynamic-range quantization (tf.lite.Optimize.DEFAULT: int8 weights, integer
    kernels with activations quantized at run time); False gives the float32 model."""
    with litert_saved_model(model, input_names, max_seq_length, output) as saved:
        converter = tf.lite.TFLiteConverter.from_saved_model(saved)
        if quantize:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        return converter.convert()


@contextlib.contextmanager
def litert_saved_model(model: keras.Model, input_names: Sequence[str], max_seq_length: int,
                       output: str = "logits", scope=None, track: Sequence = ()):
    """A temporary SavedModel directory of `model` on int32 [B, max_seq_length] ids ->
    `output`, for TFLiteConverter.from_saved_model. scope: a context (e.g. a
    keras.StatelessScope) the endpoint is traced in; track: more trackables whose variables
    that trace reads (saved beside the model's)."""
    names = tuple(input_names)

    def serve(*ids):
        with scope if scope is not None else contextlib.nullcontext():
            return {output: model(dict(zip(names, ids)), training=False)[output]}

    # Through Keras' own SavedModel export, which the converter freezes into constants (a
    # tf.Module tracking the Keras model, or a concrete function, converted with its weights
    # left as resource variables without values: NaN logits).
    archive = keras.export.ExportArchive()
    archive.track(model)
    for trackable in track:
        archive.track(trackable)
    archive.add_endpoint(
        "serve", serve,
        input_signature=[tf.TensorSpec([None, max_seq_length], tf.int32, name=n) for n in names])
    with tempfile.TemporaryDirectory() as saved:
        archive.write_out(saved, verbose=False)
        yield saved


def tflite_runner(flatbuffer: bytes, num_threads: Optional[int] = None):
    """(ids dict) -> {output: ndarray}: a tf.lite.Interpreter resized to the batch's shape."""
    interpreter = tf.lite.Interpreter(model_content=flatbuffer, num_threads=num_threads)
    runner = interpreter.get_signature_runner()
    inputs = runner.get_input_details()

    def run(ids: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return runner(**{k: np.asarray(ids[k], np.int32) for k in inputs})

    return run


# ----------------------------------------------------------------------------------------
# A garden.train run -> the int8 export and the .tflite
# ----------------------------------------------------------------------------------------


def quantize_run(model_dir: str, export_base: Optional[str] = None,
                 model_name: Optional[str] = None, tflite: Optional[str] = None,
                 min_values: int = MIN_VALUES, evaluate: bool = True) -> Dict:
    """The int8 export and the .tflite of a garden.train fine-tuning run.

    export_base: default the run's (its task's export_base); model_name: default the task's
    model_name + "_int8" (a separate model: TF Serving would otherwise serve the int8 version
    as the float model's latest); tflite: default <export_base>/<model_name>-<version>.tflite.
    evaluate: the task's evaluation (its eval file) of the float model and of the int8
    export's serving_ids signature, written beside the .tflite as <...>.json.
    Returns {"export", "tflite"} (+ "float", "int8": the evaluations, and "report")."""
    from garden import runs

    who = "garden.bertology.int8"
    run = runs.open(model_dir, [runs.MODEL_DIR], who=who)
    task, model = run.task, run.task_model()
    export_base = export_base or getattr(task, "export_base", None)
    if not export_base:
        raise ValueError(f"{who}: {model_dir}: its task names no export_base; pass "
                         f"--export_base")
    model_name = model_name or f"{task.model_name}_int8"
    module = task.serving_module(model) if model is not None else None
    if module is None:
        raise ValueError(f"{who}: {model_dir}: its task {type(task).__name__} exports nothing")
    packer = module.packer
    path = export_int8(module, export_base, model_name, min_values=min_values)
    tflite = tflite or posixpath.join(export_base, f"{model_name}-{posixpath.basename(path)}"
                                                   f".tflite")
    with tf.io.gfile.GFile(tflite, "wb") as f:
        f.write(tflite_model(model, packer.input_names, packer.max_seq_length))
    out = {"export": path, "tflite": tflite}
    if evaluate and hasattr(task, "evaluate"):
        out.update(evaluate_int8(task, model, path))
        out["report"] = tflite[:-len(".tflite")] + ".json"
        with tf.io.gfile.GFile(out["report"], "w") as f:
            json.dump({k: out[k] for k in ("export", "tflite", "float", "int8")}, f, indent=2)
    return out


def evaluate_int8(task, model, export_dir: str) -> Dict[str, Dict]:
    """{"float": task.evaluate(model), "int8": task.evaluate(the int8 export)}: the export's
    serving_ids signature stands in for the Keras model (the tasks call model(ids)["logits"])."""
    from garden import runs

    int8_model = runs.open(export_dir, [runs.EXPORT], who="garden.bertology.int8").task_model()
    return {"float": task.evaluate(model), "int8": task.evaluate(int8_model)}
