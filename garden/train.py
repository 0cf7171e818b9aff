"""`python -m garden.train --config configs/X.gin --model_dir=DIR`: the one trainer.

Every model trains through this loop; what differs between objectives lives in a task object
that the gin config picks from the task table (garden/tasks/__init__.py) and that this module
reaches only through the Task contract (garden/tasks/base.py): it names no family and no task.
The loop is a custom one over `strategy.distribute_datasets_from_function` + `strategy.run`
(Keras 3 `model.fit` fails under MultiWorkerMirroredStrategy, and exact resume needs control
over the input position), composed of garden/training's pieces: the step (step.py),
checkpoints + resume + preemption (checkpoints.py), the log line, TensorBoard and MFU
(progress.py), evaluation, export and summary.json (report.py), the checks before the first
step (setup.py).

Flags:
  --config FILE          gin file(s), applied in order (repeatable).
  --gin_param BINDING    extra gin binding, e.g. --gin_param="DATA_DIR='/data/bert'" (repeatable).
  --model_dir DIR        checkpoints, TensorBoard logs, operative_config.gin, summary.json.
  --strategy NAME        auto | one_device | mirrored (default) | multi_worker_mirrored | tpu.
                         auto: tpu when --tpu or the TPU_NAME environment variable is set,
                         multi_worker_mirrored when TF_CONFIG names two or more workers,
                         mirrored over the local GPUs (or --logical_cpus), else one_device (CPU).
  --tpu NAME             TPU name or grpc:// address, for --strategy=tpu/auto (default: TPU_NAME).
  --logical_cpus N       split the CPU into N logical devices (mirrored strategies on a CPU).
  --precision NAME       float32 | mixed_bfloat16 | mixed_float16: binds train.precision (after
                         the --gin_param bindings, so it wins); unset: the config's, else float32.
  --export_precision NAME  float32 | bfloat16: binds train.export_precision, what the export's
                         matmuls compute in (its signatures stay float32); unset: the config's,
                         else float32.
  --summary              build the configured model, print its summary and parameter count, exit.
"""

from __future__ import annotations

import argparse
import math
import os
import posixpath
import re
import sys
import time
from typing import Optional

import gin

