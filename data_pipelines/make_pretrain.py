"""Pre-training TFRecords with Apache Beam: `python -m data_pipelines.make_pretrain --objective=NAME`.

Objectives (data_pipelines/objectives/, OBJECTIVES.md): bert, albert, roberta, spanbert, ernie,
electra, xlnet, t5, bart, gpt2; `--objective=NAME --help` lists an objective's own flags
and their published defaults. Input (--input): text files (local or gs://) with one sentence
per line and a blank line between documents; JSONL files (one document per line, --text_field,
split into sentences by data_pipelines/io.py); or tfds:NAME[/CONFIG][:SPLIT] read from a
locally prepared tensorflow-datasets dataset. Output in --output_dir:
``train-NNNNN-of-MMMMM.tfrecord[.gz]`` (every shard, even empty ones), ``stats.json``,
``info.json`` and ``COMPLETED`` (last, only after the pipeline succeeded).

The job (DirectRunner by default; any Beam runner, every unknown flag goes to Beam's
PipelineOptions: --runner, --direct_num_workers, --direct_running_mode, --project, ...):

  ReadDocuments        match the glob (or the tfds shards), read files in chunks, split into
                       documents (bad lines, empty files and documents are counted and skipped)
  CreateInstances      Tokenize: the objective's tokenizer (WordPiece / SentencePiece / byte-level
                       BPE, tensorflow-text or keras-hub ops), one batched call per document;
                       per dupe pass, documents are hashed into pools; each pool is grouped and
                       turned into instances by the objective's plain functions
  WriteShards          each instance gets a stable key; shard = key % num_shards; a shard is
                       sorted by key and written as one TFRecord file (temp name, then rename)
  stats                per-file / per-pool / per-shard counters combined into stats.json

Random-next documents. The original draws B from any document of the whole corpus, which needs
the corpus in one process. Here, for each dupe pass d, document x goes to bucket
``sha256(seed, d, x) % num_buckets`` with ``num_buckets = ceil(num_documents /
--random_document_pool_size)`` (num_documents counted by Beam), and B is drawn uniformly among
the other documents of x's bucket. A bucket holds ~pool_size documents (default 1000), so no
worker ever holds more than that, the pools differ from one dupe pass to the next, and for any
corpus much larger than one document the distribution of B is the same as the original's
(a uniformly random other document). A bucket with a single document (tiny corpora) draws B
from that same document; this is counted as ``random_next_same_document``.

Determinism. Every random draw comes from a numpy Generator seeded with
``sha256(seed, document id, dupe index)``; a document id is the file path relative to the
glob's base directory plus the document's index in the file. Buckets are sorted by document id
before use and shards by instance key, so the bytes written do not depend on the runner, the
number of workers, bundle boundaries or retries. The key order is also the fixed-seed shuffle
of the instances that the original does in memory.

Scale notes: one shard is sorted in memory by one worker; choose --num_shards so that a shard
is a few hundred MB at most. On Dataflow, ship this package to the workers (e.g.
``--setup_file`` or ``--extra_package``) and keep --vocab readable at submission time (its
fingerprint goes into info.json). ``--runner=DataflowRunner --dry_run=True`` builds the job
without submitting it and writes its description (the Dataflow job and the portable pipeline
proto) to ``<output_dir>/dataflow_job.json`` (stdout when output_dir is not local).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import math
import os
import posixpath
import sys
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TestOptions

from data_pipelines import features, io as text_io, objectives, tokenizers
from data_pipelines.objectives import base

_LOG = logging.getLogger("data_pipelines.make_pretrain")

OBJECTIVES = objectives.NAMES
SPLIT = "train"
COUNTERS = "make_pretrain"  # Beam metrics namespace
STATS_TAG = "stats"


# ---------------------------------------------------------------------------------------------
# Per-element helpers


def stable_hash(*parts) -> int:
    """64-bit hash of the parts' string forms; the same on every machine and Python run."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def instance_sort_key(seed: int, dupe: int, instance_key: str) -> str:
    """Unique, stable key of an instance; its hash part decides the shard and the order."""
    return f"{stable_hash('instance', seed, dupe, instance_key):016x}|{dupe}|{instance_key}"


def shard_of(sort_key: str, num_shards: int) -> int:
    return int(sort_key[:16], 16) % num_shards


def shard_name(output_dir: str, shard: int, num_shards: int, compress: bool) -> str:
    suffix = ".tfrecord.gz" if compress else ".tfrecord"
    return FileSystems.join(output_dir, f"{SPLIT}-{shard:05d}-of-{num_shards:05d}{suffix}")


def num_buckets(num_documents: int, pool_size: int) -> int:
    return max(1, math.ceil(num_documents / pool_size))


def pool_of(seed: int, dupe: int, doc_id: str, pools: int) -> int:
    return stable_hash("bucket", seed, dupe, doc_id) % pools


