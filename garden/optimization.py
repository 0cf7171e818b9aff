"""Optimizers and learning-rate schedules, built from Keras pieces.

BERT (Devlin et al., 2019) trains with Adam + decoupled weight decay 0.01, a linear warmup
over the first steps and a linear decay to zero; LayerNorm parameters and biases are not
decayed. Keras 3's AdamW implements the decoupled decay; `exclude_from_weight_decay`
matches variable names ("gamma"/"beta" of LayerNorm, "bias").
"""

from __future__ import annotations

import re
from typing import Callable, Optional

import keras

# Keras 3 variable names are the short attribute names of their layer.
NO_DECAY_NAMES = ("bias", "gamma", "beta")


@keras.saving.register_keras_serializable(package="garden")
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak_learning_rate` over `warmup_steps`, then polynomial decay
    (power 1 = linear, as BERT) to `end_learning_rate` at `decay_steps`.

    Args:
        peak_learning_rate: float, the rate reached at the end of warmup.
        decay_steps: int, total number of steps of the run (warmup included).
        warmup_steps: int, steps of linear warmup.
        end_learning_rate: float, rate at `decay_steps` and after.
        power: float, exponent of the decay.

    Example:
        schedule = WarmupPolynomialDecay(1e-4, decay_steps=1_000_000, warmup_steps=10_000)
        optimizer = keras.optimizers.AdamW(learning_rate=schedule)
    """

    def __init__(self, peak_learning_rate, decay_steps, warmup_steps=0, end_learning_rate=0.0,
                 power=1.0):
        self.peak_learning_rate = float(peak_learning_rate)
        self.decay_steps = int(decay_steps)
        self.warmup_steps = int(warmup_steps)
        self.end_learning_rate = float(end_learning_rate)
        self.power = float(power)

    def __call__(self, step):
        ops = keras.ops
        step = ops.cast(step, "float32")
        warmup = float(max(self.warmup_steps, 1))
        decay_span = float(max(self.decay_steps - self.warmup_steps, 1))
        warm = self.peak_learning_rate * step / warmup
        progress = ops.clip((step - self.warmup_steps) / decay_span, 0.0, 1.0)
        decayed = (self.peak_learning_rate - self.end_learning_rate) * (1.0 - progress) ** self.power
        decayed = decayed + self.end_learning_rate
        if self.warmup_steps <= 0:
            return decayed
        return ops.where(step < self.warmup_steps, warm, decayed)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "decay_steps": self.decay_steps,
            "warmup_steps": self.warmup_steps,
            "end_learning_rate": self.end_learning_rate,
            "power": self.power,
        }


@keras.saving.register_keras_serializable(package="garden")
class SlantedTriangular(keras.optimizers.schedules.LearningRateSchedule):
    """ULMFiT's slanted triangular rate (Howard & Ruder, 2018, eq. 3).

    Rises linearly for `cut_frac` of the steps, then falls linearly; the lowest rate is
    1/`ratio` of the peak. Defaults are the paper's (cut_frac 0.1, ratio 32).

    Example:
        schedule = SlantedTriangular(0.01, total_steps=1000)
        schedule(100)  # the peak, 0.01
    """

    def __init__(self, peak_learning_rate, total_steps, cut_frac=0.1, ratio=32.0):
        self.peak_learning_rate = float(peak_learning_rate)
        self.total_steps = int(total_steps)
        self.cut_frac = float(cut_frac)
        self.ratio = float(ratio)

    def __call__(self, step):
        ops = keras.ops
        t = ops.cast(step, "float32")
        cut = max(float(int(self.total_steps * self.cut_frac)), 1.0)
        rising = t / cut
        falling = 1.0 - (t - cut) / max(cut * (1.0 / self.cut_frac - 1.0), 1.0)
        p = ops.clip(ops.where(t < cut, rising, falling), 0.0, 1.0)
        return self.peak_learning_rate * (1.0 + p * (self.ratio - 1.0)) / self.ratio

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate, "total_steps": self.total_steps,
                "cut_frac": self.cut_frac, "ratio": self.ratio}


SCHEDULES = ("linear", "polynomial", "slanted_triangular")


def create_schedule(name, learning_rate, train_steps, warmup_steps, end_learning_rate=0.0,
                    power=1.0):
    """linear / polynomial: warmup then decay (BERT); slanted_triangular: ULMFiT, whose rise
    takes warmup_steps / train_steps of the run as its cut fraction."""
    if name == "linear":
        return WarmupPolynomialDecay(learning_rate, train_steps, warmup_steps,
                                     end_learning_rate=end_learning_rate, power=1.0)
    if name == "polynomial":
        return WarmupPolynomialDecay(learning_rate, train_steps, warmup_steps,
                                     end_learning_rate=end_learning_rate, power=power)
    if name == "slanted_triangular":
        cut_frac = warmup_steps / train_steps if warmup_steps else 0.1
        return SlantedTriangular(learning_rate, train_steps, cut_frac=cut_frac)
    raise ValueError(f"unknown learning-rate schedule {name!r}; expected one of {SCHEDULES}")


@keras.saving.register_keras_serializable(package="garden")
class AdamW(keras.optimizers.AdamW):
    """Keras' AdamW whose Adam update runs as TensorFlow's fused `ResourceApplyAdam` kernel.

    Same arithmetic as keras.optimizers.AdamW (m += (g - m)(1 - b1), v += (g^2 - v)(1 - b2),
    w -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps); the decoupled weight decay stays
    Keras' own step), same slots and checkpoints, but one pass over each variable instead of
    about ten element-wise ops: 310 -> 130 ms a step for BERT-base's 85M encoder weights on
    2 CPU cores (benchmarks/README.md, train_step). Falls back to Keras' update for amsgrad
    and for variables that have no TensorFlow resource handle.

    Example:
        opt = AdamW(learning_rate=1e-4, weight_decay=0.01, epsilon=1e-6)
        opt.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    """

    def update_step(self, gradient, variable, learning_rate):
        handle = getattr(variable, "handle", None)
        if self.amsgrad or handle is None or keras.backend.backend() != "tensorflow":
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf

        dtype = variable.dtype
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=handle, m=m.value.handle, v=v.value.handle,
            beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype), grad=tf.convert_to_tensor(gradient, dtype))


_LAYER = re.compile(r"(?:^|/)(?:transformer|lstm)_layer_(\d+)/")


def layer_depth(path: str, num_layers: int) -> int:
    """Depth of a variable for layer-wise LR decay, as ELECTRA counts it: embeddings 0,
    Transformer (or LSTM) layer i -> i + 1, pooler num_layers + 1, everything else (task heads)
    num_layers + 2."""
    m = _LAYER.search(path)
    if m:
        return int(m.group(1)) + 1
    if re.search(r"(?:^|/)embeddings?(?:/|_)", path) or "embedding" in path.split("/")[0]:
        return 0
    if "pooler" in path:
        return num_layers + 1
    return num_layers + 2


def layerwise_multiplier(num_layers: int, decay: float) -> Callable[[str], float]:
    """path -> decay ** (num_layers + 2 - depth): the head learns at the full rate, each layer
    below it at `decay` times the rate of the one above (ELECTRA fine-tuning: 0.8 for
    base/small, 0.9 for large; Clark et al. 2020, appendix)."""
    def multiplier(path: str) -> float:
        return float(decay) ** (num_layers + 2 - layer_depth(path, num_layers))
    return multiplier


def unfreeze_steps(num_layers: int, every: int) -> Callable[[str], int]:
    """path -> the step from which the variable trains under gradual unfreezing (ULMFiT,
    Howard & Ruder 2018, section 3.3): the layer groups of layer_depth, top first. The task
    head (depth num_layers + 2) trains from step 0, the pooler from step `every`, the top
    Transformer layer from 2 x `every`, ..., the embeddings from (num_layers + 2) x `every`."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"unfreeze_every must be a positive whole number of steps, got {every!r}")

    def first_step(path: str) -> int:
        return (num_layers + 2 - layer_depth(path, num_layers)) * every
    return first_step


def _variable_path(variable) -> str:
    # The TF backend hands update_step the backing tf.Variable ("a/b/kernel:0"), not the
    # Keras Variable with its .path.
    return getattr(variable, "path", None) or variable.name.split(":")[0]


def _per_layer(cls, multiplier: Optional[Callable[[str], float]],
               first_step: Optional[Callable[[str], int]]):
    """`cls` (a Keras optimizer class) whose per-variable learning rate, and with it the
    decoupled weight decay, is scaled by multiplier(variable.path) (None: 1), and which leaves
    a variable untouched (no update, no weight decay, no slot change) before the step
    first_step(variable.path) (None: from step 0)."""

    def rate(variable) -> float:
        return multiplier(_variable_path(variable)) if multiplier else 1.0

    def start(variable) -> int:
        return first_step(_variable_path(variable)) if first_step else 0

    class PerLayer(cls):
        def trains_now(self, variable):
            """A boolean tensor: `variable` is unfrozen at the current step (None: always)."""
            first = start(variable)
            return None if first <= 0 else keras.ops.greater_equal(self.iterations, first)

        def update_step(self, gradient, variable, learning_rate):
            lr = learning_rate * rate(variable) if multiplier else learning_rate
            unfrozen = self.trains_now(variable)
            if unfrozen is None:
                return super().update_step(gradient, variable, lr)
            import tensorflow as tf

            parent = super().update_step

            def update():
                parent(gradient, variable, lr)
                return tf.constant(True)

            tf.cond(unfrozen, update, lambda: tf.constant(False))

        def _apply_weight_decay(self, variables):
            if self.weight_decay is None:
                return
            for variable in variables:
                if self._use_weight_decay(variable):
                    lr = keras.ops.cast(self.learning_rate, variable.dtype) * rate(variable)
                    wd = keras.ops.cast(self.weight_decay, variable.dtype)
                    unfrozen = self.trains_now(variable)
                    if unfrozen is not None:
                        # 0 before the group's first step: w - w x 0 leaves w bit-identical.
                        lr = lr * keras.ops.cast(unfrozen, variable.dtype)
                    variable.assign(variable - variable * wd * lr)

    PerLayer.__name__ = f"PerLayer{cls.__name__}"
    return PerLayer


def create_optimizer(name, learning_rate, train_steps, warmup_steps, weight_decay=0.01,
                     beta_1=0.9, beta_2=0.999, epsilon=1e-6, end_learning_rate=0.0, power=1.0,
                     schedule="linear", layer_decay: Optional[float] = None,
                     num_layers: Optional[int] = None, unfreeze_every: Optional[int] = None):
    """AdamW (BERT) or LAMB with a learning-rate schedule and the weight-decay exclusions.

    layer_decay: with num_layers, layer-wise learning-rate decay for fine-tuning (ELECTRA):
        see layerwise_multiplier; 1 / 2.6 gives ULMFiT's discriminative rates (each layer
        group at the rate of the one above divided by 2.6). None: one rate for every variable.
    unfreeze_every: with num_layers, gradual unfreezing (ULMFiT): see unfreeze_steps. None:
        every variable trains from step 0.
    """
    schedule = create_schedule(schedule, learning_rate, train_steps, warmup_steps,
                               end_learning_rate=end_learning_rate, power=power)
    classes = {"adamw": AdamW, "lamb": keras.optimizers.Lamb}
    if name not in classes:
        raise ValueError(f"unknown optimizer {name!r}; expected 'adamw' or 'lamb'")
    cls = classes[name]
    multiplier = first_step = None
    if layer_decay is not None:
        if not num_layers:
            raise ValueError("layer_decay needs the backbone's num_layers")
        if not 0.0 < layer_decay <= 1.0:
            raise ValueError(f"layer_decay must be in (0, 1], got {layer_decay}")
        multiplier = layerwise_multiplier(num_layers, layer_decay)
    if unfreeze_every is not None:
        if not num_layers:
            raise ValueError("unfreeze_every needs the backbone's num_layers")
        first_step = unfreeze_steps(num_layers, unfreeze_every)
    if multiplier or first_step:
        cls = _per_layer(cls, multiplier, first_step)
    if name == "adamw":
        optimizer = cls(learning_rate=schedule, weight_decay=weight_decay,
                        beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)
    else:
        optimizer = cls(learning_rate=schedule, beta_1=beta_1, beta_2=beta_2,
                        epsilon=epsilon, weight_decay=weight_decay or None)
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY_NAMES))
    return optimizer
