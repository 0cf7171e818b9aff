"""Every command the documentation shows runs (issue 35 item 7).

The shell commands of the fenced code blocks of README.md and docs/*.md that start a tool of the
project (`python -m garden.X`, `python -m data_pipelines.X`, or a console script of setup.cfg's
[options.entry_points], `garden-train`, ...) are extracted: line continuations joined, comments
dropped, `<placeholder>` values and `[--optional=flags]` brackets read as written values. Then

- each documented module answers `python -m MODULE --help` with exit status 0 (one process per
  module; the tools parse their arguments before TensorFlow or Beam is imported);
- every `--flag` a documented command passes is one that the tool's --help lists. The help is
  asked where the tool's flags depend on the command line: a subcommand (`garden.analyze
  attention --help`), make_pretrain's `--objective=NAME --help` and make_finetune's
  `--task=KIND --help`. The Beam jobs pass other flags to Beam's PipelineOptions, so there a flag
  may also be a Beam pipeline option (data_pipelines.cli.unknown_beam_args decides, as the
  jobs do). The tool is the truth: a documented flag it does not take is a documentation bug;
- a few documented commands that need no data and finish in seconds are run as written.
"""

from __future__ import annotations

import concurrent.futures
import configparser
import os
import pathlib
import re
import shlex
import subprocess
import sys
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console"}
PROJECT_PACKAGES = ("garden.", "data_pipelines.")
# Tools whose own flags depend on a selector flag's value: `--objective=NAME --help` lists the
# objective's flags, `--task=KIND --help` the kind's.
SELECTOR_FLAGS = {"data_pipelines.make_pretrain": "--objective",
                  "data_pipelines.make_finetune": "--task"}
BEAM_PASS_THROUGH = "passed to Beam's PipelineOptions"  # in the Beam jobs' --help
PLACEHOLDER = re.compile(r"<[A-Za-z_][\w./:|-]*>")
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
OPERATORS = re.compile(r"^[;&|]+$")
REDIRECT = re.compile(r"^\d*[<>]")
# The fewest commands the documents hold (there are more; a broken extractor finds none).
MIN_COMMANDS = 90
MIN_MODULES = 16


class Command(NamedTuple):
    where: str          # "docs/serving.md:42"
    module: str         # "garden.serve"
    args: Tuple[str, ...]

    def flags(self) -> List[str]:
        """The --flag names this command passes (`--name=value` and `--name value` alike)."""
        return [a.split("=", 1)[0] for a in self.args if a.startswith("--") and a != "--"]

    def help_argv(self) -> Tuple[str, ...]:
        """What to put before --help so that the tool lists this command's flags: the subcommand
        (a first positional argument) or the selector flag of SELECTOR_FLAGS."""
        selector = SELECTOR_FLAGS.get(self.module)
        if selector:
            for i, arg in enumerate(self.args):
                if arg.startswith(selector + "="):
                    return (arg,)
                if arg == selector and i + 1 < len(self.args):
                    return (f"{selector}={self.args[i + 1]}",)
            return ()
        if self.args and not self.args[0].startswith("-"):
            return (self.args[0],)
        return ()


