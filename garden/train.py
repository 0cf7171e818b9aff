"""`python -m garden.train --config configs/X.gin --model_dir=DIR`: the one trainer.

Every model trains through this loop; what differs between objectives lives in a task object
that the gin config picks from the task table (garden/tasks/__init__.py) and that this module
reaches only through the Task contract (garden/tasks/base.py): it names no family and no task.
The loop is a custom one over `strategy.distribute_datasets_from_function` + `strategy.run`
(Keras 3 `model.fit` fails under MultiWorkerMirroredStrategy, and exact resume needs control
over the input position), composed of garden/training's pieces: the step (step.py),
checkpoints + resume + preemption (checkpoints.py), the log line, TensorBoard and MFU
(progress.py), evaluation, export and summary.json (report.py), the checks before the first
step (setup.py), and the run object that holds them from build to finish (run.py).

Flags:
  --config FILE          gin file(s), applied in order (repeatable). --gin_file is the same flag
                         (gin's and t5x's name); both may be mixed, in the order given.
  --gin_param BINDING    extra gin binding, e.g. --gin_param="DATA_DIR='/data/bert'" (repeatable).
                         --gin_bindings is the same flag (gin's and t5x's name).
  --model_dir DIR        checkpoints, TensorBoard logs, operative_config.gin, summary.json.
  --mode MODE            train (default) | eval: evaluation only (garden/training/evaluation.py):
                         restores the newest checkpoint of --model_dir (or --checkpoint), runs
                         the task's evaluation on its eval data, writes the scores to
                         TensorBoard (model_dir/eval, tags eval/<name>) and to summary.json
                         under "evaluations" (training's own keys are left as they are), and
                         trains, checkpoints and exports nothing.
  --checkpoint PATH      --mode=eval: the checkpoint to score (a prefix, e.g.
                         RUN/checkpoints/ckpt-1000); default: the newest of model_dir.
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
import os
import re
import sys
from typing import Optional

import gin

from text.flags import add_bool
from garden.serving.precision import PRECISIONS as EXPORT_PRECISIONS
from garden.tasks.base import ConfigError
from garden.training.settings import PRECISIONS

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------------------
# The loop: composed of garden/training's pieces; it calls the Task contract and nothing else.
# --------------------------------------------------------------------------------------
@gin.configurable(denylist=["model_dir", "strategy", "evaluate_checkpoint"])
def train(model_dir: str, strategy, *, evaluate_checkpoint: Optional[str] = None,
          task=gin.REQUIRED, train_steps: int = gin.REQUIRED,
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
    Every `eval_every` steps (0: never) the task's held-out evaluation is logged; it and the
    final scores (summary.json's, at the last step) go to TensorBoard model_dir/eval as
    eval/<name>, where --mode=eval writes too (garden.training.report.eval_writer).
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
    model_dir/train (evaluations: model_dir/eval), the operative gin config and a final
    summary.json; exports the task's serving module when the task names an export_base.

    evaluate_checkpoint (not a gin binding; garden.train --mode=eval): trains nothing, but
    scores that checkpoint with the same task, model and precision
    (garden.training.evaluation.evaluate_checkpoint) and returns its record.
    """
    from garden import distribute
    from garden.training import settings, setup
    from garden.training.run import Run

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
        if hardware.export_precision != "float32" and not evaluate_checkpoint:
            from garden.training import report

            report.check_export(task, hardware)
        if evaluate_checkpoint:
            from garden.training import evaluation

            return evaluation.evaluate_checkpoint(
                evaluate_checkpoint, model_dir=model_dir, strategy=strategy, task=task,
                loop=loop, optimization=optimization, fine_tuning=fine_tuning,
                hardware=hardware)
        for warning in setup.schedule_warnings(loop, optimization):
            print(f"[train] warning: {warning}", flush=True)
        run = Run(model_dir=model_dir, strategy=strategy, task=task, loop=loop)
        run.build(optimization=optimization, fine_tuning=fine_tuning, hardware=hardware)
        run.start(optimization=optimization, hardware=hardware,
                  magnitude_pruning=magnitude_pruning)
        for stage in task.schedule(loop.train_steps):
            run.train_stage(stage)
        return run.finish()


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
    factory = gin.query_parameter(
        f"{reference.selector}.{getattr(task_cls, 'summary_factory', 'backbone')}")
    # None: the task builds its summary model without that factory (from its other bindings).
    backbone_fn = None if factory is None else factory.scoped_configurable_fn
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
        backbone = None if backbone_fn is None else backbone_fn(default_vocab_size=vocab_size)
        model = task_cls.summary_model_from(backbone, literal, vocab_size=vocab_size)
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


def _train_reporting_macros(model_dir: str, strategy, evaluate_checkpoint=None) -> None:
    """train(), with a macro the config uses but nobody bound (%VOCAB, %DATA_DIR) reported by
    name: gin only says that a `macro()` call in scope VOCAB lacks its value."""
    try:
        train(model_dir=model_dir, strategy=strategy, evaluate_checkpoint=evaluate_checkpoint)
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
    # --gin_file / --gin_bindings: gin's and t5x's names of the same two flags, so one
    # action each: repeated and mixed, they append to one list in the order given.
    parser.add_argument("--config", "--gin_file", dest="config", action="append", required=True,
                        help="gin config file(s)")
    parser.add_argument("--gin_param", "--gin_bindings", dest="gin_param", action="append",
                        default=[], help="extra gin binding(s)")
    parser.add_argument("--model_dir", help="output directory (required unless --summary)")
    parser.add_argument("--mode", choices=("train", "eval"), default="train",
                        help="eval: score a checkpoint of --model_dir on the task's eval data "
                             "(TensorBoard model_dir/eval, summary.json 'evaluations'); trains "
                             "nothing")
    parser.add_argument("--checkpoint", default=None,
                        help="--mode=eval: the checkpoint prefix to score (default: the newest "
                             "in model_dir/checkpoints)")
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
    add_bool(parser, "summary", False,
             "print the configured model's summary and parameter count, then exit")
    args = parser.parse_args(argv)
    if args.checkpoint and args.mode != "eval":
        parser.error("--checkpoint names the checkpoint --mode=eval scores; training resumes "
                     "from the newest in --model_dir")
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
        if args.mode == "eval":
            from garden.training import evaluation

            checkpoint = evaluation.find_checkpoint(args.model_dir, args.checkpoint)
        parse_config(args.config, bindings)
        from garden import distribute

        strategy = distribute.create_strategy(args.strategy, args.tpu)
        if args.mode == "eval":
            _train_reporting_macros(args.model_dir, strategy, evaluate_checkpoint=checkpoint)
        else:
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
