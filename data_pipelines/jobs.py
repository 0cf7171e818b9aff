"""What the Beam data jobs (make_pretrain, make_finetune) share around their pipelines once
their flags are parsed (the parser and the common flags are cli.py's, so that --help
answers before Beam loads): Beam's options, the paths and the vocabulary checked before
anything runs, the input listed, progress lines, the run's end state and stats, and
info.json's shared fields.

Each job's ``run(argv)`` calls these in its own order, top to bottom. What runs on the workers
is in pretrain_transforms.py and finetune_transforms.py; the output directory's lifecycle
(lock, work files, COMPLETED) is output.py's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import posixpath
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from text import casing, features, tokenizers
from text.finetune import parse_tfds
from data_pipelines import beam_options, gcs, output, progress, sources, worker_requirements

# Errors that mean the user must fix the input, the output directory or the credentials: a run
# ends on them with one "error: ..." line (``cli.exit_on``), not a traceback.
BAD_INPUT = (sources.InputError, output.OutputError, gcs.CredentialsError)


# ---------------------------------------------------------------------------------------------
# Beam's options (the job's own flags are parsed by cli.py, before Beam loads)


def pipeline_options(beam_args: Sequence[str]) -> PipelineOptions:
    """Beam's options from the flags that are not ours. The job always waits for its pipeline
    (--no_wait_until_finish has no effect): info.json and COMPLETED need its stats."""
    options = PipelineOptions(list(beam_args))
    options.view_as(StandardOptions).no_wait_until_finish = False
    return options


# ---------------------------------------------------------------------------------------------
# Before the pipeline


def start(args, beam_args: Sequence[str], log: logging.Logger) -> Tuple[PipelineOptions, bool, Any]:
    """Beam's options, whether this is a dry run, and the job's tokenizer (``load_tokenizer``),
    once the credentials of the paths the run reads or writes now are checked. The tokenizer is
    loaded here, not on the workers: a clear VocabularyError naming the file. On a remote runner
    the workers install only what this job imports (data_pipelines/worker_requirements.py)."""
    options = pipeline_options(worker_requirements.with_worker_packages(beam_args, args, log))
    dry_run = beam_options.is_dry_run(options)
    gcs.check_credentials(checked_paths(args, dry_run))
    return options, dry_run, load_tokenizer(args.tokenizer, args.vocab, args.do_lower_case, log)


def checked_paths(args, dry_run: bool) -> Dict[str, str]:
    """The paths of the run that are read or written now (a dry run only reads --vocab); for
    gcs.check_credentials."""
    paths = {"--vocab": args.vocab}
    if not dry_run:
        paths.update({"--input": args.input, "--output_dir": args.output_dir,
                      "--tfds_data_dir": args.tfds_data_dir or ""})
    return paths


def load_tokenizer(kind: str, vocab: str, lower_case: bool, log: logging.Logger):
    """The job's tokenizer (a clear VocabularyError naming the file), logged, with one warning
    when the vocabulary's casing contradicts ``lower_case``."""
    tokenizer = tokenizers.load_tokenizer(kind, vocab, lower_case=lower_case)
    log.info("vocabulary %s (%s): %d pieces (%s)", vocab, kind, tokenizer.vocab.size, tokenizer.fingerprint)
    warning = casing.mismatch(tokenizer, lower_case)
    if warning:
        log.warning("%s", warning)
    return tokenizer


def list_input(args, log: logging.Logger) -> List[str]:
    """The files ``args.input`` matches, or for tfds:NAME[/CONFIG][:SPLIT] its shards as
    "NAME:SPLIT[Nshard]" (also setting ``args.tfds_shards``, which the pipeline reads); logged;
    InputError when there are none."""
    if args.input_format != "tfds":
        files = sources.match_files(args.input)
    else:
        args.tfds_shards = sources.tfds_shards(args.input, args.tfds_data_dir)
        name, split = parse_tfds(args.input)
        files = [f"{name}:{split}[{i}shard]" for i in args.tfds_shards]
    log.info("input %s: %d %s", args.input, len(files), "tfds shards" if args.input_format == "tfds" else "files")
    return files


