"""The same global batch gives the same training however it is split: one device, two mirrored
logical CPUs, two workers under MultiWorkerMirroredStrategy (loopback TF_CONFIG), and gradient
accumulation. Plus exact resume after SIGKILL. Every run is a real `python -m garden.train`
process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from testing import REPO_ROOT, checkpoint_floats as _weights, max_abs_diff as _max_diff
from testing import pretrain_args, python_env as _env, run_python as _run

STEPS = 6


def _args(bert_data, model_dir, *extra, steps=STEPS, dropout=0.0):
    return pretrain_args(bert_data, model_dir, *extra, steps=steps, dropout=dropout)


@pytest.fixture(scope="module")
def single_device(bert_data, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("single")
    _run(_args(bert_data, model_dir, "--strategy=one_device"))
    return _weights(model_dir)


def test_training_moves_the_weights(bert_data, single_device, tmp_path):
    # Guard for the comparisons below: a run of fewer steps must differ measurably.
    _run(_args(bert_data, tmp_path, "--strategy=one_device", steps=STEPS - 1))
    assert _max_diff(single_device, _weights(tmp_path)) > 1e-4


def test_mirrored_two_logical_cpus_match_one_device(bert_data, single_device, tmp_path):
    proc = _run(_args(bert_data, tmp_path, "--strategy=mirrored", "--logical_cpus=2"))
    assert "on 2 replica(s) (MirroredStrategy)" in proc.stdout
    assert _max_diff(single_device, _weights(tmp_path)) < 2e-5


def test_gradient_accumulation_matches_one_device(bert_data, single_device, tmp_path):
    _run(_args(bert_data, tmp_path, "--strategy=one_device",
               "--gin_param=train.gradient_accumulation_steps=4"))
    assert _max_diff(single_device, _weights(tmp_path)) < 2e-5


def _free_ports(count):
    """Distinct free loopback ports (all bound at once, so none is handed out twice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def test_two_workers_match_one_device(bert_data, single_device, tmp_path):
    workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    procs = []
    for index in range(2):
        tf_config = json.dumps({"cluster": {"worker": workers},
                                "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen(
            [sys.executable, *_args(bert_data, tmp_path, "--strategy=multi_worker_mirrored")],
            cwd=REPO_ROOT, env=_env(TF_CONFIG=tf_config), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    outputs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=600)
        finally:
            proc.kill()
        outputs.append(out)
    for proc in procs:
        assert proc.returncode == 0, "\n".join(f"--- worker {i} (exit {p.returncode}) ---\n{o[-3000:]}"
                                                for i, (p, o) in enumerate(zip(procs, outputs)))
    assert "on 2 replica(s)" in outputs[0]
    assert "worker done" in outputs[1]
    # Only the chief's files remain.
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".worker")]
    assert _max_diff(single_device, _weights(tmp_path)) < 2e-5


def test_sigkill_then_resume_ends_at_the_uninterrupted_weights(bert_data, tmp_path):
    """Killed twice (mid-interval after the first checkpoint, then again in the resumed run),
    the same command ends at the uninterrupted run's weights."""
    steps, extra = 10, ["--strategy=one_device", "--gin_param=train.checkpoint_every=3"]
    reference = tmp_path / "reference"
    _run(_args(bert_data, reference, *extra, steps=steps, dropout=0.1))

    killed = tmp_path / "killed"
    for kill_after, kept in ((4, "ckpt-3"), (8, "ckpt-6")):
        proc = subprocess.Popen([sys.executable, *_args(bert_data, killed, *extra, steps=steps,
                                                        dropout=0.1)],
                                cwd=REPO_ROOT, env=_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 300
        for line in proc.stdout:
            # e.g. checkpoint at 6, step 8 done and lost
            if line.startswith(f"[train] step {kill_after}/"):
                proc.send_signal(signal.SIGKILL)
                break
            assert time.time() < deadline
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        assert tf.train.latest_checkpoint(str(killed / "checkpoints")).endswith(kept)

    resumed = _run(_args(bert_data, killed, *extra, steps=steps, dropout=0.1))
    assert "at step 6" in resumed.stdout
    assert _max_diff(_weights(reference), _weights(killed)) < 1e-6
