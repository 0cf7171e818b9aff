"""The launcher of every Beam data job (make_pretrain, make_finetune, and any job after them):
the command line parsed (common flags, then the chosen kind's own), the paths and the vocabulary
checked before anything runs, a Dataflow dry run, one locked run over an output directory with
its work files removed whatever happens, progress lines while it runs, then info.json and the
COMPLETED marker.

A job is a ``Job`` record: what it adds to these steps (its parser, its pipeline, its info.json
fields and messages); ``launch(job, argv)`` takes the steps in the same order for every job.
The pipelines themselves (what runs on the workers) stay in their modules; data_pipelines/
output.py has the output directory's lifecycle.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import posixpath
import sys
import uuid
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from text import casing, features, flags, tokenizers, vocab_files
from data_pipelines import beam_options, gcs, output, progress, sources
from data_pipelines.objectives import base
from text.finetune import parse_tfds
from text import vocab as text_vocab

Build = Callable[[beam.Pipeline, str], None]  # (pipeline, work dir) -> adds the job


def checked_paths(args, dry_run: bool) -> Dict[str, str]:
    """The paths of the run that are read or written now (a dry run only reads --vocab); for
    gcs.check_credentials."""
    paths = {"--vocab": args.vocab}
    if not dry_run:
        paths.update({"--input": args.input, "--output_dir": args.output_dir,
                      "--tfds_data_dir": args.tfds_data_dir or ""})
    return paths


def list_input(args) -> List[str]:
    """The files ``args.input`` matches, or for tfds:NAME[/CONFIG][:SPLIT] its shards as
    "NAME:SPLIT[Nshard]" (also setting ``args.tfds_shards``); InputError when there are none."""
    if args.input_format != "tfds":
        return sources.match_files(args.input)
    args.tfds_shards = sources.tfds_shards(args.input, args.tfds_data_dir)
    name, split = parse_tfds(args.input)
    return [f"{name}:{split}[{i}shard]" for i in args.tfds_shards]


def load_tokenizer(kind: str, vocab: str, lower_case: bool, log: logging.Logger):
    """The job's tokenizer (a clear VocabularyError naming the file), logged, with one warning
    when the vocabulary's casing contradicts ``lower_case``."""
    tokenizer = tokenizers.load_tokenizer(kind, vocab, lower_case=lower_case)
    log.info("vocabulary %s (%s): %d pieces (%s)", vocab, kind, tokenizer.vocab.size, tokenizer.fingerprint)
    warning = casing.mismatch(tokenizer, lower_case)
    if warning:
        log.warning("%s", warning)
    return tokenizer


def dry_run(pipeline_options: PipelineOptions, build: Build, output_dir: str) -> dict:
    """Builds the job and lets the runner (DataflowRunner with --dry_run) translate it without
    submitting; nothing is listed, read or written but the job description (a gs:// glob or
    output dir would need credentials and network). Returns {"dry_run": path or None}."""
    p = beam.Pipeline(options=pipeline_options)
    build(p, output.work_dir_of(output_dir, "dry-run"))
    result = p.run()  # DataflowRunner with dry_run translates the job and returns at once
    return {"dry_run": beam_options.save_dataflow_job(result, output_dir)}


def run_pipeline(pipeline_options: PipelineOptions, build: Build, output_dir: str,
                 progress: Optional[Callable[[str], object]] = None) -> None:
    """Runs the job over a fresh work directory of ``output_dir`` (removed afterwards, even on
    failure), with ``progress(work_dir)``'s context around it; OutputError unless the pipeline
    ends DONE."""
    work_dir = output.work_dir_of(output_dir, uuid.uuid4().hex[:12])
    p = beam.Pipeline(runner=beam_options.make_runner(pipeline_options), options=pipeline_options)
    build(p, work_dir)
    try:
        with (progress(work_dir) if progress is not None else contextlib.nullcontext()):
            result = p.run()
            result.wait_until_finish()
    finally:
        output.remove_work_dirs(output_dir)
    state = str(result.state)
    if "DONE" not in state:
        raise output.OutputError(f"pipeline ended in state {state}; {output_dir} is not COMPLETED")


def info_fields(args, beam_args, tokenizer, options, feature_spec, shard_files) -> Dict:
    """The info.json fields both make_pretrain and make_finetune write: the arguments, the
    vocabulary and its fingerprint, the feature spec, compression and the shard names
    (garden/data.py checks the data against its config with them)."""
    arguments = {k: v for k, v in vars(args).items() if k != "tfds_shards"}
    return {
        "arguments": {**arguments, "beam_args": list(beam_args)},
        "options": (dataclasses.asdict(options) if dataclasses.is_dataclass(options)
                    else str(options)),
        "tokenizer": args.tokenizer,
        "lower_case": args.do_lower_case,
        "vocab": args.vocab,
        "vocab_size": tokenizer.vocab.size,
        "vocab_fingerprint": tokenizer.fingerprint,
        "feature_spec": features.spec_to_json(feature_spec),
        "compression": "GZIP" if args.compress else None,
        "files": [posixpath.basename(f) for f in shard_files],
    }


