"""The settings of `python -m garden.bertology.qat` (garden/bertology/qat.py), one record whose
fields are its flags: the command parses them before TensorFlow loads, and
garden.bertology.quantization_aware and benchmarks/qat.py read the same defaults.
"""

from __future__ import annotations

import dataclasses

from text.flags import option

# Q8BERT's moving average of the activation ranges; 0.99 forgets a batch in about 100 steps,
# short enough for a fine-tuning of a few hundred.
DECAY = 0.99


@dataclasses.dataclass(frozen=True)
class QatSettings:
    """The QAT fine-tuning's settings (each is the flag of the same name)."""

    train_steps: int = option(300, "QAT steps (%(default)s)")
    batch_size: int = option(16, "global batch size (%(default)s)")
    learning_rate: float = option(2e-5, "peak learning rate (%(default)s), decayed linearly")
    warmup_steps: int = option(0, "warmup steps (%(default)s)")
    calibration_examples: int = option(
        128, "train rows the LiteRT converter calibrates the ranges it has no fake-quant op "
             "for on (%(default)s)")
    decay: float = option(DECAY, "moving average of the activation ranges (%(default)s)")
    seed: int = option(42, "the trainer's seed (%(default)s)")

    def __post_init__(self):
        for name in ("train_steps", "batch_size", "calibration_examples"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be at least 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(f"--learning_rate must be positive, got {self.learning_rate}")
        if not 0 < self.decay < 1:
            raise ValueError(f"--decay must be in (0, 1), got {self.decay}")
        if not 0 <= self.warmup_steps <= self.train_steps:
            raise ValueError(f"--warmup_steps must be in [0, --train_steps], got "
                             f"{self.warmup_steps}")