def console_scripts() -> Dict[str, str]:
    """setup.cfg's console scripts: name -> the module `python -m` runs."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    out = {}
    for line in parser["options.entry_points"]["console_scripts"].splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            name, target = (part.strip() for part in line.split("=", 1))
            out[name] = target.split(":", 1)[0].removesuffix(".__main__")
    return out


def documents() -> List[str]:
    return ["README.md"] + sorted(p.relative_to(ROOT).as_posix()
                                  for p in (ROOT / "docs").glob("*.md"))


def shell_blocks(lines: Sequence[str]) -> List[Tuple[int, List[str]]]:
    """(first line number, lines) of each fenced block in a shell language or none."""
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, language = match.group(1), match.group(2).lower()
        body, start, i = [], i + 2, i + 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        if language in SHELL_LANGUAGES:
            blocks.append((start, body))
    return blocks


def logical_lines(start: int, body: Sequence[str]) -> List[Tuple[int, str]]:
    """(line number, text) with backslash continuations joined."""
    out, pending, first = [], "", start
    for number, line in enumerate(body, start):
        if not pending:
            first = number
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        out.append((first, pending + stripped))
        pending = ""
    if pending:
        out.append((first, pending))
    return out


def tokens(line: str) -> List[str]:
    """Shell words of a line: quotes removed, `# comments` dropped, `<placeholder>`s kept as
    one word, `;`, `&`, `|`, `&&` as words of their own."""
    line = PLACEHOLDER.sub("PLACEHOLDER", line)
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # an unclosed quote: not a command a user types as is
        return []


def commands_of_line(where: str, line: str, scripts: Dict[str, str]) -> List[Command]:
    words, found, segment = tokens(line), [], []
    for word in words + [";"]:
        if not OPERATORS.match(word):
            segment.append(word)
            continue
        command = _command(where, segment, scripts)
        if command:
            found.append(command)
        segment = []
    return found


def _command(where: str, words: Sequence[str], scripts: Dict[str, str]) -> Optional[Command]:
    for i, word in enumerate(words):
        name = word.rsplit("/", 1)[-1]
        if name in ("python", "python3") and words[i + 1:i + 2] == ["-m"] and i + 2 < len(words):
            module, rest = words[i + 2], words[i + 3:]
        elif name in scripts:
            module, rest = scripts[name], words[i + 1:]
        else:
            continue
        if not module.startswith(PROJECT_PACKAGES):
            return None
        args = []
        for arg in rest:
            if REDIRECT.match(arg):
                break
            arg = arg.strip("[]")
            if arg and arg != "...":
                args.append(arg)
        return Command(where, module, tuple(args))
    return None


def extract(doc: str, lines: Sequence[str], scripts: Dict[str, str]) -> List[Command]:
    found = []
    for start, body in shell_blocks(lines):
        for number, line in logical_lines(start, body):
            found.extend(commands_of_line(f"{doc}:{number}", line, scripts))
    return found


def documented_commands() -> List[Command]:
    scripts = console_scripts()
    found = []
    for doc in documents():
        found.extend(extract(doc, (ROOT / doc).read_text(encoding="utf-8").splitlines(), scripts))
    return found


def run_tool(module: str, argv: Sequence[str], timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, "-m", module, *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


HELP_FLAG = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*")


def help_flags(text: str) -> set:
    return set(HELP_FLAG.findall(text)) | {"--help"}


@pytest.fixture(scope="module")
def commands() -> List[Command]:
    return documented_commands()


@pytest.fixture(scope="module")
def helps(commands):
    """(module, help argv) -> CompletedProcess of `python -m module *argv --help`, for each
    module alone and for each subcommand / selector the documents use; side by side."""
    keys = {(c.module, ()) for c in commands} | {(c.module, c.help_argv()) for c in commands}
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = {key: pool.submit(run_tool, key[0], [*key[1], "--help"]) for key in keys}
        return {key: future.result() for key, future in futures.items()}


def test_the_documents_show_the_tools_commands(commands):
    modules = {c.module for c in commands}
    assert len(commands) >= MIN_COMMANDS, (len(commands), sorted(modules))
    assert len(modules) >= MIN_MODULES, sorted(modules)
    # Each page that shows a tool's command line is read (a page lost to the glob shows here).
    pages = {c.where.split(":", 1)[0] for c in commands}
    for page in ("README.md", "docs/data.md", "docs/training.md", "docs/finetuning.md",
                 "docs/serving.md", "docs/analysis.md", "docs/checkpoints.md",
                 "docs/dataflow.md"):
        assert page in pages, f"{page} shows no command of the project's tools"


def test_every_documented_tool_answers_help(commands, helps):
    failed = [f"python -m {module} --help: exit {proc.returncode}: {proc.stderr[-500:]}"
              for (module, argv), proc in sorted(helps.items()) if proc.returncode != 0]
    assert not failed, "\n".join(failed)
    for (module, argv), proc in helps.items():
        assert "usage:" in proc.stdout, (module, argv, proc.stdout[:300])


def test_every_documented_flag_is_one_the_tool_takes(commands, helps):
    from data_pipelines.cli import unknown_beam_args

    problems = []
    for command in commands:
        text = helps[(command.module, command.help_argv())].stdout
        known = help_flags(text) | help_flags(helps[(command.module, ())].stdout)
        unknown = [f for f in command.flags() if f not in known]
        if unknown and BEAM_PASS_THROUGH in text:
            passed = [a for a in command.args if a.split("=", 1)[0] in unknown]
            unknown = [f.split("=", 1)[0] for f in unknown_beam_args(passed)]
        if unknown:
            problems.append(f"{command.where}: python -m {command.module} does not take "
                            f"{', '.join(unknown)} (its --help lists no such flag)")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# The extractor itself
# ---------------------------------------------------------------------------------------------
FAKE_DOC = """\
Some text with `python -m garden.train --inline` (not in a block: not a command).

```bash
# a comment: python -m garden.train --not_a_flag
.venv/bin/python -m garden.train --config=configs/bert_tiny.gin \\
    --model_dir=<run_dir> --gin_param="VOCAB='v.txt'"   # trailing --comment
TF_CPP_MIN_LOG_LEVEL=0 garden-curves --model_dir=$RUN && python -m garden.analyze heads \\
    --model=OUT [--prune_threshold=0.9] --output=report/ > log.txt
python -m benchmarks.generation --not_checked
curl -s http://localhost:8501/v1/models/x:predict
```