# ---------------------------------------------------------------------------------------------
# While and after it runs

# build(p, work_dir): lays out the job's pipeline on ``p``, with its work files under work_dir.
BuildFn = Callable[[beam.Pipeline, str], None]


def save_dry_run(args, options: PipelineOptions, build: BuildFn) -> Dict[str, Optional[str]]:
    """A dry run's result: the job description only (DataflowRunner translates the job and
    returns without submitting it); nothing is listed, read or written, as a gs:// glob or
    output_dir would need credentials and network."""
    with beam.Pipeline(options=options) as p:
        build(p, output.work_dir_of(args.output_dir, "dry-run"))
    return {"dry_run": beam_options.save_dataflow_job(p.result, args.output_dir)}


def run_pipeline(args, split: str, what: str, options: PipelineOptions, build: BuildFn,
                 work_files: Mapping[str, Tuple[str, str]], describe: Callable[[Mapping[str, int]], str],
                 log: logging.Logger, documents_per_chunk: Optional[int] = None) -> dict:
    """Under the job's output lock: prepares --output_dir for ``split``, runs the pipeline with a
    fresh work directory and progress lines (``progress_lines``; ``documents_per_chunk``: their
    ETA), and returns its stats (``read_stats``). ``what``: the job's subject in the "running"
    line ("task=cola")."""
    output.prepare(args.output_dir, args.overwrite, split)
    log.info("running %s: %s num_shards=%d -> %s", beam_options.runner_name(options), what, args.num_shards,
             args.output_dir)
    with output.fresh_work_dir(args.output_dir) as work_dir, \
            progress_lines(args, split, work_dir, work_files, describe, log, documents_per_chunk):
        with beam.Pipeline(runner=beam_options.make_runner(options), options=options) as p:
            build(p, work_dir)
    return read_stats(p.result, args.output_dir)


def progress_lines(args, split: str, work_dir: str, work_files: Mapping[str, Tuple[str, str]],
                   describe: Callable[[Mapping[str, int]], str],
                   log: logging.Logger, documents_per_chunk: Optional[int] = None) -> progress.Progress:
    """``with progress_lines(...):`` logs "progress after <seconds> s: ``describe(counts)``" every
    --progress_seconds, where ``counts`` has the number of work files of each stage (stage ->
    (subdirectory of ``work_dir``, glob)) and of finished shards (``counts["shards"]``).
    With ``documents_per_chunk`` (a "chunks" work file holds up to that many consecutive
    documents of one input file) the line ends with the reading stage's ETA, from the input's
    size (``ReadingEta``): "... | reading 35% of 40.1 MB, ETA 0:01:52"."""
    patterns = {stage: FileSystems.join(work_dir, *where) for stage, where in work_files.items()}
    patterns["shards"] = FileSystems.join(
        args.output_dir, f"{split}-*-of-{args.num_shards:05d}.tfrecord" + (".gz" if args.compress else ""))
    eta = (ReadingEta.of_input(args.input, args.input_format, args.max_line_bytes, documents_per_chunk)
           if documents_per_chunk and args.progress_seconds > 0 else None)

    def line(counts, elapsed):
        # A later stage's file (a pool, a shard) appears once every chunk is read.
        read = any(n for stage, n in counts.items() if stage != "chunks")
        return (f"progress after {elapsed:.0f} s: {describe(counts)}"
                + (eta.describe(counts["chunks"], elapsed, read) if eta else ""))

    return progress.Progress(patterns, line, args.progress_seconds, log)


# The head of the first input file read to count documents per byte (text or JSONL input).
SAMPLE_BYTES = 1 << 20
COMPRESSED = (".gz", ".bz2", ".zst", ".deflate", ".lzo", ".lzma", ".xz", ".snappy")


