"""Pre-training TFRecords with Apache Beam: `python -m data_pipelines.make_pretrain --objective=bert`.

Input: text files matched by --input (local or gs://), one sentence per line, a blank line
between documents (see data_pipelines/io.py). Output in --output_dir:
``train-NNNNN-of-MMMMM.tfrecord[.gz]`` (every shard, even empty ones), ``stats.json``,
``info.json`` and ``COMPLETED`` (last, only after the pipeline succeeded).

The job (DirectRunner by default; any Beam runner, every unknown flag goes to Beam's
PipelineOptions: --runner, --direct_num_workers, --direct_running_mode, --project, ...):

  ReadDocuments        match the glob, read files in chunks, split into documents
                       (bad lines, empty files and empty documents are counted and skipped)
  TokenizeDocuments    tensorflow-text FastBertTokenizer, one batched call per document
  CreateBertInstances  per dupe pass, documents are hashed into buckets ("random-next pools");
                       each bucket is grouped and turned into instances by the plain functions
                       of data_pipelines/objectives/bert.py
  WriteShards          each instance gets a stable key; shard = key % num_shards; a shard is
                       sorted by key and written as one TFRecord file (temp name, then rename)
  stats                per-file / per-bucket / per-shard counters combined into stats.json

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

from data_pipelines import features, io as text_io, tokenizers
from data_pipelines.objectives import bert

_LOG = logging.getLogger("data_pipelines.make_pretrain")

OBJECTIVES = ("bert",)  # other objectives plug in here
SPLIT = "train"
COUNTERS = "make_pretrain"  # Beam metrics namespace
STATS_TAG = "stats"


# ---------------------------------------------------------------------------------------------
# Per-element helpers


def stable_hash(*parts) -> int:
    """64-bit hash of the parts' string forms; the same on every machine and Python run."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def element_rng(seed: int, document_id: str, dupe: int) -> np.random.Generator:
    """The Generator of one (document, dupe pass): all of its instances' draws come from it."""
    digest = hashlib.sha256(f"rng\x1f{seed}\x1f{document_id}\x1f{dupe}".encode("utf-8")).digest()
    return np.random.default_rng(int.from_bytes(digest[:16], "big"))


def instance_sort_key(seed: int, document_id: str, dupe: int, index: int) -> str:
    """Unique, stable key of an instance; its hash part decides the shard and the order."""
    return f"{stable_hash('instance', seed, document_id, dupe, index):016x}|{document_id}|{dupe}|{index}"


def shard_of(sort_key: str, num_shards: int) -> int:
    return int(sort_key[:16], 16) % num_shards


def shard_name(output_dir: str, shard: int, num_shards: int, compress: bool) -> str:
    suffix = ".tfrecord.gz" if compress else ".tfrecord"
    return FileSystems.join(output_dir, f"{SPLIT}-{shard:05d}-of-{num_shards:05d}{suffix}")


def num_buckets(num_documents: int, pool_size: int) -> int:
    return max(1, math.ceil(num_documents / pool_size))


def _count(stats: Dict[str, int], name: str, n: int = 1) -> None:
    """Adds to the stats record and to the Beam counter of the same name."""
    if n:
        stats[name] = stats.get(name, 0) + n
        beam.metrics.Metrics.counter(COUNTERS, name).inc(n)


def length_bin(length: int, max_seq_length: int) -> str:
    width = max(1, math.ceil(max_seq_length / 16))
    lo = (length - 1) // width * width + 1
    return f"{lo:04d}-{lo + width - 1:04d}"


def bucket_instances(key, documents, *, seed: int, vocab: bert.BertVocab, options: bert.BertOptions,
                     lengths_of: int) -> tuple:
    """Instances of one random-next pool: ([(sort_key, feature dict)], stats dict).

    ``documents``: (document id, segments) pairs of one (dupe, bucket) group, in any order.
    """
    dupe, _ = key
    docs = sorted(documents, key=lambda d: d[0])  # group order is not deterministic; ids are
    stats: Dict[str, int] = {}
    out = []
    for pos, (doc_id, segments) in enumerate(docs):
        def random_document(rng, pos=pos):
            if len(docs) == 1:
                _count(stats, "random_next_same_document")
                return docs[0][1]
            j = int(rng.integers(0, len(docs) - 1))
            return docs[j + 1 if j >= pos else j][1]

        rng = element_rng(seed, doc_id, dupe)
        instances = bert.create_instances_from_document(segments, rng, random_document, vocab, options)
        for index, inst in enumerate(instances):
            out.append((instance_sort_key(seed, doc_id, dupe, index), inst))
            n = len(inst["input_ids"])
            _count(stats, "instances")
            _count(stats, "real_tokens", n)
            _count(stats, "masked_tokens", len(inst["masked_lm_positions"]))
            _count(stats, "nsp_random", inst["next_sentence_labels"][0])
            _count(stats, "seq_len/" + length_bin(n, lengths_of))
    return out, stats


