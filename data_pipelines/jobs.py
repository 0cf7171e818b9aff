"""The launcher side of a Beam data job (make_pretrain, make_finetune): the vocabulary checked
before anything runs, a Dataflow dry run, and one locked run over an output directory with its
work files removed whatever happens.

The pipelines themselves (what runs on the workers) stay in their modules; these are the steps
around them that every job takes in the same order (data_pipelines/output.py has the output
directory's lifecycle).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import posixpath
import uuid
from typing import Callable, Dict, List, Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from data_pipelines import beam_options, casing, features, output, sources, tokenizers
from data_pipelines.objectives import base

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
    name, split = sources.parse_tfds(args.input)
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


def main(run: Callable, argv=None) -> None:
    """A job's command-line entry: logging set up, then `run(argv)`; a vocabulary that cannot
    be used ends the process with one `error: ...` line instead of a traceback."""
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        run(argv)
    except (tokenizers.VocabularyError, base.VocabularyRoleError) as e:
        raise SystemExit(f"error: {e}") from e