from text import onednn
from garden.serving.precision import PRECISIONS as EXPORT_PRECISIONS
from garden.tasks.base import ConfigError
from garden.training.settings import PRECISIONS

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------------------
# The loop: composed of garden/training's pieces; it calls the Task contract and nothing else.
# --------------------------------------------------------------------------------------
@gin.configurable(denylist=["model_dir", "strategy"])
def train(model_dir: str, strategy, *, task=gin.REQUIRED, train_steps: int = gin.REQUIRED,
          global_batch_size: int = gin.REQUIRED, gradient_accumulation_steps: int = 1,
          seed: int = 42, log_every: int = 100, eval_every: int = 0,
          checkpoint_every: int = 1000, keep_checkpoints: int = 3,
          optimizer: str = "adamw", learning_rate: float = 1e-4, lr_schedule: str = "linear",
          warmup_steps: int = 10_000, lr_power: float = 1.0, end_learning_rate: float = 0.0,
          weight_decay: float = 0.01, adam_beta_1: float = 0.9, adam_beta_2: float = 0.999,
          adam_epsilon: float = 1e-6, clip_norm: Optional[float] = 1.0,
          layer_decay: Optional[float] = None, unfreeze_every: Optional[int] = None,
          precision: str = "float32", jit_compile: Optional[bool] = None,
          peak_flops: Optional[float] = None, export_precision: str = "float32",
          magnitude_pruning: Optional[dict] = None) -> dict:
    """Trains `task` for `train_steps` steps of `global_batch_size` examples.

    Every argument after `strategy` is bound by name in gin as `train.<name>`; inside, they
    travel grouped in garden/training/settings.py's records (Loop, Optimization, FineTuning,
    Hardware), whose fields carry the same names.

    global_batch_size = per-replica batch x replicas x gradient_accumulation_steps; the loss
    is normalised over the global batch, so the updates do not depend on how it is split.
    Every `eval_every` steps (0: never) the task's held-out evaluation is logged.
    precision: 'float32', 'mixed_bfloat16' (the layers compute in bfloat16; softmax, LayerNorm,
    the logits and losses in float32) or 'mixed_float16' (float16 with dynamic loss scaling;
    GPUs only). Variables, so checkpoints, stay float32 in all three: a run may resume in
    another precision.
    export_precision: what the export's model computes in, whatever the training precision:
    'float32', or 'bfloat16' (the task's model rebuilt under mixed_bfloat16 with the trained
    weights; its signatures' inputs and outputs stay the float32 export's). A bfloat16 export
    is checked before the first step (garden.training.report.check_export). Running the
    command of a finished run again with another export_precision trains no step and exports
    that run's weights again, as the next version.
    lr_schedule: 'linear' (BERT), 'polynomial' (power lr_power, to end_learning_rate) or
    'slanted_triangular' (ULMFiT, rising for warmup_steps).
    layer_decay: layer-wise learning-rate decay for fine-tuning (ELECTRA: 0.8, large 0.9):
    the task head at the full rate, each layer group of the backbone below at `layer_decay`
    times the rate of the one above (the groups: Backbone.layer_groups, embeddings first;
    garden.optimization.layerwise_multipliers); 1 / 2.6 = 0.3846 gives ULMFiT's
    discriminative rates.
    unfreeze_every: gradual unfreezing for fine-tuning (ULMFiT): the task head trains alone for
    the first `unfreeze_every` steps, then the layer group below it (pooler or final norm, top
    layer, ..., embeddings) joins every `unfreeze_every` steps; a frozen group gets no update,
    no weight decay and no gradient in the clipping norm (garden.optimization.unfreeze_steps).
    One epoch is the training rows / global_batch_size steps. None: all layers train at once.
    Both are refused before the first step when the task's model has no backbone or a frozen
    one (feature-based tagging).
    peak_flops: the accelerator's peak FLOP/s for the MFU scalar; None: measured at start
    with a large matmul on the first device (MFU = 6 x non-embedding parameters x tokens/s
    / peak, attention FLOPs left out, so it is a lower bound).
    magnitude_pruning: gradual magnitude pruning of every dense kernel while training (Zhu &
    Gupta 2017; garden.training.pruning.RunPruning), e.g. {"final_sparsity": 0.8}: the
    kernels reach 80% zeros at two thirds of train_steps; summary.json gets the sparsity and
    the curve of sparsity against the eval metric (every eval_every steps, model_dir/pruning.png).

    Resumes from the newest checkpoint in model_dir/checkpoints; writes TensorBoard scalars to
    model_dir/train, the operative gin config and a final summary.json; exports the task's
    serving module when the task names an export_base.
    """
    from garden import distribute
    from garden.training import settings, setup

    setup.check_precision(precision, strategy)
    setup.check_export_precision(export_precision, task)
    loop = settings.Loop(
        train_steps=train_steps, global_batch_size=global_batch_size,
        gradient_accumulation_steps=gradient_accumulation_steps, seed=seed,
        log_every=log_every, eval_every=eval_every, checkpoint_every=checkpoint_every,
        keep_checkpoints=keep_checkpoints)
    optimization = settings.Optimization(
        optimizer=optimizer, learning_rate=learning_rate, lr_schedule=lr_schedule,
        warmup_steps=warmup_steps, lr_power=lr_power, end_learning_rate=end_learning_rate,
        weight_decay=weight_decay, adam_beta_1=adam_beta_1, adam_beta_2=adam_beta_2,
        adam_epsilon=adam_epsilon, clip_norm=clip_norm)
    fine_tuning = settings.FineTuning(layer_decay=layer_decay, unfreeze_every=unfreeze_every)
    if jit_compile is None:
        # XLA cannot reach other logical CPU devices' variables; on one CPU it only adds
        # compile time. Keep it for GPUs and TPUs.
        jit_compile = not distribute.uses_only_cpus(strategy)
    hardware = settings.Hardware(precision=precision, jit_compile=jit_compile,
                                 peak_flops=peak_flops, export_precision=export_precision)

    setup.check_writable(model_dir)
    with setup.dtype_policy(hardware.precision):
        task.prepare()
        setup.check_arguments(loop, replicas=strategy.num_replicas_in_sync)
        if hardware.export_precision != "float32":
            from garden.training import report

            report.check_export(task, hardware)
        for warning in setup.schedule_warnings(loop, optimization):
            print(f"[train] warning: {warning}", flush=True)
        run = _Run(model_dir=model_dir, strategy=strategy, task=task, loop=loop)
        run.build(optimization=optimization, fine_tuning=fine_tuning, hardware=hardware)
        run.start(optimization=optimization, hardware=hardware,
                  magnitude_pruning=magnitude_pruning)
        for stage in task.schedule(loop.train_steps):
            run.train_stage(stage)
        return run.finish()


