"""Shared helpers for the test suite: run the project's command-line tools as a user would."""

from __future__ import annotations

import functools
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


_FIXTURE_TOOLS = None  # the fork servers of run_fixture_tool, started on first use


def _fork_pool():
    """The two fork servers of run_fixture_tool, run_tool and run_code (tests/tool_forks.py),
    started on first use; closed at the session's end (tests/conftest.py)."""
    import tool_forks

    global _FIXTURE_TOOLS
    if _FIXTURE_TOOLS is None:
        _FIXTURE_TOOLS = tool_forks.ForkPool(python_env(), size=2)
    return _FIXTURE_TOOLS


def run_fixture_tool(module: str, *args: str, timeout: int = 900) -> None:
    """`python -m module args...` for a fixture that builds test data (corpora, vocabularies,
    pretraining records): like run_module, but forked from one of two servers that have
    imported TensorFlow (tests/tool_forks.py ForkPool), so a run costs its work and not a
    TensorFlow import (a make_pretrain run of the T5 data: 1.7 s instead of 5.5). Raises,
    with the run's output, when it fails. TOOL_FORKS=0 runs fresh interpreters instead."""
    proc = run_tool(module, *args, check=False, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"python -m {module} {' '.join(args)} exited {proc.returncode}\n"
                           f"--- stdout ---\n{proc.stdout[-4000:]}\n"
                           f"--- stderr ---\n{proc.stderr[-4000:]}")


def run_tool(module: str, *args: str, check: bool = True,
             timeout: int = 900) -> subprocess.CompletedProcess:
    """run_module's `python -m module args...` (a process of its own, its exit status, stdout
    and stderr), forked from run_fixture_tool's servers: for a test that runs a command-line
    tool as a user does, where a fresh interpreter is not what it tests (a TensorFlow import,
    ~4 CPU-s, saved a run). What TensorFlow prints at import is not in the run's stderr, and
    environment variables read at TensorFlow's import are the server's: tests of either use
    run_module."""
    code, out, err, _ = _fork_pool().run(module, list(args), python_env(), timeout)
    proc = subprocess.CompletedProcess([sys.executable, "-m", module, *args], code, out, err)
    if check and code != 0:
        raise AssertionError(f"python -m {module} {' '.join(args)} exited {code}\n"
                             f"--- stdout ---\n{out[-4000:]}\n--- stderr ---\n{err[-4000:]}")
    return proc


def run_code(code: str, *args: str, check: bool = True, timeout: int = 600,
             **env) -> subprocess.CompletedProcess:
    """`python -c code args...` from the repository root in a process with TensorFlow imported
    and no module of this project, forked from run_fixture_tool's servers (which import
    TensorFlow alone): what a test asks of a fresh process that loads an export with
    tensorflow (and the tensorflow_text it imports itself), less a TensorFlow import (~4 CPU-s)
    a run. `env`: variables for the run (read after TensorFlow's import, e.g.
    CUDA_VISIBLE_DEVICES). A test of what happens at TensorFlow's import uses run_python."""
    result, out, err, _ = _fork_pool().run(None, list(args), python_env(**env), timeout,
                                           code=code)
    proc = subprocess.CompletedProcess([sys.executable, "-c", code, *args], result, out, err)
    if check:
        assert result == 0, out[-3000:] + err[-3000:]
    return proc


def close_fixture_tools() -> None:
    global _FIXTURE_TOOLS
    if _FIXTURE_TOOLS is not None:
        _FIXTURE_TOOLS.close()
        _FIXTURE_TOOLS = None


def python_env(**extra) -> dict:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **extra)


