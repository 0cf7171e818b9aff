"""`python -m garden.train --config configs/X.gin --model_dir=DIR`: the one trainer.

Every model trains through this loop; what differs between objectives lives in a task object
(garden/tasks/*) that the gin config picks: it checks and reads the data, builds the model and
computes the loss. The loop is a custom one over `strategy.distribute_datasets_from_function`
+ `strategy.run` (Keras 3 `model.fit` fails under MultiWorkerMirroredStrategy, and exact
resume needs control over the input position).

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
  --summary              build the configured model, print its summary and parameter count, exit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import posixpath
import signal
import socket
import sys
import time
import uuid
from typing import Optional

import gin

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ConfigError(ValueError):
    """The gin configuration cannot be parsed or names something that does not exist."""


# --------------------------------------------------------------------------------------
# Configurable factories (gin stays at this edge; models and tasks take plain arguments).
# --------------------------------------------------------------------------------------
@gin.configurable
def bert_backbone(default_vocab_size: Optional[int] = None, vocab_size: Optional[int] = None,
                  num_layers: int = 12, hidden_size: int = 768, num_heads: int = 12,
                  intermediate_size: int = 3072, max_sequence_length: int = 512,
                  type_vocab_size: int = 2, dropout: float = 0.1,
                  initializer_range: float = 0.02):
    """BertBackbone from gin bindings; vocab_size defaults to the task's vocabulary size."""
    from garden.models.bert.backbone import BertBackbone

    size = vocab_size if vocab_size is not None else default_vocab_size
    if size is None:
        raise ConfigError("bert_backbone.vocab_size is unset and no vocabulary gives it: bind "
                          "bert_backbone.vocab_size or the task's vocab")
    return BertBackbone(vocab_size=size, num_layers=num_layers, hidden_size=hidden_size,
                        num_heads=num_heads, intermediate_size=intermediate_size,
                        max_sequence_length=max_sequence_length, type_vocab_size=type_vocab_size,
                        dropout=dropout, initializer_range=initializer_range)


_REGISTERED = False


def _register_tasks():
    """Makes the task classes configurable as garden.<Name> (once per process)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from garden import backbones  # noqa: F401  (registers the families' gin factories)
    from garden.tasks.bert_pretraining import BertPretraining
    from garden.tasks.distillation import Distillation
    from garden.tasks.masked_lm_pretraining import (AlbertPretraining, ElectraPretraining,
                                                    RobertaPretraining)
    from garden.tasks.sentence_classification import SentenceClassification
    from garden.tasks.spanbert_pretraining import SpanBertPretraining

    for cls in (BertPretraining, SentenceClassification, RobertaPretraining, AlbertPretraining,
                ElectraPretraining, SpanBertPretraining, Distillation):
        gin.external_configurable(cls, module="garden")
    _REGISTERED = True


# --------------------------------------------------------------------------------------
# The loop.
# --------------------------------------------------------------------------------------
def _format_eta(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _progress_bar(step: int, total: int, width: int = 20) -> str:
    """A text bar that reads the same in a terminal and in a log file: 7 of 20 -> [=======>............]."""
    filled = min(width, width * step // max(total, 1))
    head = ">" if filled < width else ""
    return "[" + "=" * filled + head + "." * (width - filled - len(head)) + "]"


def _check_writable(model_dir: str) -> None:
    import tensorflow as tf

    try:
        tf.io.gfile.makedirs(model_dir)
        # A name of its own: workers of one job share model_dir, and one worker's probe
        # must not be removed under another's feet.
        probe = posixpath.join(model_dir, f".write_test-{socket.gethostname()}-{os.getpid()}-"
                                          f"{uuid.uuid4().hex}")
        with tf.io.gfile.GFile(probe, "w") as f:
            f.write("ok")
        tf.io.gfile.remove(probe)
    except (tf.errors.OpError, OSError) as e:
        raise PermissionError(f"model_dir {model_dir} is not writable: {e}") from e


@contextlib.contextmanager
def _dtype_policy(name: Optional[str]):
    """Sets Keras' (process-global) dtype policy for the run and restores it afterwards."""
    import keras

    previous = keras.mixed_precision.global_policy()
    if name:
        keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def _measure_peak_flops(mixed_precision: Optional[str]) -> float:
    """FLOP/s of a large square matmul on the first device (the MFU denominator), in the
    compute dtype of the run."""
    import tensorflow as tf

    dtype = {"mixed_bfloat16": tf.bfloat16, "mixed_float16": tf.float16}.get(mixed_precision or "", tf.float32)
    gpu = bool(tf.config.list_logical_devices("GPU"))
    n = 8192 if gpu else 2048
    with tf.device("/GPU:0" if gpu else "/CPU:0"):
        a = tf.random.normal([n, n], dtype=tf.float32)
        a = tf.cast(a, dtype)
        matmul = tf.function(lambda x: tf.reduce_sum(tf.cast(tf.matmul(x, x)[0, :1], tf.float32)))
        matmul(a).numpy()  # warm-up / trace
        reps, start = 0, time.perf_counter()
        while reps < 3 or time.perf_counter() - start < 0.3:
            matmul(a).numpy()
            reps += 1
        seconds = time.perf_counter() - start
    return 2.0 * n ** 3 * reps / seconds


