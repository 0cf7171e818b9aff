"""The transforms of the pre-training data job (data_pipelines/make_pretrain.py, whose docstring
describes the job): per-element functions, the DoFns, and the composites ReadDocuments,
CreateInstances and WriteShards.

They live apart from the command line because ``python -m data_pipelines.make_pretrain`` runs
that module as ``__main__``, and Beam pickles a class of ``__main__`` by value with every
global it names, which a remote worker cannot always rebuild; the classes here are pickled by
reference to this module.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import heapq
import json
import math
import pickle
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from text import features, tokenizers
from text import vocab as text_vocab
from data_pipelines import objectives, output, sources
from data_pipelines.counters import count
from data_pipelines.objectives import base
from data_pipelines.workfiles import encode_entries, gc_paused, read_entries

SPLIT = "train"
STATS_TAG = "stats"


# ---------------------------------------------------------------------------------------------
# Per-element helpers


def stable_hash(*parts) -> int:
    """64-bit hash of the parts' string forms; the same on every machine and Python run."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def instance_sort_key(seed: int, dupe: int, instance_key: str) -> str:
    """Unique, stable key of an instance; its hash part decides the shard and the order.
    (``stable_hash('instance', seed, dupe, instance_key)`` in hex, written out: it runs once
    per instance.)"""
    digest = hashlib.sha256(f"instance\x1f{seed}\x1f{dupe}\x1f{instance_key}".encode()).hexdigest()
    return f"{digest[:16]}|{dupe}|{instance_key}"


def shard_of(sort_key: str, num_shards: int) -> int:
    return int(sort_key[:16], 16) % num_shards


def shard_name(output_dir: str, shard: int, num_shards: int, compress: bool) -> str:
    return output.shard_name(output_dir, SPLIT, shard, num_shards, compress)


def num_buckets(num_items: int, per_bucket: int) -> int:
    return max(1, math.ceil(num_items / per_bucket))


def pool_of(seed: int, dupe: int, chunk_id: str, pools: int) -> int:
    return stable_hash("bucket", seed, dupe, chunk_id) % pools


def length_bin(length: int, max_seq_length: int) -> str:
    width = max(1, math.ceil(max_seq_length / 16))
    lo = (length - 1) // width * width + 1
    return f"{lo:04d}-{lo + width - 1:04d}"


# The feature whose non-padding length is an instance's length in the histogram.
_LENGTH_FEATURES = ("input_ids", "inputs", "input_k")


# Per-instance feature dicts are serialized this many at a time: as Python lists they take
# far more memory than their bytes (a 512-token instance's few features: ~8x their serialized
# size), so a pool's dicts are not all held at once.
_SERIALIZE_EVERY = 256


def pool_instances(key, docs: Sequence[base.Doc], *, objective: base.Objective, seed: int,
                   vocab: text_vocab.Vocab, options, lengths_of: int, spec: features.Spec,
                   unigram_counts: Optional[np.ndarray] = None) -> tuple:
    """Instances of one (dupe pass, pool): ([(sort key, serialized tf.Example)], stats dict).

    ``docs``: the pool's documents in any order; they are sorted by id first, because the
    order in which a runner groups them is not deterministic and ids are.
    """
    dupe, _ = key
    docs = sorted(docs, key=lambda d: d.id)
    ctx = base.PoolContext(seed, dupe, vocab, options, unigram_counts)
    out: List[Tuple[str, bytes]] = []
    pending_keys, pending = [], []  # per-instance dicts, serialized together

    def flush():
        out.extend(zip(pending_keys, features.serialize_examples(spec, pending)))
        pending_keys.clear()
        pending.clear()

    for item in objective.create_instances(docs, ctx):
        if isinstance(item, base.InstanceBatch):
            flush()
            keys = [instance_sort_key(seed, dupe, k) for k in item.keys]
            out.extend(zip(keys, features.serialize_columns(spec, item.columns, item.lengths)))
            ctx.count("instances", len(item))
            for name in _LENGTH_FEATURES:
                if name in item.columns:
                    n = (item.lengths[name] if name == "input_ids"
                         else (np.asarray(item.columns[name]) != 0).sum(axis=1))
                    for length, instances in collections.Counter(np.maximum(n, 1).tolist()).items():
                        ctx.count("seq_len/" + length_bin(length, lengths_of), instances)
                    break
            continue
        instance_key, feats = item
        pending_keys.append(instance_sort_key(seed, dupe, instance_key))
        pending.append(feats)
        if len(pending) >= _SERIALIZE_EVERY:
            flush()
        ctx.count("instances")
        for name in _LENGTH_FEATURES:
            if name in feats:
                n = sum(1 for t in feats[name] if t != 0) if name != "input_ids" else len(feats[name])
                ctx.count("seq_len/" + length_bin(max(n, 1), lengths_of))
                break
    flush()
    stats: Dict[str, int] = {}
    for name, n in ctx.stats.items():
        count(stats, name, n)
    return out, stats


