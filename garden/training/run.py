"""One garden.train run as an object: build (model, optimizer, checkpoint), start (the step,
TensorBoard, the start line), the task's stages, finish (evaluation, export, summary.json).
garden.train's train() makes the settings records and drives a Run; this module composes
garden/training's pieces and calls the Task contract, nothing else."""

from __future__ import annotations

import math
import posixpath
import sys
import time
from typing import Optional

import gin

from text import onednn


class Run:
    """The state of one garden.train run, advanced by train(): build, start, stages, finish."""

    def __init__(self, *, model_dir: str, strategy, task, loop):
        from garden import distribute

        self.model_dir, self.strategy, self.task, self.loop = model_dir, strategy, task, loop
        self.train_steps, self.global_batch_size = loop.train_steps, loop.global_batch_size
        self.accumulation, self.seed = loop.gradient_accumulation_steps, loop.seed
        self.replicas = strategy.num_replicas_in_sync
        self.chief = distribute.is_chief(strategy)
        self.last_eval = {}

    def build(self, *, optimization, fine_tuning, hardware) -> None:
        """The model, optimizer and checkpoint (restored when model_dir holds one)."""
        import keras

        from garden import distribute
        from garden.training import checkpoints, setup

        keras.utils.set_random_seed(self.seed)
        with self.strategy.scope():
            self.model, objects = self.task.build_model()
            self.opt = setup.build_optimizer(
                self.model, objects, train_steps=self.train_steps, optimization=optimization,
                fine_tuning=fine_tuning, precision=hardware.precision)
        self.precision = hardware.precision
        self.hardware = hardware
        self.loss_scaled = hardware.precision == "mixed_float16"
        self.checkpoints = checkpoints.Checkpoints(
            self.model_dir, model=self.model, opt=self.opt, objects=objects,
            keep=self.loop.keep_checkpoints, chief=self.chief,
            worker_dir=None if self.chief else distribute.worker_temp_dir(
                self.model_dir, self.strategy))
        latest = self.checkpoints.restore()
        self.step = self.start_step = int(self.opt.iterations.numpy())
        if latest:
            print(f"[train] resumed from {latest} at step {self.step}", flush=True)
        if self.chief:
            import tensorflow as tf

            with tf.io.gfile.GFile(posixpath.join(self.model_dir, "operative_config.gin"), "w") as f:
                f.write(gin.config_str())

    def start(self, *, optimization, hardware, magnitude_pruning: Optional[dict]) -> None:
        """The compiled step, the TensorBoard writer, the progress log, SIGTERM handling and
        the magnitude pruning."""
        import tensorflow as tf

        from garden.training import checkpoints, progress
        from garden.training.step import make_train_step

        self.train_step, _ = make_train_step(
            self.strategy, self.task, self.model, self.opt,
            gradient_accumulation_steps=self.accumulation, clip_norm=optimization.clip_norm,
            jit_compile=hardware.jit_compile)
        self.flops_per_token = progress.flops_per_token(self.model)
        self.peak = hardware.peak_flops or progress.measure_peak_flops(hardware.precision)
        self.writer = (tf.summary.create_file_writer(posixpath.join(self.model_dir, "train"))
                       if self.chief else tf.summary.create_noop_writer())
        self.progress = progress.Progress(
            self.writer, train_steps=self.train_steps, log_every=self.loop.log_every,
            global_batch_size=self.global_batch_size, shares=self.replicas * self.accumulation,
            flops_per_token=self.flops_per_token, peak_flops=self.peak,
            precision=hardware.precision)
        self.preemption = checkpoints.Preemption()
        self.start_time = time.time()
        print(f"[train] {self.task.name}: {self.train_steps} steps of {self.global_batch_size} "
              f"examples on {self.replicas} replica(s) ({type(self.strategy).__name__}), "
              f"{hardware.precision}, XLA {'on' if hardware.jit_compile else 'off'}, "
              f"{self.model.count_params():,} parameters, model_dir {self.model_dir}", flush=True)
        print(f"[train] {onednn.state()}", flush=True)
        self.pruning = None
        if magnitude_pruning:
            from garden.training.pruning import RunPruning

            self.pruning = RunPruning(self.model, magnitude_pruning,
                                      train_steps=self.train_steps, step=self.step)

    @property
    def eval_writer(self):
        """The writer of model_dir/eval (report.eval_writer), made at the first evaluation (the
        chief's only): a run that scores nothing leaves no eval/ events file."""
        from garden.training import report

        if getattr(self, "_eval_writer", None) is None:
            self._eval_writer = report.eval_writer(self.model_dir)
        return self._eval_writer

    def train_stage(self, stage) -> None:
        """Steps [max(step, first), end) on the stage's data, resumed where the stream stopped."""
        from garden.tasks.base import Stage

        stage = Stage(*stage)  # also a plain (first, end, dataset_fn, description) tuple
        if self.step >= stage.end_step:
            return
        print(f"[train] steps {stage.first_step}-{stage.end_step}: {stage.description}", flush=True)
        # Batches of the (per-replica) stream already consumed by earlier steps of this stage.
        skip = (self.step - stage.first_step) * self.accumulation * self.replicas
        micro_batch_size = self.global_batch_size // self.accumulation

        def make_dataset(ctx):
            return stage.dataset_fn(ctx, ctx.get_per_replica_batch_size(micro_batch_size),
                                    self.seed + stage.first_step, skip)

        iterator = iter(self.strategy.distribute_datasets_from_function(make_dataset))
        while self.step < stage.end_step:
            if self.pruning:
                self.pruning.before_step(self.step)
            metrics = self._step(iterator, stage)
            if self.pruning:
                self.pruning.after_step()
            self.step += 1
            self._check_finite(metrics)
            self.progress.add(self.step, metrics, lambda: self.opt.learning_rate)
            self._after_step()

    def _step(self, iterator, stage) -> dict:
        """One training step; data that ends or breaks is reported by name, not as a raw
        tf.errors traceback."""
        import tensorflow as tf

        from garden import data

        try:
            return {k: float(v) for k, v in self.train_step(iterator).items()}
        except tf.errors.OutOfRangeError:
            raise data.DataDirError(
                f"the data of steps {stage.first_step}-{stage.end_step} ({stage.description}) "
                f"gave no batch at step {self.step + 1}: it holds no examples (or fewer than one "
                f"per-replica batch). Re-run make_pretrain on more input") from None
        except tf.errors.DataLossError as e:
            where = data.locate_corruption(stage.files) or e.message.splitlines()[0]
            raise data.DataDirError(
                f"corrupt training data in {stage.description}: {where}. Re-run make_pretrain "
                f"for it") from None

    def _check_finite(self, metrics) -> None:
        if not math.isfinite(metrics["loss"]):
            raise FloatingPointError(
                f"loss is {metrics['loss']} at step {self.step}; stopping. The last good "
                f"checkpoint is kept: {self.checkpoints.latest}")
        # A finite loss can still have a NaN/Inf gradient (e.g. sqrt or norm at 0): this step
        # has already put it into the weights, so stop before they are saved. Under loss
        # scaling (mixed_float16) an overflowing gradient is expected: the LossScaleOptimizer
        # skips that step and lowers the scale.
        if not self.loss_scaled and not math.isfinite(metrics["grad_norm"]):
            raise FloatingPointError(
                f"gradient global norm is {metrics['grad_norm']} at step {self.step} (loss "
                f"{metrics['loss']:.4f}); stopping. The last good checkpoint is kept: "
                f"{self.checkpoints.latest}")

    def _after_step(self) -> None:
        """Evaluation, periodic checkpoint and preemption, in that order."""
        from garden.training import report

        step = self.step
        eval_every = self.loop.eval_every
        if eval_every and (step % eval_every == 0 or step == self.train_steps) and self.chief:
            self.last_eval = (report.evaluate(self.task, self.model, writer=self.eval_writer,
                                              step=step) or self.last_eval)
            if self.pruning:
                self.pruning.record(step, self.last_eval)
        if step % self.loop.checkpoint_every == 0:
            self.checkpoints.save(step)
        if self.preemption.requested:
            path = self.checkpoints.save(step)
            print(f"[train] SIGTERM: saved {path} at step {step}; exiting", flush=True)
            sys.exit(self.preemption.EXIT_CODE)

    def finish(self) -> dict:
        """The last checkpoint; on the chief: the task's final scores, the export, summary.json."""
        from garden import distribute
        from garden.training import report

        self.writer.flush()
        self.checkpoints.save_final(self.step)
        elapsed = time.time() - self.start_time
        if not self.chief:
            distribute.remove_worker_temp_dir(self.model_dir, self.strategy)
            print(f"[train] worker done at step {self.step}", flush=True)
            return {"steps": self.step}
        result = self.task.finish(self.model, self.model_dir)
        # The final scores (the numbers summary.json gets from task.finish) at the last step,
        # beside the periodic ones: a fine-tuning run's eval/ curve ends where summary.json does.
        if report.numeric(result):
            report.log_eval(self.eval_writer, self.step, result)
        export_dir = report.export(self.task, self.model, self.hardware)
        summary = {
            "task": self.task.name, "steps": self.step,
            "steps_this_run": self.step - self.start_step,
            "seconds_this_run": round(elapsed, 2),
            "global_batch_size": self.global_batch_size, "replicas": self.replicas,
            "precision": self.precision,
            "parameters": int(self.model.count_params()),
            "flops_per_token": self.flops_per_token, "peak_flops": self.peak,
            "mfu_last_window": self.progress.mfu,
            "first_logged_metrics": self.progress.first,
            "last_logged_metrics": self.progress.last,
            "last_eval_metrics": self.last_eval,
            "checkpoint": self.checkpoints.latest,
            **({"export_dir": export_dir,
                "export_precision": self.hardware.export_precision} if export_dir else {}),
            **(self.pruning.summary(self.model_dir) if self.pruning else {}),
            **result,
        }
        # garden.train --mode=eval's scores of this run's checkpoints (training/evaluation.py)
        # outlive a resumed training's new summary.
        evaluations = (report.read_summary(self.model_dir) or {}).get("evaluations")
        if evaluations:
            summary["evaluations"] = evaluations
        report.write_summary(self.model_dir, summary)
        print(f"[train] done: step {self.step}, checkpoint {self.checkpoints.latest}", flush=True)
        return summary


# --------------------------------------------------------------------------------------
# Command line.
# --------------------------------------------------------------------------------------
