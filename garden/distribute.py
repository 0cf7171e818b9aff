"""tf.distribute strategy selection for garden.train."""

from __future__ import annotations

import json
import os

import tensorflow as tf

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker_mirrored", "tpu")


def _tf_config_workers() -> int:
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    except json.JSONDecodeError as e:
        raise ValueError(f"TF_CONFIG is not valid JSON: {e}") from e
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def create_strategy(name: str = "mirrored", tpu: str | None = None) -> tf.distribute.Strategy:
    """Builds the strategy named on the command line.

    auto: TPU when --tpu is given, multi-worker when TF_CONFIG names several workers,
    otherwise mirrored over the local devices (GPUs, or the CPU).
    """
    if name not in STRATEGIES:
        raise ValueError(f"unknown --strategy={name!r}; expected one of {', '.join(STRATEGIES)}")
    if name == "auto":
        if tpu:
            name = "tpu"
        elif _tf_config_workers() > 1:
            name = "multi_worker_mirrored"
        else:
            name = "mirrored"
    if name == "tpu":
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
