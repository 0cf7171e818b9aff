"""Evaluation only (`python -m garden.train --mode=eval --model_dir=RUN`): one checkpoint of a
run scored on its task's eval data, with nothing trained, saved or exported.

The model is the one train() builds from the same gin configuration (so the same task, sizes
and precision), with its optimizer, because a checkpoint holds both and is restored whole: a
checkpoint of another configuration is refused by name (checkpoints.CheckpointMismatchError).
The scores go where training's periodic evaluation puts its own, in a run of their own:
TensorBoard model_dir/eval (report.eval_writer: tags eval/<name> at the checkpoint's step,
beside training's periodic and final scores) and summary.json under "evaluations", keyed by checkpoint name ("ckpt-1000"). That
key is the only one written: training's final scores (top level, last_eval_metrics) stay what
training measured, and evaluating the same checkpoint again replaces its entry. A later
training run that finishes writes summary.json again and keeps "evaluations".
"""

from __future__ import annotations

import posixpath
import time
from typing import Optional

from garden.tasks.base import ConfigError


def find_checkpoint(model_dir: str, checkpoint: Optional[str] = None) -> str:
    """The checkpoint prefix to score: `checkpoint` when given (it must exist), else the newest
    of model_dir/checkpoints. ConfigError in one line when there is none."""
    import tensorflow as tf

    if checkpoint:
        if not tf.io.gfile.glob(checkpoint + ".index"):
            raise ConfigError(f"--checkpoint={checkpoint}: no such checkpoint (give a prefix such "
                              f"as {posixpath.join(model_dir, 'checkpoints', 'ckpt-1000')}, "
                              f"without .index)")
        return checkpoint
    found = tf.train.latest_checkpoint(posixpath.join(model_dir, "checkpoints"))
    if not found:
        raise ConfigError(f"--mode=eval: {model_dir} holds no checkpoint (no "
                          f"{posixpath.join(model_dir, 'checkpoints', 'checkpoint')}): train "
                          f"the run first, or name one with --checkpoint")
    return found


def evaluate_checkpoint(checkpoint: str, *, model_dir: str, strategy, task, loop, optimization,
                        fine_tuning, hardware) -> dict:
    """Restores `checkpoint` into the task's model and scores it (task.evaluate) on the chief;
    writes TensorBoard model_dir/eval and summary.json's "evaluations" entry; returns it."""
    from garden import distribute
    from garden.training import checkpoints, report, setup

    start = time.time()
    with strategy.scope():
        model, objects = task.build_model()
        opt = setup.build_optimizer(
            model, objects, train_steps=loop.train_steps, optimization=optimization,
            fine_tuning=fine_tuning, precision=hardware.precision)
    # No manager of model_dir's checkpoints is kept past the restore: nothing is saved.
    checkpoints.Checkpoints(model_dir, model=model, opt=opt, objects=objects,
                            keep=loop.keep_checkpoints).restore(checkpoint)
    step = int(opt.iterations.numpy())
    if not distribute.is_chief(strategy):
        return {"checkpoint": checkpoint, "step": step}
    print(f"[eval] {task.name}: {checkpoint} (step {step})", flush=True)
    writer = report.eval_writer(model_dir)
    metrics = report.evaluate(task, model, writer=writer, step=step, who="eval")
    writer.flush()
    if not metrics:
        raise ConfigError(f"the {task.name} task scored nothing: its configuration names no eval "
                          f"data (bind the task's eval data, e.g. with --gin_param)")
    record = {"checkpoint": checkpoint, "step": step, "metrics": metrics,
              "seconds": round(time.time() - start, 2)}
    add_evaluation(model_dir, posixpath.basename(checkpoint), record)
    print(f"[eval] done: {posixpath.join(model_dir, 'summary.json')} "
          f"evaluations[{posixpath.basename(checkpoint)!r}]", flush=True)
    return record


def add_evaluation(model_dir: str, name: str, record: dict) -> None:
    """summary.json with `record` as evaluations[name]; every other key as it was (a run
    without summary.json, e.g. stopped before its end, gets one holding only "evaluations")."""
    from garden.training import report

    summary = report.read_summary(model_dir) or {}
    summary.setdefault("evaluations", {})[name] = record
    report.write_summary(model_dir, summary)