class _Run:
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
            self.last_eval = (report.evaluate(self.task, self.model, writer=self.writer, step=step)
                              or self.last_eval)
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
        report.write_summary(self.model_dir, summary)
        print(f"[train] done: step {self.step}, checkpoint {self.checkpoints.latest}", flush=True)
        return summary


# --------------------------------------------------------------------------------------
# Command line.
# --------------------------------------------------------------------------------------
def parse_config(config_files, bindings) -> None:
    """Parses gin files and bindings; any error names the file or binding at fault."""
    from garden import tasks

    gin.clear_config()
    tasks.register_with_gin()
    for path in config_files:
        if not os.path.exists(path):
            raise ConfigError(f"config file not found: {path}")
    gin.add_config_file_search_path(REPO_ROOT)
    for path in config_files:
        gin.add_config_file_search_path(os.path.dirname(os.path.abspath(path)))
    try:
        gin.parse_config_files_and_bindings(config_files, bindings, finalize_config=False)
    except (ValueError, KeyError, SyntaxError, ImportError, IOError) as e:
        text = str(e).strip()
        hint = tasks.renamed_hint(text)
        # One line: gin's first line says what is wrong (with the file and line for a config
        # file); for a --gin_param its next lines give "In bindings string line N" and a dump.
        at = re.search(r"In bindings string line (\d+)", text)
        where = ", ".join(config_files + [f"--gin_param={b}" for b in bindings])
        if at:
            where = f"--gin_param={_binding_at_line(bindings, int(at.group(1)))}"
        raise ConfigError(f"invalid configuration ({where}): " + (f"{hint}. " if hint else "")
                          + text.splitlines()[0]) from e


def _binding_at_line(bindings, line: int) -> str:
    """The --gin_param holding line `line` (1-based) of the bindings gin parses joined by
    newlines."""
    first = 1
    for binding in bindings:
        first += binding.count("\n") + 1
        if line < first:
            return binding
    return bindings[-1] if bindings else "?"


def build_summary(config_files, bindings) -> int:
    """Builds the configured model (no data, no macros of data paths needed) and prints it."""
    import keras

    parse_config(config_files, bindings)
    try:
        reference = gin.query_parameter("train.task")
    except ValueError as e:
        raise ConfigError(f"the config binds no train.task: {e}") from e
    task_cls = reference.configurable.wrapped
    # The factory the task's summary_model builds on: `backbone` (the encoder tasks) or the
    # task's own (the LM tasks take the whole GenerativeLM as `model`).
    backbone_fn = gin.query_parameter(
        f"{reference.selector}.{getattr(task_cls, 'summary_factory', 'backbone')}"
    ).scoped_configurable_fn
    vocab_size = None
    try:
        vocab = gin.query_parameter(f"{reference.selector}.vocab")
        if isinstance(vocab, gin.config.ConfigurableReference):  # a %MACRO
            vocab = vocab.scoped_configurable_fn()
        from text import tokenizers, vocab_files

        if vocab is not None:  # VOCAB = None: the fine-tuning run files' default (converted dirs)
            kind = vocab_files.detect_kind(vocab)  # vocab.txt, *.model or vocab.json
            vocab_size = tokenizers.load_tokenizer(kind, vocab).vocab.size
    except (ValueError, TypeError):
        pass  # no vocabulary bound or readable: the factory's preset (or binding) sizes it
    # The task's literal bindings (e.g. which family it trains); macros of data paths are left
    # out, they need not be bound for a summary.
    literal = {k: v for k, v in gin.get_bindings(reference.selector,
                                                 resolve_references=False).items()
               if not isinstance(v, gin.config.ConfigurableReference)}
    # A summary needs shapes only: inside a stateless scope that does not initialize on exit,
    # Keras defers every variable (shape and initializer kept, no values drawn), so a large
    # config prints without drawing its weights (roberta_large: 14.0 -> 5.5 CPU-seconds).
    with keras.StatelessScope(initialize_variables=False):
        backbone = backbone_fn(default_vocab_size=vocab_size)
        model = task_cls.summary_model_from(backbone, literal)
        model.summary(line_length=110)
        total = model.count_params()
        backbone = getattr(model, "backbone", None)
        if backbone is not None:
            count = backbone.count_params()
            print(f"Backbone parameters: {count:,} ({count / 1e6:.1f}M)")
    print(f"Total parameters: {total:,} ({total / 1e6:.1f}M)")
    return total