```python
import subprocess  # python -m garden.serve --in_python
```

```
python -m data_pipelines.make_pretrain --objective bert --input='c/*.txt' --runner=DirectRunner
```
"""


def test_extractor_reads_blocks_continuations_comments_and_placeholders():
    found = extract("FAKE", FAKE_DOC.splitlines(), console_scripts())
    assert [(c.where, c.module, c.args) for c in found] == [
        ("FAKE:5", "garden.train", ("--config=configs/bert_tiny.gin",
                                    "--model_dir=PLACEHOLDER", "--gin_param=VOCAB='v.txt'")),
        ("FAKE:7", "garden.curves", ("--model_dir=$RUN",)),
        ("FAKE:7", "garden.analyze", ("heads", "--model=OUT", "--prune_threshold=0.9",
                                      "--output=report/")),
        ("FAKE:18", "data_pipelines.make_pretrain", ("--objective", "bert", "--input=c/*.txt",
                                                     "--runner=DirectRunner")),
    ]
    assert found[0].flags() == ["--config", "--model_dir", "--gin_param"]
    assert found[2].help_argv() == ("heads",)
    assert found[3].help_argv() == ("--objective=bert",)
    assert found[1].help_argv() == ()


def test_a_flag_the_tool_does_not_take_is_caught():
    # Negative control: a documented flag missing from the tool's --help is reported.
    [command] = extract("FAKE", ["```bash", "python -m garden.curves --model_dir=R --no_such_flag",
                                 "```"], console_scripts())
    proc = run_tool(command.module, ["--help"])
    assert proc.returncode == 0
    assert [f for f in command.flags() if f not in help_flags(proc.stdout)] == ["--no_such_flag"]


# ---------------------------------------------------------------------------------------------
# Quick documented commands, run as written
# ---------------------------------------------------------------------------------------------
def documented(commands, module: str, *args: str) -> Command:
    """The documented command of `module` whose arguments start with `args`."""
    for command in commands:
        if command.module == module and command.args[:len(args)] == args:
            return command
    raise AssertionError(f"no documented `python -m {module} {' '.join(args)} ...`")


def test_documented_worker_requirements_command_prints_the_file(commands):
    command = documented(commands, "data_pipelines.worker_requirements", "--tokenizer=wordpiece")
    proc = run_tool(command.module, command.args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    pinned = {line.split("==", 1)[0].split("[", 1)[0].lower() for line in proc.stdout.splitlines()
              if "==" in line and not line.startswith("#")}
    # A WordPiece job's workers: Beam, numpy, crc32c and the tokenizers library, no TensorFlow.
    assert {"apache-beam", "numpy", "google-crc32c", "tokenizers"} <= pinned, pinned
    assert "tensorflow" not in pinned, pinned


def test_documented_objective_help_lists_the_objectives_flags(commands):
    # docs/data.md: `make_pretrain --objective=albert --help` lists ALBERT's own flags (--ngram).
    command = documented(commands, "data_pipelines.make_pretrain", "--objective=albert", "--help")
    proc = run_tool(command.module, command.args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--ngram" in proc.stdout and "--max_predictions_per_seq" in proc.stdout, proc.stdout


def test_documented_sample_corpus_command_writes_what_the_page_says(commands, tmp_path):
    # docs/data.md: "corpus-NNNNN-of-MMMMM.txt (--num_files, default 4; about 1 MB, 429
    # documents on Python 3.11)", and train.tsv / dev.tsv with labels reference / library.
    command = documented(commands, "data_pipelines.sample_corpus", "--output=demo_out/corpus")
    args = [a.replace("demo_out/", f"{tmp_path}/") for a in command.args]
    proc = run_tool(command.module, args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = sorted((tmp_path / "corpus").glob("corpus-*-of-*.txt"))
    assert [f.name for f in files] == [f"corpus-{i:05d}-of-00004.txt" for i in range(4)]
    texts = [f.read_text(encoding="utf-8") for f in files]
    documents = sum(len([d for d in t.split("\n\n") if d.strip()]) for t in texts)
    # The count depends on the Python installation's docs; the page states 3.11's.
    if sys.version_info[:2] == (3, 11):
        assert documents == 429, documents
    else:
        assert 300 < documents < 600, documents
    size = sum(f.stat().st_size for f in files)
    assert 0.8e6 < size < 1.3e6, size
    header, *rows = (tmp_path / "task" / "train.tsv").read_text(encoding="utf-8").splitlines()
    assert header.split("\t") == ["text_a", "label"]
    assert {row.rsplit("\t", 1)[1] for row in rows} == {"reference", "library"}
