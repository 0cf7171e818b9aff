"""Optimizers and learning-rate schedules, built from Keras pieces.

BERT (Devlin et al., 2019) trains with Adam + decoupled weight decay 0.01, a linear warmup
over the first steps and a linear decay to zero; LayerNorm parameters and biases are not
decayed. Keras 3's AdamW implements the decoupled decay; `exclude_from_weight_decay`
matches variable names ("gamma"/"beta" of LayerNorm, "bias").
"""

from __future__ import annotations

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


def create_optimizer(name, learning_rate, train_steps, warmup_steps, weight_decay=0.01,
                     beta_1=0.9, beta_2=0.999, epsilon=1e-6, end_learning_rate=0.0, power=1.0,
                     schedule="linear"):
    """AdamW (BERT) or LAMB with a learning-rate schedule and the weight-decay exclusions."""
    schedule = create_schedule(schedule, learning_rate, train_steps, warmup_steps,
                               end_learning_rate=end_learning_rate, power=power)
    if name == "adamw":
        optimizer = keras.optimizers.AdamW(learning_rate=schedule, weight_decay=weight_decay,
                                           beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)
    elif name == "lamb":
        optimizer = keras.optimizers.Lamb(learning_rate=schedule, beta_1=beta_1, beta_2=beta_2,
                                          epsilon=epsilon, weight_decay=weight_decay or None)
    else:
        raise ValueError(f"unknown optimizer {name!r}; expected 'adamw' or 'lamb'")
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY_NAMES))
    return optimizer
