"""The bad-input matrix (issue 13): every command-line tool against a table of malformed inputs
and faults, each run in a process of its own as `python -m TOOL` runs it (forked from a server
that has imported TensorFlow once, tests/tool_forks.py; TOOL_FORKS=0 starts a fresh interpreter
for every run instead).

Tools: data_pipelines.make_vocab, data_pipelines.make_pretrain, data_pipelines.sample_corpus,
data_pipelines.make_finetune (--task=question_answering|tagging), data_pipelines.sample_tasks,
garden.train (the pretraining and fine-tuning tasks), garden.export, garden.convert, garden.serve,
garden.extract_features, garden.generate, garden.fewshot, garden.analyze, garden.bertology.int8,
garden.bertology.qat, garden.export_features, garden.models.cove.sample_pairs, garden.curves, garden.to_huggingface,
data_pipelines.worker_requirements (TOOLS; a new tool is added there and gets rows).

What each row expects (``Case.expect``):

* ``usage``: argparse refuses the command line: exit status 2, and the message is argparse's
  ``<prog>: error: ...`` line after its usage text;
* ``error``: the tool refuses the input: exit status 1..127 (no signal), the message is
  ``error: ...``;
* ``skip``: the tool skips the bad part, counts it and finishes: exit status 0, ``message``
  matches a line of the output (the counter), and the row's ``output`` is there;
* ``warn``: the tool runs to the end and says once why the result is probably not what was
  meant: exit status 0, ``message`` matches exactly one line of the output.

"One line, no traceback" means, for ``usage`` and ``error`` rows:

1. neither stdout nor stderr contains ``Traceback (most recent call last)``;
2. the message is the LAST non-blank line of stderr; it matches the row's ``message`` regex
   (``re.search``), which names the file / record / flag at fault;
3. every other non-blank line of stderr is a log line: TensorFlow's C++ log lines
   (``2026-01-02 03:04:05.678901: E path/file.cc:51] ...`` or absl's ``E0102 03:04:05.678 ...``),
   or Python logging lines in the tools' format (``2026-01-02 03:04:05,678 name LEVEL ...``)
   or in logging's default format (``WARNING:tensorflow:...``),
   or, for ``usage`` rows only, argparse's usage text from its ``usage:`` line on. A printed
   exception, a ``warnings.warn`` line, a stray print to stderr or a second message fails the
   row. (stdout is free: progress lines go there.)

And for every row that does not finish (``usage`` / ``error``): nothing that looks complete is
left behind: no new or rewritten ``COMPLETED`` marker, SavedModel (``saved_model.pb``) or
``convert_info.json`` anywhere under the row's directory, and the row's ``output`` path (when it
names one) does not exist afterwards unless the row's setup put it there; nor a pipeline's
``LOCK`` or ``_work-*`` directory (MARKERS, WORK_PREFIX).

Adding a row: append ``Case(id, tool, setup, expect, message, output=None, env=None)`` to
CASES. ``setup(c)`` gets a ``Ctx`` (``c.dir``: an empty directory of its own; ``c.data``: the
session's ``bert_data`` fixture; ``c.shared``: artefacts built once for the module, e.g.
``c.shared.trained_model_dir()``; ``c.write(name, text_or_bytes)``; ``c.hold(context)`` for a
context manager held while the tool runs) and returns the tool's arguments; ``output(c)``
returns the path the tool would write. Prefer rows that fail before a model is built or a
pipeline runs: the module's budget is 150 s on two cores. A row that fails shows the tool's
whole stdout and stderr; fix the tool (one clear line), not the row.

The rows run in a small thread pool of subprocesses (ROW_WORKERS, each thread with a fork server
of its own) from one module fixture; each row is its own test, so ``-k`` selects rows (only the selected rows are run). At the end the
module prints the number of rows per tool, how many passed and the CPU seconds the rows' processes
took; every row's command line, exit status and output go to a report file (the path
$BAD_INPUT_MATRIX_REPORT, else one in the test's temporary directory).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tool_forks  # noqa: E402
from testing import pretrain_args, python_env  # noqa: E402

TOOLS = ("data_pipelines.make_vocab", "data_pipelines.make_pretrain", "data_pipelines.sample_corpus",
         "data_pipelines.make_finetune", "data_pipelines.sample_tasks",
         "garden.train", "garden.export", "garden.convert", "garden.serve", "garden.extract_features",
         "garden.generate", "garden.fewshot", "garden.analyze", "garden.bertology.int8",
         "garden.bertology.qat", "garden.export_features", "garden.models.cove.sample_pairs", "garden.curves",
         "data_pipelines.worker_requirements", "garden.to_huggingface")
ROW_WORKERS = 3  # subprocesses at once
ROW_TIMEOUT = 240
# What makes an output look complete, and what a refused run must not leave behind either: a
# pipeline's LOCK (it would refuse the next run) and its _work-* directories.
MARKERS = ("COMPLETED", "saved_model.pb", "convert_info.json", "LOCK")
WORK_PREFIX = "_work-"

TRACEBACK = "Traceback (most recent call last)"
LOG_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] "  # TensorFlow C++
    r"|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] "  # absl C++
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) "  # the tools' logging
    r"|(DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:)")  # Python logging's default format (TensorFlow's)
ERROR_LINE = re.compile(r"^error: \S")
USAGE_ERROR_LINE = re.compile(r"^python -m [\w.]+: error: \S")


# ---------------------------------------------------------------------------------------------
# Artefacts shared by the rows


class Shared:
    """Built once per module, on first use, thread-safely (rows run in a thread pool)."""

    def __init__(self, data, root: Path):
        self.data, self.root = data, root
        self._lock = threading.Lock()
        self._built: Dict[str, object] = {}
        self.cpu_seconds = 0.0  # of the processes that built them

    def _once(self, name: str, build: Callable[[], object]):
        with self._lock:
            if name not in self._built:
                self._built[name] = build()
            return self._built[name]

    def trained_model_dir(self) -> str:
        """A model_dir holding a checkpoint of the default tiny BERT (one step)."""
        def build():
            model_dir = self.root / "trained"
            proc = _run("garden.train", train_args(self.data, model_dir, steps=1))
            self.cpu_seconds += proc.cpu_seconds
            assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
            return str(model_dir)
        return self._once("trained", build)


@dataclasses.dataclass
class Ctx:
    dir: Path
    data: object  # tests/conftest.py BertData
    shared: Shared
    held: List[object] = dataclasses.field(default_factory=list)
    cpu_seconds: float = 0.0  # of the processes this row started

    def run(self, tool: str, args: List[str]) -> subprocess.CompletedProcess:
        """A setup step run as a tool (asserted to succeed)."""
        proc = _run(tool, args)
        self.cpu_seconds += proc.cpu_seconds
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return proc

    def write(self, name: str, content) -> str:
        path = self.dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return str(path)

    def hold(self, context):
        self.held.append(context)
        return context.__enter__()

    def copy_data_dir(self, source: Optional[str] = None) -> Path:
        """A private copy of a completed pipeline directory (default: bert_data's, seq 64)."""
        target = self.dir / "data"
        shutil.copytree(source or self.data.data_dir, target)
        return target


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    tool: str
    setup: Callable[[Ctx], List[str]]
    expect: str  # usage | error | skip | warn
    message: str  # regex; see the module docstring
    output: Optional[Callable[[Ctx], str]] = None
    env: Optional[Callable[[Ctx], dict]] = None
    slow: bool = False  # trains or runs a pipeline: started first, so that it is not the last to end

    def __post_init__(self):
        assert self.tool in TOOLS, self.tool
        assert self.expect in ("usage", "error", "skip", "warn"), self.expect


# ---------------------------------------------------------------------------------------------
# Inputs


def _sentences(n: int, seed: int = 0) -> List[str]:
    words = ("the cat sat on the mat while a dog ran far away and then it slept in the warm sun "
             "because the day was long").split()
    return [" ".join(words[(seed + i * 7 + j * 3) % len(words)] for j in range(5 + i % 7)) + " ."
            for i in range(n)]


def _corpus_bytes(docs: int = 4, per_doc: int = 6) -> bytes:
    return "".join("\n".join(_sentences(per_doc, d)) + "\n\n" for d in range(docs)).encode()


def train_args(data, model_dir, *extra, steps: int = 2, data_dir=None, seq: int = 64) -> List[str]:
    """garden.train arguments for a tiny BERT run on bert_data (or another data_dir)."""
    args = pretrain_args(data, model_dir, steps=steps)[2:]  # without "-m garden.train"
    if data_dir is not None:
        phases = [{"start_step": 0, "data_dir": str(data_dir), "max_seq_length": seq}]
        args.append(f"--gin_param=garden.Pretraining.phases={phases!r}")
    return args + ["--strategy=one_device", "--gin_param=train.peak_flops=1e12", *extra]


def _train(*extra) -> Callable[[Ctx], List[str]]:
    """The setup of a row that runs garden.train on bert_data with `extra` arguments."""
    return lambda c: train_args(c.data, c.dir / "run", *extra)


def finetune_args(c: Ctx, *extra, train_file=None, init="None") -> List[str]:
    return ["--config=configs/finetune/classification_tiny.gin", f"--model_dir={c.dir / 'ft'}",
            f"--gin_param=VOCAB='{c.data.vocab}'",
            f"--gin_param=TRAIN_FILE='{train_file or c.data.task_dir + '/train.tsv'}'",
            f"--gin_param=EVAL_FILE='{c.data.task_dir}/dev.tsv'",
            f"--gin_param=INIT_CHECKPOINT={init}", "--gin_param=EXPORT_BASE=None",
            "--gin_param=TRAIN_STEPS=1", "--strategy=one_device", "--gin_param=train.peak_flops=1e12",
            *extra]


def pretrain_cli(c: Ctx, *extra, input=None, output_dir=None, vocab=None) -> List[str]:
    """make_pretrain arguments: BERT, a small corpus of our own unless `input` is given."""
    return ["--objective=bert", f"--input={input or c.write('corpus.txt', _corpus_bytes())}",
            f"--output_dir={output_dir or c.dir / 'out'}", f"--vocab={vocab or c.data.vocab}",
            "--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=1",
            "--num_shards=2", *extra]


def vocab_cli(c: Ctx, *extra, input=None) -> List[str]:
    return [f"--input={input or c.write('corpus.txt', _corpus_bytes())}",
            f"--output={c.dir / 'vocab.txt'}", "--vocab_size=200", *extra]


def read_only_dir(c: Ctx) -> str:
    """A directory this process cannot create files in: mode 0555, or, for root (whom modes
    do not stop), sysfs's /sys/fs, which refuses new files to root too."""
    path = c.dir / "read_only"
    path.mkdir()
    path.chmod(0o555)
    try:
        (path / "probe").touch()
    except PermissionError:
        return str(path)
    (path / "probe").unlink()
    return "/sys/fs"


def _shard(data_dir: Path, i: int = 0) -> Path:
    return sorted(data_dir.glob("train-*.tfrecord"))[i]


def _missing_shard(c: Ctx) -> List[str]:
    data_dir = c.copy_data_dir()
    _shard(data_dir, 1).unlink()
    return train_args(c.data, c.dir / "run", data_dir=data_dir)


def _truncated_shard(c: Ctx) -> List[str]:
    data_dir = c.copy_data_dir()
    shard = _shard(data_dir, 0)
    os.truncate(shard, shard.stat().st_size - 100)  # inside the last record
    return train_args(c.data, c.dir / "run", data_dir=data_dir)


def _corrupt_record(c: Ctx) -> List[str]:
    data_dir = c.copy_data_dir()
    shard = _shard(data_dir, 0)
    raw = bytearray(shard.read_bytes())
    raw[200:210] = bytes(b ^ 0xFF for b in raw[200:210])  # inside record 0's data: only its CRC tells
    shard.write_bytes(bytes(raw))
    return train_args(c.data, c.dir / "run", data_dir=data_dir)


def _no_completed(c: Ctx) -> List[str]:
    data_dir = c.copy_data_dir()
    (data_dir / "COMPLETED").unlink()
    return train_args(c.data, c.dir / "run", data_dir=data_dir)


def _without(args: List[str], prefix: str) -> List[str]:
    kept = [a for a in args if not a.startswith(prefix)]
    assert len(kept) == len(args) - 1, prefix
    return kept


def _locked_output(c: Ctx) -> List[str]:
    from data_pipelines import output

    out = c.dir / "out"
    c.hold(output.OutputLock(str(out), "make_pretrain"))  # a first run, alive, holds the lock
    return pretrain_cli(c, output_dir=out)


def _completed_output(c: Ctx) -> List[str]:
    out = c.dir / "out"
    out.mkdir()
    (out / "COMPLETED").touch()
    return pretrain_cli(c, output_dir=out)


def _other_model_checkpoint(c: Ctx) -> List[str]:
    model_dir = c.dir / "run"
    shutil.copytree(c.shared.trained_model_dir(), model_dir)
    return train_args(c.data, model_dir, "--gin_param=backbone.intermediate_size=256")


def _tiny_data_dir(c: Ctx) -> List[str]:
    """A completed directory of fewer instances than one batch (made by make_pretrain)."""
    data_dir = c.dir / "tiny"
    corpus = c.write("tiny.txt", _corpus_bytes(docs=2, per_doc=3))
    c.run("data_pipelines.make_pretrain",
          ["--objective=bert", f"--input={corpus}", f"--output_dir={data_dir}", f"--vocab={c.data.vocab}",
           "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=1", "--num_shards=1"])
    return train_args(c.data, c.dir / "run", "--gin_param=train.train_steps=1",
                      data_dir=data_dir)


def _bad_gin(c: Ctx) -> List[str]:
    config = c.write("broken.gin", "include 'configs/bert_tiny.gin'\n\ntrain.train_steps = = 3\n")
    return ["--config", config, f"--model_dir={c.dir / 'run'}"]


def _export_model_dir(c: Ctx) -> List[str]:
    base = c.dir / "exports" / "clf"
    for version in ("1", "2"):
        (base / version).mkdir(parents=True)
    return [str(base)]


def _no_credentials(c: Ctx) -> dict:
    # Offline: no key file, an empty gcloud configuration, and not a GCE VM (as test_gcs.py does).
    return {"CLOUDSDK_CONFIG": str(c.dir / "gcloud"), "NO_GCE_CHECK": "true",
            "GCE_METADATA_TIMEOUT": "1", "GOOGLE_APPLICATION_CREDENTIALS": ""}


# --- fine-tuning inputs (make_finetune, the fine-tuning tasks of garden.train)

_SQUAD_CONTEXT = "the cat sat on the mat while a dog ran far away ."


def _squad(*qas) -> str:
    """A SQuAD v2.0 file with one paragraph holding `qas` (default: one good question)."""
    import json

    qas = qas or ({"id": "q1", "question": "where did the cat sit ?", "is_impossible": False,
                   "answers": [{"text": "on the mat", "answer_start": 12}]},)
    return json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [
        {"context": _SQUAD_CONTEXT, "qas": list(qas)}]}]}, indent=1)