def run_python(args, check: bool = True, timeout: int = 600, **env) -> subprocess.CompletedProcess:
    """Runs `python ARGS...` from the repo root; asserts success unless check=False."""
    proc = subprocess.run([sys.executable, *args], cwd=REPO_ROOT, env=python_env(**env),
                          capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


class LineReader:
    """Reads a child's text stdout pipe on a thread, so that every wait has a deadline whether
    or not lines arrive: a child that hangs silently fails the test instead of blocking it
    (the child is killed), and so does one that exits before the awaited line."""

    def __init__(self, proc):
        import queue
        import threading

        self.proc, self.lines, self._queue = proc, [], queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def _next(self, deadline: float, waiting_for: str):
        import queue
        import time

        try:
            return self._queue.get(timeout=max(deadline - time.monotonic(), 0.0))
        except queue.Empty:
            self.proc.kill()
            raise AssertionError(f"no {waiting_for} by the deadline; child killed. Last lines:\n"
                                 f"{''.join(self.lines[-20:])}") from None

    def until(self, prefix: str, timeout: float) -> str:
        """Waits for the first line that starts with `prefix` and returns it."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            line = self._next(deadline, f"line starting {prefix!r}")
            if line is None:
                raise AssertionError(f"exit {self.proc.wait()} before a line starting "
                                     f"{prefix!r}:\n{''.join(self.lines[-20:])}")
            self.lines.append(line)
            if line.startswith(prefix):
                return line

    def rest(self, timeout: float) -> str:
        """Waits for the end of the output (and the exit); returns all the output read."""
        import time

        deadline = time.monotonic() + timeout
        while (line := self._next(deadline, "end of output")) is not None:
            self.lines.append(line)
        self.proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
        return "".join(self.lines)


def pretrain_args(bert_data, model_dir, *extra, steps: int = 6, dropout: float = 0.0) -> list:
    """`-m garden.train` arguments for a tiny BERT run on the bert_data fixture (seq 64)."""
    phases = [{"start_step": 0, "data_dir": bert_data.data_dir, "max_seq_length": 64}]
    return ["-m", "garden.train", "--config=configs/bert_tiny.gin", f"--model_dir={model_dir}",
            f"--gin_param=VOCAB='{bert_data.vocab}'", f"--gin_param=DATA_DIR='{bert_data.data_dir}'",
            f"--gin_param=garden.Pretraining.phases={phases!r}",
            f"--gin_param=train.train_steps={steps}", "--gin_param=train.global_batch_size=16",
            "--gin_param=train.warmup_steps=2", "--gin_param=train.log_every=1",
            f"--gin_param=backbone.dropout={dropout}",
            "--gin_param=garden.Pretraining.shuffle_buffer=200", *extra]


def checkpoint_floats(model_dir) -> dict:
    """Every float variable of model_dir's newest checkpoint: weights and optimizer slots.

    (tf.train.Checkpoint names a variable by its first path in the object graph, which for
    most weights runs through the optimizer's list of trainable variables.)
    """
    import tensorflow as tf

    path = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    reader = tf.train.load_checkpoint(path)
    dtypes = reader.get_variable_to_dtype_map()
    names = [n for n in dtypes if dtypes[n].is_floating]
    assert len(names) > 40
    return {n: reader.get_tensor(n) for n in names}


class TrainingProbe:
    """What a garden.train run really computed, seen from inside its task (for in-process runs
    under --strategy=one_device): wraps `task_class.compute_metrics` (pytest's monkeypatch)
    and counts, in tf.Variables (so executions, not traces), the training micro-batches the
    task was given and their smallest and largest number of examples; at trace time it keeps
    the dtype of the backbone's hidden states (`activation_dtypes`, from TransformerEncoderBlock
    outputs on real tensors) seen during the run."""

    def __init__(self, monkeypatch, task_class):
        import keras
        import tensorflow as tf

        from garden.layers.transformer_encoder import TransformerEncoderBlock

        self.calls = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.smallest = tf.Variable(2 ** 62, dtype=tf.int64, trainable=False)
        self.largest = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.activation_dtypes = set()
        compute_metrics, block_call = task_class.compute_metrics, TransformerEncoderBlock.call

        def counted(task, model, batch, training, weight_shares=None):
            if training:
                size = tf.shape(tf.nest.flatten(batch)[0], out_type=tf.int64)[0]
                self.calls.assign_add(1)
                self.smallest.assign(tf.minimum(self.smallest, size))
                self.largest.assign(tf.maximum(self.largest, size))
            return compute_metrics(task, model, batch, training, weight_shares)

        @functools.wraps(block_call)  # the same signature: Keras reads `training` from it
        def recorded(block, inputs, *args, **kwargs):
            outputs = block_call(block, inputs, *args, **kwargs)
            hidden = tf.nest.flatten(outputs)[0]
            if not isinstance(hidden, keras.KerasTensor):  # not the functional model's build
                self.activation_dtypes.add(keras.backend.standardize_dtype(hidden.dtype))
            return outputs

        monkeypatch.setattr(task_class, "compute_metrics", counted)
        monkeypatch.setattr(TransformerEncoderBlock, "call", recorded)


def max_abs_diff(a: dict, b: dict) -> float:
    import numpy as np

    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def read_summary(model_dir) -> dict:
    """The summary.json garden.train writes in its model_dir."""
    import json

    with open(os.path.join(model_dir, "summary.json")) as f:
        return json.load(f)


def train_in_process(argv, model_dir, task: str | None = None, steps: int | None = None) -> dict:
    """Runs garden.train's main in this process; asserts exit 0 and, when given, the task and
    step count the summary reports; returns the summary (summary.json of model_dir)."""
    from garden import train as train_lib

    assert train_lib.main(list(argv)) == 0
    summary = read_summary(model_dir)
    if task is not None:
        assert summary["task"] == task, summary["task"]
    if steps is not None:
        assert summary["steps"] == steps, summary["steps"]
    return summary


def train_refused(argv, capsys) -> str:
    """Runs garden.train's main in this process; asserts exit 2 and one `error:` line on stderr
    without a traceback; returns that line."""
    from garden import train as train_lib

    assert train_lib.main(list(argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    lines = [ln for ln in err if ln.startswith("error:")]
    assert len(lines) == 1 and not any("Traceback" in ln for ln in err), err[-10:]
    return lines[0]
