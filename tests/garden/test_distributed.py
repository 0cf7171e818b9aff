"""The same global batch gives the same training however it is split: one device, two mirrored
logical CPUs, two workers under MultiWorkerMirroredStrategy (loopback TF_CONFIG), and gradient
accumulation (with evidence that the task really got the micro-batches). Plus exact resume
after SIGKILL at a deterministic point. Every run is a real garden.train: a
`python -m garden.train` process, or its main in this process where the test watches the task
from inside (tests/testing.py TrainingProbe)."""

from __future__ import annotations

import json
import os
import signal
import socket

import pytest
import tensorflow as tf

from garden.tasks.pretraining import Pretraining
from testing import REPO_ROOT, TrainingProbe, checkpoint_floats as _weights
from testing import max_abs_diff as _max_diff, pretrain_args
from testing import read_summary, run_code, run_tool, train_in_process

STEPS = 6

# Where the process is not what a test is about, its runs are garden.train's main in this
# process (a fresh interpreter costs a TensorFlow import and a trace each time): the
# one-device reference (also the guard, by its checkpoint one step earlier, and the
# accumulation test's negative control, watched by a probe), the accumulation run and the
# uninterrupted SIGKILL reference. Processes of their own remain where they are the point:
# two logical CPUs (set before TensorFlow's runtime starts), the two workers, the runs that
# are killed and the run that resumes after the kills, each forked from a server that has
# imported TensorFlow and nothing else (_run, testing.run_code: a TensorFlow import, ~4
# CPU-s, less each than a fresh interpreter).


def _in_process(argv, model_dir, steps):
    cwd = os.getcwd()
    os.chdir(REPO_ROOT)  # configs include each other by repo-relative paths
    try:
        return train_in_process(argv[2:], model_dir, steps=steps)  # argv[:2]: -m garden.train
    finally:
        os.chdir(cwd)


def _args(bert_data, model_dir, *extra, steps=STEPS, dropout=0.0):
    return pretrain_args(bert_data, model_dir, *extra, steps=steps, dropout=dropout)


def _run(argv):
    """`python -m garden.train` (argv: "-m", "garden.train", flags...) in a process of its own,
    forked from a server that has imported TensorFlow and nothing else (testing.run_tool):
    TensorFlow's runtime, its devices (--logical_cpus) and the strategy start in the run."""
    assert argv[:2] == ["-m", "garden.train"], argv[:2]
    return run_tool("garden.train", *argv[2:], timeout=600)


@pytest.fixture(scope="module")
def single_device_run(bert_data, tmp_path_factory):
    """The one-device reference, watched by a TrainingProbe (the negative control of the
    accumulation test: no switch, one batch of 16 per step) and checkpointed at step STEPS - 1
    too (the guard: one step fewer). Returns (model_dir, probe)."""
    model_dir = tmp_path_factory.mktemp("single")
    with pytest.MonkeyPatch.context() as monkeypatch:
        probe = TrainingProbe(monkeypatch, Pretraining)
        _in_process(_args(bert_data, model_dir, "--strategy=one_device",
                          f"--gin_param=train.checkpoint_every={STEPS - 1}"), model_dir, STEPS)
    return model_dir, probe


@pytest.fixture(scope="module")
def single_device_dir(single_device_run):
    return single_device_run[0]


@pytest.fixture(scope="module")
def single_device(single_device_dir):
    return _weights(single_device_dir)


def test_training_moves_the_weights(single_device_dir, single_device):
    # Guard for the comparisons below: the same run one step earlier (its checkpoint at step
    # STEPS - 1, kept beside the last) must differ measurably.
    checkpoints = single_device_dir / "checkpoints"
    assert tf.train.latest_checkpoint(str(checkpoints)).endswith(f"ckpt-{STEPS}")
    earlier = tf.train.load_checkpoint(str(checkpoints / f"ckpt-{STEPS - 1}"))
    assert _max_diff(single_device, {n: earlier.get_tensor(n) for n in single_device}) > 1e-4


def test_mirrored_two_logical_cpus_match_one_device(bert_data, single_device, tmp_path):
    proc = _run(_args(bert_data, tmp_path, "--strategy=mirrored", "--logical_cpus=2"))
    assert "on 2 replica(s) (MirroredStrategy)" in proc.stdout
    assert _max_diff(single_device, _weights(tmp_path)) < 2e-5


def test_without_accumulation_the_task_gets_whole_batches(single_device_run):
    # The negative control of the next test: the same probe on the one-device reference (no
    # accumulation switch) counts one batch of 16 per step.
    _, probe = single_device_run
    assert int(probe.calls.numpy()) == STEPS
    assert int(probe.smallest.numpy()) == int(probe.largest.numpy()) == 16


def test_gradient_accumulation_feeds_micro_batches_and_matches_one_device(
        bert_data, single_device_dir, single_device, tmp_path, monkeypatch):
    """With train.gradient_accumulation_steps=4 the task is given 4 micro-batches of 16 / 4
    examples per step (the previous test is the negative control: one batch of 16 per step). A
    trainer that ignored the switch would still end at the one-device weights, so the
    micro-batches the task sees are what shows that the switch took effect."""
    accumulation = 4
    monkeypatch.chdir(REPO_ROOT)  # configs include each other by repo-relative paths
    probe = TrainingProbe(monkeypatch, Pretraining)
    argv = _args(bert_data, tmp_path, "--strategy=one_device",
                 f"--gin_param=train.gradient_accumulation_steps={accumulation}")[2:]
    summary = train_in_process(argv, tmp_path, steps=STEPS)
    assert int(probe.calls.numpy()) == STEPS * accumulation
    assert int(probe.smallest.numpy()) == int(probe.largest.numpy()) == 16 // accumulation
    # Step 1 starts from the same weights on the same 16 examples (log_every=1: its loss is
    # the first logged): the split changes only the order of float32 additions. Summing n
    # terms in another order moves a float32 result by at most about n * 2^-24 of its
    # magnitude (Higham's gamma_n); n is bounded by the longest chain of additions of the
    # loss: the log-sum-exp over the V = 2000 pieces, the 16 x 10 predictions and the dot
    # products of the 2 layers (2 x (128 + 512) wide).
    loss, reference = (summary["first_logged_metrics"]["loss"],
                       read_summary(single_device_dir)["first_logged_metrics"]["loss"])
    n = 2000 + 16 * 10 + 2 * (128 + 512)
    assert abs(loss - reference) <= n * 2.0 ** -24 * abs(reference), (loss, reference)
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


