"""Fine-tuning TFRecords with Apache Beam: `python -m data_pipelines.make_finetune --task=KIND`.

Kinds (text/finetune/, docs/tasks.md): squad (SQuAD v1.1 / v2.0 JSON -> one record
per context window: doc_stride, max_query_length, max-context flags, answers re-aligned to
pieces), conll (CoNLL-2003 -> first-sub-token labels). `--task=KIND --help` lists a kind's own
flags and their defaults. Input (--input): a glob of the kind's files (local or gs://), or
tfds:NAME[/CONFIG][:SPLIT] (e.g. tfds:squad/v2.0:validation) read from a tensorflow-datasets
dataset prepared in --tfds_data_dir (nothing is downloaded). Output in --output_dir:
``<split>-NNNNN-of-MMMMM.tfrecord[.gz]`` (every shard, even empty ones; --split names them),
``stats.json``, ``info.json`` and ``COMPLETED`` (last, only after the pipeline succeeded and
wrote at least one record).

The job (DirectRunner by default; every unknown flag goes to Beam's PipelineOptions: --runner,
--direct_num_workers, --direct_running_mode, --project, ...):

  ReadExamples   per input file (or tfds shard), the kind's reader turns it into examples,
                 in file order, cut into chunks of --examples_per_chunk consecutive examples
                 written to work files; a malformed file ends the job with the reader's
                 message (file and record), and nothing is marked COMPLETED
  MakeFeatures   per chunk, the kind's features of every example (squad: all of the chunk's
                 windows from one batched tokenizer call each for the questions and the
                 distinct contexts), serialized as tf.train.Example by the kind's
                 ``records`` (text/finetune/base.py) and written to a work file, one key-ordered range per output shard; an example
                 the kind cannot featurize (e.g. an answer that covers no piece) is skipped,
                 named in the log (the first few per worker) and counted in stats.json
  WriteShards    per shard, its ranges concatenated in example order into one TFRecord file
                 (temporary name, then rename)

Example index. An example's index is its position in the input: the files in sorted path
order (tfds: the shards in order), then the examples of each file in file order, i.e. the
order of the kind's ``read_examples(path)`` for a single file. Records carry it
(``example_index``), so evaluation can map them back to the examples.

Determinism. Nothing is random: example i goes to shard ``i % num_shards`` and every shard
holds its records sorted by (example index, record index within the example), so the bytes
written do not depend on the runner, the number of workers, bundles or retries.

Bulk data goes through work files in ``<output_dir>/_work-<run id>/`` (Beam FileSystems, so
gs:// works); the PCollections carry descriptors only. The output directory's lifecycle (LOCK
against a second run, --overwrite, COMPLETED last and never for zero records, stale work
directories removed) is data_pipelines/output.py's, as for make_pretrain. A progress line is
logged every --progress_seconds, counted from the work files and shards written so far.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import pickle
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from text import finetune, tokenizers, vocab_files
from data_pipelines import jobs, output, sources
from text.finetune import base as finetune_base
from data_pipelines.counters import SumDictsFn, count as _count
from text.finetune import FinetuneDataError
from data_pipelines.workfiles import encode_entries, gc_paused, read_entries

_LOG = logging.getLogger("data_pipelines.make_finetune")

STATS_TAG = "stats"
ERRORS_TAG = "errors"
COUNTS_TAG = "counts"
SKIPPED_TAG = "skipped"
SHOWN_SKIPS = 5  # skipped examples named in the log per worker; the rest are counted
LISTED = 20      # reader errors / skipped examples listed in stats.json


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
        _count(stats, "sources_read")
        _count(stats, "examples_read", len(examples))
        yield beam.pvalue.TaggedOutput(COUNTS_TAG, (source_id, len(examples)))
        digest = hashlib.sha256(source_id.encode("utf-8")).hexdigest()[:16]
        for c, start in enumerate(range(0, len(examples), self._per_chunk)):
            part = examples[start:start + self._per_chunk]
            path = FileSystems.join(self._work_dir, "chunks", f"{digest}-{c:06d}.pkl")
            output.write_atomic(path, pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL))
            _count(stats, "chunks")
            yield source_id, start, len(part), path
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats)


class MakeFeaturesFn(beam.DoFn):
    """(source id, start, n, chunk file) -> (shard, (first example index, work file, offset,
    length, records)) per shard the chunk's records go to; skipped examples on SKIPPED_TAG."""

    def __init__(self, task: str, tokenizer_kind: str, vocab_path: str, lower_case: bool, options,
                 num_shards: int, work_dir: str):
        self._task = task
        self._tokenizer_kind = tokenizer_kind
        self._vocab_path = vocab_path
        self._lower_case = lower_case
        self._options = options
        self._num_shards = num_shards
        self._work_dir = work_dir
        self._kind = None
        self._tokenizer = None
        self._shown = 0

    def setup(self):
        self._kind = finetune.get(self._task)
        self._tokenizer = tokenizers.load_tokenizer(self._tokenizer_kind, self._vocab_path,
                                                    lower_case=self._lower_case)

    def process(self, chunk, counts):
        source_id, start, n, path = chunk
        first = sources_before(counts, source_id) + start
        examples = pickle.loads(output.read_bytes(path))
        stats: Dict[str, int] = {}
        skipped = []

        def on_error(index, error):
            _count(stats, "examples_skipped")
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
            _count(stats, "instances", len(by_shard[shard]))
        output.write_atomic(out_path, b"".join(parts))
        _count(stats, "examples_featurized", len({index for _, index, _ in keyed}))
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