@dataclasses.dataclass(frozen=True)
class ReadingEta:
    """The reading stage's share done and ETA, from the input's size: the chunk work files
    expected are, per input file, ceil(its bytes x documents per byte / documents per chunk),
    documents per byte counted on the head (SAMPLE_BYTES) of the first file. The ETA is the
    chunks still expected at the mean rate so far; an estimate, as documents vary in length
    across a corpus. None for tfds or compressed input (its bytes are not the text's)."""
    input_bytes: int
    expected_chunks: int

    @classmethod
    def of_input(cls, pattern: str, input_format: str, max_line_bytes: Optional[int],
                 per_chunk: int) -> Optional["ReadingEta"]:
        import io
        import math

        if input_format not in ("text", "jsonl"):
            return None
        try:
            files = [(m.path, m.size_in_bytes) for m in FileSystems.match([pattern])[0].metadata_list]
        except Exception:  # noqa: BLE001 - a progress line never fails the job
            return None
        if not files or any(path.endswith(COMPRESSED) for path, _ in files):
            return None
        files.sort()
        with FileSystems.open(files[0][0], compression_type=CompressionTypes.UNCOMPRESSED) as f:
            head = f.read(SAMPLE_BYTES)
        if len(head) < files[0][1]:  # a sample: whole lines (documents) only
            head = head[:head.rfind(b"\n") + 1]
        if input_format == "text":
            documents = sum(1 for _ in sources.read_documents(
                io.BytesIO(head), lambda *_: None, max_line_bytes or sources.DEFAULT_MAX_LINE_BYTES))
        else:
            documents = sum(1 for line in head.splitlines() if line.strip())
        if not head or not documents:
            return None
        per_byte = documents / len(head)
        expected = sum(max(1, math.ceil(size * per_byte / per_chunk)) for _, size in files if size)
        return cls(sum(size for _, size in files), expected)

    def describe(self, chunks: int, elapsed: float, read: bool = False) -> str:
        """" | reading 35% of 40.1 MB, ETA 0:01:52"; " | reading 40.1 MB: done" once a later
        stage has begun (``read``), "done (estimated)" when every expected chunk is there."""
        from text.progress import format_eta

        size = (f"{self.input_bytes / 1e6:.1f} MB" if self.input_bytes >= 1e5
                else f"{self.input_bytes / 1e3:.1f} kB")
        if read:
            return f" | reading {size}: done"
        if chunks >= self.expected_chunks:
            return f" | reading {size}: done (estimated)"
        if not chunks:
            return f" | reading 0% of {size}, ETA ?"
        left = elapsed * (self.expected_chunks - chunks) / chunks
        return f" | reading {100 * chunks / self.expected_chunks:.0f}% of {size}, ETA {format_eta(left)}"


def read_stats(result, output_dir: str) -> dict:
    """The stats.json the pipeline wrote; OutputError unless it ended DONE (``result``: the
    pipeline's, ``p.result`` after its ``with`` block)."""
    state = str(result.state)
    if "DONE" not in state:
        raise output.OutputError(f"pipeline ended in state {state}; {output_dir} is not COMPLETED")
    return json.loads(output.read_text(FileSystems.join(output_dir, "stats.json")))


def shard_files(args, split: str) -> List[str]:
    """Every shard the run writes, empty ones too."""
    return [output.shard_name(args.output_dir, split, s, args.num_shards, args.compress)
            for s in range(args.num_shards)]


def info_fields(args, beam_args: Sequence[str], split: str, tokenizer, options, feature_spec,
                shard_files: Sequence[str], stats: Mapping) -> Dict:
    """The info.json fields every job writes: the format version, the arguments, the vocabulary
    and its fingerprint, the feature spec, compression, the shard names and the instance counts
    (garden/data.py checks the data against its config with them)."""
    arguments = {k: v for k, v in vars(args).items() if k != "tfds_shards"}
    return {
        "format_version": features.FORMAT_VERSION,
        "split": split,
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
        "instances": {"total": stats["instances"], "per_shard": stats["instances_per_shard"]},
    }