# ---------------------------------------------------------------------------------------------
# DoFns


class ReadDocumentsFn(beam.DoFn):
    """ReadableFile -> (document id, [sentences]); a stats record per file on STATS_TAG."""

    def __init__(self, pattern: str, max_line_bytes: int):
        self._pattern = pattern
        self._max_line_bytes = max_line_bytes

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
            for index, sentences in enumerate(text_io.read_documents(f, on_skip, self._max_line_bytes)):
                n += 1
                _count(stats, "documents_read")
                _count(stats, "sentences_read", len(sentences))
                yield f"{rel}:{index}", sentences
        if n == 0 and readable_file.metadata.size_in_bytes == 0:
            _count(stats, "files_skipped/empty_file")
            _LOG.warning("input file %s is empty", path)
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats)


class TokenizeDocumentFn(beam.DoFn):
    """(id, [sentences]) -> (id, [[piece ids]]): one batched FastBertTokenizer call per document."""

    def __init__(self, vocab_tokens: Sequence[str], lower_case: bool):
        self._vocab = list(vocab_tokens)
        self._lower_case = lower_case
        self._tokenizer = None

    def setup(self):
        self._tokenizer = tokenizers.wordpiece_tokenizer(self._vocab, self._lower_case)

    def process(self, element):
        import tensorflow as tf

        doc_id, sentences = element
        ids = self._tokenizer.tokenize(tf.constant(sentences, dtype=tf.string)).to_list()
        segments = [s for s in ids if s]
        stats: Dict[str, int] = {}
        _count(stats, "sentences_dropped/no_tokens", len(ids) - len(segments))
        if segments:
            yield doc_id, segments
        else:
            _count(stats, "documents_dropped/no_tokens")
        if stats:
            yield beam.pvalue.TaggedOutput(STATS_TAG, stats)


class CreateBertInstancesFn(beam.DoFn):
    """((dupe, bucket), [(id, segments)]) -> (shard, (sort key, serialized tf.Example))."""

    def __init__(self, seed: int, vocab_tokens: Sequence[str], options: bert.BertOptions, num_shards: int):
        self._seed = seed
        self._vocab_tokens = list(vocab_tokens)
        self._options = options
        self._num_shards = num_shards
        self._vocab = None
        self._spec = features.bert_pretrain_spec(options.max_seq_length, options.max_predictions_per_seq)

    def setup(self):
        self._vocab = bert.BertVocab.from_tokens(self._vocab_tokens)

    def process(self, element):
        key, documents = element
        instances, stats = bucket_instances(key, documents, seed=self._seed, vocab=self._vocab,
                                            options=self._options,
                                            lengths_of=self._options.max_seq_length)
        for sort_key, inst in instances:
            yield shard_of(sort_key, self._num_shards), (sort_key, features.serialize_example(self._spec, inst))
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats)


class WriteShardFn(beam.DoFn):
    """(shard, [(sort key, record) | None]) -> the shard file, written under a temporary name
    and renamed, so a retried or speculative bundle never leaves a half-written shard."""

    def __init__(self, output_dir: str, num_shards: int, compress: bool):
        self._output_dir = output_dir
        self._num_shards = num_shards
        self._compress = compress

    def process(self, element):
        import tensorflow as tf

        shard, items = element
        records = sorted(x for x in items if x is not None)
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
    """Glob -> (document id, [sentences]); stats records in the ``stats`` output."""

    def __init__(self, pattern: str, max_line_bytes: int = text_io.DEFAULT_MAX_LINE_BYTES):
        super().__init__()
        self._pattern = pattern
        self._max_line_bytes = max_line_bytes

    def expand(self, pbegin):
        return (pbegin
                | "Match" >> fileio.MatchFiles(self._pattern)
                | "Open" >> fileio.ReadMatches()
                | "Split" >> beam.ParDo(ReadDocumentsFn(self._pattern, self._max_line_bytes))
                .with_outputs(STATS_TAG, main="documents"))


