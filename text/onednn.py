"""oneDNN on for every garden process, unless the user chose otherwise.

TensorFlow turns its oneDNN (MKL) CPU kernels and graph rewrites on by default only on CPUs
with AVX-512 VNNI / BF16 / AMX; elsewhere (e.g. an AVX2-only AMD EPYC Zen 3) it leaves them
off. Measured on such a 2-core host on 2026-11-28: with TF_ENABLE_ONEDNN_OPTS=1 a 4096x4096
float32 matmul ran at 127 instead of 55 GFLOP/s, and `python -m benchmarks.train_step
--configs=small --contenders=ours` at 1005 instead of 749 tokens/s, losses unchanged. So the
garden's packages set TF_ENABLE_ONEDNN_OPTS=1 when the variable is unset, before TensorFlow is
imported (TensorFlow reads it once, when it loads). A value the user set, 0 included, is kept.

`data_pipelines/__init__.py` calls `enable()`; garden imports data_pipelines first (garden/
__init__.py), so `python -m garden.train` and every other entry point get it. `state()` is the
phrase the entry points log and the benchmarks record next to the CPU.
"""

from __future__ import annotations

import os

VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
# Set beside VARIABLE when the garden chose it, so that child processes (the demo's steps, test
# subprocesses) inherit the value and still report whose choice it was.
MARKER = "GARDEN_SET_TF_ENABLE_ONEDNN_OPTS"


def enable() -> None:
    """Sets TF_ENABLE_ONEDNN_OPTS=1 when the user did not set it (call before importing TF);
    also quiets TensorFlow's C++ log lines on CPU-only hosts (text/tf_logging.py), as both
    must be set before TensorFlow loads."""
    from text import tf_logging

    tf_logging.quiet()
    if VARIABLE not in os.environ:
        os.environ[VARIABLE] = "1"
        os.environ[MARKER] = "1"


def state() -> str:
    """'on (set by the garden ...)', 'on (TF_ENABLE_ONEDNN_OPTS=1 set by the user)', 'off
    (...)', or TensorFlow's own choice when the variable is empty; reads TensorFlow's own flag
    when TensorFlow is loaded."""
    value = os.environ.get(VARIABLE, "")
    active = _tensorflow_says()
    if os.environ.get(MARKER) == "1" and value == "1":
        why = f"set by the garden: {VARIABLE} was unset; export {VARIABLE}=0 to turn it off"
    elif value:
        why = f"{VARIABLE}={value} set by the user"
    else:
        why = "TensorFlow's default for this CPU"
    if active is None:
        active = value.strip().lower() in ("1", "true") if value else None
    word = {True: "on", False: "off", None: "unknown"}[active]
    return f"oneDNN {word} ({why})"


def _tensorflow_says():
    import sys

    if "tensorflow" not in sys.modules:
        return None
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # a TensorFlow without the flag: say what the variable asks for
        return None
    return bool(_pywrap_util_port.IsMklEnabled())