def _qa(qas_id="q1", text="on the mat", start=12, **extra) -> dict:
    return {"id": qas_id, "question": "where did the cat sit ?", "is_impossible": False,
            "answers": [{"text": text, "answer_start": start}], **extra}


_CONLL = ("-DOCSTART- -X- -X- O\n\nthe DT B-NP O\ncat NN I-NP B-MISC\nsat VBD B-VP O\n\n"
          "a DT B-NP O\ndog NN I-NP B-PER\n\n")


def finetune_cli(c: Ctx, task: str, text: Optional[str] = None, *extra, input=None, vocab=None,
                 output_dir=None) -> List[str]:
    """make_finetune arguments for --task=task on a file holding `text` (or `input`)."""
    name = {"question_answering": "train.json", "tagging": "train.txt"}[task]
    return [f"--task={task}", f"--input={input or c.write(name, text)}",
            f"--output_dir={output_dir or c.dir / 'out'}", f"--vocab={vocab or c.data.vocab}",
            "--num_shards=1", "--max_seq_length=64",
            *(["--max_query_length=16", "--doc_stride=16"] if task == "question_answering" else []), *extra]


def _finetune_locked(c: Ctx) -> List[str]:
    from data_pipelines import output

    out = c.dir / "out"
    c.hold(output.OutputLock(str(out), "make_finetune"))
    return finetune_cli(c, "tagging", _CONLL, output_dir=out)


