"""Checkpoints, resume and preemption for garden.train.

What a checkpoint holds: the optimizer (with its iteration count, which is the step), the
task's named objects ("model", "backbone", ELECTRA's "generator"/"discriminator": fine-tuning
and distillation look them up by these names) and the states of the Keras seed generators
that dropout draws from, so a resumed run draws the masks an uninterrupted one would.
Every variable is float32 whatever train.precision was, and a run may resume in another
precision: under mixed_float16 the optimizer saved is the LossScaleOptimizer's inner one, with
the loss scale (its dynamic_scale and step_counter) beside it as "loss_scale", which a
mixed_float16 run restores when the checkpoint has one (else the scale starts at 2^15) and
other precisions leave unread.
"""

from __future__ import annotations

import posixpath
import signal
from typing import Dict, Optional


class CheckpointMismatchError(ValueError):
    """model_dir holds a checkpoint of another model (or configuration)."""


class Preemption:
    """Turns SIGTERM into a flag the loop checks after each step, so it can checkpoint and
    exit 143 (128 + SIGTERM), the status a scheduler expects of a preempted job."""

    EXIT_CODE = 143

    def __init__(self, install: bool = True):
        self.requested = False
        if install:
            try:
                signal.signal(signal.SIGTERM, self._handler)
            except ValueError:  # not the main thread (e.g. inside some test harnesses)
                pass

    def _handler(self, signum, frame):
        self.requested = True


class Checkpoints:
    """The run's checkpoint and its manager; `restore()` resumes from the newest one.

    Every worker of a multi-worker run takes part in saving; only the chief's copy is kept
    (the others write to a temporary directory, garden.distribute.worker_temp_dir).
    """

    def __init__(self, model_dir: str, model, opt, objects: Dict, keep: int = 3,
                 chief: bool = True, worker_dir: Optional[str] = None):
        import tensorflow as tf

        weight_ids = {id(w) for w in model.weights}
        seed_states = [v for v in model.variables if id(v) not in weight_ids]
        inner = getattr(opt, "inner_optimizer", None)  # a LossScaleOptimizer's
        self.parts = dict(optimizer=opt if inner is None else inner, seed_states=seed_states,
                          **objects)
        if inner is not None:
            self.parts["loss_scale"] = [opt.dynamic_scale, opt.step_counter]
        self.checkpoint = tf.train.Checkpoint(**self.parts)
        self.directory = posixpath.join(model_dir, "checkpoints")
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self.directory if chief else worker_dir, max_to_keep=keep)

    @property
    def latest(self) -> Optional[str]:
        return self.manager.latest_checkpoint

    def restore(self, path: Optional[str] = None) -> Optional[str]:
        """Restores checkpoint `path`, by default the newest of model_dir (None: there is none,
        a fresh start).

        A checkpoint of another model is refused by name: which checkpoint, which variable."""
        import tensorflow as tf

        latest = path or tf.train.latest_checkpoint(self.directory)
        if latest:
            saved = {name.split("/")[0] for name, _ in tf.train.list_variables(latest)}
            checkpoint = self.checkpoint
            if "loss_scale" in self.parts and "loss_scale" not in saved:
                # Written in float32 or mixed_bfloat16: the loss scale starts at its initial value.
                checkpoint = tf.train.Checkpoint(**{k: v for k, v in self.parts.items()
                                                    if k != "loss_scale"})
            try:
                status = checkpoint.restore(latest)
                status.assert_existing_objects_matched()
                if "loss_scale" in saved and "loss_scale" not in self.parts:
                    status.expect_partial()  # written in mixed_float16: its loss scale stays unread
            except (ValueError, AssertionError, tf.errors.InvalidArgumentError) as e:
                raise CheckpointMismatchError(_mismatch_message(latest, e)) from None
        return latest

    def save(self, step: int) -> str:
        return self.manager.save(checkpoint_number=step)

    def save_final(self, step: int) -> str:
        """Saves `step` unless the newest checkpoint already is it."""
        if self.latest is None or not self.latest.endswith(f"-{step}"):
            self.save(step)
        return self.latest


def _mismatch_message(path: str, error: Exception) -> str:
    # TF's message names the variable and both shapes on its first lines; the rest is a dump.
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    detail = " ".join(lines[:3])[:400]
    return (f"the checkpoint {path} in model_dir does not fit the configured model ({detail}); "
            f"it was written by another model or configuration: give a fresh --model_dir, or "
            f"the configuration that wrote it")