class _Preemption:
    """Turns SIGTERM into a flag the loop checks after each step, so it can checkpoint."""

    def __init__(self):
        self.requested = False
        try:
            signal.signal(signal.SIGTERM, self._handler)
        except ValueError:  # not the main thread (e.g. inside some test harnesses)
            pass

    def _handler(self, signum, frame):
        self.requested = True


def make_train_step(strategy, task, model, opt, gradient_accumulation_steps: int = 1,
                    clip_norm: Optional[float] = 1.0, jit_compile: bool = False):
    """The training step of `garden.train` (also what benchmarks/train_step.py times).

    Returns (train_step, compute_gradients): train_step(iterator) is a tf.function that takes
    `gradient_accumulation_steps` micro-batches per replica from the distributed iterator,
    all-reduces the summed gradients, clips their global norm, applies `opt` and returns the
    replica-mean metrics (with "grad_norm"); compute_gradients(micro_batches, weight_shares)
    is its per-replica part (XLA-compiled with jit_compile).
    """
    import keras
    import tensorflow as tf

    variables = model.trainable_variables
    replicas = strategy.num_replicas_in_sync
    loss_scaled = isinstance(opt, keras.optimizers.LossScaleOptimizer)
    # Each step averages over `shares` micro-batches: one per replica and accumulation step.
    shares = replicas * gradient_accumulation_steps
    sum_op = tf.distribute.ReduceOp.SUM

    def compute_gradients(micro_batches, weight_shares):
        """Summed gradients and mean metrics of this replica's micro-batches (XLA-able)."""
        grads_sum, metric_sums = None, {}
        for batch in micro_batches:
            with tf.GradientTape() as tape:
                metrics = task.compute_metrics(model, batch, training=True,
                                               weight_shares=weight_shares)
                loss = metrics["loss"] / shares
                if loss_scaled:
                    loss = opt.scale_loss(loss)
            grads = tape.gradient(loss, variables)
            # Embedding gradients arrive as IndexedSlices; dense ones can be summed and
            # all-reduced like the rest.
            grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                     for g, v in zip(grads, variables)]
            grads_sum = grads if grads_sum is None else [a + g for a, g in zip(grads_sum, grads)]
            for k, v in metrics.items():
                metric_sums[k] = metric_sums.get(k, 0.0) + v / len(micro_batches)
        return grads_sum, metric_sums

    compiled_gradients = (tf.function(compute_gradients, jit_compile=True) if jit_compile
                          else compute_gradients)

    def step_fn(micro_batches):
        context = tf.distribute.get_replica_context()
        # Weighted means (e.g. MLM over masked positions) divide by the weight of the whole
        # global batch, so the loss does not depend on how the batch is split.
        local = {}
        for batch in micro_batches:
            for k, v in task.loss_weights(batch).items():
                local[k] = local.get(k, 0.0) + v
        weight_shares = None
        if local:
            weight_shares = {k: v / shares for k, v in context.all_reduce(sum_op, local).items()}
        grads, metrics = compiled_gradients(micro_batches, weight_shares)
        # Clip the global (all-replica) gradient, as a single device would.
        grads = context.all_reduce(sum_op, grads)
        scale = opt.dynamic_scale if loss_scaled else 1.0
        grad_norm = tf.linalg.global_norm(grads)
        # One multiply per gradient does both the clipping (tf.clip_by_global_norm's factor,
        # NaN for a non-finite norm) and the 1/replicas that the Keras optimizer expects (it
        # sums the gradients over replicas again); none at all for one replica without clip.
        factor = None
        if clip_norm:
            limit = clip_norm * scale
            factor = tf.where(tf.math.is_finite(grad_norm), limit * tf.minimum(1.0 / grad_norm, 1.0 / limit),
                              float("nan"))
        if replicas > 1:
            factor = 1.0 / replicas if factor is None else factor / replicas
        if factor is not None:
            grads = [g * tf.cast(factor, g.dtype) for g in grads]
        opt.apply_gradients(zip(grads, variables))
        metrics = dict(metrics)
        metrics["grad_norm"] = grad_norm / scale
        return metrics

    @tf.function
    def train_step(iterator):
        micro_batches = [next(iterator) for _ in range(gradient_accumulation_steps)]
        per_replica = strategy.run(step_fn, args=(micro_batches,))
        return {k: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None)
                for k, v in per_replica.items()}

    return train_step, compiled_gradients


