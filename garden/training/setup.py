"""What garden.train sets up before the first step: the checks of its arguments and model_dir,
the dtype policy and the optimizer."""

from __future__ import annotations

import contextlib
import os
import posixpath
import socket
import uuid

from garden.tasks.base import ConfigError
from garden.training.settings import PRECISIONS, FineTuning, Loop, Optimization


def check_arguments(loop: Loop, replicas: int) -> None:
    """Whole numbers where whole numbers are meant (gin passes `train.train_steps=20.5` as is),
    and a global batch that splits evenly over the replicas and accumulation steps."""
    for name in ("train_steps", "global_batch_size", "gradient_accumulation_steps"):
        value = getattr(loop, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"train.{name} must be a positive whole number; got {value!r}")
    accumulation = loop.gradient_accumulation_steps
    if loop.global_batch_size % (replicas * accumulation):
        raise ConfigError(f"global_batch_size {loop.global_batch_size} is not divisible by "
                          f"{replicas} replicas x {accumulation} accumulation steps")


def schedule_warnings(loop: Loop, optimization: Optimization) -> list:
    """Settings that run but surely do not do what was meant (issue 13 item 9), as lines
    the trainer prints before the first step."""
    warnings = []
    train_steps, warmup_steps = loop.train_steps, optimization.warmup_steps
    if optimization.lr_schedule != "slanted_triangular" and warmup_steps >= train_steps:
        warnings.append(
            f"train.warmup_steps ({warmup_steps}) >= train.train_steps ({train_steps}): the "
            f"learning rate never leaves warmup and never reaches train.learning_rate; bind "
            f"train.warmup_steps to a share of the run (BERT: 1%, GLUE fine-tuning: 10%)")
    return warnings


def check_writable(model_dir: str) -> None:
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


def check_precision(precision, strategy) -> None:
    """train.precision names one of PRECISIONS; mixed_float16 runs on accelerators only."""
    from garden import distribute

    if precision not in PRECISIONS:
        raise ConfigError(f"train.precision must be one of "
                          f"{', '.join(repr(p) for p in PRECISIONS)}; got {precision!r}")
    if precision == "mixed_float16" and distribute.uses_only_cpus(strategy):
        # CPUs have no float16 matmul worth its loss scaling; oneDNN runs bfloat16 natively
        # on recent x86 CPUs.
        raise ConfigError(f"train.precision = 'mixed_float16' needs GPUs, and this run's "
                          f"{type(strategy).__name__} has CPU devices only; on CPUs use "
                          f"'mixed_bfloat16' or 'float32'")


def check_export_precision(export_precision, task) -> None:
    """train.export_precision names one of garden.serving.precision.PRECISIONS, and one other
    than float32 has an export to apply to."""
    from garden.serving.precision import PRECISIONS as EXPORT_PRECISIONS

    if export_precision not in EXPORT_PRECISIONS:
        raise ConfigError(f"train.export_precision must be one of "
                          f"{', '.join(repr(p) for p in EXPORT_PRECISIONS)}; "
                          f"got {export_precision!r}")
    if export_precision != "float32" and not task.export_base:
        raise ConfigError(f"train.export_precision = {export_precision!r}, but the {task.name} "
                          f"task exports nothing (its export_base is None): bind its export "
                          f"base (EXPORT_BASE in the fine-tuning run files), or unbind "
                          f"train.export_precision")


@contextlib.contextmanager
def dtype_policy(precision: str):
    """Sets Keras' (process-global) dtype policy to `precision` for the run and restores the
    previous one afterwards."""
    import keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(precision)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def build_optimizer(model, objects, *, train_steps: int, optimization: Optimization,
                    fine_tuning: FineTuning, precision: str):
    """The configured optimizer (LossScaleOptimizer-wrapped for mixed_float16), built on the
    model's trainable variables; layer-wise decay and gradual unfreezing take their depths
    from objects["backbone"]'s layer groups (switch_groups)."""
    import keras

    from garden.optimization import create_optimizer

    groups = switch_groups(objects, fine_tuning)
    opt = create_optimizer(train_steps=train_steps, layer_decay=fine_tuning.layer_decay,
                           layer_groups=groups, unfreeze_every=fine_tuning.unfreeze_every,
                           **optimization.optimizer_arguments())
    if precision == "mixed_float16":
        opt = keras.optimizers.LossScaleOptimizer(opt)
    opt.build(model.trainable_variables)
    return opt


def switch_groups(objects, fine_tuning: FineTuning):
    """The backbone's variables by layer group (Backbone.variable_groups: embeddings first,
    each layer, the top) for train.layer_decay / train.unfreeze_every, None when neither is
    bound. ConfigError, before anything trains, when the switch would do nothing: the task's
    model has no backbone, or its backbone trains no variable (feature-based tagging freezes
    it), or the backbone names no layer groups."""
    bound = [f"train.{name}" for name in ("layer_decay", "unfreeze_every")
             if getattr(fine_tuning, name) is not None]
    if not bound:
        return None
    switches = " and ".join(bound)
    backbone = objects.get("backbone")
    if backbone is None:
        raise ConfigError(f"{switches} needs a task whose model has a backbone (a fine-tuning "
                          f"task); this task's model checkpoints {sorted(objects)}: unbind it")
    family = backbone.family() if hasattr(backbone, "family") else type(backbone).__name__
    if not hasattr(backbone, "variable_groups"):
        raise ConfigError(f"{switches}: the {family} backbone ({type(backbone).__name__}) names "
                          f"no layer groups; unbind it")
    groups = backbone.variable_groups()
    if not any(groups):
        raise ConfigError(f"{switches}: the {family} backbone trains no variable (it is frozen, "
                          f"e.g. by garden.Tagging.feature_layers), so only the head "
                          f"trains and the switch would change nothing; unbind it")
    return groups
