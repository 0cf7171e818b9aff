"""TensorFlow's C++ log lines off on CPU-only hosts, unless the user chose a level.

On a host without an NVIDIA GPU every process that loads TensorFlow's CUDA build printed
E-level lines that say nothing wrong happened (2026-12-07, the demo's log on a 2-core Xeon):
  E .../cuda_platform.cc:51] failed call to cuInit: ... UNKNOWN ERROR (303)
  E tensorflow/core/util/util.cc:131] oneDNN supports DT_INT64 only on platforms with AVX-512...
plus I-level notes (oneDNN on, no CUDA drivers, the CPU's instructions). So when
TF_CPP_MIN_LOG_LEVEL is unset and no GPU is visible, the garden sets it to 3 before TensorFlow
loads: TensorFlow's C++ logging keeps only FATAL. TensorFlow's errors still reach the user as
Python exceptions, and Python warnings and the garden's own lines are untouched.

To see TensorFlow's lines: `TF_CPP_MIN_LOG_LEVEL=0 python -m garden.train ...` (0: all, 1: no
INFO, 2: no WARNING); a value the user set is always kept. On a GPU host nothing is changed.
Called by text/onednn.enable(), which every entry point runs before TensorFlow is imported
(text/__init__.py).
"""

from __future__ import annotations

import glob
import os

VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
# Set beside VARIABLE when the garden chose it (child processes inherit both).
MARKER = "GARDEN_SET_TF_CPP_MIN_LOG_LEVEL"
QUIET = "3"


def gpu_visible() -> bool:
    """Whether TensorFlow could find an NVIDIA GPU: CUDA_VISIBLE_DEVICES is not empty / -1 and
    the driver's device files exist (checked without importing TensorFlow)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def quiet() -> None:
    """TF_CPP_MIN_LOG_LEVEL=3 when unset on a host without a visible GPU (before TF loads)."""
    if VARIABLE not in os.environ and not gpu_visible():
        os.environ[VARIABLE] = QUIET
        os.environ[MARKER] = "1"