class CreateBertInstances(beam.PTransform):
    """(document id, [sentences]) -> (shard, (sort key, serialized example)) + stats records.

    Output: a dict with ``instances`` and ``stats`` PCollections.
    """

    def __init__(self, *, vocab_tokens: Sequence[str], lower_case: bool, options: bert.BertOptions,
                 dupe_factor: int, seed: int, num_shards: int, random_document_pool_size: int):
        super().__init__()
        self._vocab_tokens = list(vocab_tokens)
        self._lower_case = lower_case
        self._options = options
        self._dupe_factor = dupe_factor
        self._seed = seed
        self._num_shards = num_shards
        self._pool_size = random_document_pool_size

    def expand(self, documents):
        tokenized = documents | "Tokenize" >> beam.ParDo(
            TokenizeDocumentFn(self._vocab_tokens, self._lower_case)).with_outputs(STATS_TAG, main="docs")
        docs = tokenized.docs
        num_docs = beam.pvalue.AsSingleton(docs | "CountDocuments" >> beam.combiners.Count.Globally())
        seed, dupes, pool = self._seed, self._dupe_factor, self._pool_size

        def to_buckets(doc, n_docs):
            n = num_buckets(n_docs, pool)
            for d in range(dupes):
                yield (d, stable_hash("bucket", seed, d, doc[0]) % n), doc

        instances = (docs
                     | "AssignPools" >> beam.FlatMap(to_buckets, num_docs).with_output_types(
                         Tuple[Tuple[int, int], Tuple[str, List[List[int]]]])
                     | "GroupPools" >> beam.GroupByKey()
                     | "Instances" >> beam.ParDo(CreateBertInstancesFn(
                         self._seed, self._vocab_tokens, self._options, self._num_shards))
                     .with_outputs(STATS_TAG, main="instances"))
        stats = ((tokenized[STATS_TAG], instances[STATS_TAG])
                 | "FlattenStats" >> beam.Flatten())
        return {"instances": instances.instances, "stats": stats}


class WriteShards(beam.PTransform):
    """(shard, (sort key, record)) -> every shard file (empty ones too); yields stats records."""

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

    def __init__(self, path: str, num_shards: int):
        self._path = path
        self._num_shards = num_shards

    def process(self, counters):
        stats = format_stats(counters, self._num_shards)
        with FileSystems.create(self._path) as f:
            f.write(json.dumps(stats, indent=2, sort_keys=True).encode("utf-8"))
        yield stats


def format_stats(counters: Dict[str, int], num_shards: int) -> dict:
    """The human-facing stats.json layout of the summed counters."""
    def group(prefix):
        return {k[len(prefix):]: v for k, v in sorted(counters.items()) if k.startswith(prefix)}

    instances = counters.get("instances", 0)
    real = counters.get("real_tokens", 0)
    per_shard = [counters.get("shard_instances/%05d" % s, 0) for s in range(num_shards)]
    return {
        "files_read": counters.get("files_read", 0),
        "files_skipped": group("files_skipped/"),
        "documents_read": counters.get("documents_read", 0),
        "documents_dropped": group("documents_dropped/"),
        "sentences_read": counters.get("sentences_read", 0),
        "sentences_dropped": group("sentences_dropped/"),
        "lines_skipped": group("lines_skipped/"),
        "instances": instances,
        "instances_per_shard": per_shard,
        "real_tokens": real,
        "masked_tokens": counters.get("masked_tokens", 0),
        # masked / real tokens (specials included): ~0.15 up to rounding and the max_pred cap.
        "masked_token_rate": counters.get("masked_tokens", 0) / real if real else 0.0,
        "nsp_random_fraction": counters.get("nsp_random", 0) / instances if instances else 0.0,
        "random_next_same_document": counters.get("random_next_same_document", 0),
        "sequence_length_histogram": group("seq_len/"),
        "counters": dict(sorted(counters.items())),
    }