def tokenize_documents(tokenizer, objective: base.Objective,
                       documents: Sequence[Tuple[str, Sequence[str], Optional[Sequence]]],
                       stats: Dict[str, int], in_graph: bool = False) -> List[base.Doc]:
    """(id, sentences, units) documents -> base.Docs of non-empty piece-id segments.

    All sentences of the batch go to the tokenizer in one call (a call per document costs
    about 4x more per MB: see benchmarks/README.md, Tokenizers). Sentences without pieces and
    documents left empty are dropped and counted in ``stats``.
    """
    flat = [s for _, sentences, _ in documents for s in sentences]
    if objective.wants_units:
        ids, starts, ends = tokenizer.tokenize_with_offsets(flat)
    else:
        ids = tokenizer.tokenize_in_graph(flat) if in_graph else tokenizer.tokenize(flat)
    out: List[base.Doc] = []
    k = 0
    for doc_id, sentences, units in documents:
        segments, doc_units = [], []
        for i in range(len(sentences)):
            pieces = ids[k + i]
            if not len(pieces):
                count(stats, "sentences_dropped/no_tokens")
                continue
            segments.append(pieces if type(pieces) is list else list(pieces))  # Python ints already
            if objective.wants_units:
                annotated = units[i] if units is not None else None
                found = objective.find_units(sentences[i], starts[k + i], ends[k + i], annotated)
                count(stats, "units_annotated" if annotated is not None else "units_heuristic", len(found))
                doc_units.append([(int(a), int(b)) for a, b in found])
        k += len(sentences)
        if not segments:
            count(stats, "documents_dropped/no_tokens")
            continue
        out.append(base.Doc(doc_id, segments, doc_units if objective.wants_units else None))
    return out


# ---------------------------------------------------------------------------------------------
# Work files. Bulk data (tokenized documents, serialized instances) moves between the stages
# through files under ``<output_dir>/_work-<run id>/``, written and read with Beam's
# FileSystems (local or gs://); the PCollections carry only small descriptors. So no runner,
# the in-process DirectRunner included, ever holds the corpus: a worker holds one chunk of
# documents, one pool, or the merge buffers of one shard.

# Chunk of documents: what one source (file or tfds shard) contributes, a run of consecutive
# documents. A pool is made of whole chunks: POOL_CHUNKS chunks of pool_size / POOL_CHUNKS
# documents, so a random-next partner comes from 8 places of the corpus (hashed anew per dupe
# pass), and a tokenizer call sees a few thousand sentences.
POOL_CHUNKS = 8


# The work files of each stage (TokenizeChunksFn writes the chunks, CreateInstancesFn the pools),
# which the progress lines count: stage -> (subdirectory of the work directory, glob).
WORK_FILES = {"chunks": ("chunks", "*.pkl"), "pools": ("pools", "*.bin")}


def documents_per_chunk(pool_size: int) -> int:
    return max(1, pool_size // POOL_CHUNKS)


def chunks_per_pool(pool_size: int) -> int:
    return max(1, math.ceil(pool_size / documents_per_chunk(pool_size)))


def write_chunk(path: str, docs: Sequence[base.Doc]) -> None:
    output.write_atomic(path, pickle.dumps([(d.id, d.segments, d.units) for d in docs], protocol=pickle.HIGHEST_PROTOCOL))


def read_chunk(path: str) -> List[base.Doc]:
    return [base.Doc(doc_id, segments, units) for doc_id, segments, units in pickle.loads(output.read_bytes(path))]


# ---------------------------------------------------------------------------------------------
# DoFns


class TokenizeChunksFn(beam.DoFn):
    """An input element -> (chunk id, chunk file, documents) per chunk of ``docs_per_chunk``
    consecutive documents, tokenized with one batched call per chunk and written to
    ``<work_dir>/chunks/``; stats on STATS_TAG; per-chunk piece counts on "unigram" when the
    objective wants the corpus unigram distribution."""

    def __init__(self, source: sources.DocumentSource, objective_name: str, load_tokenizer: Callable[[], Any],
                 work_dir: str, docs_per_chunk: int, vocab_size: int, in_graph: bool = False):
        self._source = source
        self._objective_name = objective_name
        self._load_tokenizer = load_tokenizer
        self._work_dir = work_dir
        self._docs_per_chunk = docs_per_chunk
        self._vocab_size = vocab_size
        self._in_graph = in_graph
        self._tokenizer = None
        self._objective = None

    def setup(self):
        self._tokenizer = self._load_tokenizer()
        self._objective = objectives.get(self._objective_name)

    def process(self, element):
        stats: Dict[str, int] = {}
        source_id, documents = self._source.documents(element, stats)
        batch, index = [], 0
        for document in documents:
            batch.append(document)
            if len(batch) == self._docs_per_chunk:
                yield from self._flush(source_id, index, batch, stats)
                batch, index = [], index + 1
        if batch:
            yield from self._flush(source_id, index, batch, stats)
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats)

    def _flush(self, source_id, index, batch, stats):
        with gc_paused():
            docs = tokenize_documents(self._tokenizer, self._objective, batch, stats, self._in_graph)
        if not docs:
            return
        chunk_id = f"{source_id}#{index:06d}"
        path = FileSystems.join(self._work_dir, "chunks", f"{stable_hash('chunk', chunk_id):016x}.pkl")
        write_chunk(path, docs)
        count(stats, "chunks")
        yield chunk_id, path, len(docs)
        if self._objective.wants_unigram:
            pieces = np.fromiter((t for d in docs for s in d.segments for t in s), np.int64)
            yield beam.pvalue.TaggedOutput("unigram", np.bincount(pieces, minlength=self._vocab_size)[:self._vocab_size])