@dataclasses.dataclass(frozen=True)
class Job:
    """What one data job adds to the launch steps.

    name: the module ("make_pretrain"): the program name and the output lock's owner.
    log: the job's logger.
    selector: the flag that chooses the kind ("objective", "task"); ``get(name)`` -> its record
      (base.Objective, finetune.base.FinetuneKind), which has ``make_options(args)``.
    choices: the selector's values.
    make_parser: the record or None -> the whole parser (common flags + the kind's own).
    positive: int flags that must be >= 1.
    resolve: fills the arguments derived from others (default tokenizer, input format).
    split: args -> the name of the output shards.
    build: (pipeline, args, tokenizer, work dir) -> adds the job to the pipeline.
    spec: (record, options) -> the features.Spec of the written records.
    stages: progress stage -> (work subdirectory, glob) of the work files that count it;
      ``describe(args, counts, elapsed)`` -> the progress line (counts also has "shards").
    info: (args, record, options, input files, stats) -> the job's own info.json fields.
    summary: stats -> what was read, for the completion message and its errors.
    finish: (args, stats) -> the last messages of a completed run.
    check: (args, stats) -> raises when the pipeline's stats forbid COMPLETED.
    errors: further exception types that end the run with "error: ..." (bad input).
    """

    name: str
    log: logging.Logger
    selector: str
    choices: Sequence[str]
    get: Callable[[str], Any]
    make_parser: Callable[[Any], argparse.ArgumentParser]
    positive: Sequence[str]
    resolve: Callable[[argparse.Namespace, Any], None]
    split: Callable[[argparse.Namespace], str]
    build: Callable[[beam.Pipeline, argparse.Namespace, Any, str], None]
    spec: Callable[[Any, Any], features.Spec]
    stages: Mapping[str, Tuple[str, str]]
    describe: Callable[[argparse.Namespace, Mapping[str, int], float], str]
    info: Callable[..., Dict]
    summary: Callable[[Mapping], str]
    finish: Callable[[argparse.Namespace, Mapping], None]
    check: Optional[Callable[[argparse.Namespace, Mapping], None]] = None
    errors: Tuple[type, ...] = ()

    @property
    def prog(self) -> str:
        return f"python -m data_pipelines.{self.name}"


def new_parser(job: Job, doc: str, kind_help: str) -> argparse.ArgumentParser:
    """A job's parser: the first paragraph of its module docstring as description, the rest as
    epilog; unknown flags go to Beam (data_pipelines.beam_options)."""
    head, _, rest = doc.partition("\n\n")
    return argparse.ArgumentParser(
        prog=job.prog, description=head + "\n\n" + beam_options.PASS_THROUGH_HELP + " " + kind_help,
        epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False)  # an abbreviation must never swallow a Beam option


def add_input_flags(p: argparse.ArgumentParser, input_help: str) -> None:
    """--input (a glob, or tfds:NAME[/CONFIG][:SPLIT]) and --tfds_data_dir, as every job has them."""
    p.add_argument("--input", required=True, help=input_help)
    p.add_argument("--tfds_data_dir", default=None,
                   help="tensorflow-datasets data_dir holding the prepared dataset (nothing is downloaded)")


def add_output_flags(p: argparse.ArgumentParser) -> None:
    """--output_dir, --compress and --overwrite, as every job has them."""
    p.add_argument("--output_dir", required=True, help="directory for shards, info.json, stats.json, COMPLETED")
    flags.add_bool(p, "compress", False, "write GZIP-compressed .tfrecord.gz shards")
    flags.add_bool(p, "overwrite", False, "replace an existing completed output directory")


def add_vocab_flags(p: argparse.ArgumentParser, vocab_help: str, tokenizer_help: str,
                    lower_case_help: str) -> None:
    """--vocab, --tokenizer (None: the job's ``resolve`` picks the kind) and --do_lower_case, as
    every job has them; the helps say what they mean for this job."""
    p.add_argument("--vocab", required=True,
                   help=vocab_help + ": vocab.txt (wordpiece), *.model (sentencepiece) or vocab.json "
                   "with merges.txt beside it (bpe)")
    p.add_argument("--tokenizer", choices=vocab_files.KINDS, default=None, help=tokenizer_help)
    flags.add_bool(p, "do_lower_case", True, "lower-case before tokenizing; must match the vocabulary "
                   + lower_case_help)