def task_train_args(c: Ctx, config: str, *bindings) -> List[str]:
    """garden.train arguments for a fine-tuning config with one training step, no export."""
    return [f"--config=configs/finetune/{config}", f"--model_dir={c.dir / 'ft'}",
            f"--gin_param=VOCAB='{c.data.vocab}'", "--gin_param=INIT_CHECKPOINT=None",
            "--gin_param=EXPORT_BASE=None", "--gin_param=TRAIN_STEPS=1", "--strategy=one_device",
            "--gin_param=train.peak_flops=1e12", *[f"--gin_param={b}" for b in bindings]]


def _texts(c: Ctx) -> str:
    return c.write("in.txt", "the cat sat\n")


def _serve_config(c: Ctx, text: str) -> List[str]:
    return [f"--model_config_file={c.write('models.config', text)}", "--rest_api_port=0"]


def _port_in_use(flag: str):
    """Args of garden.serve with `flag` (--rest_api_port or --port, gRPC) on a port this test
    holds; the other one free."""
    def args(c: Ctx) -> List[str]:
        import socket

        sock = c.hold(contextlib.closing(socket.socket()))
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        base = c.dir / "models" / "m"
        (base / "1").mkdir(parents=True)
        ports = {"--rest_api_port": 0, "--port": 0, flag: sock.getsockname()[1]}
        return [f"--model_base_path={base}", *(f"{k}={v}" for k, v in ports.items())]
    return args



# ---------------------------------------------------------------------------------------------
# The table

MV, MP, SC = "data_pipelines.make_vocab", "data_pipelines.make_pretrain", "data_pipelines.sample_corpus"
GT, GE, GC = "garden.train", "garden.export", "garden.convert"
MF, ST = "data_pipelines.make_finetune", "data_pipelines.sample_tasks"
GS, GX = "garden.serve", "garden.extract_features"
GG, GF = "garden.generate", "garden.fewshot"
GA, GI, GQ = "garden.analyze", "garden.bertology.int8", "garden.bertology.qat"
GFE, GCP = "garden.export_features", "garden.models.cove.sample_pairs"
GCU = "garden.curves"
GTH = "garden.to_huggingface"
_LATIN1 = "the cat sat .\ncafé .\n".encode("latin-1")  # line 2 is not UTF-8
_QA_NO_ANSWER = '{"question": "q", "answer": "a"}\n{"question": "q"}\n'
_out_vocab = (lambda c: str(c.dir / "vocab.txt"))
_out_data = (lambda c: str(c.dir / "out"))


def _analyze_case(id, command, args, expect, message, model=""):
    """A garden.analyze row: `command --model=<row dir>/model *args(c) --output=<row dir>/report`;
    report is the output the refusal must not write."""
    return Case(id, GA, lambda c: [command, f"--model={c.dir / model}", *args(c),
                                   f"--output={c.dir / 'report'}"],
                expect, message, output=lambda c: str(c.dir / "report"))