class SumArraysFn(beam.CombineFn):
    """Sums the per-chunk piece counts into the corpus counts (a vector of vocab_size int64)."""

    def __init__(self, vocab_size: int):
        self._size = vocab_size

    def create_accumulator(self):
        return np.zeros(self._size, np.int64)

    def add_input(self, acc, counts):
        acc += counts
        return acc

    def merge_accumulators(self, accs):
        out = np.zeros(self._size, np.int64)
        for acc in accs:
            out += acc
        return out

    def extract_output(self, acc):
        return acc


class CreateInstancesFn(beam.DoFn):
    """((dupe, pool), [(chunk id, chunk file)]) -> (shard, (pool file, offset, length, count))
    for each shard the pool's instances go to.

    The pool's instances are serialized, sorted by (shard, sort key) and written as one file
    to ``<work_dir>/pools/``; a shard's records are one contiguous, key-sorted range of it.
    """

    def __init__(self, objective_name: str, seed: int, vocab: text_vocab.Vocab, options, num_shards: int,
                 lengths_of: int, work_dir: str):
        self._objective_name = objective_name
        self._seed = seed
        self._vocab = vocab
        self._options = options
        self._num_shards = num_shards
        self._lengths_of = lengths_of
        self._work_dir = work_dir
        self._objective = None
        self._spec = None

    def setup(self):
        self._objective = objectives.get(self._objective_name)
        self._spec = self._objective.feature_spec(self._options)

    def process(self, element, unigram_counts=None):
        with gc_paused():
            outputs = self._pool(element, unigram_counts)
        yield from outputs

    def _pool(self, element, unigram_counts):
        key, chunks = element
        docs = [doc for _, path in sorted(chunks) for doc in read_chunk(path)]
        records, stats = pool_instances(key, docs, objective=self._objective, seed=self._seed,
                                        vocab=self._vocab, options=self._options, lengths_of=self._lengths_of,
                                        spec=self._spec, unigram_counts=unigram_counts)
        entries = sorted((shard_of(sort_key, self._num_shards), sort_key, record) for sort_key, record in records)
        del records
        dupe, pool = key
        path = FileSystems.join(self._work_dir, "pools", f"{dupe:05d}-{pool:07d}.bin")
        ranges, parts, offset = [], [], 0
        start = 0
        while start < len(entries):
            shard = entries[start][0]
            end = start
            while end < len(entries) and entries[end][0] == shard:
                end += 1
            data = encode_entries([(k, r) for _, k, r in entries[start:end]])
            parts.append(data)
            ranges.append((shard, (path, offset, len(data), end - start)))
            offset += len(data)
            start = end
        output.write_atomic(path, b"".join(parts))
        return ranges + [beam.pvalue.TaggedOutput(STATS_TAG, stats)]


class WriteShardFn(output.WriteShardFn):
    """(shard, [(pool file, offset, length, count) | None]) -> the shard file: the pools' key-sorted
    ranges merged (a k-way merge, so memory holds one block per range, not the shard), written
    by ``output.WriteShardFn`` (temporary name, count checked, renamed)."""

    announced_by = "pools"

    def records(self, shard, ranges):
        merged = heapq.merge(*(read_entries(path, offset, length) for path, offset, length, _ in ranges))
        return (record for _, record in merged)


# ---------------------------------------------------------------------------------------------
# Composite transforms


