"""Reading the pipelines' output directories (docs/design.md "Every pipeline output directory").

The trainer never reads a directory a pipeline has not finished (no COMPLETED marker), and
never trains a model on data made for another vocabulary or sequence length: each check
below fails with a message that names the directory and what differs.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from typing import List, Optional

import tensorflow as tf

from text import features, kinds


class DataDirError(ValueError):
    """A pipeline output directory is incomplete or does not match the training config."""


@dataclasses.dataclass
class DataDir:
    path: str
    info: dict
    spec: features.Spec
    files: list
    announced: set = dataclasses.field(default_factory=set, repr=False)  # warnings already printed

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
        retired = kinds.renamed(f"--task={info.get('objective')}")  # made by make_finetune
        raise DataDirError(f"{path} holds data for objective {info.get('objective')!r}, "
                           f"but the config trains {objective!r}"
                           + (f" (make_finetune {retired}: make the directory again)"
                              if retired else ""))
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
    """The shards info.json lists, each checked before training, and a directory with no
    instances at all refused by name.

    A directory written with ``file_sizes`` in info.json (data_pipelines/output.complete):
    every shard present with its recorded byte size, one stat per shard. One written before:
    every shard present and, for uncompressed local shards, walked frame by frame
    (text.tfrecord.frame_lengths) to hold the recorded number of whole records.
    """
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
    found = {}
    for name, f in zip(names, files):
        try:
            found[name] = tf.io.gfile.stat(f).length
        except tf.errors.NotFoundError:
            pass
    missing = [n for n in names if n not in found]
    if missing:
        raise DataDirError(f"{path} lacks {len(missing)} of the {len(names)} shards its "
                           f"info.json lists: {', '.join(missing[:5])}. Re-run make_pretrain "
                           f"for it (training on the rest would silently skip their data)")
    sizes = info.get("file_sizes")
    per_shard = (info.get("instances") or {}).get("per_shard") or [None] * len(files)
    for name, f, expected in zip(names, files, per_shard):
        if sizes is not None:  # one stat per shard; the walk only to say where one breaks
            if name not in sizes or int(sizes[name]) != found[name]:
                _check_framing(f, expected)
                raise DataDirError(f"shard {f} has {found[name]} bytes, info.json records "
                                   f"{sizes.get(name, 'no size')}: it is truncated or was "
                                   f"replaced. Re-run make_pretrain for it")
        else:  # written before info.json recorded sizes
            _check_framing(f, expected)
    return files


def _check_framing(path: str, expected: Optional[int]) -> None:
    """For an uncompressed local shard: whole frames only, and as many records as info.json
    records where it records them (a truncated shard ends inside a frame or holds fewer);
    DataDirError naming the shard, and the partial record's byte offset, when not."""
    if path.endswith(".gz") or "://" in path:
        return
    from text import tfrecord  # here: the usual check (file_sizes) needs no walk

    records = 0
    try:
        for _ in tfrecord.frame_lengths(path):
            records += 1
    except tfrecord.FramingError as e:
        recorded = f"; info.json records {expected}" if expected is not None else ""
        raise DataDirError(
            f"shard {path} is truncated or corrupt ({e.size} bytes: {e.records} whole records, "
            f"a partial record at byte {e.offset}{recorded}). Re-run make_pretrain for it") from None
    if expected is not None and records != int(expected):
        raise DataDirError(
            f"shard {path} is truncated or corrupt ({records} whole records; info.json records "
            f"{expected}). Re-run make_pretrain for it")


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

    Deterministic for a given seed (see shard_batches for distribution and resume). A repeated
    directory of fewer instances than one batch is announced once: each batch holds copies.
    """
    total = (data.info.get("instances") or {}).get("total")
    if repeat and total is not None and 0 < total < batch_size and "small" not in data.announced:
        data.announced.add("small")
        print(f"[data] warning: {data.path} holds {total} instances, fewer than one batch of "
              f"{batch_size}: each batch repeats them; make more data or lower "
              f"train.global_batch_size", flush=True)
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
