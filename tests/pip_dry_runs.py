"""`pip install --dry-run --report` of the project's requirement sets against plain PyPI, for
tests/test_docs_and_installs.py: started when the test session starts, read when the test
comes up.

Each run mostly waits on the index (about 100 s and 30 s here, a few CPU-seconds): begun with
the session, by the xdist controller before its workers start (tests/conftest.py
pytest_configure, when the docs test file is selected), they are done by the time a worker
reaches the test, instead of holding that worker idle for the slower run's length. The
controller names their directory in ENV_VAR, which the workers inherit; a worker that finds
no such directory (the file run on its own, or the controller did not start them) starts
them itself.

A run's directory holds <name>.json (pip's --report), <name>.out / .err and, once pip has
exited, <name>.rc (its exit status, written by the small wrapper that runs pip).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
PYPI = "https://pypi.org/simple"
ENV_VAR = "GARDEN_TEST_PIP_DRY_RUNS"
DRY_RUNS = {"workers": ("-r", "requirements-workers.txt"),
            "extras": ("-c", "constraints.txt", "-e", ".[test,bench]")}

# Runs pip (argv[2:]) and writes its exit status to argv[1] once it has exited, atomically.
_WRAPPER = ("import os, subprocess, sys\n"
            "code = subprocess.call(sys.argv[2:])\n"
            "with open(sys.argv[1] + '.tmp', 'w') as f:\n"
            "    f.write(str(code))\n"
            "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n")


def pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


def _pip_command(report: Path, args) -> List[str]:
    """`--use-feature=fast-deps` reads each wheel's metadata with HTTP range requests instead of
    downloading it: a dry run otherwise fetches every wheel whole (pip 26.3 here; PyPI's PEP 658
    metadata files are not used for it), about 2.5 GB at once for the two runs (TensorFlow
    twice, torch once), and CI failed with "No space left on device" on a shared disk.
    Measured here: same resolution (181 and 245 packages), 0 downloads instead of 417, about
    10 s slower per run."""
    return [sys.executable, "-m", "pip", "install", "--isolated", "--dry-run",
            "--ignore-installed", "--disable-pip-version-check", "--use-feature=fast-deps",
            "--no-cache-dir", "--index-url", PYPI, "--report", str(report), *args]


def start(directory: Path) -> List[subprocess.Popen]:
    """Starts every DRY_RUNS run in the background, writing into `directory`: against plain
    PyPI only (this machine's pip.conf, local wheel folders and extra indexes switched off, so
    a local-only pin cannot resolve). Returns the wrapper processes."""
    directory.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    procs = []
    for name, args in DRY_RUNS.items():
        with open(directory / f"{name}.out", "w") as out, open(directory / f"{name}.err", "w") as err:
            procs.append(subprocess.Popen(
                [sys.executable, "-c", _WRAPPER, str(directory / f"{name}.rc"),
                 *_pip_command(directory / f"{name}.json", args)],
                cwd=ROOT, stdout=out, stderr=err, env=env))
    return procs


def stop(procs: List[subprocess.Popen]) -> None:
    """Kills the runs still going (a session that ended before reading them)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def result(directory: Path, name: str, timeout: float = 900.0) -> Dict[str, str]:
    """{package: version} that run `name` resolved; waits for it to exit (at most `timeout` s);
    an exit status other than 0 fails with the end of its output."""
    from packaging.utils import canonicalize_name

    rc, deadline = directory / f"{name}.rc", time.monotonic() + timeout
    while not rc.exists():
        assert time.monotonic() < deadline, f"pip dry run {name!r} still running after {timeout} s"
        time.sleep(0.5)
    code = int(rc.read_text())
    out = (directory / f"{name}.out").read_text()[-2000:]
    err = (directory / f"{name}.err").read_text()[-3000:]
    assert code == 0, f"pip dry run {name!r} exited {code}\n{out}\n{err}"
    report = json.loads((directory / f"{name}.json").read_text())
    return {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
            for item in report["install"]}
