"""Preemption (SIGTERM) and a diverging loss: each leaves a usable model_dir behind."""

from __future__ import annotations

import signal
import subprocess
import sys

import tensorflow as tf

from testing import REPO_ROOT, LineReader, pretrain_args, python_env, run_tool


def test_sigterm_writes_a_checkpoint_and_the_run_resumes(bert_data, tmp_path):
    args = pretrain_args(bert_data, tmp_path, "--gin_param=train.checkpoint_every=1000", steps=400)
    proc = subprocess.Popen([sys.executable, *args], cwd=REPO_ROOT, env=python_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    reader = LineReader(proc)  # deadlines hold even when the child prints nothing
    reader.until("[train] step 5/", timeout=300)
    proc.send_signal(signal.SIGTERM)
    out = reader.rest(timeout=120)
    assert proc.returncode == 143, out[-3000:]
    assert "SIGTERM: saved" in out
    # No periodic checkpoint was due (every 1000): the one there is the preemption's.
    latest = tf.train.latest_checkpoint(str(tmp_path / "checkpoints"))
    step = int(latest.rsplit("-", 1)[1])
    assert 5 <= step < 400
    # The resumed run: `python -m garden.train` forked from a server that has imported
    # TensorFlow (testing.run_tool), as the diverging run below.
    resumed = run_tool("garden.train", *pretrain_args(bert_data, tmp_path, steps=step + 2)[2:])
    assert f"at step {step}" in resumed.stdout


def test_diverging_loss_stops_with_a_clear_error_and_keeps_the_good_checkpoint(bert_data, tmp_path):
    args = pretrain_args(bert_data, tmp_path, "--gin_param=train.checkpoint_every=1",
                         "--gin_param=train.learning_rate=1e30", "--gin_param=train.clip_norm=None",
                         steps=30)
    proc = run_tool("garden.train", *args[2:], check=False)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "loss is nan" in proc.stderr or "loss is inf" in proc.stderr, proc.stderr[-2000:]
    failed_step = int(proc.stderr.split(" at step ")[1].split(";")[0])
    latest = tf.train.latest_checkpoint(str(tmp_path / "checkpoints"))
    assert latest is not None and latest.endswith(f"ckpt-{failed_step - 1}")
    assert f"The last good checkpoint is kept: {latest}" in proc.stderr
    # The kept checkpoint holds finite weights.
    reader = tf.train.load_checkpoint(latest)
    dtypes = reader.get_variable_to_dtype_map()
    for name, dtype in dtypes.items():
        if dtype.is_floating:
            assert tf.reduce_all(tf.math.is_finite(reader.get_tensor(name))), name