# A worker: garden.train after writing its process id to the file argv[1], so that the test
# can kill it when its peer fails (it would wait for the peer until the deadline).
_WORKER = """
import os, runpy, sys
with open(sys.argv.pop(1), "w") as f:
    f.write(str(os.getpid()))
runpy.run_module("garden.train", run_name="__main__", alter_sys=True)
"""


def _run_workers(bert_data, model_dir, logs, timeout=600):
    """Two workers on fresh ports, each a process of its own forked from a server that has
    imported TensorFlow (testing.run_code, side by side: TF_CONFIG is read when the strategy
    starts, in the run). Returns their CompletedProcesses; when one fails, the other is killed
    (it would wait for its peer). When the failure is a port taken in the meantime (the ports
    are free when chosen, and another process may bind one before the worker does: the gRPC
    server then reports "Address already in use"), returns None."""
    import concurrent.futures

    workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    pids = [logs / f"worker{index}.pid" for index in range(2)]
    for path in pids:
        path.unlink(missing_ok=True)
    argv = _args(bert_data, model_dir, "--strategy=multi_worker_mirrored")[2:]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(run_code, _WORKER, str(pids[index]), *argv, check=False,
                            timeout=timeout, TF_CONFIG=json.dumps(
                                {"cluster": {"worker": workers},
                                 "task": {"type": "worker", "index": index}}))
                for index in range(2)]
        first = next(concurrent.futures.as_completed(runs)).result()
        if first.returncode != 0:
            for run, path in zip(runs, pids):
                if not run.done() and path.exists():
                    os.kill(int(path.read_text()), signal.SIGKILL)
        procs = [run.result() for run in runs]
    if any(p.returncode != 0 and "Address already in use" in p.stdout + p.stderr
           for p in procs):
        return None
    return procs


def test_two_workers_match_one_device(bert_data, single_device, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    model_dir = tmp_path / "model"
    for attempt in range(3):  # a port taken by another process between choice and bind: again
        procs = _run_workers(bert_data, model_dir, logs)
        if procs is not None:
            break
    else:
        pytest.fail("three pairs of free ports were all taken before the workers bound them")
    outputs = [p.stdout + p.stderr for p in procs]
    for proc in procs:
        assert proc.returncode == 0, "\n".join(f"--- worker {i} (exit {p.returncode}) ---\n{o[-3000:]}"
                                                for i, (p, o) in enumerate(zip(procs, outputs)))
    assert "on 2 replica(s)" in outputs[0]
    assert "worker done" in outputs[1]
    # Only the chief's files remain.
    assert not [p for p in os.listdir(model_dir) if p.startswith(".worker")]
    assert _max_diff(single_device, _weights(model_dir)) < 2e-5


# garden.train that kills itself (SIGKILL) right after the log line of step argv[1] (printed
# and flushed): the kill lands at that point and nowhere later, on any machine.
_KILLED_TRAIN = """
import os, runpy, signal, sys
from garden.training import progress
kill_at, add = int(sys.argv.pop(1)), progress.Progress.add
def add_then_kill(self, step, *args):
    line = add(self, step, *args)
    if step == kill_at:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return line
progress.Progress.add = add_then_kill
runpy.run_module("garden.train", run_name="__main__", alter_sys=True)
"""


def test_sigkill_then_resume_ends_at_the_uninterrupted_weights(bert_data, tmp_path):
    """Killed twice (mid-interval after the first checkpoint, then again in the resumed run),
    the same command ends at the uninterrupted run's weights. The killed runs are processes of
    their own forked from a server that has imported TensorFlow (testing.run_code: ~4 CPU-s
    less each than a fresh interpreter); what is killed is the run, not the import."""
    steps, extra = 10, ["--strategy=one_device", "--gin_param=train.checkpoint_every=3"]
    reference = tmp_path / "reference"
    _in_process(_args(bert_data, reference, *extra, steps=steps, dropout=0.1), reference, steps)

    killed = tmp_path / "killed"
    for kill_after, kept in ((4, "ckpt-3"), (8, "ckpt-6")):
        # e.g. checkpoint at 6, step 8 done and lost: the kill falls between steps 8 and 9.
        args = _args(bert_data, killed, *extra, steps=steps, dropout=0.1)[2:]
        proc = run_code(_KILLED_TRAIN, str(kill_after), *args, check=False, timeout=300)
        assert proc.returncode == -signal.SIGKILL, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f"[train] step {kill_after}/" in proc.stdout, proc.stdout[-3000:]
        assert f"[train] step {kill_after + 1}/" not in proc.stdout, proc.stdout[-3000:]
        assert tf.train.latest_checkpoint(str(killed / "checkpoints")).endswith(kept)

    resumed = _run(_args(bert_data, killed, *extra, steps=steps, dropout=0.1))
    assert "at step 6" in resumed.stdout
    assert _max_diff(_weights(reference), _weights(killed)) < 1e-6
