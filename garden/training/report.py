"""Evaluation during training, the export at the end and summary.json: what a run reports."""

from __future__ import annotations

import json
import posixpath
from typing import Any, Dict, Optional

from garden.tasks.base import ConfigError


def eval_writer(model_dir: str):
    """The TensorBoard writer of every evaluation of a run: model_dir/eval, tags eval/<name>.
    Training's periodic and final scores and garden.train --mode=eval's land in this one run,
    so TensorBoard and garden.curves draw them on one chart beside model_dir/train's losses."""
    import tensorflow as tf

    return tf.summary.create_file_writer(posixpath.join(model_dir, "eval"))


def eval_tag(name: str) -> str:
    """The TensorBoard tag of a score: eval/<name>, a fine-tuning task's "eval_" prefix dropped
    (eval_loss -> eval/loss), so that it shares its chart with the training scalar of the same
    name (loss, accuracy) in TensorBoard and garden.curves."""
    return "eval/" + (name[len("eval_"):] if name.startswith("eval_") else name)


def numeric(results: Dict[str, Any]) -> Dict[str, float]:
    """The numbers of a task's results (bools, strings, lists left out)."""
    return {k: v for k, v in results.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def log_eval(writer, step: int, results: Dict[str, Any]) -> Dict[str, float]:
    """Writes the numbers of `results` (bools and strings left out) as eval_tag(<name>) at
    `step`; returns them."""
    import tensorflow as tf

    numbers = numeric(results)
    with writer.as_default(step=step):
        for k, v in numbers.items():
            tf.summary.scalar(eval_tag(k), v)
    writer.flush()
    return numbers


def evaluate(task, model, writer, step: int, who: str = "train") -> Dict[str, float]:
    """Runs task.evaluate, logs its numbers to TensorBoard as eval/<name> (log_eval) and prints
    the floats: `[train] eval at step 10 | loss 5.1234 ...`. Returns the numeric results ({}:
    none)."""
    results = task.evaluate(model)
    numbers = log_eval(writer, step, results)
    if results:
        shown = " ".join(f"{k} {v:.4f}" for k, v in results.items() if isinstance(v, float))
        print(f"[{who}] eval at step {step} | {shown}", flush=True)
    return numbers


def serving_model(task, model, hardware):
    """The task model the export traces: `model` when it was built under the export precision's
    Keras policy (garden.serving.precision.POLICIES), else a copy the task builds under that
    policy, holding `model`'s weights. Variables are float32 under every policy, so the copy's
    weights are the trained values, bit for bit; only what its layers compute in differs."""
    from garden.serving.precision import POLICIES
    from garden.training import setup

    policy = POLICIES[hardware.export_precision]
    if policy == hardware.precision:
        return model
    with setup.dtype_policy(policy):
        copy, _ = task.build_model()
    copy.set_weights(model.get_weights())
    return copy


def check_export(task, hardware) -> None:
    """Before training: the task's serving module, built under the export precision, passes
    the exporter's precision checks (garden.serving.precision.checked: a bfloat16 node without
    a CPU kernel, ...), so that a refused export stops the run before its first step instead
    of after its last. Builds a model of its own and writes nothing. ConfigError naming
    train.export_precision when refused."""
    from garden.serving.precision import POLICIES, PrecisionError, checked
    from garden.training import setup

    with setup.dtype_policy(POLICIES[hardware.export_precision]):
        model, _ = task.build_model()
        module = task.serving_module(model)
        if module is None:
            raise ConfigError(f"train.export_precision = {hardware.export_precision!r}, but the "
                              f"{task.name} task has no serving module to export; unbind it")
        try:
            checked(module.signatures(), hardware.export_precision, module.task)
        except PrecisionError as e:
            raise ConfigError(f"train.export_precision = {hardware.export_precision!r}: {e}"
                              ) from None


def export(task, model, hardware) -> Optional[str]:
    """Exports task.serving_module(model) through the one exporter in hardware.export_precision
    (serving_model: the model rebuilt under that precision when it was trained in another)
    when the task names an export_base; returns the export directory (None: nothing to
    export)."""
    if not task.export_base:
        return None
    module = task.serving_module(serving_model(task, model, hardware))
    if module is None:
        return None
    from garden.serving.export import export as export_module  # the serving side's one exporter

    path = export_module(module, task.export_base, task.model_name,
                         precision=hardware.export_precision)
    print(f"[train] exported {path} ({hardware.export_precision})", flush=True)
    return str(path)


def read_summary(model_dir: str) -> Optional[Dict[str, Any]]:
    """model_dir/summary.json (None: there is none)."""
    import tensorflow as tf

    path = posixpath.join(model_dir, "summary.json")
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def write_summary(model_dir: str, summary: Dict[str, Any]) -> str:
    """model_dir/summary.json (numpy values as lists)."""
    import numpy as np
    import tensorflow as tf

    path = posixpath.join(model_dir, "summary.json")
    with tf.io.gfile.GFile(path, "w") as f:
        json.dump(summary, f, indent=2, default=lambda o: np.asarray(o).tolist())
    return path