def _count(stats: Dict[str, int], name: str, n: int = 1) -> None:
    """Adds to the stats record and to the Beam counter of the same name."""
    if n:
        stats[name] = stats.get(name, 0) + n
        beam.metrics.Metrics.counter(COUNTERS, name).inc(n)


def length_bin(length: int, max_seq_length: int) -> str:
    width = max(1, math.ceil(max_seq_length / 16))
    lo = (length - 1) // width * width + 1
    return f"{lo:04d}-{lo + width - 1:04d}"


# The feature whose non-padding length is an instance's length in the histogram.
_LENGTH_FEATURES = ("input_ids", "inputs", "input_k")


def pool_instances(key, docs: Sequence[base.Doc], *, objective: base.Objective, seed: int,
                   vocab: base.Vocab, options, lengths_of: int,
                   unigram_counts: Optional[np.ndarray] = None) -> tuple:
    """Instances of one (dupe pass, pool): ([(sort_key, feature dict)], stats dict).

    ``docs``: the pool's documents in any order; they are sorted by id first, because the
    order in which a runner groups them is not deterministic and ids are.
    """
    dupe, _ = key
    docs = sorted(docs, key=lambda d: d.id)
    ctx = base.PoolContext(seed, dupe, vocab, options, unigram_counts)
    out = []
    for instance_key, feats in objective.create_instances(docs, ctx):
        out.append((instance_sort_key(seed, dupe, instance_key), feats))
        ctx.count("instances")
        for name in _LENGTH_FEATURES:
            if name in feats:
                n = sum(1 for t in feats[name] if t != 0) if name != "input_ids" else len(feats[name])
                ctx.count("seq_len/" + length_bin(max(n, 1), lengths_of))
                break
    stats: Dict[str, int] = {}
    for name, n in ctx.stats.items():
        _count(stats, name, n)
    return out, stats


def tokenize_document(tokenizer, objective: base.Objective, doc_id: str, sentences: Sequence[str],
                      units: Optional[Sequence] = None) -> Tuple[Optional[base.Doc], Dict[str, int]]:
    """Sentences -> a base.Doc of non-empty piece-id segments (None if nothing is left)."""
    stats: Dict[str, int] = {}
    if objective.wants_units:
        ids, starts, ends = tokenizer.tokenize_with_offsets(list(sentences))
    else:
        ids = tokenizer.tokenize(list(sentences))
    segments, doc_units = [], []
    for i, pieces in enumerate(ids):
        if not len(pieces):
            _count(stats, "sentences_dropped/no_tokens")
            continue
        segments.append([int(t) for t in pieces])
        if objective.wants_units:
            annotated = units[i] if units is not None else None
            found = objective.find_units(sentences[i], starts[i], ends[i], annotated)
            _count(stats, "units_annotated" if annotated is not None else "units_heuristic", len(found))
            doc_units.append([(int(a), int(b)) for a, b in found])
    if not segments:
        _count(stats, "documents_dropped/no_tokens")
        return None, stats
    return base.Doc(doc_id, segments, doc_units if objective.wants_units else None), stats


# ---------------------------------------------------------------------------------------------
# DoFns


class ReadDocumentsFn(beam.DoFn):
    """ReadableFile -> (document id, [sentences], units or None); stats on STATS_TAG.

    Text files: one sentence per line, blank line between documents (id "path:index").
    JSONL files: one document per line, text in ``text_field`` (id "path:line").
    """

    def __init__(self, pattern: str, max_line_bytes: int, input_format: str = "text",
                 text_field: str = "text", units_field: Optional[str] = None):
        self._pattern = pattern
        self._max_line_bytes = max_line_bytes
        self._format = input_format
        self._text_field = text_field
        self._units_field = units_field

    def process(self, readable_file):
        path = readable_file.metadata.path
        rel = text_io.relative_path(path, self._pattern)
        stats: Dict[str, int] = {}
        _count(stats, "files_read")

        def on_skip(reason, line_no):
            if reason == text_io.EMPTY_DOCUMENT:
                _count(stats, "documents_dropped/" + reason)
            else:
                _count(stats, "lines_skipped/" + reason)
                _LOG.warning("skipping line %d of %s: %s", line_no, path, reason)

        n = 0
        with readable_file.open() as f:
            if self._format == "jsonl":
                docs = ((f"{rel}:{line}", sentences, units) for line, sentences, units in text_io.read_jsonl_documents(
                    f, on_skip, self._text_field, self._units_field, self._max_line_bytes))
            else:
                docs = ((f"{rel}:{index}", sentences, None) for index, sentences in enumerate(
                    text_io.read_documents(f, on_skip, self._max_line_bytes)))
            for doc_id, sentences, units in docs:
                n += 1
                _count(stats, "documents_read")
                _count(stats, "sentences_read", len(sentences))
                yield doc_id, sentences, units
        if n == 0 and readable_file.metadata.size_in_bytes == 0:
            _count(stats, "files_skipped/empty_file")
            _LOG.warning("input file %s is empty", path)
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats)


