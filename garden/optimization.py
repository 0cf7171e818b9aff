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


def create_optimizer(name, learning_rate, train_steps, warmup_steps, weight_decay=0.01,
                     beta_1=0.9, beta_2=0.999, epsilon=1e-6, end_learning_rate=0.0, power=1.0):
    """AdamW (BERT) or LAMB with the warmup + decay schedule and the weight-decay exclusions."""
    schedule = WarmupPolynomialDecay(learning_rate, train_steps, warmup_steps,
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
