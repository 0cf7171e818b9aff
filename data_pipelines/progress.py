"""Progress lines of a running data job, read from the files it has written so far.

Beam's local runner reports its counters only when the pipeline has finished, and a worker's
log may not reach the launching terminal (multi-processing workers, remote runners): without
these lines a job of a few minutes prints nothing between "running" and "wrote". The work
files are the job's own record of what is done: a chunk file per tokenized chunk of
documents, a pool file per pool of instances, a shard file (under its final name, after the
rename) per finished shard. ``Progress`` lists them every ``seconds`` from a thread of the
launching process and logs one line; it only reads, so the shards are the same bytes with or
without it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Dict

from apache_beam.io.filesystems import FileSystems

_LOG = logging.getLogger("data_pipelines.progress")


def count_files(pattern: str) -> int:
    """Files matching ``pattern`` now; 0 while their directory does not exist yet."""
    try:
        return len(FileSystems.match([pattern])[0].metadata_list)
    except Exception:  # noqa: BLE001 - a progress line never fails the job (Beam raises BeamIOError)
        return 0


class Progress:
    """``with Progress(describe, seconds):`` logs ``describe(counts, elapsed)`` every
    ``seconds`` while the block runs (``seconds <= 0``: never), where ``counts`` holds the number
    of files matching each of ``patterns`` (name -> glob)."""

    def __init__(self, patterns: Dict[str, str], describe: Callable[[Dict[str, int], float], str],
                 seconds: float, logger: logging.Logger = _LOG):
        self._patterns = patterns
        self._describe = describe
        self._seconds = seconds
        self._logger = logger
        self._stop = threading.Event()
        self._thread = None
        self._start = 0.0

    def line(self) -> str:
        counts = {name: count_files(pattern) for name, pattern in self._patterns.items()}
        return self._describe(counts, time.monotonic() - self._start)

    def _loop(self):
        while not self._stop.wait(self._seconds):
            self._logger.info("%s", self.line())

    def __enter__(self):
        self._start = time.monotonic()
        if self._seconds > 0:
            self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return False