class ReadTfdsShardFn(beam.DoFn):
    """(tfds name, data_dir, split, shard index) -> documents of that shard of a prepared
    tensorflow-datasets dataset (nothing is downloaded: the dataset must exist in data_dir)."""

    def __init__(self, text_field: str):
        self._text_field = text_field

    def process(self, element):
        import tensorflow_datasets as tfds

        name, data_dir, split, shard = element
        builder = tfds.builder(name, data_dir=data_dir)
        ds = builder.as_dataset(split=f"{split}[{shard}shard]", shuffle_files=False)
        stats: Dict[str, int] = {}
        _count(stats, "files_read")
        for index, example in enumerate(tfds.as_numpy(ds)):
            value = example.get(self._text_field) if isinstance(example, dict) else None
            if not isinstance(value, bytes):
                _count(stats, "lines_skipped/" + text_io.NO_TEXT)
                continue
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                _count(stats, "lines_skipped/" + text_io.INVALID_UTF8)
                continue
            sentences = [text[a:b] for a, b in text_io.split_sentences(text.replace("\x00", " "))]
            if not sentences:
                _count(stats, "documents_dropped/" + text_io.EMPTY_DOCUMENT)
                continue
            _count(stats, "documents_read")
            _count(stats, "sentences_read", len(sentences))
            yield f"{split}[{shard}shard]:{index}", sentences, None
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats)


class TokenizeDocumentFn(beam.DoFn):
    """(id, [sentences], units) -> base.Doc: one batched tokenizer call per document."""

    def __init__(self, objective_name: str, tokenizer_kind: str, vocab_path: str, lower_case: bool):
        self._objective_name = objective_name
        self._kind = tokenizer_kind
        self._vocab_path = vocab_path
        self._lower_case = lower_case
        self._tokenizer = None
        self._objective = None

    def setup(self):
        self._tokenizer = tokenizers.load_tokenizer(self._kind, self._vocab_path, lower_case=self._lower_case)
        self._objective = objectives.get(self._objective_name)

    def process(self, element):
        doc_id, sentences, units = element
        doc, stats = tokenize_document(self._tokenizer, self._objective, doc_id, sentences, units)
        if doc is not None:
            yield doc
        if stats:
            yield beam.pvalue.TaggedOutput(STATS_TAG, stats)


class CountPiecesFn(beam.CombineFn):
    """Corpus piece counts (a vector of vocab_size int64) for objectives with wants_unigram."""

    def __init__(self, vocab_size: int):
        self._size = vocab_size

    def create_accumulator(self):
        return np.zeros(self._size, np.int64)

    def add_input(self, acc, doc):
        for seg in doc.segments:
            acc += np.bincount(np.asarray(seg, np.int64), minlength=self._size)[:self._size]
        return acc

    def merge_accumulators(self, accs):
        out = np.zeros(self._size, np.int64)
        for acc in accs:
            out += acc
        return out

    def extract_output(self, acc):
        return acc


class CreateInstancesFn(beam.DoFn):
    """((dupe, pool), [Doc]) -> (shard, [(sort key, serialized tf.Example)]) per shard."""

    def __init__(self, objective_name: str, seed: int, vocab: base.Vocab, options, num_shards: int,
                 lengths_of: int):
        self._objective_name = objective_name
        self._seed = seed
        self._vocab = vocab
        self._options = options
        self._num_shards = num_shards
        self._lengths_of = lengths_of
        self._objective = None
        self._spec = None

    def setup(self):
        self._objective = objectives.get(self._objective_name)
        self._spec = self._objective.feature_spec(self._options)

    def process(self, element, unigram_counts=None):
        key, docs = element
        instances, stats = pool_instances(key, docs, objective=self._objective, seed=self._seed,
                                          vocab=self._vocab, options=self._options,
                                          lengths_of=self._lengths_of, unigram_counts=unigram_counts)
        # One element per (pool, shard) rather than per instance: Beam's per-element cost
        # (coding, shuffling) would otherwise exceed the cost of making the instance.
        by_shard: Dict[int, list] = {}
        for sort_key, inst in instances:
            by_shard.setdefault(shard_of(sort_key, self._num_shards), []).append(
                (sort_key, features.serialize_example(self._spec, inst)))
        for shard, records in sorted(by_shard.items()):
            yield shard, records
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats)


