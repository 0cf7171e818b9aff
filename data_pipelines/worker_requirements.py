"""What the Beam workers of one data job install: the distributions its per-element code
imports, their dependencies, and nothing more (issue 35 item 6).

A WordPiece BERT job's DoFns import Beam, numpy, the `tokenizers` library (text.wordpiece) and
google-crc32c (text.tfrecord's shard checksums); they never import TensorFlow. Installing the
whole runtime on every worker (the former requirements-workers.txt: TensorFlow, matplotlib,
scikit-learn, grpc, ...) cost each worker about 1.6 GB of wheels before its first element
(BUILD.md, "Running the data pipelines on Dataflow", has the figures).

What a job imports follows from three things it states on its command line, so the table is
keyed by them, not by objective or task (every objective and fine-tuning kind tokenizes through
text.tokenizers, whose kind alone decides TensorFlow):

- the tokenizer kind (TOKENIZER_PACKAGES): wordpiece runs on `tokenizers`; sentencepiece and
  byte-level BPE tokenize with TensorFlow graph modules (text.sentencepiece_model, text.bpe);
- remote paths (gs://, s3://): a --vocab is read through tf.io.gfile (text.vocab_files), and so
  are make_finetune's task files (input format "files", text.finetune), so TensorFlow; the
  pretraining corpora (formats "text", "jsonl") go through Beam's file systems without it;
- tfds:NAME input (format "tfds"): tensorflow-datasets.

tests/data_pipelines/test_worker_requirements.py runs jobs in fresh processes on the local
runner, records every third-party module that code under text/ and data_pipelines/ imports
while the job runs, and fails when one is outside ``requirements(...)``'s closure, or when a
row of the table is never imported.

``with_worker_packages`` is what data_pipelines.jobs calls: for a remote runner (Dataflow,
Flink, Spark) with no --requirements_file, --setup_file or --sdk_container_image of the user's,
it writes the job's file and passes it as --requirements_file (with --requirements_cache=skip,
unless given: workers install from PyPI, the launcher downloads nothing), and stages the job's
code as a wheel that declares no dependencies: Beam's worker boot runs `pip install` on an
--extra_package, so the garden's own wheel would bring its whole install_requires back. Each line pins the version
installed where the job is launched (what the launcher ran is what the workers run), with every
dependency listed, so pip on the worker resolves nothing new.

    python -m data_pipelines.worker_requirements --tokenizer=wordpiece --vocab=vocab.txt \\
        --input='gs://B/corpus/*.txt'      # prints the file a job with these flags would stage
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from importlib import metadata
from typing import Dict, Iterable, List, Optional, Sequence, Set

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from data_pipelines import gcs

# Every job: Beam itself (the workers' SDK; [gcp] on a remote runner, for gs:// I/O), numpy (the
# objectives' arrays and RNG), google-crc32c (text/tfrecord.py writes shards without TensorFlow).
EVERY_JOB = ("apache-beam", "numpy", "google-crc32c")
TOKENIZER_PACKAGES: Dict[str, Sequence[str]] = {
    "wordpiece": ("tokenizers",),                                   # text/wordpiece.py
    "sentencepiece": ("tensorflow", "tensorflow-text", "sentencepiece"),  # text/sentencepiece_model.py
    "bpe": ("tensorflow",),                                         # text/bpe.py: core TF ops
}
REMOTE_PATH_PACKAGES = ("tensorflow",)  # tf.io.gfile reads gs:// vocabularies and task files
GFILE_INPUT_FORMATS = ("files",)  # make_finetune's readers; make_pretrain reads through Beam
TFDS_PACKAGES = ("tensorflow-datasets", "tensorflow")  # text/finetune/tfds_sources.py

# Options by which the user already says how workers get their packages; then nothing is added.
USER_DEPENDENCY_FLAGS = ("--requirements_file", "--setup_file", "--sdk_container_image",
                         "--worker_harness_container_image")
DATAFLOW_RUNNERS = ("DataflowRunner", "dataflow")
LOCAL_RUNNERS = (None, "DirectRunner", "direct", "SwitchingDirectRunner", "FnApiRunner",
                 "BundleBasedDirectRunner", "PrismRunner")
# pip freeze leaves these out; pip installs them where a dependency asks.
INSTALLER_PACKAGES = {"pip", "setuptools", "wheel", "distribute"}

_LOG = logging.getLogger(__name__)


def is_remote(path: Optional[str]) -> bool:
    return bool(path) and "://" in str(path)


def roots(tokenizer: str, vocab: str = "", input: str = "", input_format: str = "text",
          gcp: bool = False) -> List[str]:
    """The distributions (requirement strings) the job's per-element code imports: the table
    rows that its tokenizer kind, its paths and its input format select. ``gcp``: Beam with its
    gcp extra (Dataflow, or gs:// paths on any runner)."""
    if tokenizer not in TOKENIZER_PACKAGES:
        raise ValueError(f"unknown tokenizer kind {tokenizer!r}; one of {sorted(TOKENIZER_PACKAGES)}")
    names = list(EVERY_JOB) + list(TOKENIZER_PACKAGES[tokenizer])
    if is_remote(vocab) or (is_remote(input) and input_format in GFILE_INPUT_FORMATS):
        names += REMOTE_PATH_PACKAGES
    if input_format == "tfds":
        names += TFDS_PACKAGES
    unique = list(dict.fromkeys(names))
    return [f"{n}[gcp]" if n == "apache-beam" and gcp else n for n in unique]


def closure(requirements: Iterable[str]) -> Dict[str, str]:
    """{canonical name: installed version} of ``requirements`` and everything they need on this
    platform (markers evaluated for this interpreter; extras followed only where named), read
    from the installed distributions' metadata: offline, and the launcher's own versions."""
    env = default_environment()
    seen: Dict[str, Set[str]] = {}
    stack = [(Requirement(r), "") for r in requirements]
    while stack:
        req, parent_extra = stack.pop()
        if req.marker and not req.marker.evaluate({**env, "extra": parent_extra}):
            continue
        name = canonicalize_name(req.name)
        extras = set(req.extras)
        if name in seen and extras <= seen[name]:
            continue
        first = name not in seen
        seen.setdefault(name, set()).update(extras)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            raise SystemExit(f"error: {req.name} is not installed here, but the job's workers need "
                             f"it; install it (pip install '.[dataflow]' for apache-beam[gcp])")
        for line in requires:
            dep = Requirement(line)
            if dep.marker is None:
                if first:
                    stack.append((dep, ""))
                continue
            for extra in extras | {""}:  # a requirement guarded by an extra: once per extra asked for
                stack.append((dep, extra))
    return {name: metadata.version(name) for name in sorted(set(seen) - INSTALLER_PACKAGES)}


def render(requirements: Sequence[str]) -> str:
    """A requirements file: a header naming the roots, then one NAME[EXTRAS]==VERSION per line
    of their closure."""
    extras = {canonicalize_name(Requirement(r).name): sorted(Requirement(r).extras) for r in requirements}
    lines = [f"{name}{'[' + ','.join(extras[name]) + ']' if extras.get(name) else ''}=={version}"
             for name, version in closure(requirements).items()]
    header = ("# Beam worker requirements of one data job (data_pipelines/worker_requirements.py):\n"
              f"# what its per-element code imports ({', '.join(requirements)}) and their\n"
              "# dependencies, at the versions installed where the job was launched.\n")
    return header + "\n".join(lines) + "\n"


def runner_of(beam_args: Sequence[str]) -> Optional[str]:
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    return PipelineOptions(list(beam_args)).view_as(StandardOptions).runner


def flag_given(beam_args: Sequence[str], *flags: str) -> Optional[str]:
    """The first of ``flags`` that ``beam_args`` sets (--flag or --flag=value), or None."""
    for arg in beam_args:
        for flag in flags:
            if arg == flag or arg.startswith(flag + "="):
                return flag
    return None


def with_worker_packages(beam_args: Sequence[str], args: argparse.Namespace,
                         log: logging.Logger = _LOG, directory: Optional[str] = None) -> List[str]:
    """``beam_args`` plus what a remote runner's workers install for this job: the job's
    requirements file (--requirements_file, --requirements_cache=skip) and the workers' wheel of
    text/ and data_pipelines/ without dependencies (--extra_package; ``build_worker_wheel``),
    each unless the user chose it (USER_DEPENDENCY_FLAGS, --extra_package). Unchanged for the
    local runner. ``args``: the job's parsed flags (tokenizer, vocab, input, input_format, output_dir)."""
    beam_args = list(beam_args)
    runner = runner_of(beam_args)
    if runner in LOCAL_RUNNERS:
        return beam_args
    if runner in DATAFLOW_RUNNERS:
        gcs.require_dataflow_extra(f"--runner={runner}")
    directory = directory or tempfile.mkdtemp(prefix="garden-workers-")
    os.makedirs(directory, exist_ok=True)
    added = []
    chosen = flag_given(beam_args, *USER_DEPENDENCY_FLAGS)
    if chosen:
        log.info("workers get their packages from %s (not the job's own requirements file)", chosen)
    else:
        gcp = runner in DATAFLOW_RUNNERS or any(
            str(path).startswith("gs://") for path in (args.vocab, args.input, args.output_dir))
        requirements = roots(args.tokenizer, args.vocab, args.input, args.input_format, gcp=gcp)
        text = render(requirements)
        path = os.path.join(directory, "requirements-workers.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        count = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        log.info("workers install %s: %d packages for %s", path, count, ", ".join(requirements))
        added.append(f"--requirements_file={path}")
        if not flag_given(beam_args, "--requirements_cache"):
            # Without it Beam's stager `pip download`s every wheel at submission (network even
            # on a --dry_run; 2 min for this file here) and uploads them to --staging_location;
            # with it each worker installs the file from PyPI at start.
            added.append("--requirements_cache=skip")
    extra = flag_given(beam_args, "--extra_package", "--extra_packages")
    if extra:
        # Beam's worker boot runs `pip install WHEEL` after a --no-deps install, so a wheel that
        # declares install_requires (the garden's own: TensorFlow, ...) brings all of them.
        log.warning("%s: workers also install that package's own dependencies; leave it out and "
                    "the job stages its code without them", extra)
    elif not flag_given(beam_args, "--setup_file", "--sdk_container_image"):
        wheel = build_worker_wheel(directory)
        log.info("workers get the job's code from %s (text/, data_pipelines/; no dependencies)", wheel)
        added.append(f"--extra_package={wheel}")
    return beam_args + added


WORKER_DISTRIBUTION = "bertology_garden_workers"
WORKER_PACKAGES = ("text", "data_pipelines")  # what DoFns import; garden/ never runs on workers
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)  # fixed: the same code gives the same bytes (Beam stages by hash)


def build_worker_wheel(directory: str) -> str:
    """A py3-none-any wheel of WORKER_PACKAGES as installed here, declaring no dependencies (the
    requirements file pins them), written to ``directory``; its path."""
    import base64
    import hashlib
    import importlib
    import zipfile

    version = metadata.version("bertology-garden")
    info = f"{WORKER_DISTRIBUTION}-{version}.dist-info"
    files = []
    for package in WORKER_PACKAGES:
        root = os.path.dirname(importlib.import_module(package).__file__)
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(names):
                if not name.endswith((".pyc", ".pyo")):
                    full = os.path.join(folder, name)
                    files.append((package + "/" + os.path.relpath(full, root).replace(os.sep, "/"), full))
    contents = [(arc, open(full, "rb").read()) for arc, full in files]
    contents.append((f"{info}/METADATA", (
        f"Metadata-Version: 2.1\nName: {WORKER_DISTRIBUTION}\nVersion: {version}\n"
        "Summary: bertology-garden's text/ and data_pipelines/ for Beam workers "
        "(dependencies: the job's requirements file)\n").encode()))
    contents.append((f"{info}/WHEEL", (
        "Wheel-Version: 1.0\nGenerator: data_pipelines.worker_requirements\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n").encode()))
    record = "".join(
        f"{arc},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}\n" for arc, data in contents) + f"{info}/RECORD,,\n"
    contents.append((f"{info}/RECORD", record.encode()))
    path = os.path.join(directory, f"{WORKER_DISTRIBUTION}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for arc, data in contents:
            entry = zipfile.ZipInfo(arc, date_time=_ZIP_TIME)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(entry, data)
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m data_pipelines.worker_requirements",
                                description="Prints the worker requirements file that a data job "
                                "with these flags stages on a remote runner.")
    p.add_argument("--tokenizer", required=True, choices=sorted(TOKENIZER_PACKAGES))
    p.add_argument("--vocab", default="")
    p.add_argument("--input", default="")
    p.add_argument("--input_format", default="text", choices=("text", "jsonl", "files", "tfds"),
                   help="text, jsonl: make_pretrain corpora; files: make_finetune task files; tfds")
    args = p.parse_args(argv)
    sys.stdout.write(render(roots(args.tokenizer, args.vocab, args.input, args.input_format,
                                  gcp=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
