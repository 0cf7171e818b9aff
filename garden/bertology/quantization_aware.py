"""Quantization-aware fine-tuning (Q8BERT: Zafrir et al., 2019): what
`python -m garden.bertology.qat` runs (its module docstring says what it does and what was
measured). Kept apart from the command so that the command parses its flags before TensorFlow
and Keras load: this module imports both.

The simulated int8 (FakeQuant), as in Q8BERT but for the activations' zero point:
- every kernel and embedding table (the dense and attention kernels, the word, position and
  segment tables, the pooler and classifier kernels; not the biases) is read, in the forward
  pass, as its symmetric per-tensor int8 rounding: scale = abs-max / 127, values in [-127, 127]
  (tf.quantization.fake_quant_with_min_max_vars, narrow range: 255 levels);
- the input of every fully connected product (a Dense layer's input, the attention layer's
  query/key/value input) is rounded to 256 levels over [low, high], exponential moving averages
  (decay DECAY) of the batches' minimum and maximum, started at the first training batch's.
  Q8BERT's range is symmetric, [-m, m] over the abs-max; LiteRT's int8 activations have a zero
  point, and the GELU outputs (the second feed-forward product's input) lie in [-0.17, 25] on
  MiniLM: a symmetric range spends half its levels below -0.17. Measured on the fine-tuned
  MiniLM before any QAT step (451 dev texts, ranges from 40 train batches): float 428 right,
  activations rounded symmetrically 423, with low and high 425 (weights rounded alone: 428);
- both with the straight-through estimator gradient of the fake-quant op (the gradient passes
  where the value is inside the range), so the float weights train under the rounding;
- softmax, LayerNorm, GELU, the residual sums and the attention products (Q K^T, P V) stay float.
One place the simulation misses: garden.layers.attention multiplies the attention context by
the output kernel inside its own call, so that product's input (the context) is not rounded in
training; the LiteRT model rounds it with a calibrated range (below).

The LiteRT model (litert_int8): the Keras model traced with the fake-quant ops, converted by
TFLiteConverter with Optimize.DEFAULT and a representative dataset (calibration examples from
the train file), with every builtin op but FULLY_CONNECTED denylisted
(tf.lite.experimental.QuantizationDebugger's selective quantization): every fully connected
layer runs as an int8 x int8 -> int32 kernel on int8 activations, and the rest of the graph in
float32 with QUANTIZE / DEQUANTIZE between. The same conversion of the float model is the
post-training static int8 baseline (calibrated ranges, no training).
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from typing import Dict, List, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from garden.bertology.qat_settings import DECAY
from garden.bertology.quantization import (DequantizingScope, litert_saved_model, tflite_model,
                                           tflite_runner)
from garden.layers.attention import MultiHeadAttention
from garden.tasks.base import Task

WHO = "garden.bertology.qat"
# The layers whose input is the input of a fully connected product. The attention layer's
# query / key / value kernels (EinsumDense sublayers) are read by the attention layer itself:
# its inputs are theirs; its EinsumDense sublayers are never called.
FULLY_CONNECTED = (keras.layers.Dense, keras.layers.EinsumDense)
PROJECTING = (MultiHeadAttention,)
# The weights rounded to int8, by variable name: Dense / EinsumDense kernels, embedding tables.
ROUNDED_WEIGHTS = ("kernel", "embeddings")
# The one TFLite op the LiteRT models run in int8 (Q8BERT quantizes the GEMMs only).
INT8_OPS = ("FULLY_CONNECTED",)


def fake_quant_weight(w: tf.Tensor) -> tf.Tensor:
    """w rounded to symmetric per-tensor int8: 255 levels k * abs-max / 127, k in [-127, 127]."""
    m = tf.reduce_max(tf.abs(w))
    return tf.quantization.fake_quant_with_min_max_vars(w, -m, m, num_bits=8, narrow_range=True)


def fake_quant_activation(x: tf.Tensor, low: tf.Tensor, high: tf.Tensor) -> tf.Tensor:
    """x rounded to 256 levels over [low, high], widened to hold 0 (values outside clipped;
    gradient zero there)."""
    return tf.quantization.fake_quant_with_min_max_vars(x, tf.minimum(low, 0.0),
                                                        tf.maximum(high, 0.0), num_bits=8)


class FakeQuant(tf.Module):
    """Q8BERT's simulated int8 on a built Keras model (the module docstring says what is
    rounded): `scope(training)` is the context in which calling the model computes with it;
    outside it, the model is the float model, unchanged.

    The activation ranges are variables of this module (`ranges`, one [low, high] per layer
    whose input is rounded, [0, 0] until a training call sets them): checkpoint it beside the
    model.

    Args:
        model: the Keras model (a classifier).
        backbone: its backbone; refused when it has no fully connected layer (an LSTM family).
        decay: of the ranges' moving average.
    """

    def __init__(self, model: keras.Model, backbone: Optional[keras.Model] = None,
                 decay: float = DECAY):
        super().__init__(name="fake_quant")
        check_backbone(backbone)
        self.decay = float(decay)
        # Not tracked (the model saves them): id -> the Keras variable read as int8: the
        # kernels and embedding tables (not the attention's [heads, width] biases).
        self.__dict__["_weights"] = {id(v): v for v in model.weights if v.dtype == "float32"
                                     and v.path.rsplit("/", 1)[-1] in ROUNDED_WEIGHTS}
        self.__dict__["_state"] = {"active": False, "training": False}
        self.ranges: List[tf.Variable] = []
        self.__dict__["layer_paths"] = []
        for layer in _rounded_layers(model):
            r = tf.Variable([0.0, 0.0], trainable=False,
                            name=layer.path.replace("/", "_") + "_range",
                            aggregation=tf.VariableAggregation.MEAN)
            self.ranges.append(r)
            self.layer_paths.append(layer.path)
            self._round_inputs(layer, r)

    @property
    def weight_count(self) -> int:
        return len(self._weights)

    def _round_inputs(self, layer, r: tf.Variable) -> None:
        """Makes `layer`'s call round its tensor inputs (the first; the attention layer's
        first two, query and value) while a scope is active."""
        call, state = layer.call, self._state
        count = 2 if isinstance(layer, PROJECTING) else 1

        def call_with_rounded_inputs(*args, **kwargs):
            if not state["active"]:
                return call(*args, **kwargs)
            args = list(args)
            inputs = [x for x in args[:count] if x is not None]
            low, high = tf.unstack(self._range(r, inputs))
            args[:count] = [None if x is None else fake_quant_activation(x, low, high)
                            for x in args[:count]]
            return call(*args, **kwargs)

        # An instance attribute: Keras' __call__ calls self.call; the class is untouched.
        object.__setattr__(layer, "call", call_with_rounded_inputs)

    def _range(self, r: tf.Variable, inputs) -> tf.Tensor:
        """[low, high]: read, or (training) moved toward this batch's [min, max]."""
        if not self._state["training"]:
            return r.read_value()
        inputs = [tf.stop_gradient(x) for x in inputs]
        batch = tf.stack([tf.reduce_min(tf.stack([tf.reduce_min(x) for x in inputs])),
                          tf.reduce_max(tf.stack([tf.reduce_max(x) for x in inputs]))])
        started = r[1] > r[0]  # [0, 0] until the first training batch
        new = tf.where(started, self.decay * r + (1 - self.decay) * batch, batch)
        r.assign(new)
        return new

    def scope(self, training: bool = False) -> keras.StatelessScope:
        """The context in which the model computes with int8-rounded weights and inputs;
        training: the ranges follow the batches (moving average) instead of being read."""
        reads = {key: (lambda v=v: fake_quant_weight(v._value))  # the tf.Variable: gradients
                 for key, v in self._weights.items()}
        return _FakeQuantScope(reads, self._state, training)

    def summary(self) -> dict:
        return {"quantization": "q8bert_fake_quant", "weights": self.weight_count,
                "activation_ranges": {p: [round(float(v), 6) for v in r.numpy()]
                                      for p, r in zip(self.layer_paths, self.ranges)},
                "decay": self.decay}