class WriteShardFn(beam.DoFn):
    """(shard, [[(sort key, record)] | None]) -> the shard file, written under a temporary name
    and renamed, so a retried or speculative bundle never leaves a half-written shard."""

    def __init__(self, output_dir: str, num_shards: int, compress: bool):
        self._output_dir = output_dir
        self._num_shards = num_shards
        self._compress = compress

    def process(self, element):
        import tensorflow as tf

        shard, groups = element  # lists of (sort key, record) from the pools, or None
        records = sorted(x for group in groups if group is not None for x in group)
        final = shard_name(self._output_dir, shard, self._num_shards, self._compress)
        tmp = f"{final}.tmp-{uuid.uuid4().hex}"
        options = tf.io.TFRecordOptions(compression_type="GZIP" if self._compress else "")
        with tf.io.TFRecordWriter(tmp, options) as writer:
            for _, record in records:
                writer.write(record)
        tf.io.gfile.rename(tmp, final, overwrite=True)
        stats: Dict[str, int] = {}
        _count(stats, "shard_instances/%05d" % shard, len(records))
        _count(stats, "shards_written")
        yield stats


class SumDictsFn(beam.CombineFn):
    """Sums {name: count} records: the job's counters, independent of the runner's metrics."""

    def create_accumulator(self):
        return {}

    def add_input(self, acc, record):
        for k, v in record.items():
            acc[k] = acc.get(k, 0) + v
        return acc

    def merge_accumulators(self, accs):
        out: Dict[str, int] = {}
        for acc in accs:
            self.add_input(out, acc)
        return out

    def extract_output(self, acc):
        return dict(sorted(acc.items()))


# ---------------------------------------------------------------------------------------------
# Composite transforms


class ReadDocuments(beam.PTransform):
    """Input -> (document id, [sentences], units or None); stats records in the ``stats`` output.

    ``pattern``: a glob of text/JSONL files, or ``tfds:NAME[/CONFIG][:SPLIT]`` (with
    ``tfds_data_dir``) for a tensorflow-datasets dataset prepared locally.
    """

    def __init__(self, pattern: str, max_line_bytes: int = text_io.DEFAULT_MAX_LINE_BYTES,
                 input_format: str = "text", text_field: str = "text", units_field: Optional[str] = None,
                 tfds_data_dir: Optional[str] = None, tfds_shards: Sequence[int] = ()):
        super().__init__()
        self._pattern = pattern
        self._max_line_bytes = max_line_bytes
        self._format = input_format
        self._text_field = text_field
        self._units_field = units_field
        self._tfds_data_dir = tfds_data_dir
        self._tfds_shards = list(tfds_shards)

    def expand(self, pbegin):
        if self._format == "tfds":
            name, split = parse_tfds(self._pattern)
            return (pbegin
                    | "TfdsShards" >> beam.Create([(name, self._tfds_data_dir, split, s) for s in self._tfds_shards])
                    | "Reshuffle" >> beam.Reshuffle()
                    | "ReadTfds" >> beam.ParDo(ReadTfdsShardFn(self._text_field))
                    .with_outputs(STATS_TAG, main="documents"))
        return (pbegin
                | "Match" >> fileio.MatchFiles(self._pattern)
                | "Open" >> fileio.ReadMatches()
                | "Split" >> beam.ParDo(ReadDocumentsFn(self._pattern, self._max_line_bytes, self._format,
                                                        self._text_field, self._units_field))
                .with_outputs(STATS_TAG, main="documents"))


class CreateInstances(beam.PTransform):
    """(document id, [sentences], units) -> (shard, [(sort key, serialized example)]) + stats.

    Output: a dict with ``instances`` and ``stats`` PCollections.
    """

    def __init__(self, *, objective: str, tokenizer_kind: str, vocab_path: str, vocab: base.Vocab,
                 lower_case: bool, options, dupe_factor: int, seed: int, num_shards: int,
                 random_document_pool_size: int, lengths_of: int):
        super().__init__()
        self._objective = objective
        self._kind = tokenizer_kind
        self._vocab_path = vocab_path
        self._vocab = vocab
        self._lower_case = lower_case
        self._options = options
        self._dupe_factor = dupe_factor
        self._seed = seed
        self._num_shards = num_shards
        self._pool_size = random_document_pool_size
        self._lengths_of = lengths_of

    def expand(self, documents):
        tokenized = documents | "Tokenize" >> beam.ParDo(
            TokenizeDocumentFn(self._objective, self._kind, self._vocab_path, self._lower_case)
        ).with_outputs(STATS_TAG, main="docs")
        docs = tokenized.docs
        num_docs = beam.pvalue.AsSingleton(docs | "CountDocuments" >> beam.combiners.Count.Globally())
        seed, dupes, pool = self._seed, self._dupe_factor, self._pool_size

        def to_pools(doc, n_docs):
            n = num_buckets(n_docs, pool)
            for d in range(dupes):
                yield (d, pool_of(seed, d, doc.id, n)), doc

        side = {}
        if objectives.get(self._objective).wants_unigram:
            side["unigram_counts"] = beam.pvalue.AsSingleton(
                docs | "CountPieces" >> beam.CombineGlobally(CountPiecesFn(self._vocab.size)))
        instances = (docs
                     | "AssignPools" >> beam.FlatMap(to_pools, num_docs).with_output_types(
                         Tuple[Tuple[int, int], Any])
                     | "GroupPools" >> beam.GroupByKey()
                     | "Instances" >> beam.ParDo(CreateInstancesFn(
                         self._objective, self._seed, self._vocab, self._options, self._num_shards,
                         self._lengths_of), **side)
                     .with_outputs(STATS_TAG, main="instances"))
        stats = ((tokenized[STATS_TAG], instances[STATS_TAG])
                 | "FlattenStats" >> beam.Flatten())
        return {"instances": instances.instances, "stats": stats}


