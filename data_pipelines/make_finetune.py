"""Fine-tuning TFRecords with Apache Beam: `python -m data_pipelines.make_finetune --task=KIND`.

Kinds (data_pipelines/finetune/, docs/tasks.md): squad (SQuAD v1.1 / v2.0 JSON -> one record
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
                 distinct contexts, serialized by the kind's examples_records; a kind with
                 examples_columns: serialized by features.serialize_columns; a kind with
                 example_features only: per example), serialized as tf.train.Example and
                 written to a work file, one key-ordered range per output shard; an example
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
import importlib
import inspect
import json
import logging
import pickle
import sys
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from data_pipelines import beam_options, features, flags, gcs, jobs, output, progress, sources, tokenizers
from data_pipelines.counters import SumDictsFn, count as _count
from data_pipelines.finetune import FinetuneDataError
from data_pipelines.make_pretrain import encode_entries, gc_paused, read_entries
from data_pipelines.objectives import base
from data_pipelines.tfrecord import write_tfrecords

_LOG = logging.getLogger("data_pipelines.make_finetune")

# --task -> the module implementing the kind protocol (data_pipelines/finetune/__init__.py),
# imported on first use.
KINDS = {"squad": "data_pipelines.finetune.squad", "conll": "data_pipelines.finetune.conll"}
STATS_TAG = "stats"
ERRORS_TAG = "errors"
COUNTS_TAG = "counts"
SKIPPED_TAG = "skipped"
SHOWN_SKIPS = 5  # skipped examples named in the log per worker; the rest are counted
LISTED = 20      # reader errors / skipped examples listed in stats.json


def get_kind(name: str):
    """The kind module for --task=name; ImportError naming what is missing."""
    if name not in KINDS:
        raise ImportError(f"unknown --task={name!r}; expected one of {sorted(KINDS)}")
    return importlib.import_module(KINDS[name])


# ---------------------------------------------------------------------------------------------
# Per-element helpers


def record_spec(tf_spec) -> features.Spec:
    """A kind's {name: tf.io.FixedLenFeature} as data_pipelines.features' Spec (a scalar is
    one value), which the writer serializes with and info.json records."""
    spec = {}
    for name, f in tf_spec.items():
        length = 1
        for d in f.shape:
            length *= int(d)
        spec[name] = features.Feature("float32" if f.dtype.is_floating else "int64", length)
    return spec


def kind_spec(kind, options) -> features.Spec:
    """The kind's record Spec: its own ``record_spec(options)`` when it has one (no TensorFlow
    import), else converted from its feature_spec."""
    if hasattr(kind, "record_spec"):
        return kind.record_spec(options)
    return record_spec(kind.feature_spec(options))


def example_key(index: int, record: int) -> str:
    return f"{index:012d}.{record:06d}"


def sources_before(counts: Dict[str, int], source_id: str) -> int:
    """Examples in the sources that sort before ``source_id`` (the index of its first example)."""
    return sum(n for s, n in counts.items() if s < source_id)


def featurize(kind, examples: Sequence, tokenizer, options, first_index: int, on_error) -> List[List[dict]]:
    """The kind's records of each example; batched where the kind offers examples_features.
    An example whose features raise FinetuneDataError gets [] and is reported to on_error."""
    if hasattr(kind, "examples_features"):
        return kind.examples_features(examples, tokenizer, options, first_index, on_error=on_error)
    takes_index = "example_index" in inspect.signature(kind.example_features).parameters
    out = []
    for k, example in enumerate(examples):
        extra = {"example_index": first_index + k} if takes_index else {}
        try:
            out.append(kind.example_features(example, tokenizer, options, **extra))
        except FinetuneDataError as e:
            on_error(first_index + k, e)
            out.append([])
    return out


def serialized_rows(spec: features.Spec, columns) -> List[Tuple[str, int, bytes]]:
    """(sort key, example index, tf.train.Example bytes) of each row of a kind's columns
    (name -> [N, length] int64 matrix; rows in example order, windows in order)."""
    if not columns or not len(next(iter(columns.values()))):
        return []
    n = len(columns["example_index"])
    lengths = {name: [spec[name].length] * n for name in spec}
    records = features.serialize_columns(spec, columns, lengths)
    index = columns["example_index"][:, 0].tolist()
    window = [0] * n
    for r in range(1, n):  # the position of a row among its example's rows
        window[r] = window[r - 1] + 1 if index[r] == index[r - 1] else 0
    return [(example_key(i, j), i, rec) for i, j, rec in zip(index, window, records)]


def as_values(record: dict, spec: features.Spec, index: int) -> dict:
    """A kind's record (name -> int | list) as lists of values; example_index set to ``index``."""
    row = {name: (value if isinstance(value, (list, tuple)) else [value]) for name, value in record.items()}
    if "example_index" in spec:
        row["example_index"] = [index]
    return row


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
        kind = get_kind(self._task)
        stats: Dict[str, int] = {}
        try:
            if self._format == "tfds":
                name, data_dir, split, shard = element
                if not hasattr(kind, "read_tfds"):
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
                 spec: features.Spec, num_shards: int, work_dir: str):
        self._task = task
        self._tokenizer_kind = tokenizer_kind
        self._vocab_path = vocab_path
        self._lower_case = lower_case
        self._options = options
        self._spec = spec
        self._num_shards = num_shards
        self._work_dir = work_dir
        self._kind = None
        self._tokenizer = None
        self._shown = 0

    def setup(self):
        self._kind = get_kind(self._task)
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

        if hasattr(self._kind, "examples_records"):  # serialized by the kind itself
            with gc_paused():  # the GC's passes over the chunk's many small objects cost ~15%
                records = self._kind.examples_records(examples, self._tokenizer, self._options, first,
                                                      on_error=on_error)
            keyed = [(example_key(i, w), i, rec) for i, w, rec in records]
        elif hasattr(self._kind, "examples_columns"):
            columns = self._kind.examples_columns(examples, self._tokenizer, self._options, first,
                                                  on_error=on_error)
            if hasattr(self._kind, "to_records"):  # the stored form of some features
                columns = self._kind.to_records(columns)
            keyed = serialized_rows(self._spec, columns)
        else:
            per_example = featurize(self._kind, examples, self._tokenizer, self._options, first, on_error)
            if hasattr(self._kind, "to_records"):
                per_example = [[self._kind.to_records(r) for r in records]
                               for records in per_example]
            keyed = [(example_key(first + k, j), first + k, as_values(record, self._spec, first + k))
                     for k, records in enumerate(per_example) for j, record in enumerate(records)]
            records = features.serialize_examples(self._spec, [r for _, _, r in keyed])
            keyed = [(key, index, record) for (key, index, _), record in zip(keyed, records)]
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