def check_backbone(backbone: Optional[keras.Model]) -> None:
    """Refuses a backbone with no fully connected product to round (an LSTM family)."""
    if backbone is not None and not _rounded_layers(backbone):
        raise ValueError(f"{WHO}: the backbone {type(backbone).__name__} has no Dense, "
                         f"EinsumDense or attention layer: Q8BERT rounds fully connected "
                         f"products, and it has none to round")


def _rounded_layers(model: keras.Model) -> list:
    """The layers whose inputs are rounded: the fully connected layers called as layers, and
    the attention layers (their projections' kernels are read, not called)."""
    layers = list(model._flatten_layers(include_self=False, recursive=True))
    inside = {id(sub) for layer in layers if isinstance(layer, PROJECTING)
              for sub in layer._flatten_layers(include_self=False)}
    out, seen = [], set()
    for layer in layers:
        if id(layer) in seen or id(layer) in inside:
            continue
        seen.add(id(layer))
        if isinstance(layer, FULLY_CONNECTED + PROJECTING):
            out.append(layer)
    return out


class _FakeQuantScope(DequantizingScope):
    """garden.bertology.quantization's reading scope (values made once per graph) that turns
    the input rounding on, and keeps the writes the model makes inside it (the dropout seed
    generator's state: a plain StatelessScope drops them, and every step would draw the same
    dropout masks)."""

    def __init__(self, reads, state, training: bool):
        super().__init__(reads)
        self._state, self._training, self._updates = state, bool(training), []

    def add_update(self, update):
        super().add_update(update)
        self._updates.append(update)

    def __enter__(self):
        self._state.update(active=True, training=self._training)
        return super().__enter__()

    def __exit__(self, *args):
        self._state.update(active=False, training=False)
        super().__exit__(*args)
        for variable, value in self._updates:
            variable.assign(value)
        self._updates = []


