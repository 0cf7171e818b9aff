"""Reading the pipelines' output directories (docs/design.md "Every pipeline output directory").

The trainer never reads a directory a pipeline has not finished (no COMPLETED marker), and
never trains a model on data made for another vocabulary or sequence length: each check
below fails with a message that names the directory and what differs.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import struct
from typing import List, Optional

import tensorflow as tf

from data_pipelines import features


class DataDirError(ValueError):
    """A pipeline output directory is incomplete or does not match the training config."""


@dataclasses.dataclass
class DataDir:
    path: str
    info: dict
    spec: features.Spec
    files: list

    @property
    def compressed(self) -> bool:
        return any(f.endswith(".gz") for f in self.files)


def open_data_dir(path: str, *, objective: str, split: str = "train",
                  vocab_fingerprint: Optional[str] = None, vocab_size: Optional[int] = None,
                  max_seq_length: Optional[int] = None) -> DataDir:
    """Checks a pipeline output directory against what the trainer expects."""
    if not tf.io.gfile.isdir(path):
        raise DataDirError(f"data directory {path} does not exist")
    if not tf.io.gfile.exists(posixpath.join(path, "COMPLETED")):
        raise DataDirError(
            f"data directory {path} has no COMPLETED marker: the pipeline that writes it did not "
            f"finish (or is still running). Re-run data_pipelines.make_pretrain for it.")
    info_path = posixpath.join(path, "info.json")
    try:
        with tf.io.gfile.GFile(info_path) as f:
            info = json.load(f)
    except (tf.errors.NotFoundError, json.JSONDecodeError) as e:
        raise DataDirError(f"{info_path} is missing or not valid JSON: {e}") from e
    if info.get("objective") != objective:
        raise DataDirError(f"{path} holds data for objective {info.get('objective')!r}, "
                           f"but the config trains {objective!r}")
    if vocab_fingerprint is not None and info.get("vocab_fingerprint") != vocab_fingerprint:
        raise DataDirError(
            f"{path} was tokenized with vocabulary {info.get('vocab')} "
            f"({info.get('vocab_fingerprint')}), not the config's vocabulary ({vocab_fingerprint})")
    if vocab_size is not None and int(info.get("vocab_size", -1)) != vocab_size:
        raise DataDirError(f"{path} has vocab_size {info.get('vocab_size')}, "
                           f"the model has {vocab_size}")
    if max_seq_length is not None and int(info.get("max_seq_length", -1)) != max_seq_length:
        raise DataDirError(f"{path} has max_seq_length {info.get('max_seq_length')}, "
                           f"the config expects {max_seq_length}")
    spec = features.spec_from_json(info["feature_spec"])
    files = listed_shards(path, info, split)
    return DataDir(path=path, info=info, spec=spec, files=files)


def listed_shards(path: str, info: dict, split: str = "train") -> List[str]:
    """The shards info.json lists, each checked before training: present, of the recorded size
    where info.json records sizes, and (uncompressed local shards) holding the recorded number
    of whole records; a directory with no instances at all is refused by name."""
    total = (info.get("instances") or {}).get("total")
    if total == 0:
        raise DataDirError(f"{path} holds no instances (info.json: instances.total = 0): its "
                           f"input produced nothing to train on. Re-run make_pretrain on a "
                           f"non-empty corpus")
    names = info.get("files")
    if names is None:  # written before info.json listed its shards: take what is there
        files = sorted(tf.io.gfile.glob(posixpath.join(path, f"{split}-*-of-*.tfrecord*")))
        if not files:
            raise DataDirError(f"{path} has no {split}-*.tfrecord shards")
        return files
    files = [posixpath.join(path, n) for n in names]
    missing = [n for n, f in zip(names, files) if not tf.io.gfile.exists(f)]
    if missing:
        raise DataDirError(f"{path} lacks {len(missing)} of the {len(names)} shards its "
                           f"info.json lists: {', '.join(missing[:5])}. Re-run make_pretrain "
                           f"for it (training on the rest would silently skip their data)")
    sizes = info.get("file_sizes") or {}
    per_shard = (info.get("instances") or {}).get("per_shard") or [None] * len(files)
    for name, f, expected in zip(names, files, per_shard):
        size = tf.io.gfile.stat(f).length
        if name in sizes and int(sizes[name]) != size:
            raise DataDirError(f"shard {f} has {size} bytes, info.json records {sizes[name]}: "
                               f"it is truncated or was replaced. Re-run make_pretrain")
        if expected is not None and not f.endswith(".gz") and "://" not in f:
            _check_framing(f, size, int(expected))
    return files


def _check_framing(path: str, size: int, expected: int) -> None:
    """Walks the TFRecord frames (8-byte length, 4-byte CRC, data, 4-byte CRC) by their
    lengths only, without reading the data: a truncated shard ends inside a frame, or holds
    fewer records than info.json records."""
    records, offset = 0, 0
    with tf.io.gfile.GFile(path, "rb") as f:
        while offset < size:
            f.seek(offset)
            header = f.read(8)
            end = offset + 8 + 4 + (struct.unpack("<Q", header)[0] if len(header) == 8 else size) + 4
            if end > size:
                break  # the frame starting at `offset` does not fit: truncated there
            offset, records = end, records + 1
    if offset != size or records != expected:
        partial = f", a partial record at byte {offset}" if offset != size else ""
        raise DataDirError(
            f"shard {path} is truncated or corrupt ({size} bytes: {records} whole records"
            f"{partial}; info.json records {expected}). Re-run make_pretrain for it")


def locate_corruption(files) -> Optional[str]:
    """Which shard, and which record of it, fails to read (CRC or framing): read only after
    tf.data reported a DataLossError, whose message names neither. None: all read cleanly."""
    for path in files:
        count = 0
        try:
            for _ in tf.data.TFRecordDataset(path, compression_type="GZIP" if path.endswith(".gz") else ""):
                count += 1
        except tf.errors.DataLossError as e:
            return f"shard {path}, record {count} (0-based): {e.message.splitlines()[0]}"
    return None


def shard_batches(ds: tf.data.Dataset, input_context=None, skip_batches: int = 0) -> tf.data.Dataset:
    """Skips already-seen batches, then deals batches round-robin to the input pipelines.

    Every pipeline reads the same shuffled stream of per-replica batches; pipeline i takes
    batches i, i+P, i+2P, ... Together the replicas of one step therefore see exactly the
    examples a single device would see in one global batch, so a run does not depend on how
    it is distributed, and `skip_batches` (counted in per-replica batches of the whole stream)
    puts a resumed run back on the batch an uninterrupted run would read next.
    """
    if skip_batches:
        ds = ds.skip(skip_batches)
    if input_context is not None and input_context.num_input_pipelines > 1:
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds


def record_dataset(data: DataDir, *, batch_size: int, seed: int, input_context=None,
                   shuffle_buffer: int = 10_000, repeat: bool = True,
                   skip_batches: int = 0) -> tf.data.Dataset:
    """Parsed, shuffled batches of `batch_size` (per replica) examples of a checked directory.

    Deterministic for a given seed (see shard_batches for distribution and resume).
    """
    ds = tf.data.TFRecordDataset(data.files, compression_type="GZIP" if data.compressed else "")
    if repeat:
        ds = ds.repeat()
    if shuffle_buffer:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size, drop_remainder=repeat)
    ds = shard_batches(ds, input_context, skip_batches)
    parsing = features.tf_parsing_spec(data.spec)
    ds = ds.map(lambda x: tf.io.parse_example(x, parsing), num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)