CASES = [
    # --- make_vocab
    Case("vocab-invalid-utf8-nul-and-long-lines", MV, lambda c: vocab_cli(
        c, "--max_line_bytes=300", input=c.write("bad.txt", b"a \x00 b\n" + b"x" * 400 + b"\n"
                                                  + _corpus_bytes()[:200] + b"\xff\xfe broken\n"
                                                  + _corpus_bytes()[200:])),
        "skip", r"skipped 3 lines \{'invalid_utf8': 1, 'line_too_long': 1, 'nul_byte': 1\}", output=_out_vocab,
        slow=True),
    Case("vocab-input-glob-matches-nothing", MV, lambda c: vocab_cli(c, input=str(c.dir / "no/*.txt")),
         "error", r"no/\*\.txt", output=_out_vocab),
    Case("vocab-input-is-a-directory", MV, lambda c: vocab_cli(c, input=str(c.dir)),
         "error", r"--input=\S+ names a directory .*give a glob of its files", output=_out_vocab),
    Case("vocab-empty-corpus", MV, lambda c: vocab_cli(c, input=c.write("empty.txt", b"")),
         "error", r"empty\.txt", output=_out_vocab),
    Case("vocab-size-too-small", MV, lambda c: vocab_cli(c, "--vocab_size=3"),
         "usage", r"--vocab_size=3 is too small", output=_out_vocab),
    Case("vocab-unknown-flag", MV, lambda c: vocab_cli(c, "--vocabsize=300"),
         "usage", r"unrecognized arguments: --vocabsize=300", output=_out_vocab),
    Case("vocab-output-read-only", MV, lambda c: [*vocab_cli(c)[:1], f"--output={read_only_dir(c)}/v.txt",
                                                  "--vocab_size=200"],
         "error", r"--output=\S+/v\.txt cannot be written \(Permission denied"),
    Case("vocab-output-is-a-directory", MV,
         lambda c: [*vocab_cli(c)[:1], f"--output={c.dir}", "--vocab_size=200"],
         "error", r"--output=\S+ is a directory; give the path of the file"),
    Case("vocab-gs-without-credentials", MV, lambda c: vocab_cli(c, input="gs://garden-test-bucket/c/*.txt"),
         "error", r"--input=gs://garden-test-bucket/c/\*\.txt needs Google Cloud credentials",
         output=_out_vocab, env=_no_credentials),
    # --- make_pretrain
    Case("pretrain-empty-corpus", MP, lambda c: pretrain_cli(c, input=c.write("empty.txt", b"\n\n")),
         "error", r"gave 0 instances.*not marked COMPLETED", output=None),
    Case("pretrain-invalid-utf8-line", MP, lambda c: pretrain_cli(c, input=c.write(
        "bad.txt", _corpus_bytes()[:200] + b"\xff\xfe broken\n" + _corpus_bytes()[200:])),
        "skip", r"invalid_utf8 1", output=lambda c: str(c.dir / "out" / "COMPLETED"), slow=True),
    Case("pretrain-second-run-on-a-locked-dir", MP, _locked_output,
         "error", rf"in use by another make_pretrain run \(pid {os.getpid()} "),
    Case("pretrain-completed-dir-without-overwrite", MP, _completed_output,
         "error", r"already holds a completed dataset.*--overwrite"),
    Case("pretrain-output-dir-read-only", MP, lambda c: pretrain_cli(c, output_dir=read_only_dir(c)),
         "error", r"cannot create \S+/LOCK in --output_dir .*writable --output_dir"),
    Case("pretrain-input-is-a-directory", MP, lambda c: pretrain_cli(c, input=str(c.dir)),
         "error", r"--input=\S+ names a directory .*give a glob of its files", output=_out_data),
    Case("pretrain-input-glob-matches-nothing", MP, lambda c: pretrain_cli(c, input=str(c.dir / "no/*.txt")),
         "error", r"no/\*\.txt", output=_out_data),
    Case("pretrain-vocab-missing", MP, lambda c: pretrain_cli(c, vocab=str(c.dir / "nope.txt")),
         "error", r"nope\.txt", output=_out_data),
    Case("pretrain-vocab-not-a-vocabulary", MP, lambda c: pretrain_cli(
        c, vocab=c.write("vocab.txt", "hello\nworld\n")), "error", r"vocab\.txt", output=_out_data),
    Case("pretrain-unknown-objective", MP, lambda c: ["--objective=bart2", *pretrain_cli(c)[1:]],
         "usage", r"--objective: invalid choice: 'bart2'", output=_out_data),
    Case("pretrain-zero-sequence-length", MP, lambda c: pretrain_cli(c, "--max_seq_length=0"),
         "usage", r"--max_seq_length must be >= 1, got 0", output=_out_data),
    Case("pretrain-negative-dupe-factor", MP, lambda c: pretrain_cli(c, "--dupe_factor=-2"),
         "usage", r"--dupe_factor must be >= 1, got -2", output=_out_data),
    Case("pretrain-unknown-flag", MP, lambda c: pretrain_cli(c, "--num_shard=3"),
         "usage", r"unrecognized arguments: --num_shard=3", output=_out_data),
    Case("pretrain-gs-without-credentials", MP,
         lambda c: pretrain_cli(c, output_dir="gs://garden-test-bucket/out"),
         "error", r"--output_dir=gs://garden-test-bucket/out needs Google Cloud credentials.*gcloud auth",
         env=_no_credentials),
    # --- make_finetune
    Case("finetune-squad-invalid-json", MF, lambda c: finetune_cli(c, "question_answering", _squad()[:-20]),
         "error", r"train\.json:\d+: invalid JSON"),
    Case("finetune-squad-answer-start-off", MF, lambda c: finetune_cli(c, "question_answering", _squad(_qa(start=9))),
         "error", r"train\.json: data\[0\]\.paragraphs\[0\]\.qas\[0\]\.answers\[0\]: answer_start 9 does not "
                  r"point at 'on the mat'"),
    Case("finetune-squad-duplicate-id", MF, lambda c: finetune_cli(c, "question_answering", _squad(_qa(), _qa())),
         "error", r"train\.json: data\[0\]\.paragraphs\[0\]\.qas\[1\]: duplicate id 'q1'"),
    Case("finetune-squad-id-not-a-string", MF, lambda c: finetune_cli(c, "question_answering", _squad(_qa(qas_id=7))),
         "error", r"qas\[0\]\.id must be a string, got int 7"),
    Case("finetune-squad-answer-start-a-string", MF, lambda c: finetune_cli(c, "question_answering", _squad(_qa(start="12"))),
         "error", r"answers\[0\]\.answer_start must be an integer, got '12'"),
    Case("finetune-squad-zero-questions", MF, lambda c: finetune_cli(c, "question_answering", '{"version": "v2.0", "data": []}'),
         "error", r"the input gave 0 instances \(sources read 1, examples read 0.*\S+/out is not marked COMPLETED",
         slow=True),
    Case("finetune-conll-wrong-column-count", MF, lambda c: finetune_cli(
        c, "tagging", _CONLL.replace("sat VBD B-VP O", "sat VBD O")),
        "error", r"train\.txt:5: expected 4 columns \(word POS chunk NER\), got 3"),
    Case("finetune-conll-bad-tag", MF, lambda c: finetune_cli(c, "tagging", _CONLL.replace("B-PER", "X-PER")),
         "error", r"train\.txt:8: tag 'X-PER' is not O, B-TYPE or I-TYPE; \S+/out is not COMPLETED"),
    Case("finetune-conll-tag-not-a-label", MF, lambda c: finetune_cli(c, "tagging", _CONLL.replace("B-PER", "B-ANIMAL")),
         "skip", r"skipping example 1 of \S+/train\.txt: sentence at line 7: tags \['B-ANIMAL'\] are not among",
         output=lambda c: str(c.dir / "out" / "COMPLETED"), slow=True),
    Case("finetune-input-missing", MF, lambda c: finetune_cli(c, "tagging", input=str(c.dir / "none.txt")),
         "error", r"\S+/none\.txt", output=_out_data),
    Case("finetune-input-flag-missing", MF, lambda c: [a for a in finetune_cli(c, "tagging", _CONLL)
                                                      if not a.startswith("--input")],
         "usage", r"the following arguments are required: --input", output=_out_data),
    Case("finetune-input-is-a-directory", MF, lambda c: finetune_cli(c, "tagging", input=str(c.dir)),
         "error", r"--input=\S+ names a directory", output=_out_data),
    Case("finetune-unknown-task", MF, lambda c: ["--task=ner", *finetune_cli(c, "tagging", _CONLL)[1:]],
         "usage", r"--task: invalid choice: 'ner'", output=_out_data),
    Case("finetune-vocab-missing", MF, lambda c: finetune_cli(c, "tagging", _CONLL, vocab=str(c.dir / "nope.txt")),
         "error", r"nope\.txt", output=_out_data),
    Case("finetune-second-run-on-a-locked-dir", MF, _finetune_locked,
         "error", rf"in use by another make_finetune run \(pid {os.getpid()} "),
    Case("finetune-output-dir-read-only", MF, lambda c: finetune_cli(c, "tagging", _CONLL, output_dir=read_only_dir(c)),
         "error", r"cannot create \S+/LOCK in --output_dir"),
    # --- sample_tasks
    Case("sample-tasks-output-is-a-file", ST, lambda c: [f"--output={c.write('taken', 'x')}", "--kinds=single"],
         "error", r"--output=\S+/taken"),
    Case("sample-tasks-output-read-only", ST, lambda c: [f"--output={read_only_dir(c)}/tasks", "--kinds=single"],
         "error", r"--output=\S+/tasks"),
    Case("sample-tasks-unknown-kind", ST, lambda c: [f"--output={c.dir / 't'}", "--kinds=single,qa"],
         "usage", r"--kinds: unknown \['qa'\]", output=lambda c: str(c.dir / "t")),
    # --- garden.serve
    Case("serve-base-path-missing", GS, lambda c: [f"--model_base_path={c.dir / 'none'}", "--rest_api_port=0"],
         "error", r"model default: base path \S+/none does not exist"),
    Case("serve-base-path-without-versions", GS, lambda c: [f"--model_base_path={c.dir}", "--rest_api_port=0"],
         "error", r"base path \S+/serve-base-path-without-versions holds no version directory"),
    Case("serve-config-file-malformed", GS, lambda c: _serve_config(
        c, "model_config_list {\n  config {\n    name: 'm'\n    base_path: \n  }\n}\n"),
        "error", r"models\.config: 5:3 : .*Expected string"),
    Case("serve-config-file-missing", GS, lambda c: [f"--model_config_file={c.dir / 'none.config'}"],
         "error", r"\S+/none\.config"),
    Case("serve-config-file-and-base-path", GS, lambda c: [
        *_serve_config(c, f"model_config_list {{ config {{ name: 'm' base_path: '{c.dir}' }} }}\n"),
        f"--model_base_path={c.dir}"],
        "error", r"--model_config_file.*--model_base_path|--model_base_path.*--model_config_file"),
    Case("serve-negative-thread-pool", GS, lambda c: [f"--model_base_path={c.dir}", "--rest_api_port=0",
                                                     "--tensorflow_inter_op_parallelism=-1"],
         "error", r"--tensorflow_inter_op_parallelism must be >= 0"),
    Case("serve-port-in-use", GS, _port_in_use("--rest_api_port"), "error",
         r"--rest_api_port=\d+ on 127\.0\.0\.1: Address already in use"),
    Case("serve-grpc-port-in-use", GS, _port_in_use("--port"), "error",
         r"--port=\d+ \(gRPC\) on 127\.0\.0\.1: Address already in use"),
    # --- garden.analyze, garden.bertology.int8 and garden.bertology.qat
    _analyze_case("analyze-model-missing", "attention", lambda c: [
        f"--input={c.write('t.txt', 'a b c .')}"], "error",
        r"--model=\S+/none is neither .*garden\.convert", model="none"),
    _analyze_case("analyze-input-matches-nothing", "attention", lambda c: [
        f"--input={c.dir / '*.none'}"], "error", r"--input=\S+\*\.none matches no file"),
    _analyze_case("analyze-heads-without-task-data", "heads", lambda c: [],
                  "usage", r"heads needs --task_data"),
    _analyze_case("analyze-prune-without-task-data", "prune", lambda c: [],
                  "usage", r"prune needs --task_data"),
    _analyze_case("analyze-probe-without-probe-train", "probe", lambda c: [],
                  "usage", r"probe needs --probe_train"),
    _analyze_case("analyze-perplexity-without-input", "perplexity", lambda c: [],
                  "usage", r"perplexity needs --input"),
    _analyze_case("analyze-probe-unknown-task", "probe", lambda c: [
        f"--probe_train={c.write('train.txt', 'Paris NNP B-NP I-LOC' + chr(10))}",
        "--probe_tasks=srl"], "usage", r"--probe_tasks=srl: choose among ner, pos, chunk"),
    _analyze_case("analyze-neighbours-without-input", "neighbours", lambda c: [],
                  "usage", r"neighbours needs --input"),
    _analyze_case("analyze-attributions-zero-steps", "attributions", lambda c: [
        f"--input={c.write('t.txt', 'a b c .')}", "--steps=0"],
        "usage", r"--steps=0 must be at least 1"),
    _analyze_case("analyze-fill-mask-model-missing", "fill_mask", lambda c: [
        f"--input={c.write('m.txt', 'a [MASK] c .')}"], "error",
        r"--model=\S+/none is neither .*garden\.convert", model="none"),
    _analyze_case("analyze-perplexity-model-missing", "perplexity", lambda c: [
        f"--input={c.write('t.txt', 'a b c .')}"], "error",
        r"--model=\S+/none is neither .*garden\.convert", model="none"),
    _analyze_case("analyze-prune-threshold-above-1", "prune", lambda c: [
        f"--task_data={c.dir / 'dev.tsv'}", "--prune_threshold=1.5"],
        "usage", r"--prune_threshold=1\.5 must lie in \[0, 1\]"),
    _analyze_case("analyze-probe-train-missing", "probe", lambda c: [
        f"--probe_train={c.dir / 'none.conll'}"], "error",
        r"--probe_train=\S+/none\.conll is not a file"),
    _analyze_case("analyze-senses-missing", "wsd", lambda c: [
        f"--senses={c.dir / 'none.jsonl'}"], "error", r"--senses=\S+/none\.jsonl is not a file"),
    _analyze_case("analyze-input-empty", "attention", lambda c: [
        f"--input={c.write('empty.txt', '')}"], "error", r"no sentence in \S+/empty\.txt"),
    _analyze_case("analyze-input-not-utf8", "contextuality", lambda c: [
        f"--input={c.write('latin1.txt', _LATIN1)}"],
        "error", r"\S+/latin1\.txt:2 is not UTF-8 text"),
    _analyze_case("analyze-pruned-output-holds-a-model", "prune", lambda c: [
        f"--task_data={c.dir / 'dev.tsv'}",
        f"--pruned_output={os.path.dirname(c.write('pruned/convert_info.json', '{}'))}"],
        "error", r"--pruned_output=\S+/pruned is a file or already holds a convert_info\.json"),
    Case("int8-model-dir-missing", GI, lambda c: [f"--model_dir={c.dir / 'none'}"],
         "error", r"\S+/none is not a garden\.train run directory"),
    Case("int8-no-model-dir", GI, lambda c: [], "usage", r"--model_dir"),
    Case("qat-model-dir-missing", GQ, lambda c: [f"--model_dir={c.dir / 'none'}",
                                                f"--output_dir={c.dir / 'qat'}"],
         "error", r"\S+/none is not a garden\.train run directory",
         output=lambda c: str(c.dir / "qat")),
    Case("qat-output-is-the-run", GQ, lambda c: [f"--model_dir={c.dir / 'run'}",
                                               f"--output_dir={c.dir / 'run'}"],
         "error", r"--output_dir is the float run \S+/run; the QAT run needs a directory of its own"),
    Case("qat-zero-steps", GQ, lambda c: [f"--model_dir={c.dir / 'run'}",
                                        f"--output_dir={c.dir / 'qat'}", "--train_steps=0"],
         "usage", r"--train_steps must be at least 1, got 0"),
    # --- garden.curves
    Case("curves-no-events", GCU, lambda c: [f"--model_dir={c.dir / 'none'}",
                                             f"--output={c.dir / 'curves.png'}"],
         "error", r"no TensorBoard event files in \S+/none/train",
         output=lambda c: str(c.dir / "curves.png")),
    Case("curves-no-model-dir", GCU, lambda c: [], "usage", r"--model_dir"),
    # --- garden.to_huggingface
    Case("to-huggingface-no-flags", GTH, lambda c: [], "usage", r"--model_dir, --output"),
    Case("to-huggingface-model-dir-missing", GTH, lambda c: [
        f"--model_dir={c.dir / 'none'}", f"--output={c.dir / 'hf'}"], "error",
        r"\S+/none is neither a garden\.train run directory \(no operative_config\.gin\) nor "
        r"a garden\.convert output directory", output=lambda c: str(c.dir / "hf")),
    Case("to-huggingface-output-holds-a-model", GTH, lambda c: [
        f"--model_dir={c.shared.trained_model_dir()}",
        f"--output={os.path.dirname(c.write('hf/model.safetensors', b'held'))}"], "error",
        r"\S+/hf/model\.safetensors exists: give a new --output"),
    # --- data_pipelines.worker_requirements (prints a job's worker requirements; writes nothing)
    Case("worker-requirements-no-tokenizer", "data_pipelines.worker_requirements",
         lambda c: [], "usage", r"--tokenizer"),
    Case("worker-requirements-unknown-tokenizer", "data_pipelines.worker_requirements",
         lambda c: ["--tokenizer=unigram"], "usage", r"--tokenizer: invalid choice: 'unigram'"),
    # --- garden.export_features and the CoVe sample pair task
    Case("features-model-dir-missing", GFE, lambda c: [
        f"--model_dir={c.dir / 'none'}", f"--export_base={c.dir / 'exports'}"], "error",
        r"\S+/none is neither a garden\.train run directory \(no operative_config\.gin\) nor a "
        r"garden\.convert output directory", output=lambda c: str(c.dir / "exports")),
    Case("features-no-export-base", GFE, lambda c: [f"--model_dir={c.dir}"], "usage",
         r"--export_base"),
    Case("sample-pairs-input-missing", GCP, lambda c: [
        f"--input={c.dir / 'none.txt'}", f"--output={c.dir / 'pairs'}"], "error",
        r"--input=\S+/none\.txt is not a file", output=lambda c: str(c.dir / "pairs")),
    Case("sample-pairs-no-sentence", GCP, lambda c: [
        f"--input={c.write('long.txt', ' '.join(['word'] * 30) + chr(10))}",
        f"--output={c.dir / 'pairs'}"], "error", r"long\.txt holds no non-empty line of at "
        r"most 20 words", output=lambda c: str(c.dir / "pairs")),
    # --- extract_features
    Case("extract-model-dir-missing", GX, lambda c: [
        f"--model_dir={c.dir / 'none'}", f"--input={_texts(c)}",
        f"--output={c.dir / 'f.jsonl'}"], "error", r"\S+/none", output=lambda c: str(c.dir / "f.jsonl")),
    Case("extract-bad-layers", GX, lambda c: [
        f"--model_dir={c.dir}", f"--input={_texts(c)}",
        f"--output={c.dir / 'f.jsonl'}", "--layers=-1,top"],
        "error", r"--layers must be comma-separated integers, got '-1,top'", output=lambda c: str(c.dir / "f.jsonl")),
    Case("extract-input-missing", GX, lambda c: [
        f"--model_dir={c.dir}", f"--input={c.dir / 'none.txt'}", f"--output={c.dir / 'f.jsonl'}"],
        "error", r"\S+/none\.txt", output=lambda c: str(c.dir / "f.jsonl")),
    Case("extract-neither-model-dir-nor-checkpoint", GX, lambda c: [
        f"--input={_texts(c)}", f"--output={c.dir / 'f.jsonl'}"],
        "usage", r"give exactly one of --model_dir and --init_checkpoint"),
    # --- garden.generate / garden.fewshot
    Case("generate-model-dir-missing", GG, lambda c: [f"--model_dir={c.dir / 'none'}", "--prompt=x"],
         "error", r"\S+/none is neither a garden\.train run directory \(no "
                  r"operative_config\.gin\).* \(no generation\.json\)"),
    Case("generate-top-p-zero", GG, lambda c: [f"--model_dir={c.dir}", "--prompt=x", "--top_p=0"],
         "error", r"top_p=0\.0 must be in \(0, 1\]"),
    Case("generate-negative-threads", GG, lambda c: [f"--model_dir={c.dir}", "--prompt=x",
                                                     "--intra_op_threads=-1"],
         "error", r"--intra_op_threads must be >= 0"),
    Case("fewshot-freeform-line-without-answer", GF, lambda c: [
        f"--model_dir={c.dir}", "--task=freeform", f"--demos={c.write('qa.jsonl', _QA_NO_ANSWER)}",
        f"--eval={c.dir / 'qa.jsonl'}"], "error", r"qa\.jsonl:2:"),
    Case("fewshot-negative-k", GF, lambda c: [
        f"--model_dir={c.dir}", "--task=swag", "--demos=a.csv", "--eval=b.csv", "--k=-1"],
        "error", r"--k=-1 must be >= 0"),
    # --- garden.train: the fine-tuning tasks on malformed files
    Case("train-tagging-conll-bad-columns", GT, lambda c: task_train_args(
        c, "tagging_tiny.gin", f"TRAIN_DATA='{c.write('train.txt', _CONLL.replace('sat VBD B-VP O', 'sat O'))}'",
        f"EVAL_DATA='{c.write('dev.txt', _CONLL)}'"),
        "error", r"train\.txt:5: expected 4 columns"),
    Case("train-qa-squad-answer-start-off", GT, lambda c: task_train_args(
        c, "question_answering_tiny.gin", f"TRAIN_FILE='{c.write('train.json', _squad(_qa(start=3)))}'", "TRAIN_RECORDS=None",
        f"EVAL_FILE='{c.write('dev.json', _squad())}'"),
        "error", r"train\.json: data\[0\]\.paragraphs\[0\]\.qas\[0\]\.answers\[0\]: answer_start 3"),
    Case("train-multiple-choice-short-row", GT, lambda c: task_train_args(
        c, "multiple_choice_tiny.gin", f"TRAIN_FILE='{c.write('train.csv', _SWAG_BAD)}'",
        f"EVAL_FILE='{c.write('dev.csv', _SWAG_BAD)}'"),
        "error", r"train\.csv:3: row has \d+ fields"),
    Case("train-glue-sst2-extra-field", GT, lambda c: finetune_args(
        c, "--gin_param=garden.Classification.glue_task='sst2'", train_file=c.write(
            "train.tsv", "sentence\tlabel\nthe cat sat\t1\nthe dog\tran\t0\n")),
        "error", r"train\.tsv:3"),
    # --- sample_corpus
    Case("sample-corpus-zero-files", SC, lambda c: [f"--output={c.dir / 'corpus'}", "--num_files=0"],
         "usage", r"--num_files must be >= 1"),
    Case("sample-corpus-output-is-a-file", SC, lambda c: [f"--output={c.write('taken', 'x')}"],
         "error", r"--output=\S+/taken: cannot write there \(File exists"),
    Case("sample-corpus-task-output-is-a-file", SC, lambda c: [
        f"--output={c.dir / 'corpus'}", f"--task_output={c.write('taken', 'x')}", "--num_files=1"],
        "error", r"--task_output=\S+/taken: cannot write there \(File exists"),
    # --- garden.train: data
    Case("train-missing-shard", GT, _missing_shard, "error", r"lacks 1 of the 2 shards .*train-00001-of-00002"),
    Case("train-truncated-shard", GT, _truncated_shard, "error",
         r"shard \S+/train-00000-of-00002\.tfrecord is truncated or corrupt .*partial record at byte \d+"),
    Case("train-corrupt-record", GT, _corrupt_record, "error",
         r"shard \S+/train-00000-of-00002\.tfrecord, record 0 \(0-based\)", slow=True),
    Case("train-data-dir-not-completed", GT, _no_completed, "error", r"no COMPLETED marker"),
    Case("train-data-dir-missing", GT, lambda c: train_args(c.data, c.dir / "run", data_dir=c.dir / "nodata"),
         "error", r"data directory \S+/nodata does not exist"),
    Case("train-data-of-another-sequence-length", GT,
         lambda c: train_args(c.data, c.dir / "run", data_dir=c.data.data_dir_128, seq=64),
         "error", r"has max_seq_length 128, the config expects 64"),
    Case("train-empty-dataset", GT, lambda c: _empty_dataset(c), "error", r"holds no instances"),
    # --- garden.train: configuration
    Case("train-vocab-macro-missing", GT,
         lambda c: _without(train_args(c.data, c.dir / "run"), "--gin_param=VOCAB"),
         "error", r"uses the macro %VOCAB but does not bind it"),
    Case("train-data-dir-macro-missing", GT, lambda c: [
        a for a in _without(train_args(c.data, c.dir / "run"), "--gin_param=DATA_DIR")
        if not a.startswith("--gin_param=garden.Pretraining.phases")],
        "error", r"uses the macro %DATA_DIR but does not bind it"),
    Case("train-fractional-steps", GT, _train("--gin_param=train.train_steps=20.5"),
         "error", r"train\.train_steps must be a positive whole number; got 20\.5"),
    Case("train-zero-batch", GT, _train("--gin_param=train.global_batch_size=0"),
         "error", r"global_batch_size"),
    Case("train-negative-steps", GT, _train("--gin_param=train.train_steps=-3"),
         "error", r"train\.train_steps must be a positive whole number; got -3"),
    Case("train-gin-syntax-error", GT, _bad_gin, "error", r"broken\.gin.*line 3"),
    Case("train-gin-unknown-parameter", GT, _train("--gin_param=train.train_stepz=3"),
         "error", r"invalid configuration \(--gin_param=train\.train_stepz=3\): Configurable 'train' "
                  r"doesn't have a parameter named 'train_stepz'\.$"),
    Case("train-config-file-missing", GT, lambda c: ["--config=configs/no_such.gin", f"--model_dir={c.dir}"],
         "error", r"config file not found: configs/no_such\.gin"),
    Case("train-unknown-flag", GT, lambda c: train_args(c.data, c.dir / "run", "--model-dir=x"),
         "usage", r"unrecognized arguments: --model-dir=x"),
    Case("train-model-dir-read-only", GT, lambda c: train_args(c.data, f"{read_only_dir(c)}/run"),
         "error", r"\S+/run"),
    Case("train-init-checkpoint-missing", GT, lambda c: finetune_args(c, init=f"'{c.dir}/no_such_run'"),
         "error", r"\S+/no_such_run"),
    Case("train-train-file-missing", GT, lambda c: finetune_args(c, train_file=f"{c.dir}/none.tsv"),
         "error", r"\S+/none\.tsv"),
    Case("train-model-dir-holds-another-model", GT, _other_model_checkpoint, "error",
         r"ckpt-1.*does not fit the configured model.*(\(128, 512\)|\[128,512\])", slow=True),
    # precisions (issue 34): refused before model_dir is made or a model is built
    Case("train-precision-unknown", GT, _train("--gin_param=train.precision='bf16'"), "error",
         r"train\.precision must be one of 'float32', 'mixed_bfloat16', 'mixed_float16'; got 'bf16'"),
    Case("train-export-precision-unknown", GT,
         lambda c: finetune_args(c, "--gin_param=train.export_precision='bf16'"), "error",
         r"train\.export_precision must be one of 'float32', 'bfloat16'; got 'bf16'"),
    Case("train-export-precision-flag-unknown", GT,
         lambda c: finetune_args(c, "--export_precision=float16"), "usage",
         r"--export_precision: invalid choice: 'float16'"),
    Case("train-bfloat16-export-without-export", GT, _train("--export_precision=bfloat16"), "error",
         r"train\.export_precision = 'bfloat16', but the \S+ task exports nothing .*unbind "
         r"train\.export_precision"),
    # --- garden.train: runs that finish but warn
    Case("train-warmup-longer-than-run", GT,
         _train("--gin_param=train.train_steps=1", "--gin_param=train.warmup_steps=5"),
         "warn", r"warning: train\.warmup_steps \(5\) >= train\.train_steps \(1\)", slow=True),
    Case("train-pretraining-data-smaller-than-a-batch", GT, _tiny_data_dir,
         "warn", r"warning: \S+/tiny holds \d+ instances, fewer than one batch of 16", slow=True),
    Case("train-finetune-file-smaller-than-a-batch", GT, lambda c: finetune_args(c, train_file=c.write(
        "three.tsv", "text_a\tlabel\nthe cat sat\treference\na dog ran\tlibrary\nit slept\treference\n")),
        "warn", r"warning: \S+/three\.tsv has 3 examples, fewer than one batch of 32", slow=True),
    # --- garden.export
    Case("export-model-dir-without-version", GE, _export_model_dir, "error",
         r"not a SavedModel version directory .*versions \[1, 2\]: pass \S+/clf/2"),
    Case("export-missing-dir", GE, lambda c: [str(c.dir / "nothing")],
         "error", r"\S+/nothing is not a SavedModel"),
    # --- garden.convert
    Case("convert-missing-directory", GC, lambda c: [
        "--source=huggingface", "--model=bert", f"--input={c.dir / 'no_model'}", f"--output={c.dir / 'out'}"],
        "error", r"\S+/no_model", output=lambda c: str(c.dir / "out")),
    Case("convert-directory-without-config", GC, lambda c: [
        "--source=huggingface", "--model=bert", f"--input={c.dir}", f"--output={c.dir / 'out'}"],
        "error", r"config\.json", output=lambda c: str(c.dir / "out")),
    Case("convert-tf1-without-config", GC, lambda c: [
        "--source=tf1", "--model=bert", f"--input={c.dir / 'ckpt'}", f"--output={c.dir / 'out'}"],
        "error", r"--source=tf1 needs --config", output=lambda c: str(c.dir / "out")),
    Case("convert-tf1-checkpoint-missing", GC, lambda c: [
        "--source=tf1", "--model=bert", f"--input={c.dir / 'ckpt'}", f"--output={c.dir / 'out'}",
        f"--config={c.write('bert_config.json', _BERT_CONFIG)}"],
        "error", r"--input=\S+/ckpt cannot be read as a --source=tf1 checkpoint",
        output=lambda c: str(c.dir / "out")),
    Case("convert-unknown-family", GC, lambda c: [
        "--source=huggingface", "--model=gpt9", f"--input={c.dir}", f"--output={c.dir / 'out'}"],
        "usage", r"--model: invalid choice: 'gpt9'", output=lambda c: str(c.dir / "out")),
    # --- garden.convert: files of the wrong format (issue 32)
    Case("convert-allennlp-weights-not-hdf5", GC, lambda c: [
        "--source=allennlp", "--model=elmo", f"--input={c.write('weights.hdf5', 'not HDF5')}",
        f"--config={c.write('options.json', '{}')}", f"--output={c.dir / 'out'}"],
        "error", r"--input=\S+/weights\.hdf5 is not a readable HDF5 file .*file signature not found",
        output=lambda c: str(c.dir / "out")),
    Case("convert-huggingface-config-not-json", GC, lambda c: [
        "--source=huggingface", "--model=bert",
        f"--input={_hf_dir(c, _CONFIG_NOT_JSON)}", f"--output={c.dir / 'out'}"],
        "error", r"\S+/hf/config\.json is not JSON: Expecting property name .*line 1 column 23",
        output=lambda c: str(c.dir / "out")),
    Case("convert-huggingface-config-of-another-model", GC, lambda c: [
        "--source=huggingface", "--model=roberta", f"--input={_hf_dir(c, '{}')}",
        f"--output={c.dir / 'out'}"],
        "error", r"\S+/hf/config\.json has no 'vocab_size' \(is it a --model=roberta config\?\)",
        output=lambda c: str(c.dir / "out")),
    Case("convert-huggingface-weights-not-safetensors", GC, lambda c: [
        "--source=huggingface", "--model=bert", f"--input={_hf_dir(c, _BERT_CONFIG, b'not safetensors')}",
        f"--output={c.dir / 'out'}"],
        "error", r"\S+/hf/model\.safetensors is not a readable safetensors file",
        output=lambda c: str(c.dir / "out")),
    Case("convert-tf1-config-not-json", GC, lambda c: [
        "--source=tf1", "--model=bert", f"--input={c.dir / 'ckpt'}", "--lower_case",
        f"--config={c.write('bert_config.json', '{vocab_size: 100}')}", f"--output={c.dir / 'out'}"],
        "error", r"--config=\S+/bert_config\.json is not JSON", output=lambda c: str(c.dir / "out")),
    # --- garden.convert: checkpoints as users hold them (issue 35 item 2)
    Case("convert-model-id-not-in-the-hub-cache", GC, lambda c: [
        "--source=huggingface", "--model=bert", "--input=test-org/absent-bert",
        f"--cache_dir={c.dir / 'hub'}", f"--output={c.dir / 'out'}"],
        "error", r"--input=test-org/absent-bert is not a directory, and the Hugging Face cache "
                 r"\S+/hub holds no models--test-org--absent-bert .*`hf download test-org/absent-bert`",
        output=lambda c: str(c.dir / "out")),
    Case("convert-keras-hub-family-without-converter", GC, lambda c: [
        "--source=keras_hub", "--model=roberta", f"--input={c.dir}", f"--output={c.dir / 'out'}"],
        "error", r"no --source=keras_hub converter for 'roberta' \(it converts from huggingface\)",
        output=lambda c: str(c.dir / "out")),
    Case("convert-keras-hub-directory-without-preset", GC, lambda c: [
        "--source=keras_hub", "--model=bert", f"--input={c.dir}", f"--output={c.dir / 'out'}"],
        "error", r"--input=\S+ has no config\.json or model\.weights\.h5: not a keras-hub backbone preset",
        output=lambda c: str(c.dir / "out")),
]