# ----------------------------------------------------------------------------------------
# Fine-tuning under the simulation: a Task for the one trainer (garden.train.train)
# ----------------------------------------------------------------------------------------


class QuantizationAware(Task):
    """A fine-tuned classification run's task, trained on with Q8BERT's fake quantization:
    the same data, batches, loss and evaluation, the model started from the run's checkpoint,
    every loss and evaluation computed inside FakeQuant's scope. The checkpoint holds the model,
    its backbone and the activation ranges ("fake_quant"). Nothing is exported by the trainer
    (the LiteRT model is made after training: run_qat).

    Args:
        task: the run's garden.Classification (not regression).
        checkpoint: the run's checkpoint prefix (its model and backbone are restored).
        decay: FakeQuant's.
    """

    def __init__(self, task, checkpoint: str, decay: float = DECAY):
        self.task, self.checkpoint, self.decay = task, checkpoint, decay
        self.name = f"quantization_aware_{task.name}"
        self.model = self.fake_quant = None

    def prepare(self) -> None:
        self.task.prepare()

    def build_model(self):
        model, objects = self.task.build_model()
        status = tf.train.Checkpoint(**objects).read(self.checkpoint)
        status.expect_partial()
        status.assert_existing_objects_matched()
        self.model = model
        self.fake_quant = FakeQuant(model, objects.get("backbone"), self.decay)
        return model, dict(objects, fake_quant=self.fake_quant)

    def schedule(self, train_steps: int):
        return self.task.schedule(train_steps)

    def loss_weights(self, batch):
        return self.task.loss_weights(batch)

    def compute_metrics(self, model, batch, training: bool, weight_shares=None):
        with self.fake_quant.scope(training):
            return self.task.compute_metrics(model, batch, training, weight_shares)

    def evaluate(self, model) -> dict:
        with self.fake_quant.scope():
            return self.task.evaluate(model)

    def finish(self, model, model_dir: str) -> dict:
        result = self.evaluate(model)
        print(f"[{self.name}] eval {json.dumps(result, sort_keys=True)}", flush=True)
        return result


def check_task(task, where: str) -> None:
    """Refuses a run QAT cannot report on: not a classification, or a regression."""
    from garden.tasks.classification import Classification

    if not isinstance(task, Classification):
        raise ValueError(f"{WHO}: {where}: its task is {type(task).__name__}; quantization-"
                         f"aware fine-tuning takes a garden.Classification run (it reports "
                         f"dev accuracy)")
    if task.regression:
        raise ValueError(f"{WHO}: {where}: a regression run (one output, no accuracy); "
                         f"quantization-aware fine-tuning takes a classification run")


# ----------------------------------------------------------------------------------------
# LiteRT
# ----------------------------------------------------------------------------------------