class WriteShards(beam.PTransform):
    """(shard, [(sort key, record)]) -> every shard file (empty ones too); yields stats records."""

    def __init__(self, output_dir: str, num_shards: int, compress: bool):
        super().__init__()
        self._output_dir = output_dir
        self._num_shards = num_shards
        self._compress = compress

    def expand(self, keyed_records):
        all_shards = (keyed_records.pipeline
                      | "ShardIds" >> beam.Create([(s, None) for s in range(self._num_shards)]))
        return ((keyed_records, all_shards)
                | "WithEmptyShards" >> beam.Flatten().with_output_types(Tuple[int, Any])
                | "GroupShards" >> beam.GroupByKey()
                | "Write" >> beam.ParDo(WriteShardFn(self._output_dir, self._num_shards, self._compress)))


class WriteJson(beam.DoFn):
    """Writes the one combined stats dict as stats.json (the only element of its input)."""

    def __init__(self, path: str, num_shards: int, objective: str):
        self._path = path
        self._num_shards = num_shards
        self._objective = objective

    def process(self, counters):
        stats = format_stats(counters, self._num_shards, objectives.get(self._objective))
        with FileSystems.create(self._path) as f:
            f.write(json.dumps(stats, indent=2, sort_keys=True).encode("utf-8"))
        yield stats


def format_stats(counters: Dict[str, int], num_shards: int, objective: Optional[base.Objective] = None) -> dict:
    """The human-facing stats.json layout of the summed counters."""
    def group(prefix):
        return {k[len(prefix):]: v for k, v in sorted(counters.items()) if k.startswith(prefix)}

    per_shard = [counters.get("shard_instances/%05d" % s, 0) for s in range(num_shards)]
    stats = {
        "files_read": counters.get("files_read", 0),
        "files_skipped": group("files_skipped/"),
        "documents_read": counters.get("documents_read", 0),
        "documents_dropped": group("documents_dropped/"),
        "sentences_read": counters.get("sentences_read", 0),
        "sentences_dropped": group("sentences_dropped/"),
        "lines_skipped": group("lines_skipped/"),
        "instances": counters.get("instances", 0),
        "instances_per_shard": per_shard,
        "real_tokens": counters.get("real_tokens", 0),
        "masked_tokens": counters.get("masked_tokens", 0),
        "sequence_length_histogram": group("seq_len/"),
        "counters": dict(sorted(counters.items())),
    }
    if objective is not None and objective.summarize is not None:
        stats.update(objective.summarize(counters))
    return stats


def build_pipeline(p: beam.Pipeline, args, vocab: base.Vocab) -> None:
    """Adds the whole job to ``p`` (no I/O happens until it runs)."""
    objective = objectives.get(args.objective)
    options = objective.make_options(args)
    read = p | "ReadDocuments" >> ReadDocuments(
        args.input, args.max_line_bytes, args.input_format, args.text_field, args.units_field,
        args.tfds_data_dir, getattr(args, "tfds_shards", ()))
    made = read.documents | "CreateInstances" >> CreateInstances(
        objective=args.objective, tokenizer_kind=args.tokenizer, vocab_path=args.vocab, vocab=vocab,
        lower_case=args.do_lower_case, options=options, dupe_factor=args.dupe_factor, seed=args.seed,
        num_shards=args.num_shards, random_document_pool_size=args.random_document_pool_size,
        lengths_of=args.max_seq_length)
    written = made["instances"] | "WriteShards" >> WriteShards(args.output_dir, args.num_shards, args.compress)
    _ = ((read[STATS_TAG], made["stats"], written)
         | "AllStats" >> beam.Flatten()
         | "SumStats" >> beam.CombineGlobally(SumDictsFn())
         | "WriteStats" >> beam.ParDo(WriteJson(FileSystems.join(args.output_dir, "stats.json"),
                                                args.num_shards, args.objective)))


# ---------------------------------------------------------------------------------------------
# Command line

_bool = base._bool
_add_bool = base.add_bool


def parse_tfds(spec: str) -> Tuple[str, str]:
    """"tfds:NAME[/CONFIG][:SPLIT]" -> ("NAME[/CONFIG]", SPLIT (default "train"))."""
    body = spec[len("tfds:"):]
    name, _, split = body.partition(":")
    if not name:
        raise ValueError(f"--input={spec}: expected tfds:NAME[/CONFIG][:SPLIT]")
    return name, split or "train"