_SWAG_HEADER = "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"
_SWAG_BAD = (_SWAG_HEADER + "v1,0,the cat sat,the cat sat,on,gold,the mat,a hat,the sun,a dog,0\n"
             "v2,1,the dog ran,the dog ran,far,gold,away,home,late\n")

_CONFIG_NOT_JSON = '{"model_type": "bert",,}'  # the second comma: column 23
_BERT_CONFIG = ('{"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, '
                '"intermediate_size": 64, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, '
                '"attention_probs_dropout_prob": 0.1, "max_position_embeddings": 64, "type_vocab_size": 2, '
                '"initializer_range": 0.02}')


def _hf_dir(c: Ctx, config: str, weights: Optional[bytes] = None) -> str:
    """A Hugging Face checkpoint directory: config.json and model.safetensors (by default a
    real one holding one array, so that only the config is at fault)."""
    if weights is None:
        import numpy as np
        from safetensors.numpy import save

        weights = save({"x": np.zeros(3, np.float32)})
    c.write("hf/model.safetensors", weights)
    return os.path.dirname(c.write("hf/config.json", config))


def _empty_dataset(c: Ctx) -> List[str]:
    """A completed directory whose info.json counts zero instances (as make_pretrain wrote
    before it refused to complete one)."""
    import json

    data_dir = c.copy_data_dir()
    info = json.loads((data_dir / "info.json").read_text())
    for name in info["files"]:
        (data_dir / name).write_bytes(b"")
    info["instances"] = {"total": 0, "per_shard": [0] * len(info["files"])}
    info["file_sizes"] = {name: 0 for name in info["files"]}
    (data_dir / "info.json").write_text(json.dumps(info))
    return train_args(c.data, c.dir / "run", data_dir=data_dir)