def litert_int8(model: keras.Model, input_names: Sequence[str], max_seq_length: int,
                representative: Sequence[Dict[str, np.ndarray]],
                fake_quant: Optional[FakeQuant] = None, output: str = "logits") -> bytes:
    """The LiteRT model of `model` whose fully connected layers run in int8 (weights and
    activations), the rest in float32 (the module docstring).

    representative: batches of int32 ids (dicts by input name) the converter calibrates the
    ranges it has no fake-quant op for on. fake_quant: trace the model inside its scope (the
    QAT model: its rounding is in the graph); None: the float model (post-training static)."""
    from tensorflow.lite.python import schema_py_generated as schema

    scope = fake_quant.scope() if fake_quant is not None else None
    track = (fake_quant,) if fake_quant is not None else ()
    denylisted = [name for name in vars(schema.BuiltinOperator)
                  if name.isupper() and name not in INT8_OPS]
    with litert_saved_model(model, input_names, max_seq_length, output, scope, track) as saved:
        converter = tf.lite.TFLiteConverter.from_saved_model(saved)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]

        def calibration():
            for ids in representative:
                yield {k: np.asarray(ids[k], np.int32) for k in input_names}

        converter.representative_dataset = calibration
        debugger = tf.lite.experimental.QuantizationDebugger(
            converter=converter, debug_dataset=calibration,
            debug_options=tf.lite.experimental.QuantizationDebugOptions(
                denylisted_ops=denylisted))
        return debugger.get_nondebug_quantized_model()


def int8_ops(flatbuffer: bytes) -> Dict[str, List[str]]:
    """{op name: [dtype of its inputs and outputs, ...]} of the model's compute ops, for the
    report and the tests (FULLY_CONNECTED: int8, int8, int32 -> int8)."""
    interpreter = tf.lite.Interpreter(model_content=flatbuffer)
    details = interpreter.get_tensor_details()
    out = {}
    for op in interpreter._get_ops_details():
        if op["op_name"] in ("FULLY_CONNECTED", "BATCH_MATMUL"):
            dtypes = [details[i]["dtype"].__name__ for i in list(op["inputs"]) + list(op["outputs"])
                      if i >= 0]
            out.setdefault(op["op_name"], []).append(" ".join(dtypes))
    return out


def packed(task, rows: Sequence[dict]) -> Dict[str, np.ndarray]:
    """rows (text_a, (text_b)) packed by the task's TextPacker in one eager call: the ids its
    tf.data pipeline feeds the model."""
    return task.packer.encode_numpy([r["text_a"] for r in rows],
                                    [r["text_b"] for r in rows] if task.text_b else None)


def batches(ids: Dict[str, np.ndarray], size: int) -> List[Dict[str, np.ndarray]]:
    count = len(next(iter(ids.values())))
    return [{k: v[i:i + size] for k, v in ids.items()} for i in range(0, count, size)]


def keras_logits(model: keras.Model, ids: Dict[str, np.ndarray], size: int = 64) -> np.ndarray:
    """float32 logits [N, classes] of a Keras classifier on packed ids, `size` rows a call."""
    from garden.serving.text import model_inputs

    return np.concatenate([
        model(model_inputs(model, {k: tf.constant(v) for k, v in batch.items()}),
              training=False)["logits"].numpy() for batch in batches(ids, size)])


def litert_logits(flatbuffer: bytes, ids: Dict[str, np.ndarray], size: int = 64) -> np.ndarray:
    """The same of a LiteRT model (its signature's inputs are the packer's names)."""
    run = tflite_runner(flatbuffer)
    return np.concatenate([run(batch)["logits"] for batch in batches(ids, size)])


# ----------------------------------------------------------------------------------------
# A garden.train run -> QAT run, LiteRT models, the accuracy table
# ----------------------------------------------------------------------------------------

ROWS = (("float", "float32 Keras model (the run's)"),
        ("ptq_dynamic", "post-training int8, LiteRT dynamic range (garden.bertology.int8)"),
        ("ptq_int8", "post-training int8, LiteRT int8 fully connected layers (calibrated)"),
        ("qat_fake_quant", "QAT, Keras model with fake quantization"),
        ("qat_int8", "QAT, LiteRT int8 fully connected layers"))


