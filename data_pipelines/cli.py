"""The command line of the Beam data jobs (make_pretrain, make_finetune): a job's ``main``, its
parser, the flags every job has, the kind chosen before the whole parser exists, our flags
split from Beam's, the checks of their values, and the one-line end of a run on bad input.

Nothing here imports Beam or TensorFlow, so a job's ``--help`` and its usage errors answer
before either loads (make_pretrain --help: 1.8 s -> 0.3 s); only a flag that is not ours is
checked against Beam's pipeline options, and only then is Beam imported (``split_args``).
What the jobs share once the flags are parsed is jobs.py's.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
from typing import Any, Callable, List, Optional, Sequence, Tuple

from text import flags, kinds, vocab_files
from text import vocab as text_vocab

# A --vocab that cannot be used; run() raises them as they are, main() ends on them in one line.
BAD_VOCABULARY = (vocab_files.VocabularyError, text_vocab.VocabularyRoleError)

PASS_THROUGH_HELP = ("Any flag not listed here is passed to Beam's PipelineOptions (--runner, "
                     "--direct_num_workers, --direct_running_mode, --project, --region, --temp_location, "
                     "--dry_run ...).")


def main(run: Callable[[Optional[Sequence[str]]], Any], argv: Optional[Sequence[str]]) -> None:
    """A job's ``main``: ``run(argv)`` with log lines on stderr; an unusable --vocab ends it in
    one line."""
    log_to_stderr()
    with exit_on(*BAD_VOCABULARY):
        run(argv)


def log_to_stderr() -> None:
    """The log lines of a job's command line (progress, skipped lines, warnings)."""
    # force: on the runtime install Beam's import-time warning may configure the root logger
    # first, at WARNING (data_pipelines/gcs.py, BEAM_WITHOUT_GCP), which would hide INFO lines
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        force=True)


@contextlib.contextmanager
def exit_on(*errors: type):
    """``with exit_on(E, ...):`` an exception of those types ends the run with
    SystemExit("error: <its message>"): one line that names what to fix, no traceback."""
    try:
        yield
    except errors as e:
        raise SystemExit(f"error: {e}") from e


# ---------------------------------------------------------------------------------------------
# The parser and the flags every job has


def new_parser(prog: str, doc: str, kind_help: str) -> argparse.ArgumentParser:
    """A job's parser: the first paragraph of its module docstring as description, the rest as
    epilog; unknown flags go to Beam (``split_args``)."""
    head, _, rest = doc.partition("\n\n")
    return argparse.ArgumentParser(
        prog=prog, description=head + "\n\n" + PASS_THROUGH_HELP + " " + kind_help,
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
    """--vocab, --tokenizer (None: the job picks the kind) and --lower_case / --no-lower_case,
    as every job has them; the helps say what they mean for this job. The casing flag is
    spelled as in every other tool (make_vocab, garden.convert, ...); its value stays
    ``args.do_lower_case`` (the objectives' defaults and info.json's arguments name it so), and
    --do_lower_case / --no-do_lower_case are refused naming the new spelling."""
    p.add_argument("--vocab", required=True,
                   help=vocab_help + ": vocab.txt (wordpiece), *.model (sentencepiece) or vocab.json "
                   "with merges.txt beside it (bpe)")
    p.add_argument("--tokenizer", choices=vocab_files.KINDS, default=None, help=tokenizer_help)
    flags.add_bool(p, "lower_case", True, "lower-case before tokenizing; must match the vocabulary "
                   + lower_case_help, dest="do_lower_case", retired=["do_lower_case"])


def chosen(argv: Sequence[str], flag: str, choices: Sequence[str], get: Callable, prog: str):
    """(name, record) of the kind that ``--flag`` chooses in ``argv`` (objective, task), read
    before the whole parser exists because the kind adds its own flags to it; (None, None)
    when the flag is absent (the parser then says it is required). An invalid name is a usage
    error (a retired one names its replacement: text/kinds.py); a kind whose module cannot be
    imported ends the run with one line."""
    pre = argparse.ArgumentParser(prog=prog, add_help=False,
                                  allow_abbrev=False)  # its errors name the command as typed
    pre.add_argument(f"--{flag}")
    name = getattr(pre.parse_known_args(list(argv))[0], flag)
    if not name:
        return None, None
    if name not in choices:
        retired = kinds.renamed(f"--{flag}={name}")
        pre.error(f"argument --{flag}: invalid choice: {name!r} (choose from "
                  f"{', '.join(map(repr, choices))})" + (f"; {retired}" if retired else ""))
    try:
        return name, get(name)
    except ImportError as e:
        raise SystemExit(f"error: --{flag}={name}: {e}") from e


# ---------------------------------------------------------------------------------------------
# Parsing and checking


def split_args(parser: argparse.ArgumentParser, argv: Sequence[str],
               hint: str = "see --help") -> Tuple[argparse.Namespace, List[str]]:
    """(our flags, Beam's flags) of ``argv``; a usage error (exit 2) names any flag that is
    neither ours nor a Beam pipeline option. ``parser`` must have ``allow_abbrev=False``, so
    that an abbreviation never swallows a Beam option."""
    args, beam_args = parser.parse_known_args(list(argv))
    unknown = unknown_beam_args(beam_args) if beam_args else []
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)} (neither flags of this job "
                     f"{hint} nor Beam pipeline options; see --help)")
    return args, beam_args


def unknown_beam_args(beam_args: Sequence[str]) -> List[str]:
    """The flags among ``beam_args`` that no registered Beam PipelineOptions class defines
    (Beam itself would only log and drop them, so a typo would silently change nothing)."""
    # Beam's options are known only to Beam: it is imported here, once our own flags parsed.
    from apache_beam.options.pipeline_options import PipelineOptions

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


def check_positive(parser: argparse.ArgumentParser, args, names: Sequence[str]) -> None:
    """A usage error for the first of the int flags ``names`` below 1."""
    for name in names:
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")


def check_progress_seconds(parser: argparse.ArgumentParser, args) -> None:
    if not args.progress_seconds >= 0:
        parser.error(f"--progress_seconds must be >= 0 (0: no progress lines), got {args.progress_seconds}")
