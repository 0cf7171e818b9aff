"""Fine-tuning TFRecords with Apache Beam: `python -m data_pipelines.make_finetune --task=KIND`.

Kinds (text/finetune/, docs/tasks.md): question_answering (SQuAD v1.1 / v2.0 JSON -> one record
per context window: doc_stride, max_query_length, max-context flags, answers re-aligned to
pieces), tagging (CoNLL-2003 -> first-sub-token labels). `--task=KIND --help` lists a kind's own
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
import functools
import logging
import sys
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from text import finetune, tokenizers, vocab_files
from text.finetune import FinetuneDataError
from text.finetune import base as finetune_base
from data_pipelines import cli

# Beam is imported by run() and build_pipeline, once the flags are parsed: --help and usage
# errors answer before Beam loads.
if TYPE_CHECKING:
    import apache_beam as beam

_LOG = logging.getLogger("data_pipelines.make_finetune")

PROG = "python -m data_pipelines.make_finetune"


def make_parser(kind: Optional[finetune_base.FinetuneKind] = None) -> argparse.ArgumentParser:
    """The whole command line: the common flags, then ``kind``'s own (None: before the kind
    is known)."""
    p = cli.new_parser(PROG, __doc__, "`--task=KIND --help` lists that kind's own flags.")
    p.add_argument("--task", required=True, choices=sorted(finetune.KINDS),
                   help="task kind (docs/tasks.md): " + ", ".join(sorted(finetune.KINDS)))
    cli.add_input_flags(p, "glob of the kind's files (local or gs://; SQuAD JSON, CoNLL text), or "
                         "tfds:NAME[/CONFIG][:SPLIT] for a tensorflow-datasets dataset prepared in --tfds_data_dir")
    cli.add_output_flags(p)
    cli.add_vocab_flags(
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


def parse_args(argv: Optional[Sequence[str]] = None) -> Tuple[argparse.Namespace, List[str]]:
    """Our flags (the common ones and the --task's own) and the rest (Beam's pipeline options);
    usage errors exit with status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    name, kind = cli.chosen(argv, "task", sorted(finetune.KINDS), finetune.get, PROG)
    parser = make_parser(kind)
    args, beam_args = cli.split_args(parser, argv, hint=f"or of --task={name}")
    cli.check_positive(parser, args, ("num_shards", "examples_per_chunk"))
    cli.check_progress_seconds(parser, args)
    args.tokenizer = args.tokenizer or vocab_files.detect_kind(args.vocab)
    args.input_format = "tfds" if args.input.startswith("tfds:") else "files"
    try:
        kind.make_options(args)
    except ValueError as e:
        parser.error(f"--task={name}: {e}")
    return args, beam_args


def build_pipeline(p: beam.Pipeline, args, options, work_dir: str) -> None:
    """Adds the job's transforms to ``p`` (nothing is read or written until it runs); bulk data
    goes through ``work_dir``."""
    import apache_beam as beam
    from apache_beam.io.filesystems import FileSystems

    from data_pipelines import sources
    from data_pipelines.counters import SumDictsFn
    from data_pipelines.finetune_transforms import (
        COUNTS_TAG, ERRORS_TAG, SKIPPED_TAG, STATS_TAG, MakeFeaturesFn, ReadExamplesFn, WriteShardFn, WriteStatsFn)

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
                args.task, functools.partial(tokenizers.load_tokenizer, args.tokenizer, args.vocab,
                                             lower_case=args.do_lower_case),
                options, args.num_shards, work_dir), counts)
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


def run(argv: Optional[Sequence[str]] = None) -> dict:
    """Runs the job; returns its stats (for a dry run, {"dry_run": path or None}). Bad input (a
    malformed file included) or an unusable output directory ends it with
    SystemExit("error: ..."); an unusable --vocab raises VocabularyError."""
    args, beam_args = parse_args(argv)
    from data_pipelines import jobs, output  # Beam loads here, once the flags are parsed
    from data_pipelines.finetune_transforms import WORK_FILES

    with cli.exit_on(*jobs.BAD_INPUT, FinetuneDataError):
        pipeline_options, dry_run, tokenizer = jobs.start(args, beam_args, _LOG)
        kind = finetune.get(args.task)
        options = kind.make_options(args)

        def build(p, work_dir):
            build_pipeline(p, args, options, work_dir)

        if dry_run:
            # As make_pretrain's: the job description only, nothing listed, read or written.
            return jobs.save_dry_run(args, pipeline_options, build)

        files = jobs.list_input(args, _LOG)
        with output.OutputLock(args.output_dir, "make_finetune"):
            stats = jobs.run_pipeline(args, args.split, f"task={args.task}", pipeline_options, build,
                                      WORK_FILES, _progress(args), _LOG)
            if stats["error_count"]:  # a reader's error (a malformed file): no COMPLETED
                more = (f" (and {stats['error_count'] - 1} more input errors, listed in stats.json)"
                        if stats["error_count"] > 1 else "")
                raise FinetuneDataError(f"{stats['errors'][0]}{more}; {args.output_dir} is not COMPLETED")

            shard_files = jobs.shard_files(args, args.split)
            info = {
                **jobs.info_fields(args, beam_args, args.split, tokenizer, options, kind.record_spec(options),
                                   shard_files, stats),
                # garden/data.py reads ``objective``, the vocabulary, ``max_seq_length``,
                # ``feature_spec`` and ``files``.
                "task": args.task,
                "objective": args.task,
                "input_files": list(files),
                "max_seq_length": getattr(options, "max_seq_length", None),
                "examples": {"read": stats["examples_read"], "featurized": stats["examples_featurized"],
                             "skipped": stats["examples_skipped"]},
            }
            output.complete(args.output_dir, info, shard_files, stats["instances"], summary=(
                f" (sources read {stats['sources_read']}, examples read {stats['examples_read']}, "
                f"skipped {stats['examples_skipped']})"))

    if stats["examples_skipped"]:
        _LOG.warning("%d examples skipped (the first are listed in stats.json: skipped_examples)",
                     stats["examples_skipped"])
    print(f"wrote {stats['instances']} {args.task} records of {stats['examples_featurized']} examples "
          f"to {args.output_dir} ({args.num_shards} shards, stats.json, info.json, COMPLETED)")
    return stats


def _progress(args):
    """What a progress line says of the work files and finished shards counted so far."""
    return lambda n: (f"{n['chunks']} chunks of up to {args.examples_per_chunk} examples read, "
                      f"{n['features']} featurized, {n['shards']} of {args.num_shards} shards written")


def main(argv: Optional[Sequence[str]] = None) -> None:
    """The command line (cli.main)."""
    cli.main(run, argv)


if __name__ == "__main__":
    main()
