"""The output directory's lifecycle as make_pretrain uses it (issue 13, items 4 and 6): an empty
corpus is never COMPLETED; one run per directory (a lock), a dead run's lock taken over."""

import json
import os
import socket
import subprocess
import sys

import pytest

from data_pipelines import make_pretrain, output
from testing import run_module


def _argv(pattern, vocab, out, *extra):
    return ["--objective=bert", f"--input={pattern}", f"--output_dir={out}", f"--vocab={vocab}",
            "--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=1", "--num_shards=2",
            "--seed=3", *extra]


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("the cat sat on the mat .\nthe dog ran far away .\n\nthe sun was warm .\n"
                    "a bird sang in the tree .\n", encoding="utf-8")
    return str(path)


def test_empty_corpus_is_refused_not_completed(tmp_path, tiny_vocab_path):
    # Every line is invalid UTF-8 or NUL: all skipped and counted, no document left.
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"the cat \xff sat .\nthe \x00 dog .\n\n\xc3\x28 bad\n")
    out = tmp_path / "out"
    proc = run_module("data_pipelines.make_pretrain", *_argv(str(bad), tiny_vocab_path, out), check=False,
                      timeout=300)
    assert proc.returncode != 0, proc.stdout[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the input gave 0 instances") and str(out) in last, proc.stderr[-2000:]
    assert "lines skipped {'invalid_utf8': 2, 'nul_byte': 1}" in last
    assert "Traceback" not in proc.stderr
    assert not (out / "COMPLETED").exists() and not (out / "info.json").exists()
    assert (out / "stats.json").exists()  # left for the diagnosis the message points to
    assert not (out / "LOCK").exists()


def test_second_run_on_a_locked_directory_is_refused(tmp_path, corpus, tiny_vocab_path):
    out = tmp_path / "out"
    out.mkdir()
    # A run in progress: its lock (a live process of this host) and its work files.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (out / "LOCK").write_text(json.dumps({"job": "make_pretrain", "host": socket.gethostname(),
                                              "pid": other.pid, "started": "2026-01-01T00:00:00"}))
        work = out / "_work-inprogress"  # output.WORK_PREFIX
        work.mkdir()
        (work / "chunk.pkl").write_bytes(b"x")
        with pytest.raises(SystemExit, match=rf"in use by another make_pretrain run \(pid {other.pid} on host"):
            make_pretrain.run(_argv(corpus, tiny_vocab_path, out))
        assert (work / "chunk.pkl").exists(), "the refused run must not touch the running one's files"
        assert (out / "LOCK").exists() and not (out / "COMPLETED").exists()
    finally:
        other.kill()
        other.wait()
    # The holder is gone (a killed run): its lock is stale and the next run takes it over.
    stats = make_pretrain.run(_argv(corpus, tiny_vocab_path, out))
    assert stats["instances"] > 0 and (out / "COMPLETED").exists()
    assert not (out / "LOCK").exists() and not work.exists()


def test_lock_is_exclusive_and_released(tmp_path):
    first = output.OutputLock(str(tmp_path), "make_pretrain")
    with first:
        with pytest.raises(output.OutputError, match=f"pid {os.getpid()} on host"):
            with output.OutputLock(str(tmp_path), "make_pretrain"):
                pass
        assert (tmp_path / output.LOCK).exists()
    assert not (tmp_path / output.LOCK).exists()
    (tmp_path / output.LOCK).write_text("")  # names no run (e.g. a crash while writing it)
    with pytest.raises(output.OutputError, match="names no run; .*remove"):
        with output.OutputLock(str(tmp_path), "make_pretrain"):
            pass
