"""--strategy=auto: which strategy it picks for each kind of machine, and that the pick works here."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf

from garden import distribute


def _tf_config(workers: int, chief: bool = False) -> str:
    cluster = {"worker": [f"host{i}:2222" for i in range(workers)]}
    if chief:
        cluster["chief"] = ["chief:2222"]
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})


def _auto(tpu=None, tf_config=None, num_gpus=0, num_cpus=1, environ=None):
    return distribute.resolve_strategy_name("auto", tpu=tpu, tf_config=tf_config,
                                            num_gpus=num_gpus, num_cpus=num_cpus,
                                            environ=environ or {})


def test_auto_picks_tpu_when_the_tpu_flag_is_given():
    # A TPU wins over everything else on the machine.
    assert _auto(tpu="my-tpu", tf_config=_tf_config(2), num_gpus=8) == "tpu"


def test_auto_picks_tpu_when_tpu_name_is_set_in_the_environment():
    assert _auto(environ={"TPU_NAME": "my-tpu"}, num_gpus=8) == "tpu"
    # An empty TPU_NAME configures nothing.
    assert _auto(environ={"TPU_NAME": ""}) == "one_device"


def test_auto_reads_the_process_environment_when_none_is_given(monkeypatch):
    monkeypatch.setenv("TPU_NAME", "my-tpu")
    assert distribute.resolve_strategy_name("auto", tpu=None, tf_config=None, num_gpus=0) == "tpu"
    monkeypatch.delenv("TPU_NAME")
    assert distribute.resolve_strategy_name("auto", tpu=None, tf_config=None, num_gpus=0) == "one_device"


def test_auto_picks_multi_worker_when_tf_config_names_two_workers():
    assert _auto(tf_config=_tf_config(2), num_gpus=4) == "multi_worker_mirrored"
    # A chief and one worker are two training tasks as well.
    assert _auto(tf_config=_tf_config(1, chief=True)) == "multi_worker_mirrored"


def test_auto_with_a_single_worker_in_tf_config_stays_on_this_machine():
    assert _auto(tf_config=_tf_config(1), num_gpus=2) == "mirrored"
    assert _auto(tf_config=_tf_config(1)) == "one_device"


def test_auto_mirrors_over_local_gpus():
    assert _auto(num_gpus=1) == "mirrored"
    assert _auto(num_gpus=8) == "mirrored"


def test_auto_without_accelerators_uses_the_cpu():
    assert _auto() == "one_device"
    # --logical_cpus=2 splits the CPU in two: mirrored over both, as the tests of
    # tests/garden/test_distributed.py do by hand.
    assert _auto(num_cpus=2) == "mirrored"


def test_named_strategies_are_taken_as_given():
    for name in ("one_device", "mirrored", "multi_worker_mirrored", "tpu"):
        assert distribute.resolve_strategy_name(name, tpu=None, tf_config=_tf_config(2),
                                                num_gpus=8, environ={"TPU_NAME": "x"}) == name


def test_invalid_tf_config_is_a_clear_error():
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        _auto(tf_config="{cluster:")


def test_unknown_strategy_name_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"unknown --strategy='mirorred'; expected one of auto, "):
        distribute.create_strategy("mirorred")
    with pytest.raises(ValueError, match="'gpu'"):
        distribute.resolve_strategy_name("gpu", tpu=None, tf_config=None, num_gpus=1)


def test_create_auto_on_this_cpu_machine_gives_a_working_strategy(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv("TPU_NAME", raising=False)
    strategy = distribute.create_strategy("auto")
    gpus = tf.config.list_logical_devices("GPU")
    expected = (tf.distribute.MirroredStrategy if gpus or len(tf.config.list_logical_devices("CPU")) > 1
                else tf.distribute.OneDeviceStrategy)
    assert isinstance(strategy, expected)
    replicas = strategy.num_replicas_in_sync
    assert replicas >= 1
    # It runs a replicated computation: each replica contributes 1.0 -> the sum is the count.
    with strategy.scope():
        v = tf.Variable(2.0)
    per_replica = strategy.run(lambda: v * 0.5)
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    assert float(total) == float(replicas)


_FRESH_PROCESS = """
import json, os, socket, sys
import tensorflow as tf
from garden import distribute

case = sys.argv[1]
if case == "multi_worker":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{port}"]},
                                          "task": {"type": "worker", "index": 0}})
    strategy = distribute.create_strategy("multi_worker_mirrored")
    assert isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy), strategy
else:  # auto on a CPU split into two logical devices
    os.environ.pop("TF_CONFIG", None); os.environ.pop("TPU_NAME", None)
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = distribute.create_strategy("auto")
    assert isinstance(strategy, tf.distribute.MirroredStrategy), strategy
print("replicas", strategy.num_replicas_in_sync)
"""


@pytest.mark.parametrize("case,replicas", [("multi_worker", 1), ("auto_logical_cpus", 2)])
def test_create_strategy_leaves_the_runtime_unstarted_until_it_builds(case, replicas):
    """In a fresh process, as `garden.train` runs: picking the strategy must not start
    TensorFlow's runtime first, or MultiWorkerMirroredStrategy cannot configure its collective
    ops ("must be configured at program startup") and logical CPU devices cannot be counted."""
    import subprocess
    import sys

    from testing import REPO_ROOT, python_env

    done = subprocess.run([sys.executable, "-c", _FRESH_PROCESS, case], cwd=REPO_ROOT,
                          env=python_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"replicas {replicas}" in done.stdout, done.stdout
