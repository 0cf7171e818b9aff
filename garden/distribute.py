"""tf.distribute strategy selection for garden.train."""

from __future__ import annotations

import json
import os
from typing import Mapping

import tensorflow as tf

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker_mirrored", "tpu")


def _tf_config_workers(tf_config: str | None) -> int:
    """Tasks that train in the TF_CONFIG cluster: its workers plus its chief (0 without one)."""
    try:
        cluster = json.loads(tf_config or "{}").get("cluster", {})
    except json.JSONDecodeError as e:
        raise ValueError(f"TF_CONFIG is not valid JSON: {e}") from e
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def resolve_strategy_name(requested: str, *, tpu: str | None, tf_config: str | None,
                          num_gpus: int, num_cpus: int = 1,
                          environ: Mapping[str, str] | None = None) -> str:
    """The strategy `requested` stands for: itself, or what "auto" picks on this machine.

    auto: "tpu" when a TPU is configured (--tpu, or the TPU_NAME environment variable that
    TPUClusterResolver itself reads); "multi_worker_mirrored" when TF_CONFIG names two or more
    workers (a chief counts as one); "mirrored" over the local GPUs, or over the CPU when it
    is split into several logical devices (--logical_cpus); else "one_device" on the CPU.
    """
    if requested not in STRATEGIES:
        raise ValueError(f"unknown --strategy={requested!r}; expected one of {', '.join(STRATEGIES)}")
    if requested != "auto":
        return requested
    environ = os.environ if environ is None else environ
    if tpu or environ.get("TPU_NAME"):
        return "tpu"
    if _tf_config_workers(tf_config) > 1:
        return "multi_worker_mirrored"
    if num_gpus > 0 or num_cpus > 1:
        return "mirrored"
    return "one_device"


def create_strategy(name: str = "mirrored", tpu: str | None = None) -> tf.distribute.Strategy:
    """Builds the strategy named on the command line ("auto": see resolve_strategy_name)."""
    if name == "auto":
        # Counted without starting TensorFlow's runtime: MultiWorkerMirroredStrategy must
        # configure the collective ops before anything initialises the eager context (listing
        # logical devices would).
        cpu = tf.config.list_physical_devices("CPU")[0]
        name = resolve_strategy_name(
            name, tpu=tpu, tf_config=os.environ.get("TF_CONFIG"),
            num_gpus=len(tf.config.list_physical_devices("GPU")),
            num_cpus=len(tf.config.get_logical_device_configuration(cpu) or [cpu]))
    else:
        name = resolve_strategy_name(name, tpu=tpu, tf_config=None, num_gpus=0)  # checks the name
    if name == "tpu":
        # With no --tpu, TPUClusterResolver finds the TPU from TPU_NAME (or the Cloud TPU VM).
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    if name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    gpus = tf.config.list_logical_devices("GPU")
    devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(devices=devices)


def uses_only_cpus(strategy: tf.distribute.Strategy) -> bool:
    devices = getattr(strategy.extended, "worker_devices", ())
    return all("CPU" in d.upper() for d in devices)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True unless this process is a non-chief worker of a multi-worker strategy."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and not has_chief


def worker_temp_dir(model_dir: str, strategy: tf.distribute.Strategy) -> str:
    resolver = strategy.cluster_resolver
    return os.path.join(model_dir, f".worker_{resolver.task_type}_{resolver.task_id}")


def remove_worker_temp_dir(model_dir: str, strategy: tf.distribute.Strategy) -> None:
    path = worker_temp_dir(model_dir, strategy)
    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)