class WriteShardFn(beam.DoFn):
    """(shard, [(first example, work file, offset, length, records) | None]) -> the shard file:
    its ranges in example order, checked to be key-sorted, written under a temporary name and
    renamed."""

    def __init__(self, output_dir: str, split: str, num_shards: int, compress: bool):
        self._output_dir = output_dir
        self._split = split
        self._num_shards = num_shards
        self._compress = compress

    def process(self, element):
        shard, ranges = element
        ranges = sorted(r for r in ranges if r is not None)
        expected = sum(r[4] for r in ranges)
        final = output.shard_name(self._output_dir, self._split, shard, self._num_shards, self._compress)
        tmp = f"{final}.tmp-{uuid.uuid4().hex}"
        last = [""]

        def records():
            for _, path, offset, length, _ in ranges:
                for key, record in read_entries(path, offset, length):
                    if key <= last[0]:
                        raise RuntimeError(f"shard {shard}: record {key} after {last[0]} (ranges overlap)")
                    last[0] = key
                    yield record

        written = write_tfrecords(tmp, records(), self._compress)
        if written != expected:
            raise RuntimeError(f"shard {shard}: wrote {written} records, the chunks announced {expected}")
        output.replace(tmp, final)
        stats: Dict[str, int] = {}
        _count(stats, "shard_instances/%05d" % shard, written)
        _count(stats, "shards_written")
        yield stats


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
    kind = get_kind(args.task)
    options = kind.options_from_flags(args)
    spec = kind_spec(kind, options)
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
                args.task, args.tokenizer, args.vocab, args.do_lower_case, options, spec,
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
# Command line

_add_bool = flags.add_bool