# ---------------------------------------------------------------------------------------------
# Running a row


# The fork servers of the running `outcomes` fixture (tests/tool_forks.py), one per row
# thread; a run takes one that is free (None outside the fixture: a fresh interpreter).
_POOL: "tool_forks.ForkPool | None" = None


def _run(tool: str, args: List[str], env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """`python -m tool args` in a process of its own (forked from a fork server that has imported
    TensorFlow, or a fresh interpreter with TOOL_FORKS=0); the CompletedProcess also carries
    ``cpu_seconds`` (the child's user + system time, what the 2-core budget is about)."""
    run_env = python_env(**(env or {}))
    code, out, err, cpu = (_POOL.run(tool, args, run_env, ROW_TIMEOUT) if _POOL is not None
                           else tool_forks.run_tool(tool, args, run_env, ROW_TIMEOUT))
    proc = subprocess.CompletedProcess([sys.executable, "-m", tool, *args], code, out, err)
    proc.cpu_seconds = cpu
    return proc


def _markers(root: Path) -> Dict[str, float]:
    found = {}
    for dirpath, dirs, files in os.walk(root):
        found.update({os.path.join(dirpath, d): 0 for d in dirs if d.startswith(WORK_PREFIX)})
        for name in files:
            if name in MARKERS:
                path = os.path.join(dirpath, name)
                found[path] = os.stat(path).st_mtime_ns
    return found


@dataclasses.dataclass
class Outcome:
    case: Case
    args: List[str]
    proc: Optional[subprocess.CompletedProcess]
    problems: List[str]
    seconds: float
    cpu_seconds: float  # the row's processes: its setup's and the tool's

    def report(self) -> str:
        out = self.proc.stdout[-3000:] if self.proc else ""
        err = self.proc.stderr[-5000:] if self.proc else ""
        return (f"row {self.case.id}: python -m {self.case.tool} {' '.join(self.args)}\n"
                f"exit {self.proc.returncode if self.proc else None}, {self.seconds:.1f} s, "
                f"{self.cpu_seconds:.1f} CPU-s\n"
                + "".join(f"PROBLEM: {p}\n" for p in self.problems)
                + f"--- stdout ---\n{out}\n--- stderr ---\n{err}")


def check(case: Case, proc: subprocess.CompletedProcess, before: Dict[str, float], after: Dict[str, float],
          output: Optional[str], output_existed: bool) -> List[str]:
    """What is wrong with one row's run (empty: as expected); see the module docstring."""
    problems = []
    both = proc.stdout + proc.stderr
    if TRACEBACK in both:
        problems.append("a Python traceback in the output")
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    if case.expect in ("usage", "error"):
        if case.expect == "usage" and proc.returncode != 2:
            problems.append(f"exit status {proc.returncode}, argparse's is 2")
        if not 0 < proc.returncode < 128:
            problems.append(f"exit status {proc.returncode}, expected 1..127 (a refusal, not a signal)")
        message = lines[-1] if lines else ""
        shape = USAGE_ERROR_LINE if case.expect == "usage" else ERROR_LINE
        if not shape.match(message):
            problems.append(f"the last line of stderr is not {shape.pattern!r}: {message!r}")
        if not re.search(case.message, message):
            problems.append(f"the message does not match {case.message!r}: {message!r}")
        rest = lines[:-1]
        if case.expect == "usage":
            usage = [i for i, ln in enumerate(rest) if ln.startswith("usage: ")]
            rest = rest[:usage[0]] if usage else rest
        stray = [ln for ln in rest if not LOG_LINE.match(ln)]
        if stray:
            problems.append(f"{len(stray)} stderr lines besides the message that are not log lines, "
                            f"e.g. {stray[:3]}")
        new = sorted(p for p, t in after.items() if before.get(p) != t)
        if new:
            problems.append(f"left output that looks complete: {new}")
        if output and os.path.exists(output) and not output_existed:
            problems.append(f"left its output {output}")
    else:
        if proc.returncode != 0:
            problems.append(f"exit status {proc.returncode}, expected 0")
        matching = [ln for ln in both.splitlines() if re.search(case.message, ln)]
        if case.expect == "warn" and len(matching) != 1:
            problems.append(f"{len(matching)} lines match {case.message!r}, expected exactly one")
        if case.expect == "skip" and not matching:
            problems.append(f"no line counts the skip ({case.message!r})")
        if output and not os.path.exists(output):
            problems.append(f"its output {output} is missing")
    return problems


def run_case(case: Case, root: Path, shared: Shared) -> Outcome:
    start = time.monotonic()
    c = Ctx(dir=root / case.id, data=shared.data, shared=shared)
    c.dir.mkdir(parents=True)
    args, proc = [], None
    try:
        args = case.setup(c)
        output = case.output(c) if case.output else None
        output_existed = bool(output) and os.path.exists(output)
        before = _markers(c.dir)
        proc = _run(case.tool, args, case.env(c) if case.env else None)
        c.cpu_seconds += proc.cpu_seconds
        problems = check(case, proc, before, _markers(c.dir), output, output_existed)
    except Exception:  # noqa: BLE001 - a broken setup fails its row, not the whole table
        problems = [f"the row's setup or run raised:\n{traceback.format_exc()}"]
    finally:
        for context in reversed(c.held):
            context.__exit__(None, None, None)
        with contextlib.suppress(OSError):
            (c.dir / "read_only").chmod(0o755)  # so that pytest can clean up
    return Outcome(case, args, proc, problems, time.monotonic() - start, c.cpu_seconds)


# ---------------------------------------------------------------------------------------------
# Tests


@pytest.fixture(scope="module")
def fork_pool() -> tool_forks.ForkPool:
    """ROW_WORKERS fork servers (tests/tool_forks.py; none with TOOL_FORKS=0), started side by
    side, closed after the module."""
    pool = tool_forks.ForkPool(python_env(), size=ROW_WORKERS)
    pool.start_all()
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def outcomes(request, bert_data, tmp_path_factory, fork_pool) -> Dict[str, Outcome]:
    """Runs the selected rows, ROW_WORKERS at a time; {case id: Outcome}."""
    selected = {item.callspec.params["case"].id for item in request.session.items
                if item.fspath == request.fspath and hasattr(item, "callspec")
                and "case" in item.callspec.params}
    cases = [case for case in CASES if case.id in selected]
    root = tmp_path_factory.mktemp("matrix")
    shared = Shared(bert_data, root / "_shared")
    results = {}
    global _POOL
    _POOL = fork_pool
    try:
        with concurrent.futures.ThreadPoolExecutor(ROW_WORKERS) as pool:
            futures = {pool.submit(run_case, case, root, shared): case
                       for case in sorted(cases, key=lambda case: not case.slow)}
            for future in concurrent.futures.as_completed(futures):
                outcome = future.result()
                results[outcome.case.id] = outcome
    finally:
        _POOL = None
    yield results
    by_tool = collections.Counter(o.case.tool for o in results.values())
    passed = sum(not o.problems for o in results.values())
    cpu = (sum(o.cpu_seconds for o in results.values()) + shared.cpu_seconds
           + sum(server.cpu_seconds for server in fork_pool.start_all()))
    report = Path(os.environ.get("BAD_INPUT_MATRIX_REPORT") or root / "matrix_report.txt")
    report.write_text("\n\n".join(results[c.id].report() for c in cases))
    cpu_by_tool = collections.Counter()
    for o in results.values():
        cpu_by_tool[o.case.tool.split(".")[-1]] += round(o.cpu_seconds)
    slowest = sorted(results.values(), key=lambda o: -o.cpu_seconds)[:5]
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(
            f"\nbad-input matrix: {len(results)} of {len(CASES)} rows run, {passed} as expected; "
            f"per tool: {dict(sorted(by_tool.items()))}; {cpu:.0f} CPU-s in the rows' processes "
            f"({dict(cpu_by_tool.most_common())}) "
            f"(slowest: {', '.join(f'{o.case.id} {o.cpu_seconds:.0f}' for o in slowest)}); every "
            f"row's output: {report}")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case, outcomes):
    outcome = outcomes[case.id]
    assert not outcome.problems, outcome.report()


def test_the_fork_servers_import_tensorflow_without_stray_output(fork_pool):
    """What a row's process does not print itself because its server imported TensorFlow
    before the fork is held to the rows' rule: log lines only, no traceback."""
    for server in fork_pool.start_all():
        text = server.import_output
        assert TRACEBACK not in text, text
        stray = [ln for ln in text.splitlines() if ln.strip() and not LOG_LINE.match(ln)]
        assert not stray, text


def test_every_tool_has_rows_of_refusal_and_the_ids_are_unique():
    assert len({c.id for c in CASES}) == len(CASES)
    per_tool = collections.Counter(c.tool for c in CASES if c.expect in ("usage", "error"))
    assert set(per_tool) == set(TOOLS), per_tool
    assert len(CASES) >= 50, len(CASES)
