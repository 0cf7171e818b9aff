"""The settings of one garden.train run, grouped by what they steer.

garden/train.py's train() is the one place where they are named for gin (`train.<field>`) and
given defaults; these records carry them, by name, to the pieces in garden/training. Their
fields are the gin names, so an error about a field can name the binding to change. No field
has a default here: a default written twice drifts.
"""

from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class Loop:
    """How many steps of how many examples, split how, and how often the loop logs,
    evaluates (0: never) and saves."""
    train_steps: int
    global_batch_size: int
    gradient_accumulation_steps: int
    seed: int
    log_every: int
    eval_every: int
    checkpoint_every: int
    keep_checkpoints: int


@dataclasses.dataclass(frozen=True)
class Optimization:
    """The optimizer, its learning-rate schedule and the gradient clipping (None: none)."""
    optimizer: str
    learning_rate: float
    lr_schedule: str
    warmup_steps: int
    lr_power: float
    end_learning_rate: float
    weight_decay: float
    adam_beta_1: float
    adam_beta_2: float
    adam_epsilon: float
    clip_norm: Optional[float]

    def optimizer_arguments(self) -> dict:
        """The keyword arguments of garden.optimization.create_optimizer (less the steps and
        the layer switches)."""
        return dict(name=self.optimizer, learning_rate=self.learning_rate,
                    schedule=self.lr_schedule, warmup_steps=self.warmup_steps,
                    power=self.lr_power, end_learning_rate=self.end_learning_rate,
                    weight_decay=self.weight_decay, beta_1=self.adam_beta_1,
                    beta_2=self.adam_beta_2, epsilon=self.adam_epsilon)


@dataclasses.dataclass(frozen=True)
class FineTuning:
    """Layer-wise learning-rate decay and gradual unfreezing (None: off)."""
    layer_decay: Optional[float]
    unfreeze_every: Optional[int]


# train.precision's values: Keras dtype policies. The mixed ones compute in the half type and
# keep every variable (so every checkpoint) in float32; mixed_float16 also scales the loss.
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


@dataclasses.dataclass(frozen=True)
class Hardware:
    """How the step runs on the devices: the precision (one of PRECISIONS), XLA, and the peak
    FLOP/s the MFU divides by (None: measured at start); and the precision the export computes
    in (garden.serving.precision.PRECISIONS: 'float32' or 'bfloat16'), whatever the training's."""
    precision: str
    jit_compile: bool
    peak_flops: Optional[float]
    export_precision: str