# ---------------------------------------------------------------------------------------------
# The pipeline


def build_pipeline(p: beam.Pipeline, args, work_dir: str) -> None:
    """Adds the whole job to ``p`` (no I/O happens until it runs)."""
    options = finetune.get(args.task).make_options(args)
    read = (p
            | "Sources" >> sources.MatchSources(args.input, args.input_format, args.tfds_data_dir,
                                                getattr(args, "tfds_shards", ()))
            | "ReadExamples" >> beam.ParDo(ReadExamplesFn(
                args.task, args.input_format, work_dir, args.examples_per_chunk))
            .with_outputs(STATS_TAG, ERRORS_TAG, COUNTS_TAG, main="chunks"))
    counts = beam.pvalue.AsDict(read[COUNTS_TAG])
    made = (read.chunks
            | "SpreadChunks" >> beam.Reshuffle()
            | "MakeFeatures" >> beam.ParDo(MakeFeaturesFn(
                args.task, args.tokenizer, args.vocab, args.do_lower_case, options,
                args.num_shards, work_dir), counts)
            .with_outputs(STATS_TAG, SKIPPED_TAG, main="ranges"))
    all_shards = p | "ShardIds" >> beam.Create([(s, None) for s in range(args.num_shards)])
    written = ((made.ranges, all_shards)
               | "WithEmptyShards" >> beam.Flatten().with_output_types(Tuple[int, Any])
               | "GroupShards" >> beam.GroupByKey()
               | "WriteShards" >> beam.ParDo(WriteShardFn(args.output_dir, args.split, args.num_shards,
                                                          args.compress)))
    errors = beam.pvalue.AsList(read[ERRORS_TAG])
    skipped = beam.pvalue.AsList(made[SKIPPED_TAG])
    _ = ((read[STATS_TAG], made[STATS_TAG], written)
         | "AllStats" >> beam.Flatten()
         | "SumStats" >> beam.CombineGlobally(SumDictsFn())
         | "WriteStats" >> beam.ParDo(WriteStatsFn(FileSystems.join(args.output_dir, "stats.json"),
                                                   args.num_shards), errors, skipped))


# ---------------------------------------------------------------------------------------------
# Command line (the launch steps are data_pipelines/jobs.py's)