def input_format(args) -> str:
    if args.input_format != "auto":
        return args.input_format
    if args.input.startswith("tfds:"):
        return "tfds"
    if args.input.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz")):
        return "jsonl"
    return "text"


def make_parser(objective: Optional[base.Objective] = None) -> argparse.ArgumentParser:
    head, _, rest = __doc__.partition("\n\n")
    p = argparse.ArgumentParser(
        prog="python -m data_pipelines.make_pretrain",
        description=head + "\n\nAny flag not listed here is passed to Beam's PipelineOptions "
        "(--runner, --direct_num_workers, --direct_running_mode, --project, --region, "
        "--temp_location, --dry_run ...). `--objective=NAME --help` lists that objective's own flags.",
        epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False)  # an abbreviation must never swallow a Beam option
    p.add_argument("--objective", required=True, choices=objectives.NAMES,
                   help="pre-training objective (OBJECTIVES.md): " + ", ".join(objectives.NAMES))
    p.add_argument("--input", required=True,
                   help="glob of text files (local or gs://; .gz decompressed): one sentence per line, blank "
                   "line between documents; or JSONL files (one document per line, see --text_field); or "
                   "tfds:NAME[/CONFIG][:SPLIT] for a tensorflow-datasets dataset prepared in --tfds_data_dir")
    p.add_argument("--input_format", choices=("auto", "text", "jsonl", "tfds"), default="auto",
                   help="auto: tfds: prefix -> tfds, *.jsonl / *.json(.gz) -> jsonl, else text (default %(default)s)")
    p.add_argument("--text_field", default="text",
                   help="JSONL / tfds field holding a document's text; it is split into sentences at newlines "
                   "and at . ! ? followed by a capitalised word (data_pipelines/io.py) (default %(default)s)")
    p.add_argument("--units_field", default=None,
                   help="JSONL field with [start, end) character spans of phrases/entities for unit masking "
                   "(ernie); without it ernie uses its documented heuristic")
    p.add_argument("--tfds_data_dir", default=None,
                   help="tensorflow-datasets data_dir holding the prepared dataset (nothing is downloaded)")
    p.add_argument("--output_dir", required=True, help="directory for shards, info.json, stats.json, COMPLETED")
    p.add_argument("--vocab", required=True,
                   help="vocabulary from data_pipelines.make_vocab: vocab.txt (wordpiece), *.model "
                   "(sentencepiece) or vocab.json with merges.txt beside it (bpe)")
    p.add_argument("--tokenizer", choices=("wordpiece", "sentencepiece", "bpe"), default=None,
                   help="tokenizer kind of --vocab (default: the objective's: " + ", ".join(
                       f"{n}={_objective_tokenizer(n)}" for n in objectives.NAMES) + ")")
    p.add_argument("--max_seq_length", type=int, default=128, help="tokens per instance (default %(default)s)")
    p.add_argument("--dupe_factor", type=int, default=10,
                   help="passes over the corpus, each with fresh masks and pairs (default %(default)s)")
    _add_bool(p, "do_lower_case", True,
              "lower-case before tokenizing; must match the vocabulary (make_vocab --lower_case)")
    p.add_argument("--seed", type=int, default=12345, help="the job's seed (default %(default)s)")
    p.add_argument("--num_shards", type=int, default=4,
                   help="output files; each is sorted in one worker's memory, so keep shards to a few "
                   "hundred MB (default %(default)s)")
    _add_bool(p, "compress", False, "write GZIP-compressed .tfrecord.gz shards")
    _add_bool(p, "overwrite", False, "replace an existing completed output directory")
    p.add_argument("--random_document_pool_size", type=int, default=1000,
                   help="documents per pool: random-next/SOP partners are drawn from, and packing objectives "
                   "concatenate, the documents of a pool of about this size (documents hashed into pools per "
                   "dupe pass), so no worker needs the whole corpus (default %(default)s)")
    p.add_argument("--max_line_bytes", type=int, default=text_io.DEFAULT_MAX_LINE_BYTES,
                   help="longer input lines are skipped and counted as line_too_long (default %(default)s)")
    if objective is not None:
        p.description += f"\n\n--objective={objective.name}: {objective.recipe}."
        group = p.add_argument_group(f"--objective={objective.name}: {objective.recipe}")
        objective.add_flags(group)
        p.set_defaults(**objective.defaults)
    return p


def _objective_tokenizer(name: str) -> str:
    try:
        return objectives.get(name).tokenizer
    except ImportError:
        return "?"