def make_parser(kind=None, task: Optional[str] = None) -> argparse.ArgumentParser:
    head, _, rest = __doc__.partition("\n\n")
    p = argparse.ArgumentParser(
        prog="python -m data_pipelines.make_finetune",
        description=head + "\n\n" + beam_options.PASS_THROUGH_HELP
        + " `--task=KIND --help` lists that kind's own flags.",
        epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False)  # an abbreviation must never swallow a Beam option
    p.add_argument("--task", required=True, choices=sorted(KINDS),
                   help="task kind (docs/tasks.md): " + ", ".join(sorted(KINDS)))
    p.add_argument("--input", required=True,
                   help="glob of the kind's files (local or gs://; SQuAD JSON, CoNLL text), or "
                   "tfds:NAME[/CONFIG][:SPLIT] for a tensorflow-datasets dataset prepared in --tfds_data_dir")
    p.add_argument("--tfds_data_dir", default=None,
                   help="tensorflow-datasets data_dir holding the prepared dataset (nothing is downloaded)")
    p.add_argument("--output_dir", required=True, help="directory for shards, info.json, stats.json, COMPLETED")
    p.add_argument("--vocab", required=True,
                   help="vocabulary of the model to fine-tune: vocab.txt (wordpiece), *.model "
                   "(sentencepiece) or vocab.json with merges.txt beside it (bpe)")
    p.add_argument("--tokenizer", choices=tokenizers.KINDS, default=None,
                   help="tokenizer kind of --vocab (default: from its name: *.model sentencepiece, "
                   "*vocab.json bpe, else wordpiece)")
    _add_bool(p, "do_lower_case", True,
              "lower-case before tokenizing; must match the vocabulary (a mismatch gets one warning, "
              "data_pipelines/casing.py)")
    p.add_argument("--split", default="train",
                   help="name of the output shards, <split>-NNNNN-of-MMMMM.tfrecord (default %(default)s)")
    p.add_argument("--num_shards", type=int, default=4, help="output files (default %(default)s)")
    _add_bool(p, "compress", False, "write GZIP-compressed .tfrecord.gz shards")
    _add_bool(p, "overwrite", False, "replace an existing completed output directory")
    p.add_argument("--examples_per_chunk", type=int, default=1000,
                   help="consecutive examples featurized together by one worker (default %(default)s)")
    p.add_argument("--progress_seconds", type=float, default=10.0,
                   help="log the work done so far every this many seconds; 0 turns it off "
                   "(default %(default)s)")
    if kind is not None:
        group = p.add_argument_group(f"--task={task}")
        kind.add_flags(group)
    return p