@gin.configurable(denylist=["model_dir", "strategy"])
def train(model_dir: str, strategy, task=gin.REQUIRED, train_steps: int = gin.REQUIRED,
          global_batch_size: int = gin.REQUIRED, optimizer: str = "adamw",
          learning_rate: float = 1e-4, warmup_steps: int = 10_000, weight_decay: float = 0.01,
          adam_beta_1: float = 0.9, adam_beta_2: float = 0.999, adam_epsilon: float = 1e-6,
          clip_norm: Optional[float] = 1.0, checkpoint_every: int = 1000,
          keep_checkpoints: int = 3, log_every: int = 100, seed: int = 42,
          mixed_precision: Optional[str] = None, jit_compile: Optional[bool] = None,
          gradient_accumulation_steps: int = 1, eval_every: int = 0,
          lr_schedule: str = "linear", lr_power: float = 1.0, end_learning_rate: float = 0.0,
          layer_decay: Optional[float] = None, peak_flops: Optional[float] = None) -> dict:
    """Trains `task` for `train_steps` steps of `global_batch_size` examples.

    global_batch_size = per-replica batch x replicas x gradient_accumulation_steps; the loss
    is normalised over the global batch, so the updates do not depend on how it is split.
    Every `eval_every` steps (0: never) the task's held-out evaluation is logged.
    lr_schedule: 'linear' (BERT), 'polynomial' (power lr_power, to end_learning_rate) or
    'slanted_triangular' (ULMFiT, rising for warmup_steps).
    layer_decay: layer-wise learning-rate decay for fine-tuning (ELECTRA: 0.8, large 0.9):
    the task head at the full rate, each Transformer layer below at `layer_decay` times the
    rate of the one above (garden.optimization.layerwise_multiplier).
    peak_flops: the accelerator's peak FLOP/s for the MFU scalar; None: measured at start
    with a large matmul on the first device (MFU = 6 x non-embedding parameters x tokens/s
    / peak, attention FLOPs left out, so it is a lower bound).

    Resumes from the newest checkpoint in model_dir/checkpoints; writes TensorBoard scalars to
    model_dir/train, the operative gin config and a final summary.json.
    """
    import keras
    import numpy as np
    import tensorflow as tf

    from garden import distribute
    from garden.optimization import create_optimizer

    _check_writable(model_dir)
    with _dtype_policy(mixed_precision):
        task.prepare()

        replicas = strategy.num_replicas_in_sync
        if gradient_accumulation_steps < 1 or global_batch_size % (replicas * gradient_accumulation_steps):
            raise ConfigError(f"global_batch_size {global_batch_size} is not divisible by "
                              f"{replicas} replicas x {gradient_accumulation_steps} accumulation steps")
        micro_batch_size = global_batch_size // gradient_accumulation_steps
        if jit_compile is None:
            # XLA cannot reach other logical CPU devices' variables; on one CPU it only adds
            # compile time. Keep it for GPUs and TPUs.
            jit_compile = not distribute.uses_only_cpus(strategy)

        keras.utils.set_random_seed(seed)
        with strategy.scope():
            model, items = task.build_model()
            num_layers = None
            if layer_decay is not None and "backbone" in items:
                num_layers = items["backbone"].get_config().get("num_layers")
            opt = create_optimizer(optimizer, learning_rate, train_steps, warmup_steps,
                                   weight_decay=weight_decay, beta_1=adam_beta_1, beta_2=adam_beta_2,
                                   epsilon=adam_epsilon, schedule=lr_schedule, power=lr_power,
                                   end_learning_rate=end_learning_rate, layer_decay=layer_decay,
                                   num_layers=num_layers)
            loss_scaled = mixed_precision == "mixed_float16"
            if loss_scaled:
                opt = keras.optimizers.LossScaleOptimizer(opt)
            opt.build(model.trainable_variables)
        # Dropout draws from Keras seed generators whose states are variables outside the model's
        # weights: checkpoint them too, so a resumed run draws the same masks as an uninterrupted one.
        weight_ids = {id(w) for w in model.weights}
        seed_states = [v for v in model.variables if id(v) not in weight_ids]
        checkpoint = tf.train.Checkpoint(optimizer=opt, seed_states=seed_states, **items)
        chief = distribute.is_chief(strategy)
        checkpoint_dir = posixpath.join(model_dir, "checkpoints")
        # Every worker of a multi-worker run takes part in saving; only the chief's copy is kept.
        manager = tf.train.CheckpointManager(
            checkpoint, checkpoint_dir if chief else distribute.worker_temp_dir(model_dir, strategy),
            max_to_keep=keep_checkpoints)
        latest = tf.train.latest_checkpoint(checkpoint_dir)
        if latest:
            checkpoint.restore(latest).assert_existing_objects_matched()
        step = int(opt.iterations.numpy())
        if latest:
            print(f"[train] resumed from {latest} at step {step}", flush=True)

        if chief:
            with tf.io.gfile.GFile(posixpath.join(model_dir, "operative_config.gin"), "w") as f:
                f.write(gin.config_str())

        variables = model.trainable_variables
        shares = replicas * gradient_accumulation_steps
        train_step, _ = make_train_step(strategy, task, model, opt, gradient_accumulation_steps,
                                        clip_norm, jit_compile)

        # Model FLOPs per trained token: 6 x non-embedding parameters (forward 2, backward 4).
        flops_per_token = 6.0 * sum(int(np.prod(v.shape)) for v in variables if "embedding" not in v.path)
        peak = peak_flops or _measure_peak_flops(mixed_precision)
        writer = (tf.summary.create_file_writer(posixpath.join(model_dir, "train")) if chief
                  else tf.summary.create_noop_writer())
        preemption = _Preemption()
        schedule = task.schedule(train_steps)
        print(f"[train] {task.name}: {train_steps} steps of {global_batch_size} examples on "
              f"{replicas} replica(s) ({type(strategy).__name__}), XLA {'on' if jit_compile else 'off'}, "
              f"{model.count_params():,} parameters, model_dir {model_dir}", flush=True)

        last, first_logged, last_eval, last_mfu = {}, None, {}, None
        start_time = time.time()
        start_step = step
        window_time, window_steps, window_sums = time.time(), 0, {}
        for first, end, dataset_fn, description in schedule:
            if step >= end:
                continue
            print(f"[train] steps {first}-{end}: {description}", flush=True)
            # Batches of the (per-replica) stream already consumed by earlier steps of this phase.
            skip = (step - first) * gradient_accumulation_steps * replicas

            def make_dataset(ctx, _fn=dataset_fn, _skip=skip, _first=first):
                return _fn(ctx, ctx.get_per_replica_batch_size(micro_batch_size), seed + _first, _skip)

            iterator = iter(strategy.distribute_datasets_from_function(make_dataset))
            while step < end:
                metrics = {k: float(v) for k, v in train_step(iterator).items()}
                step += 1
                if not math.isfinite(metrics["loss"]):
                    raise FloatingPointError(
                        f"loss is {metrics['loss']} at step {step}; stopping. The last good "
                        f"checkpoint is kept: {manager.latest_checkpoint}")
                # A finite loss can still have a NaN/Inf gradient (e.g. sqrt or norm at 0):
                # this step has already put it into the weights, so stop before they are saved.
                # Under loss scaling (mixed_float16) an overflowing gradient is expected: the
                # LossScaleOptimizer skips that step and lowers the scale.
                if not loss_scaled and not math.isfinite(metrics["grad_norm"]):
                    raise FloatingPointError(
                        f"gradient global norm is {metrics['grad_norm']} at step {step} (loss "
                        f"{metrics['loss']:.4f}); stopping. The last good checkpoint is kept: "
                        f"{manager.latest_checkpoint}")
                for k, v in metrics.items():
                    window_sums[k] = window_sums.get(k, 0.0) + v
                window_steps += 1
                if step % log_every == 0 or step == train_steps:
                    now = time.time()
                    rate = window_steps / max(now - window_time, 1e-9)
                    means = {k: v / window_steps for k, v in window_sums.items()}
                    first_logged = first_logged or means
                    last = means
                    lr = float(opt.learning_rate)  # the schedule at the current iteration
                    with writer.as_default(step=step):
                        for k, v in means.items():
                            tf.summary.scalar(k, v)
                        tf.summary.scalar("learning_rate", lr)
                        tf.summary.scalar("steps_per_second", rate)
                        tf.summary.scalar("examples_per_second", rate * global_batch_size)
                        if "tokens" in means:  # per micro-batch and replica: scale to the step
                            tokens_per_second = rate * means["tokens"] * shares
                            tf.summary.scalar("tokens_per_second", tokens_per_second)
                            last_mfu = flops_per_token * tokens_per_second / peak
                            tf.summary.scalar("mfu", last_mfu)
                    shown = " ".join(f"{k} {v:.4f}" for k, v in means.items() if k != "tokens")
                    eta = (train_steps - step) / max(rate, 1e-9)
                    print(f"[train] step {step}/{train_steps} {_progress_bar(step, train_steps)} "
                          f"{100 * step / train_steps:.0f}% | "
                          f"{shown} | lr {lr:.2e} | {rate:.1f} steps/s "
                          f"{rate * global_batch_size:.0f} ex/s"
                          + (f" MFU {100 * last_mfu:.1f}%" if last_mfu is not None else "")
                          + f" | ETA {_format_eta(eta)}", flush=True)
                    window_time, window_steps, window_sums = now, 0, {}
                if eval_every and (step % eval_every == 0 or step == train_steps) and chief:
                    results = task.evaluate(model) if hasattr(task, "evaluate") else {}
                    with writer.as_default(step=step):
                        for k, v in results.items():
                            if isinstance(v, (int, float)):
                                tf.summary.scalar(f"eval/{k}", v)
                    if results:
                        last_eval = {k: v for k, v in results.items() if isinstance(v, (int, float))}
                        shown = " ".join(f"{k} {v:.4f}" for k, v in results.items()
                                         if isinstance(v, float))
                        print(f"[train] eval at step {step} | {shown}", flush=True)
                if step % checkpoint_every == 0:
                    manager.save(checkpoint_number=step)
                if preemption.requested:
                    path = manager.save(checkpoint_number=step)
                    print(f"[train] SIGTERM: saved {path} at step {step}; exiting", flush=True)
                    sys.exit(143)
        writer.flush()
        if manager.latest_checkpoint is None or not manager.latest_checkpoint.endswith(f"-{step}"):
            manager.save(checkpoint_number=step)
        elapsed = time.time() - start_time
        if not chief:
            distribute.remove_worker_temp_dir(model_dir, strategy)
            print(f"[train] worker done at step {step}", flush=True)
            return {"steps": step}
        result = task.finish(model, model_dir)
        summary = {
            "task": task.name,
            "steps": step,
            "steps_this_run": step - start_step,
            "seconds_this_run": round(elapsed, 2),
            "global_batch_size": global_batch_size,
            "replicas": replicas,
            "parameters": int(model.count_params()),
            "flops_per_token": flops_per_token,
            "peak_flops": peak,
            "mfu_last_window": last_mfu,
            "first_logged_metrics": first_logged,
            "last_logged_metrics": last,
            "last_eval_metrics": last_eval,
            "checkpoint": manager.latest_checkpoint,
            **result,
        }
        with tf.io.gfile.GFile(posixpath.join(model_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2, default=lambda o: np.asarray(o).tolist())
        print(f"[train] done: step {step}, checkpoint {manager.latest_checkpoint}", flush=True)
        return summary


# --------------------------------------------------------------------------------------
# Command line.
# --------------------------------------------------------------------------------------
def parse_config(config_files, bindings) -> None:
    """Parses gin files and bindings; any error names the file or binding at fault."""
    gin.clear_config()
    _register_tasks()
    for path in config_files:
        if not os.path.exists(path):
            raise ConfigError(f"config file not found: {path}")
    gin.add_config_file_search_path(REPO_ROOT)
    for path in config_files:
        gin.add_config_file_search_path(os.path.dirname(os.path.abspath(path)))
    try:
        gin.parse_config_files_and_bindings(config_files, bindings, finalize_config=False)
    except (ValueError, KeyError, SyntaxError, ImportError, IOError) as e:
        where = ", ".join(config_files + [f"--gin_param={b}" for b in bindings])
        raise ConfigError(f"invalid configuration ({where}): {e}") from e


def build_summary(config_files, bindings) -> int:
    """Builds the configured model (no data, no macros of data paths needed) and prints it."""
    parse_config(config_files, bindings)
    try:
        reference = gin.query_parameter("train.task")
    except ValueError as e:
        raise ConfigError(f"the config binds no train.task: {e}") from e
    task_cls = reference.configurable.wrapped
    backbone_fn = gin.query_parameter(f"{reference.selector}.backbone").scoped_configurable_fn
    vocab_size = None
    try:
        vocab = gin.query_parameter(f"{reference.selector}.vocab")
        if isinstance(vocab, gin.config.ConfigurableReference):  # a %MACRO
            vocab = vocab.scoped_configurable_fn()
        from data_pipelines import tokenizers

        kind = tokenizers.detect_kind(vocab)  # vocab.txt, *.model or vocab.json
        vocab_size = tokenizers.load_tokenizer(kind, vocab).vocab.size
    except (ValueError, TypeError):
        pass  # no vocabulary bound or readable: the factory's preset (or binding) sizes it
    model = task_cls.summary_model(backbone_fn(default_vocab_size=vocab_size))
    model.summary(line_length=110)
    total = model.count_params()
    backbone = getattr(model, "backbone", None)
    if backbone is not None:
        count = backbone.count_params()
        print(f"Backbone parameters: {count:,} ({count / 1e6:.1f}M)")
    print(f"Total parameters: {total:,} ({total / 1e6:.1f}M)")
    return total


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
    parser.add_argument("--summary", action="store_true",
                        help="print the configured model's summary and parameter count, then exit")
    args = parser.parse_args(argv)
    try:
        if args.summary:
            build_summary(args.config, args.gin_param)
            return 0
        if not args.model_dir:
            parser.error("--model_dir is required")
        if args.logical_cpus:
            import tensorflow as tf

            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * args.logical_cpus)
        parse_config(args.config, args.gin_param)
        from garden import distribute

        strategy = distribute.create_strategy(args.strategy, args.tpu)
        train(model_dir=args.model_dir, strategy=strategy)
    except (ConfigError, PermissionError, FileNotFoundError, FloatingPointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # data/config mismatches raised by tasks (DataDirError, ...)
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
