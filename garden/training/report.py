"""Evaluation during training, the export at the end and summary.json: what a run reports."""

from __future__ import annotations

import json
import posixpath
from typing import Any, Dict, Optional


def evaluate(task, model, writer, step: int) -> Dict[str, float]:
    """Runs task.evaluate, logs its numbers to TensorBoard as eval/<name> and prints the floats:
    `[train] eval at step 10 | loss 5.1234 ...`. Returns the numeric results ({}: none)."""
    import tensorflow as tf

    results = task.evaluate(model)
    numbers = {k: v for k, v in results.items() if isinstance(v, (int, float))}
    with writer.as_default(step=step):
        for k, v in numbers.items():
            tf.summary.scalar(f"eval/{k}", v)
    if results:
        shown = " ".join(f"{k} {v:.4f}" for k, v in results.items() if isinstance(v, float))
        print(f"[train] eval at step {step} | {shown}", flush=True)
    return numbers


def export(task, model) -> Optional[str]:
    """Exports task.serving_module(model) through the one exporter when the task names an
    export_base; returns the export directory (None: nothing to export)."""
    if not task.export_base:
        return None
    module = task.serving_module(model)
    if module is None:
        return None
    from garden.serving.export import export as export_module  # the serving side's one exporter

    path = export_module(module, task.export_base, task.model_name)
    print(f"[train] exported {path}", flush=True)
    return str(path)


def write_summary(model_dir: str, summary: Dict[str, Any]) -> str:
    """model_dir/summary.json (numpy values as lists)."""
    import numpy as np
    import tensorflow as tf

    path = posixpath.join(model_dir, "summary.json")
    with tf.io.gfile.GFile(path, "w") as f:
        json.dump(summary, f, indent=2, default=lambda o: np.asarray(o).tolist())
    return path