def run_qat(model_dir: str, output_dir: str, settings) -> Dict:
    """Fine-tunes a garden.train classification run under FakeQuant into output_dir (a
    garden.train run directory of its own), converts it to LiteRT int8, and scores float,
    post-training int8 and QAT int8 on the run's eval file.

    settings: garden.bertology.qat_settings.QatSettings (train_steps, batch_size, learning_rate,
    warmup_steps, calibration_examples, decay, seed). Writes output_dir/qat_int8.tflite,
    ptq_int8.tflite, ptq_dynamic.tflite and qat.json (the table); returns the report."""
    import gin

    from garden import distribute, runs
    from garden import train as train_lib

    if posixpath.abspath(output_dir) == posixpath.abspath(model_dir):
        raise ValueError(f"{WHO}: --output_dir is the float run {model_dir}; the QAT run "
                         f"needs a directory of its own (it would resume the float run)")
    run = runs.open(model_dir, [runs.MODEL_DIR], who=WHO)
    check_task(run.task, model_dir)
    task = run.task
    float_model = run.task_model()
    check_backbone(run.objects.get("backbone"))
    packer = task.packer
    names, length = packer.input_names, packer.max_seq_length
    # Calibration: the first train rows, 8 a batch; the eval file packed once for every model.
    calibration = batches(packed(task, task.train_rows[:settings.calibration_examples]), 8)
    eval_ids = packed(task, task.eval_rows)
    tf.io.gfile.makedirs(output_dir)
    files = {name: posixpath.join(output_dir, f"{name}.tflite")
             for name in ("ptq_dynamic", "ptq_int8", "qat_int8")}
    flatbuffers = {"ptq_dynamic": tflite_model(float_model, names, length),
                   "ptq_int8": litert_int8(float_model, names, length, calibration)}
    logits = {"float": keras_logits(float_model, eval_ids)}

    qat = QuantizationAware(task, run.checkpoint, settings.decay)
    bindings = {"train.train_steps": settings.train_steps,
                "train.global_batch_size": settings.batch_size,
                "train.learning_rate": settings.learning_rate,
                "train.warmup_steps": settings.warmup_steps,
                "train.checkpoint_every": settings.train_steps,
                "train.log_every": max(1, min(25, settings.train_steps)),
                "train.eval_every": 0, "train.seed": settings.seed,
                "train.magnitude_pruning": None}
    with gin.unlock_config():
        for key, value in bindings.items():  # the QAT run's operative_config.gin says them
            gin.bind_parameter(key, value)
    train_lib.train(output_dir, distribute.create_strategy("one_device"), task=qat)
    with qat.fake_quant.scope():
        logits["qat_fake_quant"] = keras_logits(qat.model, eval_ids)
    flatbuffers["qat_int8"] = litert_int8(qat.model, names, length, calibration, qat.fake_quant)
    for name, flatbuffer in flatbuffers.items():
        with tf.io.gfile.GFile(files[name], "wb") as f:
            f.write(flatbuffer)
        logits[name] = litert_logits(flatbuffer, eval_ids)
    labels = {name: values.argmax(-1) for name, values in logits.items()}
    # Classification.evaluate's eval_accuracy, from the same logits.
    accuracy = {name: float(np.mean(values == task.eval_labels)) for name, values in labels.items()}
    agree = lambda a, b: float(np.mean(labels[a] == labels[b]))  # noqa: E731
    report = {"model_dir": model_dir, "output_dir": output_dir,
              "settings": dataclasses.asdict(settings),
              "eval_file": task.eval_file, "eval_examples": len(task.eval_rows),
              "rows": {name: {"description": what, "eval_accuracy": accuracy[name],
                              **({"tflite": files[name], "bytes": len(flatbuffers[name])}
                                 if name in files else {})}
                       for name, what in ROWS},
              # The share of eval examples two models give the same label.
              "label_agreement": {"qat_int8 vs qat_fake_quant": agree("qat_int8", "qat_fake_quant"),
                                  "ptq_int8 vs float": agree("ptq_int8", "float"),
                                  "ptq_dynamic vs float": agree("ptq_dynamic", "float"),
                                  "qat_fake_quant vs float": agree("qat_fake_quant", "float"),
                                  "qat_int8 vs float": agree("qat_int8", "float")},
              "qat_int8_ops": int8_ops(flatbuffers["qat_int8"]),
              "fake_quant": qat.fake_quant.summary()}
    report["report"] = posixpath.join(output_dir, "qat.json")
    with tf.io.gfile.GFile(report["report"], "w") as f:
        json.dump(report, f, indent=2)
    return report


def table(report: Dict) -> str:
    """The report's rows as text: name, accuracy, difference to float, LiteRT size."""
    base = report["rows"]["float"]["eval_accuracy"]
    lines = [f"{'model':15s} {'accuracy':>8s} {'vs float':>9s} {'LiteRT MB':>9s}  what"]
    for name, row in report["rows"].items():
        size = f"{row['bytes'] / 1e6:9.2f}" if "bytes" in row else f"{'':9s}"
        lines.append(f"{name:15s} {row['eval_accuracy']:8.4f} "
                     f"{100 * (row['eval_accuracy'] - base):+8.2f}p {size}  {row['description']}")
    return "\n".join(lines)