class ReadDocuments(beam.PTransform):
    """Input -> (chunk id, chunk file, documents) descriptors: documents read, tokenized and
    written to ``<work_dir>/chunks/`` a chunk at a time. Outputs: ``chunks``, ``stats`` and
    ``unigram`` (per-chunk piece counts, only when the objective wants them).

    ``pattern``: a glob of text/JSONL files, or ``tfds:NAME[/CONFIG][:SPLIT]`` (with
    ``tfds_data_dir``) for a tensorflow-datasets dataset prepared locally.
    """

    def __init__(self, pattern: str, *, objective: str, tokenizer_kind: str, vocab_path: str, vocab_size: int,
                 lower_case: bool, work_dir: str, docs_per_chunk: int,
                 max_line_bytes: int = sources.DEFAULT_MAX_LINE_BYTES, input_format: str = "text",
                 text_field: str = "text", units_field: Optional[str] = None,
                 tfds_data_dir: Optional[str] = None, tfds_shards: Sequence[int] = (),
                 in_graph_tokenizer: bool = False):
        super().__init__()
        self._sources = sources.MatchSources(pattern, input_format, tfds_data_dir, tfds_shards)
        self._fn = TokenizeChunksFn(
            sources.DocumentSource(pattern, max_line_bytes, input_format, text_field, units_field),
            objective, functools.partial(tokenizers.load_tokenizer, tokenizer_kind, vocab_path, lower_case=lower_case),
            work_dir, docs_per_chunk, vocab_size, in_graph_tokenizer)

    def expand(self, pbegin):
        return (pbegin
                | "Sources" >> self._sources
                | "TokenizeChunks" >> beam.ParDo(self._fn).with_outputs(STATS_TAG, "unigram", main="chunks"))


class CreateInstances(beam.PTransform):
    """(chunk id, chunk file, documents) -> (shard, (pool file, offset, length, count)); stats.

    Per dupe pass d, chunk c goes to pool ``sha256(seed, d, c) % num_pools`` with
    ``num_pools = ceil(num_chunks / chunks_per_pool)``; each pool's instances are made by the
    objective and written to one pool file. Output: a dict with ``ranges`` and ``stats``.
    """

    def __init__(self, *, objective: str, vocab: text_vocab.Vocab, options, dupe_factor: int, seed: int,
                 num_shards: int, random_document_pool_size: int, lengths_of: int, work_dir: str,
                 unigram=None):
        super().__init__()
        self._objective = objective
        self._vocab = vocab
        self._options = options
        self._dupe_factor = dupe_factor
        self._seed = seed
        self._num_shards = num_shards
        self._pool_size = random_document_pool_size
        self._lengths_of = lengths_of
        self._work_dir = work_dir
        self._unigram = unigram

    def expand(self, chunks):
        num_chunks = beam.pvalue.AsSingleton(chunks | "CountChunks" >> beam.combiners.Count.Globally())
        seed, dupes, per_pool = self._seed, self._dupe_factor, chunks_per_pool(self._pool_size)

        def to_pools(chunk, n_chunks):
            chunk_id, path, _ = chunk
            n = num_buckets(n_chunks, per_pool)
            for d in range(dupes):
                yield (d, pool_of(seed, d, chunk_id, n)), (chunk_id, path)

        side = {}
        if objectives.get(self._objective).wants_unigram:
            side["unigram_counts"] = beam.pvalue.AsSingleton(
                self._unigram | "CountPieces" >> beam.CombineGlobally(SumArraysFn(self._vocab.size)))
        made = (chunks
                | "AssignPools" >> beam.FlatMap(to_pools, num_chunks).with_output_types(Tuple[Tuple[int, int], Any])
                | "GroupPools" >> beam.GroupByKey()
                | "Instances" >> beam.ParDo(CreateInstancesFn(
                    self._objective, self._seed, self._vocab, self._options, self._num_shards,
                    self._lengths_of, self._work_dir), **side)
                .with_outputs(STATS_TAG, main="ranges"))
        return {"ranges": made.ranges, "stats": made[STATS_TAG]}


class WriteShards(beam.PTransform):
    """(shard, pool file range) -> every shard file (empty ones too); yields stats records."""

    def __init__(self, output_dir: str, num_shards: int, compress: bool):
        super().__init__()
        self._output_dir = output_dir
        self._num_shards = num_shards
        self._compress = compress

    def expand(self, ranges):
        all_shards = (ranges.pipeline
                      | "ShardIds" >> beam.Create([(s, None) for s in range(self._num_shards)]))
        return ((ranges, all_shards)
                | "WithEmptyShards" >> beam.Flatten().with_output_types(Tuple[int, Any])
                | "GroupShards" >> beam.GroupByKey()
                | "Write" >> beam.ParDo(WriteShardFn(self._output_dir, SPLIT, self._num_shards, self._compress)))


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
    if objective is not None:
        stats.update(objective.summarize(counters))
    return stats
