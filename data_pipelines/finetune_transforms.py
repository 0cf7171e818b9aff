"""The transforms of the fine-tuning data job (data_pipelines/make_finetune.py, whose docstring
describes the job): ReadExamplesFn, MakeFeaturesFn, WriteShardFn and the stats.

They live apart from the command line for the reason pretrain_transforms.py gives: a class of
``__main__`` would be pickled by value.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
from typing import Any, Callable, Dict, List, Sequence, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from text import finetune
from text.finetune import FinetuneDataError
from data_pipelines import output
from data_pipelines.counters import count
from data_pipelines.workfiles import encode_entries, gc_paused, read_entries

_LOG = logging.getLogger("data_pipelines.make_finetune")  # the job's log lines name the job

STATS_TAG = "stats"
ERRORS_TAG = "errors"
COUNTS_TAG = "counts"
SKIPPED_TAG = "skipped"
SHOWN_SKIPS = 5  # skipped examples named in the log per worker; the rest are counted
LISTED = 20      # reader errors / skipped examples listed in stats.json
# The work files of each stage (ReadExamplesFn writes the chunks, MakeFeaturesFn the features),
# which the progress lines count: stage -> (subdirectory of the work directory, glob).
WORK_FILES = {"chunks": ("chunks", "*.pkl"), "features": ("features", "*.bin")}


# ---------------------------------------------------------------------------------------------
# Per-element helpers


def example_key(index: int, record: int) -> str:
    return f"{index:012d}.{record:06d}"


def sources_before(counts: Dict[str, int], source_id: str) -> int:
    """Examples in the sources that sort before ``source_id`` (the index of its first example)."""
    return sum(n for s, n in counts.items() if s < source_id)


# ---------------------------------------------------------------------------------------------
# DoFns


class ReadExamplesFn(beam.DoFn):
    """An input element (a Beam ReadableFile or a tfds shard) -> (source id, first example of
    the chunk in the source, examples, chunk file) per chunk of consecutive examples; the
    source's example count on COUNTS_TAG, a reader's error on ERRORS_TAG, stats on STATS_TAG."""

    def __init__(self, task: str, input_format: str, work_dir: str, per_chunk: int):
        self._task = task
        self._format = input_format
        self._work_dir = work_dir
        self._per_chunk = per_chunk

    def process(self, element):
        kind = finetune.get(self._task)
        stats: Dict[str, int] = {}
        try:
            if self._format == "tfds":
                name, data_dir, split, shard = element
                if kind.read_tfds is None:
                    raise FinetuneDataError(f"--task={self._task} cannot read tfds: inputs")
                source_id = f"{shard:06d}"
                examples = kind.read_tfds(name, f"{split}[{shard}shard]", data_dir)
            else:
                source_id = element.metadata.path
                with gc_paused():  # tens of thousands of examples and no cycles
                    examples = kind.read_examples(source_id)
        except FinetuneDataError as e:
            yield beam.pvalue.TaggedOutput(ERRORS_TAG, str(e))
            return
        count(stats, "sources_read")
        count(stats, "examples_read", len(examples))
        yield beam.pvalue.TaggedOutput(COUNTS_TAG, (source_id, len(examples)))
        digest = hashlib.sha256(source_id.encode("utf-8")).hexdigest()[:16]
        for c, start in enumerate(range(0, len(examples), self._per_chunk)):
            part = examples[start:start + self._per_chunk]
            path = FileSystems.join(self._work_dir, "chunks", f"{digest}-{c:06d}.pkl")
            output.write_atomic(path, pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL))
            count(stats, "chunks")
            yield source_id, start, len(part), path
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats)


class MakeFeaturesFn(beam.DoFn):
    """(source id, start, n, chunk file) -> (shard, (first example index, work file, offset,
    length, records)) per shard the chunk's records go to; skipped examples on SKIPPED_TAG."""

    def __init__(self, task: str, load_tokenizer: Callable[[], Any], options, num_shards: int, work_dir: str):
        self._task = task
        self._load_tokenizer = load_tokenizer
        self._options = options
        self._num_shards = num_shards
        self._work_dir = work_dir
        self._kind = None
        self._tokenizer = None
        self._shown = 0

    def setup(self):
        self._kind = finetune.get(self._task)
        self._tokenizer = self._load_tokenizer()

    def process(self, chunk, counts):
        source_id, start, n, path = chunk
        first = sources_before(counts, source_id) + start
        examples = pickle.loads(output.read_bytes(path))
        stats: Dict[str, int] = {}
        skipped = []

        def on_error(index, error):
            count(stats, "examples_skipped")
            skipped.append(f"example {index}: {error}")
            if self._shown < SHOWN_SKIPS:
                _LOG.warning("skipping example %d of %s: %s", index, source_id, error)
                self._shown += 1

        with gc_paused():  # the GC's passes over the chunk's many small objects cost ~15%
            records = self._kind.records(examples, self._tokenizer, self._options, first, on_error)
        keyed = [(example_key(i, j), i, record) for i, j, record in records]
        by_shard: Dict[int, List[Tuple[str, bytes]]] = {}
        for key, index, record in keyed:
            by_shard.setdefault(index % self._num_shards, []).append((key, record))
        out_path = FileSystems.join(self._work_dir, "features", f"{first:012d}.bin")
        parts, ranges, offset = [], [], 0
        for shard in sorted(by_shard):
            data = encode_entries(by_shard[shard])
            parts.append(data)
            ranges.append((shard, (first, out_path, offset, len(data), len(by_shard[shard]))))
            offset += len(data)
            count(stats, "instances", len(by_shard[shard]))
        output.write_atomic(out_path, b"".join(parts))
        count(stats, "examples_featurized", len({index for _, index, _ in keyed}))
        yield from ranges
        for message in skipped:
            yield beam.pvalue.TaggedOutput(SKIPPED_TAG, message)
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats)


class WriteShardFn(output.WriteShardFn):
    """(shard, [(first example, work file, offset, length, records) | None]) -> the shard file:
    its ranges in example order, checked to be key-sorted, written by ``output.WriteShardFn``
    (temporary name, count checked, renamed)."""

    announced_by = "chunks"

    def records(self, shard, ranges):
        last = ""
        for _, path, offset, length, _ in ranges:
            for key, record in read_entries(path, offset, length):
                if key <= last:
                    raise RuntimeError(f"shard {shard}: record {key} after {last} (ranges overlap)")
                last = key
                yield record


class WriteStatsFn(beam.DoFn):
    """Writes the combined counters, reader errors and skipped examples as stats.json."""

    def __init__(self, path: str, num_shards: int):
        self._path = path
        self._num_shards = num_shards

    def process(self, counters, errors, skipped):
        stats = format_stats(counters, self._num_shards, errors, skipped)
        output.write_text(self._path, json.dumps(stats, indent=2, sort_keys=True))
        yield stats


def format_stats(counters: Dict[str, int], num_shards: int, errors: Sequence[str],
                 skipped: Sequence[str]) -> dict:
    return {
        "sources_read": counters.get("sources_read", 0),
        "examples_read": counters.get("examples_read", 0),
        "examples_featurized": counters.get("examples_featurized", 0),
        "examples_skipped": counters.get("examples_skipped", 0),
        "skipped_examples": sorted(skipped)[:LISTED],
        "errors": sorted(errors)[:LISTED],
        "error_count": len(errors),
        "instances": counters.get("instances", 0),
        "instances_per_shard": [counters.get("shard_instances/%05d" % s, 0) for s in range(num_shards)],
        "counters": dict(sorted(counters.items())),
    }