def parse_args(argv: Optional[Sequence[str]] = None):
    """Our flags (common + the objective's) and the rest (Beam pipeline options)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--objective", choices=objectives.NAMES)
    known, _ = pre.parse_known_args(argv)
    objective = objectives.get(known.objective) if known.objective else None
    parser = make_parser(objective)
    args, beam_args = parser.parse_known_args(argv)
    for name in ("max_seq_length", "dupe_factor", "num_shards", "random_document_pool_size", "max_line_bytes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    unknown = _unknown_beam_args(beam_args)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)} (neither flags of --objective="
                     f"{objective.name} nor Beam pipeline options; see --help)")
    args.tokenizer = args.tokenizer or objective.tokenizer
    args.input_format = input_format(args)
    try:
        objective.make_options(args)
    except ValueError as e:
        parser.error(f"--objective={objective.name}: {e}")
    return args, beam_args


def _unknown_beam_args(beam_args: Sequence[str]) -> List[str]:
    """The flags among ``beam_args`` that no registered Beam PipelineOptions class defines
    (Beam itself would only log and drop them, so a typo would silently change nothing)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    seen, todo = set(), [PipelineOptions]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        todo.extend(cls.__subclasses__())
        try:
            cls._add_argparse_args(parser)
        except argparse.ArgumentError:
            pass  # an option defined by two classes: the first registration stands
    _, unknown = parser.parse_known_args(list(beam_args))
    return [a for a in unknown if a.startswith("--")]


def make_runner(options: PipelineOptions):
    """The runner for ``options``: Beam's FnApiRunner for DirectRunner (or no --runner).

    Beam's DirectRunner first tries the Prism runner, a Go binary it downloads at run time;
    this job must run offline, so the local runner is the Python FnApiRunner (what
    DirectRunner falls back to), which honours --direct_num_workers / --direct_running_mode.
    Any other --runner is returned by name for Beam to resolve.
    """
    name = options.view_as(StandardOptions).runner
    if name not in (None, "DirectRunner", "direct", "SwitchingDirectRunner"):
        return name
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def _is_local(path: str) -> bool:
    return "://" not in path


def _write_text(path: str, text: str) -> None:
    with FileSystems.create(path) as f:
        f.write(text.encode("utf-8"))


def _prepare_output_dir(output_dir: str, overwrite: bool) -> None:
    completed = FileSystems.join(output_dir, "COMPLETED")
    if FileSystems.exists(completed):
        if not overwrite:
            raise SystemExit(f"error: {output_dir} already holds a completed dataset (COMPLETED exists); "
                             f"pass --overwrite to replace it or choose another --output_dir")
        FileSystems.delete([completed])  # first: a crash from here on leaves no COMPLETED
    stale = []
    for pattern in (f"{SPLIT}-*-of-*.tfrecord*", "info.json", "stats.json"):
        for m in FileSystems.match([FileSystems.join(output_dir, pattern)])[0].metadata_list:
            stale.append(m.path)
    if stale:
        _LOG.info("removing %d stale files from %s", len(stale), output_dir)
        FileSystems.delete(stale)
    if _is_local(output_dir):
        os.makedirs(output_dir, exist_ok=True)


def _check_input(args) -> List[str]:
    """The input's files (or tfds shards); a clear error when there are none."""
    if args.input_format == "tfds":
        return _tfds_shards(args)
    pattern = args.input
    try:
        matched = FileSystems.match([pattern])[0].metadata_list
    except Exception as e:  # Beam raises BeamIOError for an unreachable scheme or bucket
        raise SystemExit(f"error: cannot list --input={pattern}: {e}") from e
    if not matched:
        raise SystemExit(f"error: --input={pattern} matches no files; check the path/glob")
    return sorted(m.path for m in matched)


def _tfds_shards(args) -> List[str]:
    """Sets args.tfds_shards to the shard indices of the split; nothing is downloaded."""
    import tensorflow_datasets as tfds

    name, split = parse_tfds(args.input)
    try:
        builder = tfds.builder(name, data_dir=args.tfds_data_dir)
        info = builder.info.splits[split]
    except Exception as e:  # tfds raises several kinds for a missing dataset/config/split
        raise SystemExit(f"error: --input={args.input}: cannot open the prepared tensorflow-datasets "
                         f"dataset in --tfds_data_dir={args.tfds_data_dir} ({type(e).__name__}: {e}); "
                         f"prepare it first (tfds build / builder.download_and_prepare())") from e
    if not info.num_examples:
        raise SystemExit(f"error: --input={args.input} has no examples in split {split!r}")
    args.tfds_shards = list(range(info.num_shards))
    return [f"{name}:{split}[{i}shard]" for i in args.tfds_shards]


def _dry_run(options: PipelineOptions) -> bool:
    return _bool(options.view_as(TestOptions).dry_run or False)


