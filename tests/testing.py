"""Shared helpers for the test suite: run the project's command-line tools as a user would."""

from __future__ import annotations

import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_module(module: str, *args: str, check: bool = True, timeout: int = 900,
               env_extra: dict | None = None) -> subprocess.CompletedProcess:
    """Runs `python -m module args...` in a fresh process from the repo root.

    Output is captured; on an unexpected exit code the assertion shows it.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env_extra or {}))
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"python -m {module} {' '.join(args)} exited {proc.returncode}\n"
                             f"--- stdout ---\n{proc.stdout[-4000:]}\n"
                             f"--- stderr ---\n{proc.stderr[-4000:]}")
    return proc