def parse_args(job: Job, argv: Optional[Sequence[str]] = None):
    """The job's flags (common + the chosen kind's) and the rest (Beam pipeline options)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(prog=job.prog, add_help=False,
                                  allow_abbrev=False)  # its errors name the command as typed
    pre.add_argument(f"--{job.selector}", choices=job.choices)
    name = getattr(pre.parse_known_args(argv)[0], job.selector)
    kind = None
    if name:
        try:
            kind = job.get(name)
        except ImportError as e:
            raise SystemExit(f"error: --{job.selector}={name}: {e}") from e
    parser = job.make_parser(kind)
    args, beam_args = beam_options.split_args(parser, argv, hint=f"or of --{job.selector}={name}")
    for flag in job.positive:
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if not args.progress_seconds >= 0:
        parser.error(f"--progress_seconds must be >= 0 (0: no progress lines), got {args.progress_seconds}")
    job.resolve(args, kind)
    try:
        kind.make_options(args)
    except ValueError as e:
        parser.error(f"--{job.selector}={name}: {e}")
    return args, beam_args


def launch(job: Job, argv: Optional[Sequence[str]] = None) -> dict:
    """Runs the job; returns the stats (or, for a dry run, {"dry_run": path}). Bad input or an
    unusable output directory ends it with SystemExit("error: ...")."""
    args, beam_args = parse_args(job, argv)
    pipeline_options = PipelineOptions(beam_args)
    dry = beam_options.is_dry_run(pipeline_options)
    try:
        gcs.check_credentials(checked_paths(args, dry))
        # Clear VocabularyError naming the file; the vocabulary travels to the workers.
        tokenizer = load_tokenizer(args.tokenizer, args.vocab, args.do_lower_case, job.log)
        build = lambda p, work_dir: job.build(p, args, tokenizer, work_dir)  # noqa: E731
        if dry:
            return dry_run(pipeline_options, build, args.output_dir)
        files = list_input(args)
        job.log.info("input %s: %d %s", args.input, len(files),
                     "tfds shards" if args.input_format == "tfds" else "files")
        with output.OutputLock(args.output_dir, job.name):
            return _run_locked(job, args, beam_args, pipeline_options, tokenizer, files, build)
    except (sources.InputError, output.OutputError, gcs.CredentialsError) + tuple(job.errors) as e:
        raise SystemExit(f"error: {e}") from e


def _run_locked(job: Job, args, beam_args, pipeline_options, tokenizer, files, build) -> dict:
    """The run proper, with the output directory locked: prepare it, run the pipeline, write
    info.json and COMPLETED."""
    split, name = job.split(args), getattr(args, job.selector)
    output.prepare(args.output_dir, args.overwrite, split)
    job.log.info("running %s: %s=%s num_shards=%d -> %s", beam_options.runner_name(pipeline_options),
                 job.selector, name, args.num_shards, args.output_dir)
    run_pipeline(pipeline_options, build, args.output_dir, lambda work_dir: _progress(job, args, work_dir))
    stats = json.loads(output.read_text(FileSystems.join(args.output_dir, "stats.json")))
    if job.check is not None:
        job.check(args, stats)
    shard_files = [output.shard_name(args.output_dir, split, s, args.num_shards, args.compress)
                   for s in range(args.num_shards)]
    kind = job.get(name)
    options = kind.make_options(args)
    info = {
        "format_version": features.FORMAT_VERSION,
        job.selector: name,
        "split": split,
        **info_fields(args, beam_args, tokenizer, options, job.spec(kind, options), shard_files),
        "instances": {"total": stats["instances"], "per_shard": stats["instances_per_shard"]},
        **job.info(args, kind, options, files, stats),
    }
    output.complete(args.output_dir, info, shard_files, stats["instances"], summary=job.summary(stats))
    job.finish(args, stats)
    return stats


def _progress(job: Job, args, work_dir: str) -> progress.Progress:
    """Progress lines while the pipeline runs, from its work files and finished shards."""
    patterns = {stage: FileSystems.join(work_dir, *where) for stage, where in job.stages.items()}
    patterns["shards"] = FileSystems.join(
        args.output_dir, f"{job.split(args)}-*-of-{args.num_shards:05d}.tfrecord" + (".gz" if args.compress else ""))
    return progress.Progress(patterns, lambda counts, elapsed: job.describe(args, counts, elapsed),
                             args.progress_seconds, job.log)


def entry_points(job: Job) -> Tuple[Callable, Callable, Callable]:
    """A job module's ``parse_args(argv)``, ``run(argv)`` and ``main(argv)``:
    ``parse_args, run, main = jobs.entry_points(JOB)``."""
    module = f"data_pipelines.{job.name}"

    def parse_args_(argv: Optional[Sequence[str]] = None):
        return parse_args(job, argv)

    def run(argv: Optional[Sequence[str]] = None) -> dict:
        return launch(job, argv)

    def main_(argv=None) -> None:
        main(run, argv)

    parse_args_.__doc__ = f"Our flags (common + the --{job.selector}'s own) and the rest (Beam pipeline options)."
    run.__doc__ = launch.__doc__
    main_.__doc__ = main.__doc__
    for name, function in (("parse_args", parse_args_), ("run", run), ("main", main_)):
        function.__name__ = function.__qualname__ = name
        function.__module__ = module
    return parse_args_, run, main_


def main(run: Callable, argv=None) -> None:
    """A job's command-line entry: logging set up, then `run(argv)`; a vocabulary that cannot
    be used ends the process with one `error: ...` line instead of a traceback."""
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        run(argv)
    except (vocab_files.VocabularyError, text_vocab.VocabularyRoleError) as e:
        raise SystemExit(f"error: {e}") from e
