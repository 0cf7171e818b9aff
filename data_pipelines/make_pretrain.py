"""Pre-training TFRecords with Apache Beam: `python -m data_pipelines.make_pretrain --objective=NAME`.

Objectives (data_pipelines/objectives/, docs/objectives.md): bert, albert, roberta, spanbert, ernie,
electra, xlnet, t5, bart, gpt2; `--objective=NAME --help` lists an objective's own flags
and their published defaults. Input (--input): text files (local or gs://) with one sentence
per line and a blank line between documents; JSONL files (one document per line, --text_field,
split into sentences by data_pipelines/sources.py); or tfds:NAME[/CONFIG][:SPLIT] read from a
locally prepared tensorflow-datasets dataset. Output in --output_dir:
``train-NNNNN-of-MMMMM.tfrecord[.gz]`` (every shard, even empty ones), ``stats.json``,
``info.json`` and ``COMPLETED`` (last, only after the pipeline succeeded).

The job (DirectRunner by default; any Beam runner, every unknown flag goes to Beam's
PipelineOptions: --runner, --direct_num_workers, --direct_running_mode, --project, ...):

  ReadDocuments        match the glob (or the tfds shards); per file, read documents in order
                       (bad lines, empty files and documents are counted and skipped), cut them
                       into chunks of pool_size/8 consecutive documents, tokenize each chunk in
                       one batched call (WordPiece: the tokenizers library's BERT pipeline,
                       without TensorFlow, or the graph module with --in_graph_tokenizer;
                       SentencePiece / byte-level BPE: tensorflow-text or keras-hub ops) and
                       write it to a work file
  CreateInstances      per dupe pass, chunks are hashed into pools of ~pool_size documents;
                       each pool is turned into instances by the objective's plain functions,
                       serialized, sorted by (shard, key) and written to one work file
  WriteShards          per shard, the pools' key-sorted ranges are merged (k-way, streaming)
                       into one TFRecord file (write_tfrecords; temp name, then rename)
  stats                per-file / per-pool / per-shard counters combined into stats.json

What the run tells its user: one warning when the vocabulary's casing contradicts
--lower_case (text/casing.py); the first few skipped lines of each reason by file
and line, then only counts, and the count per reason at the end (sources.SkipLog; stats.json);
a progress line every --progress_seconds, counted from the work files below
(data_pipelines/progress.py).

Bulk data never travels through the runner: tokenized chunks and serialized instances go
through work files in ``<output_dir>/_work-<run id>/`` (Beam FileSystems, so gs:// works),
and the PCollections carry only descriptors (chunk ids, file ranges, counters). A worker holds
one chunk, one pool, or one block per pool range while merging a shard, so memory does not
grow with the corpus, whatever the runner; the work directory is removed when the run ends
(and by the next run over the same output_dir if the process was killed). The output
directory's lifecycle (LOCK against a second run, COMPLETED last and never for zero
instances) is data_pipelines/output.py's.

Random-next documents. The original draws B from any document of the whole corpus, which needs
the corpus in one process. Here, for each dupe pass d, chunk c goes to pool
``sha256(seed, d, c) % num_pools`` with ``num_pools = ceil(num_chunks / 8)`` (num_chunks
counted by Beam), and B is drawn uniformly among the other documents of the pool: ~pool_size
documents from 8 places of the corpus, regrouped in every dupe pass, so no worker ever holds
more than that. A pool with a single document (tiny corpora) draws B from that same document;
this is counted as ``random_next_same_document``.

Determinism. Every random draw comes from a numpy Generator seeded with
``sha256(seed, document id, dupe index)``; a document id is the file path relative to the
glob's base directory plus the document's index in the file. Buckets are sorted by document id
before use and shards by instance key, so the bytes written do not depend on the runner, the
number of workers, bundle boundaries or retries. The key order is also the fixed-seed shuffle
of the instances that the original does in memory.

Scale notes: a shard is merged from the pools' sorted ranges, reading 64 KiB of each range at
a time, so a merge holds 64 KiB per (dupe pass, pool) (a 10 GB corpus at the default pool size
and dupe_factor: about 100k ranges, 6 GB; raise --random_document_pool_size for such corpora,
or lower dupe_factor and run several seeds); choose --num_shards so that a shard
is a few hundred MB at most. On Dataflow (or another remote runner) the job writes its workers'
requirements itself: the distributions its per-element code imports for this --tokenizer and
these paths, pinned to the launcher's versions, and this package as a wheel without
dependencies (data_pipelines/worker_requirements.py; with a --requirements_file, --setup_file
or --sdk_container_image of yours it adds no requirements, with an --extra_package no wheel;
BUILD.md, "Running the data pipelines on Dataflow"). Keep --vocab readable at submission time
(its fingerprint goes into info.json). ``--runner=DataflowRunner --dry_run=True`` builds the
job without submitting it and writes its description (the Dataflow job and the portable
pipeline proto) to ``<output_dir>/dataflow_job.json`` (stdout when output_dir is not local).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from text import flags
from data_pipelines import cli, input_rules, objectives
from data_pipelines.objectives import base

# Beam is imported by run() and build_pipeline, once the flags are parsed: --help and usage
# errors answer before Beam loads (1.8 s -> 0.3 s).
if TYPE_CHECKING:
    import apache_beam as beam

    from text import vocab as text_vocab

_LOG = logging.getLogger("data_pipelines.make_pretrain")

PROG = "python -m data_pipelines.make_pretrain"


def make_parser(objective: Optional[base.Objective] = None) -> argparse.ArgumentParser:
    """The whole command line: the common flags, then ``objective``'s own (None: before the
    objective is known)."""
    p = cli.new_parser(PROG, __doc__, "`--objective=NAME --help` lists that objective's own flags.")
    p.add_argument("--objective", required=True, choices=objectives.NAMES,
                   help="pre-training objective (docs/objectives.md): "
                   + ", ".join(objectives.NAMES))
    cli.add_input_flags(p, "glob of text files (local or gs://; .gz decompressed): one sentence per line, blank "
                         "line between documents; or JSONL files (one document per line, see --text_field); or "
                         "tfds:NAME[/CONFIG][:SPLIT] for a tensorflow-datasets dataset prepared in --tfds_data_dir")
    p.add_argument("--input_format", choices=("auto", *input_rules.FORMATS), default="auto",
                   help="auto: tfds: prefix -> tfds, *.jsonl / *.json(.gz) -> jsonl, else text (default %(default)s)")
    p.add_argument("--text_field", default="text",
                   help="JSONL / tfds field holding a document's text; it is split into sentences at newlines "
                   "and at . ! ? followed by a capitalised word (data_pipelines/sources.py) (default %(default)s)")
    p.add_argument("--units_field", default=None,
                   help="JSONL field with [start, end) character spans of phrases/entities for unit masking "
                   "(ernie); without it ernie uses its documented heuristic")
    cli.add_output_flags(p)
    cli.add_vocab_flags(
        p, "vocabulary from data_pipelines.make_vocab",
        "tokenizer kind of --vocab (default: the objective's: "
        + ", ".join(f"{n}={_objective_tokenizer(n)}" for n in objectives.NAMES) + ")",
        "(make_vocab --lower_case). A cased --vocab (pieces with capitals) with lower-casing on, or an "
        "uncased-looking one with it off, gets one warning naming the vocabulary and what to pass "
        "(text/casing.py); the run goes on, since lower-casing text for a cased model can be meant")
    p.add_argument("--max_seq_length", type=int, default=128, help="tokens per instance (default %(default)s)")
    p.add_argument("--dupe_factor", type=int, default=10,
                   help="passes over the corpus, each with fresh masks and pairs (default %(default)s)")
    p.add_argument("--seed", type=int, default=12345, help="the job's seed (default %(default)s)")
    p.add_argument("--num_shards", type=int, default=4,
                   help="output files; each is sorted in one worker's memory, so keep shards to a few "
                   "hundred MB (default %(default)s)")
    flags.add_bool(p, "in_graph_tokenizer", False,
                   "wordpiece: tokenize with the graph module of training and serving (text.wordpiece) "
                   "instead of the tokenizers library's BERT pipeline. Same ids (tested), but every worker process "
                   "imports TensorFlow (about 4.4 CPU-s and 0.7 GB). The other tokenizer kinds always use their "
                   "tensorflow-text / keras-hub op")
    p.add_argument("--random_document_pool_size", type=int, default=1000,
                   help="documents per pool: random-next/SOP partners are drawn from, and packing objectives "
                   "concatenate, the documents of a pool of about this size (chunks of pool_size/8 consecutive "
                   "documents hashed into pools per dupe pass), so no worker needs the whole corpus "
                   "(default %(default)s)")
    p.add_argument("--max_line_bytes", type=int, default=input_rules.DEFAULT_MAX_LINE_BYTES,
                   help="longer input lines are skipped and counted as line_too_long (default %(default)s); "
                   f"skipped lines are named in the log for the first {input_rules.SKIPPED_LINES_SHOWN} of each reason "
                   "(per worker), then counted: the count per reason is logged at the end and kept in "
                   "stats.json")
    p.add_argument("--progress_seconds", type=float, default=10.0,
                   help="log the work done so far (chunks tokenized, pools of instances made, shards "
                   "written) every this many seconds while the pipeline runs; 0 turns it off (default "
                   "%(default)s)")
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


def parse_args(argv: Optional[Sequence[str]] = None) -> Tuple[argparse.Namespace, List[str]]:
    """Our flags (the common ones and the --objective's own) and the rest (Beam's pipeline
    options); usage errors exit with status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    name, objective = cli.chosen(argv, "objective", objectives.NAMES, objectives.get, PROG)
    parser = make_parser(objective)
    args, beam_args = cli.split_args(parser, argv, hint=f"or of --objective={name}")
    cli.check_positive(parser, args, ("max_seq_length", "dupe_factor", "num_shards",
                                       "random_document_pool_size", "max_line_bytes"))
    cli.check_progress_seconds(parser, args)
    args.tokenizer = args.tokenizer or objective.tokenizer
    args.input_format = input_rules.input_format(args.input, args.input_format)
    try:
        objective.make_options(args)
    except ValueError as e:
        parser.error(f"--objective={name}: {e}")
    return args, beam_args


