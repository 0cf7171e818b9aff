"""What garden.train sets up before the first step: the checks of its arguments and model_dir,
the dtype policy and the optimizer."""

from __future__ import annotations

import contextlib
import os
import posixpath
import socket
import uuid
from typing import Optional

from garden.tasks.base import ConfigError


def check_arguments(train_steps, global_batch_size, replicas: int,
                    gradient_accumulation_steps: int) -> None:
    """Whole numbers where whole numbers are meant (gin passes `train.train_steps=20.5` as is),
    and a global batch that splits evenly."""
    for name, value in (("train.train_steps", train_steps),
                        ("train.global_batch_size", global_batch_size),
                        ("train.gradient_accumulation_steps", gradient_accumulation_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive whole number; got {value!r}")
    if global_batch_size % (replicas * gradient_accumulation_steps):
        raise ConfigError(f"global_batch_size {global_batch_size} is not divisible by "
                          f"{replicas} replicas x {gradient_accumulation_steps} accumulation steps")


def schedule_warnings(train_steps: int, warmup_steps: int, lr_schedule: str) -> list:
    """Settings that run but surely do not do what was meant (issue 13 item 9), as lines
    the trainer prints before the first step."""
    warnings = []
    if lr_schedule != "slanted_triangular" and warmup_steps >= train_steps:
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


@contextlib.contextmanager
def dtype_policy(name: Optional[str]):
    """Sets Keras' (process-global) dtype policy for the run and restores it afterwards."""
    import keras

    previous = keras.mixed_precision.global_policy()
    if name:
        keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def build_optimizer(model, objects, train_steps: int, mixed_precision: Optional[str],
                    layer_decay: Optional[float], unfreeze_every: Optional[int] = None,
                    **optimizer_args):
    """The configured optimizer (LossScaleOptimizer-wrapped for mixed_float16), built on the
    model's trainable variables; layer-wise decay and gradual unfreezing take their depths
    from objects["backbone"]'s layer groups (switch_groups)."""
    import keras

    from garden.optimization import create_optimizer

    groups = switch_groups(objects, layer_decay, unfreeze_every)
    opt = create_optimizer(train_steps=train_steps, layer_decay=layer_decay, layer_groups=groups,
                           unfreeze_every=unfreeze_every, **optimizer_args)
    if mixed_precision == "mixed_float16":
        opt = keras.optimizers.LossScaleOptimizer(opt)
    opt.build(model.trainable_variables)
    return opt


def switch_groups(objects, layer_decay: Optional[float], unfreeze_every: Optional[int]):
    """The backbone's variables by layer group (Backbone.variable_groups: embeddings first,
    each layer, the top) for train.layer_decay / train.unfreeze_every, None when neither is
    bound. ConfigError, before anything trains, when the switch would do nothing: the task's
    model has no backbone, or its backbone trains no variable (feature-based tagging freezes
    it), or the backbone names no layer groups."""
    bound = [name for name, value in (("train.layer_decay", layer_decay),
                                      ("train.unfreeze_every", unfreeze_every))
             if value is not None]
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
                          f"e.g. by garden.TokenTagging.feature_layers), so only the head "
                          f"trains and the switch would change nothing; unbind it")
    return groups
