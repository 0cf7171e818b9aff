"""The garden turns oneDNN on where TensorFlow would not, and keeps a user's choice
(text/onednn.py). Fresh processes: TensorFlow reads the variable once, when it loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = r"""
import json, os
import garden  # what every `python -m garden.X` imports first
import tensorflow as tf
from tensorflow.python.util import _pywrap_util_port
from text import onednn
print(json.dumps({"variable": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
                  "mkl": bool(_pywrap_util_port.IsMklEnabled()), "state": onednn.state()}))
"""


def probe(value):
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    if value is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = value
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="oneDNN's x86-64 kernels")
def test_unset_variable_turns_onednn_on_and_says_so():
    seen = probe(None)
    assert seen["variable"] == "1" and seen["mkl"] is True, seen
    assert seen["state"].startswith("oneDNN on (set by the garden"), seen


def test_a_user_choice_is_kept():
    seen = probe("0")
    assert seen["variable"] == "0" and seen["mkl"] is False, seen
    assert seen["state"] == "oneDNN off (TF_ENABLE_ONEDNN_OPTS=0 set by the user)", seen