def build_pipeline(p: beam.Pipeline, args, vocab_tokens: Sequence[str]) -> None:
    """Adds the whole job to ``p`` (no I/O happens until it runs)."""
    options = bert.BertOptions(
        max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq,
        masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob,
        whole_word_mask=args.whole_word_mask,
    )
    read = p | "ReadDocuments" >> ReadDocuments(args.input, args.max_line_bytes)
    made = read.documents | "CreateBertInstances" >> CreateBertInstances(
        vocab_tokens=vocab_tokens, lower_case=args.do_lower_case, options=options,
        dupe_factor=args.dupe_factor, seed=args.seed, num_shards=args.num_shards,
        random_document_pool_size=args.random_document_pool_size)
    written = made["instances"] | "WriteShards" >> WriteShards(args.output_dir, args.num_shards, args.compress)
    _ = ((read[STATS_TAG], made["stats"], written)
         | "AllStats" >> beam.Flatten()
         | "SumStats" >> beam.CombineGlobally(SumDictsFn())
         | "WriteStats" >> beam.ParDo(WriteJson(FileSystems.join(args.output_dir, "stats.json"), args.num_shards)))


# ---------------------------------------------------------------------------------------------
# Command line


def _bool(text: str) -> bool:
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "y", "t"):
        return True
    if value in ("0", "false", "no", "n", "f"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {text!r}")


def _add_bool(parser, name: str, default: bool, help: str) -> None:
    """--name, --name=true|false and --noname, as absl flags allow."""
    parser.add_argument(f"--{name}", type=_bool, nargs="?", const=True, default=default,
                        help=f"{help} (default {default}; --{name}, --{name}=true|false, --no{name})")
    parser.add_argument(f"--no{name}", dest=name, action="store_false", help=argparse.SUPPRESS)


def make_parser() -> argparse.ArgumentParser:
    head, _, rest = __doc__.partition("\n\n")
    p = argparse.ArgumentParser(
        prog="python -m data_pipelines.make_pretrain",
        description=head + "\n\nAny flag not listed here is passed to Beam's PipelineOptions "
        "(--runner, --direct_num_workers, --direct_running_mode, --project, --region, "
        "--temp_location, --dry_run ...).",
        epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False)  # an abbreviation must never swallow a Beam option
    p.add_argument("--objective", required=True, choices=OBJECTIVES,
                   help="pre-training objective (OBJECTIVES.md); only bert so far")
    p.add_argument("--input", required=True, help="glob of text files (local or gs://): one sentence per "
                   "line, blank line between documents; .gz files are decompressed")
    p.add_argument("--output_dir", required=True, help="directory for shards, info.json, stats.json, COMPLETED")
    p.add_argument("--vocab", required=True, help="WordPiece vocabulary (make_vocab output)")
    p.add_argument("--max_seq_length", type=int, default=128, help="tokens per instance (default %(default)s)")
    p.add_argument("--max_predictions_per_seq", type=int, default=20,
                   help="cap on masked positions per instance (default %(default)s)")
    p.add_argument("--masked_lm_prob", type=float, default=0.15,
                   help="share of tokens to mask, specials included in the count (default %(default)s)")
    p.add_argument("--short_seq_prob", type=float, default=0.1,
                   help="probability that a document's dupe pass targets a random shorter length "
                   "randint(2, max_seq_length-3) (default %(default)s)")
    p.add_argument("--dupe_factor", type=int, default=10,
                   help="passes over the corpus, each with fresh masks and pairs (default %(default)s)")
    _add_bool(p, "whole_word_mask", False, "mask whole words (a word's ## pieces together)")
    _add_bool(p, "do_lower_case", True,
              "lower-case and strip accents before WordPiece; must match the vocabulary (make_vocab --lower_case)")
    p.add_argument("--seed", type=int, default=12345, help="the job's seed (default %(default)s)")
    p.add_argument("--num_shards", type=int, default=4,
                   help="output files; each is sorted in one worker's memory, so keep shards to a few "
                   "hundred MB (default %(default)s)")
    _add_bool(p, "compress", False, "write GZIP-compressed .tfrecord.gz shards")
    _add_bool(p, "overwrite", False, "replace an existing completed output directory")
    p.add_argument("--random_document_pool_size", type=int, default=1000,
                   help="documents per random-next pool: B of a random-next pair is drawn from the other "
                   "documents of a pool of about this size (documents hashed into pools per dupe pass), "
                   "so no worker needs the whole corpus (default %(default)s)")
    p.add_argument("--max_line_bytes", type=int, default=text_io.DEFAULT_MAX_LINE_BYTES,
                   help="longer input lines are skipped and counted as line_too_long (default %(default)s)")
    return p


def parse_args(argv: Optional[Sequence[str]] = None):
    """Our flags and the rest (Beam pipeline options)."""
    parser = make_parser()
    args, beam_args = parser.parse_known_args(argv)
    for name in ("max_seq_length", "max_predictions_per_seq", "dupe_factor", "num_shards",
                 "random_document_pool_size", "max_line_bytes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.max_seq_length < 5:
        parser.error("--max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP])")
    return args, beam_args


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


def _check_input(pattern: str) -> List[str]:
    try:
        matched = FileSystems.match([pattern])[0].metadata_list
    except Exception as e:  # Beam raises BeamIOError for an unreachable scheme or bucket
        raise SystemExit(f"error: cannot list --input={pattern}: {e}") from e
    if not matched:
        raise SystemExit(f"error: --input={pattern} matches no files; check the path/glob")
    return sorted(m.path for m in matched)


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
    pipeline_options = PipelineOptions(beam_args)
    dry_run = _dry_run(pipeline_options)
    runner = pipeline_options.view_as(StandardOptions).runner or "DirectRunner"

    vocab_tokens = tokenizers.load_vocab(args.vocab)  # clear VocabularyError naming the file
    fingerprint = tokenizers.vocab_fingerprint(args.vocab)
    _LOG.info("vocabulary %s: %d tokens (%s)", args.vocab, len(vocab_tokens), fingerprint)

    if dry_run:
        # Nothing is listed, read or written but the job description: a gs:// glob or output
        # dir would need credentials and network.
        p = beam.Pipeline(options=pipeline_options)
        build_pipeline(p, args, vocab_tokens)
        result = p.run()  # DataflowRunner with dry_run translates the job and returns at once
        return {"dry_run": _save_dataflow_job(result, args.output_dir)}

    files = _check_input(args.input)
    _LOG.info("input %s: %d files", args.input, len(files))
    _prepare_output_dir(args.output_dir, args.overwrite)

    _LOG.info("running %s: objective=%s dupe_factor=%d max_seq_length=%d num_shards=%d -> %s",
              runner, args.objective, args.dupe_factor, args.max_seq_length, args.num_shards, args.output_dir)
    p = beam.Pipeline(runner=make_runner(pipeline_options), options=pipeline_options)
    build_pipeline(p, args, vocab_tokens)
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

    spec = features.bert_pretrain_spec(args.max_seq_length, args.max_predictions_per_seq)
    info = {
        "format_version": features.FORMAT_VERSION,
        "objective": args.objective,
        "split": SPLIT,
        "arguments": {**vars(args), "beam_args": list(beam_args)},
        "tokenizer": "wordpiece",
        "lower_case": args.do_lower_case,
        "vocab": args.vocab,
        "vocab_size": len(vocab_tokens),
        "vocab_fingerprint": fingerprint,
        "feature_spec": features.spec_to_json(spec),
        "max_seq_length": args.max_seq_length,
        "max_predictions_per_seq": args.max_predictions_per_seq,
        "compression": "GZIP" if args.compress else None,
        "files": [posixpath.basename(f) for f in shard_files],
        "instances": {"total": stats["instances"], "per_shard": stats["instances_per_shard"]},
    }
    _write_text(FileSystems.join(args.output_dir, "info.json"), json.dumps(info, indent=2, sort_keys=True))
    _write_text(FileSystems.join(args.output_dir, "COMPLETED"), "")

    _LOG.info("files read %d, documents read %d (dropped %s), lines skipped %s",
              stats["files_read"], stats["documents_read"], stats["documents_dropped"], stats["lines_skipped"])
    _LOG.info("instances %d in %d shards, masked-token rate %.4f, NSP random fraction %.4f",
              stats["instances"], args.num_shards, stats["masked_token_rate"], stats["nsp_random_fraction"])
    print(f"wrote {stats['instances']} instances to {args.output_dir} "
          f"({args.num_shards} shards, stats.json, info.json, COMPLETED)")
    return stats


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        run(argv)
    except tokenizers.VocabularyError as e:
        raise SystemExit(f"error: {e}") from e


if __name__ == "__main__":
    main(sys.argv[1:])