def _without_gin_context(error: Exception) -> str:
    """The error's own message, without the "In call to configurable ..." lines gin adds."""
    return str(error).split("\n  In call to configurable")[0].strip()


def _tf_op_error():
    import tensorflow as tf

    return tf.errors.OpError


def _train_reporting_macros(model_dir: str, strategy) -> None:
    """train(), with a macro the config uses but nobody bound (%VOCAB, %DATA_DIR) reported by
    name: gin only says that a `macro()` call in scope VOCAB lacks its value."""
    try:
        train(model_dir=model_dir, strategy=strategy)
    except TypeError as e:
        found = re.search(r"configurable 'macro' .* in scope '([^']+)'", str(e))
        if not found:
            raise
        name = found.group(1)
        raise ConfigError(f"the configuration uses the macro %{name} but does not bind it: pass "
                          f"--gin_param=\"{name}='...'\" (the run file's header lists the "
                          f"macros it needs)") from None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m garden.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", required=True, help="gin config file(s)")
    parser.add_argument("--gin_param", action="append", default=[], help="extra gin binding(s)")
    parser.add_argument("--model_dir", help="output directory (required unless --summary)")
    parser.add_argument("--strategy", default="mirrored",
                        help="auto | one_device | mirrored | multi_worker_mirrored | tpu. auto picks "
                             "tpu when --tpu or the TPU_NAME environment variable is set, "
                             "multi_worker_mirrored when TF_CONFIG names two or more workers, "
                             "mirrored over the local GPUs (or --logical_cpus), else one_device "
                             "on the CPU")
    parser.add_argument("--tpu", default=None,
                        help="TPU name or address (default: the TPU_NAME environment variable)")
    parser.add_argument("--logical_cpus", type=int, default=0,
                        help="split the host CPU into N logical devices, to run mirrored "
                             "strategies on a CPU-only machine (tests, debugging)")
    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="binds train.precision (after the --gin_param bindings); unset: "
                             "the config's binding, else float32. mixed_float16 needs GPUs")
    parser.add_argument("--export_precision", choices=EXPORT_PRECISIONS, default=None,
                        help="binds train.export_precision (after the --gin_param bindings): "
                             "what the export's matmuls compute in; its signatures stay float32")
    parser.add_argument("--summary", action="store_true",
                        help="print the configured model's summary and parameter count, then exit")
    args = parser.parse_args(argv)
    bindings = args.gin_param + [f"train.{name} = '{value}'" for name, value in (
        ("precision", args.precision), ("export_precision", args.export_precision)) if value]
    try:
        if args.summary:
            build_summary(args.config, bindings)
            return 0
        if not args.model_dir:
            parser.error("--model_dir is required")
        if args.logical_cpus:
            import tensorflow as tf

            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * args.logical_cpus)
        parse_config(args.config, bindings)
        from garden import distribute

        strategy = distribute.create_strategy(args.strategy, args.tpu)
        _train_reporting_macros(args.model_dir, strategy)
    except (ConfigError, PermissionError, FileNotFoundError, FloatingPointError) as e:
        message = f"error: {_without_gin_context(e)}"
    except ValueError as e:  # data/config mismatches raised by tasks (DataDirError, ...)
        message = f"error: {type(e).__name__}: {_without_gin_context(e)}"
    except _tf_op_error() as e:  # e.g. a checkpoint or file the config names that is not there
        message = f"error: {type(e).__name__}: {e.message.splitlines()[0]}"
    else:
        return 0
    _release_quietly()
    print(message, file=sys.stderr)
    return 2


def _release_quietly() -> None:
    """Frees what the failed run built before its one-line refusal is printed: a checkpoint
    restore it abandoned otherwise logs "Value in checkpoint could not be found" warnings
    when the objects die at exit, after the line that must come last."""
    if "tensorflow" not in sys.modules:
        return
    import gc

    import tensorflow as tf

    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        gc.collect()
    finally:
        logger.setLevel(level)


if __name__ == "__main__":
    sys.exit(main())