def build_pipeline(p: beam.Pipeline, args, options, vocab: text_vocab.Vocab, work_dir: str) -> None:
    """Adds the job's transforms to ``p`` (nothing is read or written until it runs); bulk data
    goes through ``work_dir``."""
    import apache_beam as beam
    from apache_beam.io.filesystems import FileSystems

    from data_pipelines.counters import SumDictsFn
    from data_pipelines.pretrain_transforms import (
        STATS_TAG, CreateInstances, ReadDocuments, WriteJson, WriteShards, documents_per_chunk)

    read = p | "ReadDocuments" >> ReadDocuments(
        args.input, objective=args.objective, tokenizer_kind=args.tokenizer, vocab_path=args.vocab,
        vocab_size=vocab.size, lower_case=args.do_lower_case, work_dir=work_dir,
        docs_per_chunk=documents_per_chunk(args.random_document_pool_size),
        max_line_bytes=args.max_line_bytes, input_format=args.input_format, text_field=args.text_field,
        units_field=args.units_field, tfds_data_dir=args.tfds_data_dir,
        tfds_shards=getattr(args, "tfds_shards", ()), in_graph_tokenizer=args.in_graph_tokenizer)
    made = read.chunks | "CreateInstances" >> CreateInstances(
        objective=args.objective, vocab=vocab, options=options, dupe_factor=args.dupe_factor, seed=args.seed,
        num_shards=args.num_shards, random_document_pool_size=args.random_document_pool_size,
        lengths_of=args.max_seq_length, work_dir=work_dir, unigram=read.unigram)
    written = made["ranges"] | "WriteShards" >> WriteShards(args.output_dir, args.num_shards, args.compress)
    _ = ((read[STATS_TAG], made["stats"], written)
         | "AllStats" >> beam.Flatten()
         | "SumStats" >> beam.CombineGlobally(SumDictsFn())
         | "WriteStats" >> beam.ParDo(WriteJson(FileSystems.join(args.output_dir, "stats.json"),
                                                args.num_shards, args.objective)))