def make_parser(kind: Optional[finetune_base.FinetuneKind] = None) -> argparse.ArgumentParser:
    p = jobs.new_parser(JOB, __doc__, "`--task=KIND --help` lists that kind's own flags.")
    p.add_argument("--task", required=True, choices=sorted(finetune.KINDS),
                   help="task kind (docs/tasks.md): " + ", ".join(sorted(finetune.KINDS)))
    jobs.add_input_flags(p, "glob of the kind's files (local or gs://; SQuAD JSON, CoNLL text), or "
                         "tfds:NAME[/CONFIG][:SPLIT] for a tensorflow-datasets dataset prepared in --tfds_data_dir")
    jobs.add_output_flags(p)
    jobs.add_vocab_flags(
        p, "vocabulary of the model to fine-tune",
        "tokenizer kind of --vocab (default: from its name: *.model sentencepiece, *vocab.json bpe, "
        "else wordpiece)",
        "(a mismatch gets one warning, text/casing.py)")
    p.add_argument("--split", default="train",
                   help="name of the output shards, <split>-NNNNN-of-MMMMM.tfrecord (default %(default)s)")
    p.add_argument("--num_shards", type=int, default=4, help="output files (default %(default)s)")
    p.add_argument("--examples_per_chunk", type=int, default=1000,
                   help="consecutive examples featurized together by one worker (default %(default)s)")
    p.add_argument("--progress_seconds", type=float, default=10.0,
                   help="log the work done so far every this many seconds; 0 turns it off "
                   "(default %(default)s)")
    if kind is not None:
        kind.add_flags(p.add_argument_group(f"--task={kind.name}"))
    return p


def _resolve(args, kind) -> None:
    args.tokenizer = args.tokenizer or vocab_files.detect_kind(args.vocab)
    args.input_format = "tfds" if args.input.startswith("tfds:") else "files"


def _describe(args, n, elapsed: float) -> str:
    return (f"progress after {elapsed:.0f} s: {n['chunks']} chunks of up to {args.examples_per_chunk} "
            f"examples read, {n['features']} featurized, {n['shards']} of {args.num_shards} shards written")


def _check(args, stats) -> None:
    """A reader's error (a malformed file) leaves the output without COMPLETED."""
    if stats["error_count"]:
        more = f" (and {stats['error_count'] - 1} more input errors, listed in stats.json)" \
            if stats["error_count"] > 1 else ""
        raise FinetuneDataError(f"{stats['errors'][0]}{more}; {args.output_dir} is not COMPLETED")


def _info(args, kind, options, files: Sequence[str], stats: dict) -> dict:
    """info.json beyond the shared fields (garden/data.py reads ``objective``, the vocabulary,
    ``max_seq_length``, ``feature_spec`` and ``files``)."""
    return {
        "objective": args.task,
        "input_files": list(files),
        "max_seq_length": getattr(options, "max_seq_length", None),
        "examples": {"read": stats["examples_read"], "featurized": stats["examples_featurized"],
                     "skipped": stats["examples_skipped"]},
    }


def _summary(stats) -> str:
    return (f" (sources read {stats['sources_read']}, examples read {stats['examples_read']}, "
            f"skipped {stats['examples_skipped']})")


def _finish(args, stats) -> None:
    if stats["examples_skipped"]:
        _LOG.warning("%d examples skipped (the first are listed in stats.json: skipped_examples)",
                     stats["examples_skipped"])
    print(f"wrote {stats['instances']} {args.task} records of {stats['examples_featurized']} examples "
          f"to {args.output_dir} ({args.num_shards} shards, stats.json, info.json, COMPLETED)")


JOB = jobs.Job(
    name="make_finetune", log=_LOG, selector="task", choices=sorted(finetune.KINDS),
    get=lambda name: finetune.get(name),  # looked up when called, as the DoFns do
    make_parser=make_parser,
    positive=("num_shards", "examples_per_chunk"), resolve=_resolve, split=lambda args: args.split,
    build=lambda p, args, tokenizer, work_dir: build_pipeline(p, args, work_dir),
    spec=lambda kind, options: kind.record_spec(options),
    stages={"chunks": ("chunks", "*.pkl"), "features": ("features", "*.bin")}, describe=_describe,
    info=_info, summary=_summary, finish=_finish, check=_check, errors=(FinetuneDataError,))


parse_args, run, main = jobs.entry_points(JOB)

if __name__ == "__main__":
    # Run the importable module's main, not this __main__ copy (Beam pickles DoFns by reference
    # to their module; see make_pretrain).
    from data_pipelines import make_finetune as _module

    _module.main(sys.argv[1:])
