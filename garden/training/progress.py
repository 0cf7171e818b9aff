"""What garden.train shows while it runs: the log line with its progress bar and ETA, the
TensorBoard scalars (model_dir/train) and the model FLOPs utilisation (MFU).

The log line (docs/training.md documents it; keep its format):
  [train] step 7/20 [=======>............] 35% | loss 6.1234 ... | lr 1.00e-03 | 3.2 steps/s 51 ex/s MFU 1.2% | mixed_bfloat16 | ETA 0:00:04
"""

from __future__ import annotations

import functools
import time
from typing import Dict, Optional

from text.progress import format_eta  # one H:MM:SS for every tool's ETA


def progress_bar(step: int, total: int, width: int = 20) -> str:
    """A text bar that reads the same in a terminal and in a log file: 7 of 20 -> [=======>............]."""
    filled = min(width, width * step // max(total, 1))
    head = ">" if filled < width else ""
    return "[" + "=" * filled + head + "." * (width - filled - len(head)) + "]"


@functools.lru_cache(maxsize=None)
def measure_peak_flops(precision: str) -> float:
    """FLOP/s of a large square matmul on the first device (the MFU denominator), in the
    compute dtype of the run's precision (train.precision), run eagerly: on CPUs the eager op
    takes oneDNN's kernel and one traced alone in a tf.function did not (38 against 78 GFLOP/s
    in float32 measured on a Xeon), and a peak that low put a run's MFU above 1.

    Measured once per process and precision: the device does not change between the runs of
    one process (a notebook, the test suite's in-process runs), and each measurement costs
    about a second of matmuls (0.96 s of a 20-step BERT-tiny fine-tuning run's 11 CPU-s)."""
    import tensorflow as tf

    dtype = {"float32": tf.float32, "mixed_bfloat16": tf.bfloat16,
             "mixed_float16": tf.float16}[precision]
    gpu = bool(tf.config.list_logical_devices("GPU"))
    n = 8192 if gpu else 2048
    with tf.device("/GPU:0" if gpu else "/CPU:0"):
        a = tf.cast(tf.random.normal([n, n], dtype=tf.float32), dtype)
        tf.matmul(a, a)[0, 0].numpy()  # warm-up
        reps, start = 0, time.perf_counter()
        while reps < 3 or time.perf_counter() - start < 0.3:
            tf.matmul(a, a)[0, 0].numpy()
            reps += 1
        seconds = time.perf_counter() - start
    return 2.0 * n ** 3 * reps / seconds


def flops_per_token(model) -> float:
    """Model FLOPs per trained token: 6 x non-embedding parameters (forward 2, backward 4);
    attention FLOPs are left out, so MFU is a lower bound."""
    import numpy as np

    return 6.0 * sum(int(np.prod(v.shape)) for v in model.trainable_variables
                     if "embedding" not in v.path)


def log_line(step: int, total: int, *, means: Dict[str, float], lr: float, rate: float,
             global_batch_size: int, mfu: Optional[float], precision: str) -> str:
    """The documented log line (see the module docstring)."""
    shown = " ".join(f"{k} {v:.4f}" for k, v in means.items() if k != "tokens")
    eta = (total - step) / max(rate, 1e-9)
    return (f"[train] step {step}/{total} {progress_bar(step, total)} "
            f"{100 * step / total:.0f}% | {shown} | lr {lr:.2e} | {rate:.1f} steps/s "
            f"{rate * global_batch_size:.0f} ex/s"
            + (f" MFU {100 * mfu:.1f}%" if mfu is not None else "")
            + f" | {precision} | ETA {format_eta(eta)}")


class Progress:
    """Sums the step metrics of a logging window; every `log_every` steps (and at the last)
    prints the log line and writes the window's means to TensorBoard.

    `shares` = replicas x accumulation steps: a step's "tokens" metric is per micro-batch and
    replica, so tokens/s scales by it. first/last: the first and newest windows' means.
    `precision` (train.precision) is named on every line: it sets the MFU's peak.
    """

    def __init__(self, writer, *, train_steps: int, log_every: int, global_batch_size: int,
                 shares: int, flops_per_token: float, peak_flops: float, precision: str,
                 clock=time.time):
        self.writer, self.train_steps, self.log_every = writer, train_steps, log_every
        self.global_batch_size, self.shares, self.precision = global_batch_size, shares, precision
        self.flops_per_token, self.peak_flops, self.clock = flops_per_token, peak_flops, clock
        self.first: Optional[Dict[str, float]] = None
        self.last: Dict[str, float] = {}
        self.mfu: Optional[float] = None
        self._start, self._steps, self._sums = clock(), 0, {}

    def add(self, step: int, metrics: Dict[str, float], lr_fn) -> Optional[str]:
        """Counts one step; at a logging step returns (and prints) the log line."""
        for k, v in metrics.items():
            self._sums[k] = self._sums.get(k, 0.0) + v
        self._steps += 1
        if step % self.log_every and step != self.train_steps:
            return None
        now = self.clock()
        rate = self._steps / max(now - self._start, 1e-9)
        means = {k: v / self._steps for k, v in self._sums.items()}
        self.first = self.first or means
        self.last = means
        lr = float(lr_fn())  # the schedule at the current iteration
        self._scalars(step, means=means, lr=lr, rate=rate)
        line = log_line(step, self.train_steps, means=means, lr=lr, rate=rate,
                        global_batch_size=self.global_batch_size, mfu=self.mfu,
                        precision=self.precision)
        print(line, flush=True)
        self._start, self._steps, self._sums = now, 0, {}
        return line

    def _scalars(self, step: int, *, means: Dict[str, float], lr: float, rate: float) -> None:
        import tensorflow as tf

        with self.writer.as_default(step=step):
            for k, v in means.items():
                tf.summary.scalar(k, v)
            tf.summary.scalar("learning_rate", lr)
            tf.summary.scalar("steps_per_second", rate)
            tf.summary.scalar("examples_per_second", rate * self.global_batch_size)
            if "tokens" in means:  # per micro-batch and replica: scale to the step
                tokens_per_second = rate * means["tokens"] * self.shares
                tf.summary.scalar("tokens_per_second", tokens_per_second)
                self.mfu = self.flops_per_token * tokens_per_second / self.peak_flops
                tf.summary.scalar("mfu", self.mfu)