def parse_args(argv: Optional[Sequence[str]] = None):
    """Our flags (common + the kind's) and the rest (Beam pipeline options)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(prog="python -m data_pipelines.make_finetune", add_help=False,
                                  allow_abbrev=False)
    pre.add_argument("--task", choices=sorted(KINDS))
    known, _ = pre.parse_known_args(argv)
    kind = None
    if known.task:
        try:
            kind = get_kind(known.task)
        except ImportError as e:
            raise SystemExit(f"error: --task={known.task}: {e}") from e
    parser = make_parser(kind, known.task)
    args, beam_args = beam_options.split_args(parser, argv, hint=f"or of --task={known.task}")
    for name in ("num_shards", "examples_per_chunk"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if not args.progress_seconds >= 0:
        parser.error(f"--progress_seconds must be >= 0 (0: no progress lines), got {args.progress_seconds}")
    args.tokenizer = args.tokenizer or tokenizers.detect_kind(args.vocab)
    args.input_format = "tfds" if args.input.startswith("tfds:") else "files"
    try:
        kind.options_from_flags(args)
    except ValueError as e:
        parser.error(f"--task={args.task}: {e}")
    return args, beam_args


def run(argv: Optional[Sequence[str]] = None) -> dict:
    """Runs the job; returns the stats (or, for a dry run, {"dry_run": path}). Bad input or an
    unusable output directory ends it with SystemExit("error: ...")."""
    args, beam_args = parse_args(argv)
    pipeline_options = PipelineOptions(beam_args)
    dry_run = beam_options.is_dry_run(pipeline_options)
    try:
        gcs.check_credentials(jobs.checked_paths(args, dry_run))
        tokenizer = jobs.load_tokenizer(args.tokenizer, args.vocab, args.do_lower_case, _LOG)
        build = lambda p, work_dir: build_pipeline(p, args, work_dir)  # noqa: E731
        if dry_run:
            return jobs.dry_run(pipeline_options, build, args.output_dir)
        files = jobs.list_input(args)
        _LOG.info("input %s: %d %s", args.input, len(files),
                  "tfds shards" if args.input_format == "tfds" else "files")
        with output.OutputLock(args.output_dir, "make_finetune"):
            return _run_locked(args, beam_args, pipeline_options, tokenizer, files, build)
    except (sources.InputError, output.OutputError, gcs.CredentialsError, FinetuneDataError) as e:
        raise SystemExit(f"error: {e}") from e


def _run_locked(args, beam_args, pipeline_options, tokenizer, files, build) -> dict:
    output.prepare(args.output_dir, args.overwrite, args.split)
    _LOG.info("running %s: task=%s num_shards=%d -> %s", beam_options.runner_name(pipeline_options),
              args.task, args.num_shards, args.output_dir)
    jobs.run_pipeline(pipeline_options, build, args.output_dir, lambda work_dir: _progress(args, work_dir))
    stats = json.loads(output.read_text(FileSystems.join(args.output_dir, "stats.json")))
    if stats["error_count"]:
        more = f" (and {stats['error_count'] - 1} more input errors, listed in stats.json)" \
            if stats["error_count"] > 1 else ""
        raise FinetuneDataError(f"{stats['errors'][0]}{more}; {args.output_dir} is not COMPLETED")
    shard_files = [output.shard_name(args.output_dir, args.split, s, args.num_shards, args.compress)
                   for s in range(args.num_shards)]
    read = (f" (sources read {stats['sources_read']}, examples read {stats['examples_read']}, "
            f"skipped {stats['examples_skipped']})")
    output.complete(args.output_dir, _info(args, beam_args, tokenizer, files, shard_files, stats),
                    shard_files, stats["instances"], summary=read)
    if stats["examples_skipped"]:
        _LOG.warning("%d examples skipped (the first are listed in stats.json: skipped_examples)",
                     stats["examples_skipped"])
    print(f"wrote {stats['instances']} {args.task} records of {stats['examples_featurized']} examples "
          f"to {args.output_dir} ({args.num_shards} shards, stats.json, info.json, COMPLETED)")
    return stats


def _progress(args, work_dir: str) -> progress.Progress:
    shards = FileSystems.join(args.output_dir, f"{args.split}-*-of-{args.num_shards:05d}.tfrecord"
                              + (".gz" if args.compress else ""))
    patterns = {"chunks": FileSystems.join(work_dir, "chunks", "*.pkl"),
                "features": FileSystems.join(work_dir, "features", "*.bin"), "shards": shards}

    def describe(n, elapsed):
        return (f"progress after {elapsed:.0f} s: {n['chunks']} chunks of up to {args.examples_per_chunk} "
                f"examples read, {n['features']} featurized, {n['shards']} of {args.num_shards} shards written")

    return progress.Progress(patterns, describe, args.progress_seconds, _LOG)


def _info(args, beam_args, tokenizer, files: Sequence[str], shard_files: Sequence[str], stats: dict) -> dict:
    """info.json: what a reader needs to check the data against its config (garden/data.py
    reads ``objective``, the vocabulary, ``max_seq_length``, ``feature_spec`` and ``files``)."""
    kind = get_kind(args.task)
    options = kind.options_from_flags(args)
    return {
        "format_version": features.FORMAT_VERSION,
        "task": args.task,
        "objective": args.task,
        "split": args.split,
        "input_files": list(files),
        "max_seq_length": getattr(options, "max_seq_length", None),
        **jobs.info_fields(args, beam_args, tokenizer, options,
                           kind_spec(kind, options), shard_files),
        "examples": {"read": stats["examples_read"], "featurized": stats["examples_featurized"],
                     "skipped": stats["examples_skipped"]},
        "instances": {"total": stats["instances"], "per_shard": stats["instances_per_shard"]},
    }


def main(argv=None) -> None:
    jobs.main(run, argv)


if __name__ == "__main__":
    # Run the importable module's main, not this __main__ copy (Beam pickles DoFns by reference
    # to their module; see make_pretrain).
    from data_pipelines import make_finetune as _module

    _module.main(sys.argv[1:])