def _save_dataflow_job(result, output_dir: str) -> Optional[str]:
    from google.protobuf import json_format

    job = getattr(result, "job", None)
    if job is None:
        _LOG.info("dry run: the runner built no job description")
        return None
    description = {
        "job": json.loads(job.json()),
        "pipeline": json_format.MessageToDict(job.proto_pipeline),
    }
    text = json.dumps(description, indent=1, sort_keys=True)
    transforms = job.proto_pipeline.components.transforms
    names = sorted({t.unique_name.split("/")[0] for t in transforms.values() if t.unique_name})
    print(f"dry run: built Dataflow job {job.proto.name!r} with {len(transforms)} transforms "
          f"({', '.join(names)}); not submitted")
    if _is_local(output_dir):
        os.makedirs(output_dir, exist_ok=True)
        path = os.path.join(output_dir, "dataflow_job.json")
        with open(path, "w") as f:
            f.write(text)
        print(f"dry run: job description written to {path}")
        return path
    print(text)
    return None


def run(argv: Optional[Sequence[str]] = None) -> dict:
    """Runs the job; returns the stats (or, for a dry run, {"dry_run": path})."""
    args, beam_args = parse_args(argv)
    objective = objectives.get(args.objective)
    options = objective.make_options(args)
    pipeline_options = PipelineOptions(beam_args)
    dry_run = _dry_run(pipeline_options)
    runner = pipeline_options.view_as(StandardOptions).runner or "DirectRunner"

    # Clear VocabularyError naming the file; the Vocab (ids, roles) travels to the workers.
    tokenizer = tokenizers.load_tokenizer(args.tokenizer, args.vocab, lower_case=args.do_lower_case)
    vocab = tokenizer.vocab
    _LOG.info("vocabulary %s (%s): %d pieces (%s)", args.vocab, args.tokenizer, vocab.size, tokenizer.fingerprint)

    if dry_run:
        # Nothing is listed, read or written but the job description: a gs:// glob or output
        # dir would need credentials and network.
        p = beam.Pipeline(options=pipeline_options)
        build_pipeline(p, args, vocab)
        result = p.run()  # DataflowRunner with dry_run translates the job and returns at once
        return {"dry_run": _save_dataflow_job(result, args.output_dir)}

    files = _check_input(args)
    _LOG.info("input %s: %d files", args.input, len(files))
    _prepare_output_dir(args.output_dir, args.overwrite)

    _LOG.info("running %s: objective=%s dupe_factor=%d max_seq_length=%d num_shards=%d -> %s",
              runner, args.objective, args.dupe_factor, args.max_seq_length, args.num_shards, args.output_dir)
    p = beam.Pipeline(runner=make_runner(pipeline_options), options=pipeline_options)
    build_pipeline(p, args, vocab)
    result = p.run()
    result.wait_until_finish()
    state = str(result.state)
    if "DONE" not in state:
        raise SystemExit(f"error: pipeline ended in state {state}; {args.output_dir} is not COMPLETED")

    with FileSystems.open(FileSystems.join(args.output_dir, "stats.json")) as f:
        stats = json.loads(f.read().decode("utf-8"))
    shard_files = [shard_name(args.output_dir, s, args.num_shards, args.compress) for s in range(args.num_shards)]
    missing = [f for f in shard_files if not FileSystems.exists(f)]
    if missing:
        raise SystemExit(f"error: pipeline finished but shards are missing: {missing[:3]}")

    spec = objective.feature_spec(options)
    arguments = {k: v for k, v in vars(args).items() if k != "tfds_shards"}
    info = {
        "format_version": features.FORMAT_VERSION,
        "objective": args.objective,
        "recipe": objective.recipe,
        "split": SPLIT,
        "arguments": {**arguments, "beam_args": list(beam_args)},
        "options": dataclasses.asdict(options) if dataclasses.is_dataclass(options) else str(options),
        "tokenizer": args.tokenizer,
        "lower_case": args.do_lower_case,
        "vocab": args.vocab,
        "vocab_size": vocab.size,
        "vocab_fingerprint": tokenizer.fingerprint,
        "feature_spec": features.spec_to_json(spec),
        "max_seq_length": args.max_seq_length,
        "max_predictions_per_seq": getattr(args, "max_predictions_per_seq", None),
        "compression": "GZIP" if args.compress else None,
        "files": [posixpath.basename(f) for f in shard_files],
        "instances": {"total": stats["instances"], "per_shard": stats["instances_per_shard"]},
    }
    _write_text(FileSystems.join(args.output_dir, "info.json"), json.dumps(info, indent=2, sort_keys=True))
    _write_text(FileSystems.join(args.output_dir, "COMPLETED"), "")

    _LOG.info("files read %d, documents read %d (dropped %s), lines skipped %s",
              stats["files_read"], stats["documents_read"], stats["documents_dropped"], stats["lines_skipped"])
    print(f"wrote {stats['instances']} {args.objective} instances to {args.output_dir} "
          f"({args.num_shards} shards, stats.json, info.json, COMPLETED)")
    return stats


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        run(argv)
    except (tokenizers.VocabularyError, base.VocabularyRoleError) as e:
        raise SystemExit(f"error: {e}") from e


if __name__ == "__main__":
    main(sys.argv[1:])
