"""The output directory of a data job: what it holds, in which order it appears, who may write it.

A finished directory holds ``<split>-NNNNN-of-MMMMM.tfrecord[.gz]`` (every shard, empty ones
too), ``stats.json``, ``info.json`` and ``COMPLETED``, written last: readers (garden/data.py)
trust nothing without it. Around a run:

* ``OutputLock``: one run per directory. ``LOCK`` (host, pid, start time) is created
  atomically (O_EXCL) before anything is touched and removed at the end; a second run is
  refused with a message naming the first; a lock left by a dead process of this host is taken
  over. (On gs:// the check and the write are two requests: a best effort.)
* ``prepare``: refuses a completed directory unless overwrite; then deletes COMPLETED first
  (a crash from there on leaves no COMPLETED), the old shards, info.json, stats.json and the
  work directories of interrupted runs.
* work files under ``<output_dir>/_work-<run id>/`` (``fresh_work_dir``, removed when the run
  ends), written under a temporary name and renamed (``write_atomic``), so a retried bundle
  never leaves a half-written file behind a name;
* each shard written by a job's ``WriteShardFn`` under a temporary name, its record count
  checked against what the job's earlier stage announced, then renamed;
* ``complete``: every listed shard present, at least one instance, then info.json (with each
  shard's byte size, ``file_sizes``), then COMPLETED.

Paths go through Beam's FileSystems, so gs:// works the same as local paths.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import posixpath
import shutil
import socket
import time
import uuid
from typing import Dict, Iterable, Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from data_pipelines.counters import count
from text.tfrecord import write_tfrecords

_LOG = logging.getLogger("data_pipelines.output")

WORK_PREFIX = "_work-"  # <output_dir>/_work-<run id>/: the work files of a run
COMPLETED = "COMPLETED"
LOCK = "LOCK"


class OutputError(Exception):
    """The output directory cannot be used or completed; the message names it and what to do."""


def is_local(path: str) -> bool:
    return "://" not in path


def shard_name(output_dir: str, split: str, shard: int, num_shards: int, compress: bool) -> str:
    suffix = ".tfrecord.gz" if compress else ".tfrecord"
    return FileSystems.join(output_dir, f"{split}-{shard:05d}-of-{num_shards:05d}{suffix}")


def work_dir_of(output_dir: str, run_id: str) -> str:
    return FileSystems.join(output_dir, f"{WORK_PREFIX}{run_id}")


# ---------------------------------------------------------------------------------------------
# Files


def write_text(path: str, text: str) -> None:
    with FileSystems.create(path) as f:
        f.write(text.encode("utf-8"))


def read_text(path: str) -> str:
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return f.read().decode("utf-8")


def write_atomic(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path`` under a temporary name, then renames it: a retried or
    speculative bundle never leaves a half-written file behind a name another stage reads."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with FileSystems.create(tmp) as f:
        f.write(data)
    replace(tmp, path)


def replace(tmp: str, path: str) -> None:
    """Renames the finished file ``tmp`` to ``path``, replacing a file left there by a retried
    bundle (FileSystems.rename does not overwrite on every file system)."""
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


class WriteShardFn(beam.DoFn):
    """(shard, [range | None]) -> the shard file and its counters (``shard_instances/NNNNN``,
    ``shards_written``). A job's subclass gives ``records(shard, ranges)``: the shard's records
    from its ranges, sorted (a range is a tuple whose last item is the number of records it
    announced; None stands for no range, so that an empty shard is written too). The records go
    under a temporary name, are checked to be as many as the ranges announced, and are renamed,
    so a retried bundle never leaves a half-written shard."""

    announced_by = "ranges"  # the stage that wrote the ranges, for the error message

    def __init__(self, output_dir: str, split: str, num_shards: int, compress: bool):
        self._output_dir = output_dir
        self._split = split
        self._num_shards = num_shards
        self._compress = compress

    def records(self, shard: int, ranges: Sequence[tuple]) -> Iterable[bytes]:
        raise NotImplementedError

    def process(self, element):
        shard, ranges = element
        ranges = sorted(r for r in ranges if r is not None)
        expected = sum(r[-1] for r in ranges)
        final = shard_name(self._output_dir, self._split, shard, self._num_shards, self._compress)
        tmp = f"{final}.tmp-{uuid.uuid4().hex}"
        written = write_tfrecords(tmp, self.records(shard, ranges), self._compress)
        if written != expected:
            raise RuntimeError(f"shard {shard}: wrote {written} records, the {self.announced_by} "
                               f"announced {expected}")
        replace(tmp, final)
        stats: Dict[str, int] = {}
        count(stats, "shard_instances/%05d" % shard, written)
        count(stats, "shards_written")
        yield stats


def read_bytes(path: str) -> bytes:
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return f.read()


# ---------------------------------------------------------------------------------------------
# Lifecycle


def prepare(output_dir: str, overwrite: bool, split: str) -> None:
    """Makes ``output_dir`` ready for a new run (see the module docstring)."""
    completed = FileSystems.join(output_dir, COMPLETED)
    if FileSystems.exists(completed):
        if not overwrite:
            raise OutputError(f"{output_dir} already holds a completed dataset (COMPLETED exists); "
                              f"pass --overwrite to replace it or choose another --output_dir")
        FileSystems.delete([completed])  # first: a crash from here on leaves no COMPLETED
    stale = []
    for pattern in (f"{split}-*-of-*.tfrecord*", "info.json", "stats.json"):
        for m in FileSystems.match([FileSystems.join(output_dir, pattern)])[0].metadata_list:
            stale.append(m.path)
    if stale:
        _LOG.info("removing %d stale files from %s", len(stale), output_dir)
        FileSystems.delete(stale)
    remove_work_dirs(output_dir)  # an interrupted run's work files
    if is_local(output_dir):
        os.makedirs(output_dir, exist_ok=True)


@contextlib.contextmanager
def fresh_work_dir(output_dir: str):
    """``with fresh_work_dir(output_dir) as work_dir:`` a new work directory for one run's work
    files; every work directory of ``output_dir`` is removed when the block ends, whatever
    happens."""
    try:
        yield work_dir_of(output_dir, uuid.uuid4().hex[:12])
    finally:
        remove_work_dirs(output_dir)


def remove_work_dirs(output_dir: str) -> None:
    """Deletes every ``_work-*`` directory of ``output_dir``."""
    if is_local(output_dir):
        if os.path.isdir(output_dir):
            for name in os.listdir(output_dir):
                if name.startswith(WORK_PREFIX):
                    shutil.rmtree(os.path.join(output_dir, name), ignore_errors=True)
        return
    found = FileSystems.match([FileSystems.join(output_dir, WORK_PREFIX + "*")])[0].metadata_list
    if found:
        FileSystems.delete([m.path for m in found])


def complete(output_dir: str, info: dict, shard_files: Sequence[str], instances: int,
             summary: str = "") -> None:
    """Writes info.json, then COMPLETED: only when every shard in ``shard_files`` exists and
    the dataset holds at least one instance (a trainer cannot learn from zero; ``summary``
    says what was read, so the error shows where the input went). info.json gets
    ``file_sizes`` ({shard base name: bytes}), which readers check in one stat per shard."""
    missing = [f for f in shard_files if not FileSystems.exists(f)]
    if missing:
        raise OutputError(f"the pipeline finished but shards are missing in {output_dir}: {missing[:3]}; "
                          f"it is not COMPLETED, run the job again")
    if instances <= 0:
        raise OutputError(f"the input gave 0 instances{summary}, so {output_dir} is not marked COMPLETED "
                          f"(stats.json there counts what was read and skipped); check --input, its "
                          f"format flags and the sequence length")
    sizes = {posixpath.basename(f): FileSystems.get_filesystem(f).metadata(f).size_in_bytes
             for f in shard_files}
    info = {**info, "file_sizes": sizes}
    write_text(FileSystems.join(output_dir, "info.json"), json.dumps(info, indent=2, sort_keys=True))
    write_text(FileSystems.join(output_dir, COMPLETED), "")


# ---------------------------------------------------------------------------------------------
# One run per directory


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


class OutputLock:
    """``with OutputLock(output_dir, job):`` holds ``<output_dir>/LOCK`` for the block."""

    def __init__(self, output_dir: str, job: str):
        self.path = FileSystems.join(output_dir, LOCK)
        self._output_dir = output_dir
        self._job = job
        self._token = json.dumps({"job": job, "host": socket.gethostname(), "pid": os.getpid(),
                                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                  "token": uuid.uuid4().hex}, sort_keys=True)

    def __enter__(self):
        for _ in range(3):  # a stale lock is removed, then created again; a race loses here
            if self._create():
                return self
            holder = self._holder()
            if not self._stale(holder):
                raise OutputError(self._refusal(holder))
            _LOG.warning("taking over %s: its run (pid %s on this host) is gone", self.path, holder.get("pid"))
            FileSystems.delete([self.path])
        raise OutputError(f"{self.path}: could not take the lock; another run keeps taking it")

    def __exit__(self, *exc):
        try:
            if self._read() == self._token:  # never delete a lock another run took over
                FileSystems.delete([self.path])
        except OSError as e:
            _LOG.warning("could not remove %s: %s", self.path, e)
        return False

    def _create(self) -> bool:
        if not is_local(self.path):
            if FileSystems.exists(self.path):
                return False
            write_text(self.path, self._token)
            return True
        try:
            os.makedirs(self._output_dir, exist_ok=True)
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        except OSError as e:
            raise OutputError(f"cannot create {self.path} in --output_dir ({e.strerror}); "
                              f"choose a writable --output_dir") from e
        with os.fdopen(fd, "w") as f:
            f.write(self._token)
        return True

    def _read(self) -> Optional[str]:
        try:
            return read_text(self.path)
        except Exception:  # gone, or unreadable: nothing of ours to release
            return None

    def _holder(self) -> dict:
        text = self._read()
        try:
            return json.loads(text) if text else {}
        except ValueError:
            return {}

    @staticmethod
    def _stale(holder: dict) -> bool:
        pid = holder.get("pid")
        return (holder.get("host") == socket.gethostname() and isinstance(pid, int)
                and not _pid_alive(pid))

    def _refusal(self, holder: dict) -> str:
        if not holder:
            return (f"{self._output_dir} is locked by {self.path}, which names no run; if no other "
                    f"run writes there, remove {self.path} and start again")
        return (f"{self._output_dir} is in use by another {holder.get('job', 'data job')} run (pid "
                f"{holder.get('pid')} on host {holder.get('host')}, started {holder.get('started')}); "
                f"wait for it to finish or choose another --output_dir (if that run is gone, remove "
                f"{self.path})")