def run(argv: Optional[Sequence[str]] = None) -> dict:
    """Runs the job; returns its stats (for a dry run, {"dry_run": path or None}). Bad input or
    an unusable output directory ends it with SystemExit("error: ..."); an unusable --vocab
    raises VocabularyError."""
    args, beam_args = parse_args(argv)
    from data_pipelines import jobs, output  # Beam loads here, once the flags are parsed
    from data_pipelines.pretrain_transforms import SPLIT, WORK_FILES, documents_per_chunk

    with cli.exit_on(*jobs.BAD_INPUT):
        pipeline_options, dry_run, tokenizer = jobs.start(args, beam_args, _LOG)
        objective = objectives.get(args.objective)
        options = objective.make_options(args)

        def build(p, work_dir):
            build_pipeline(p, args, options, tokenizer.vocab, work_dir)

        if dry_run:
            return jobs.save_dry_run(args, pipeline_options, build)

        jobs.list_input(args, _LOG)  # InputError now if --input matches nothing (tfds: sets args.tfds_shards)
        with output.OutputLock(args.output_dir, "make_pretrain"):
            stats = jobs.run_pipeline(args, SPLIT, f"objective={args.objective}", pipeline_options, build,
                                      WORK_FILES, _progress(args), _LOG,
                                      documents_per_chunk(args.random_document_pool_size))

            shard_files = jobs.shard_files(args, SPLIT)
            info = {
                **jobs.info_fields(args, beam_args, SPLIT, tokenizer, options, objective.feature_spec(options),
                                   shard_files, stats),
                # What a reader checks the data against its config with (garden/data.py).
                "objective": args.objective,
                "recipe": objective.recipe,
                "max_seq_length": args.max_seq_length,
                "max_predictions_per_seq": getattr(args, "max_predictions_per_seq", None),
            }
            output.complete(args.output_dir, info, shard_files, stats["instances"], summary=(
                f" (files read {stats['files_read']}, documents read {stats['documents_read']}, dropped "
                f"{stats['documents_dropped']}, lines skipped {stats['lines_skipped']})"))

    _LOG.info("files read %d, documents read %d (dropped %s), lines skipped %s",
              stats["files_read"], stats["documents_read"], stats["documents_dropped"], stats["lines_skipped"])
    if stats["lines_skipped"]:
        _LOG.warning("skipped lines per reason: %s (the first %d of each reason per worker are named above; "
                     "stats.json keeps the counts)", ", ".join(f"{r} {n}" for r, n in stats["lines_skipped"].items()),
                     input_rules.SKIPPED_LINES_SHOWN)
    print(f"wrote {stats['instances']} {args.objective} instances to {args.output_dir} "
          f"({args.num_shards} shards, stats.json, info.json, COMPLETED)")
    return stats


def _progress(args):
    """What a progress line says of the work files and finished shards counted so far."""
    from data_pipelines.pretrain_transforms import documents_per_chunk

    return lambda n: (f"{n['chunks']} chunks of up to "
                      f"{documents_per_chunk(args.random_document_pool_size)} documents read and tokenized, "
                      f"{n['pools']} pools of instances made (dupe passes x pools), "
                      f"{n['shards']} of {args.num_shards} shards written")


def main(argv: Optional[Sequence[str]] = None) -> None:
    """The command line (cli.main)."""
    cli.main(run, argv)


if __name__ == "__main__":
    main()
