"""Each data job's workers install what its code imports and no more (issue 35 item 6).

A job runs in a fresh process on the local runner (Beam's FnApiRunner in that process, so the
per-element code runs there too) with builtins.__import__ wrapped: every import statement
executed by a module under text/ or data_pipelines/ is recorded. Each recorded third-party
module must belong to a distribution in the closure of the job's worker requirements
(data_pipelines.worker_requirements.roots), and each row of the table that the job selects must
be imported by that code: the table neither misses a module (a worker would fail with
ModuleNotFoundError) nor carries one the job never imports (TensorFlow on a WordPiece job).

The launcher's own imports (data_pipelines/jobs.py, the tokenizer loaded before submission) are
recorded too: the check is conservative, never blind.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from packaging.utils import canonicalize_name

from data_pipelines import worker_requirements
from test_requirements import PACKAGES, distribution_key, module_owners

ROOT = pathlib.Path(__file__).resolve().parents[2]

RECORDER = """
import builtins, json, os, runpy, sys
OURS = tuple(os.path.join({root!r}, p) + os.sep for p in ("text", "data_pipelines"))
direct = {{}}
original = builtins.__import__
def recording(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and globals:
        where = globals.get("__file__") or ""
        if where.startswith(OURS):
            direct.setdefault(name, os.path.relpath(where, {root!r}))
    return original(name, globals, locals, fromlist, level)
builtins.__import__ = recording
sys.argv = {argv!r}
try:
    runpy.run_module(sys.argv[0], run_name="__main__")
finally:
    with open({out!r}, "w") as f:
        json.dump({{"direct": direct, "modules": sorted(sys.modules)}}, f)
"""


def run_recorded(tmp_path, module: str, *args: str) -> dict:
    out = tmp_path / "imports.json"
    code = RECORDER.format(root=str(ROOT), argv=[module, *args], out=str(out))
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def imported_distributions(direct: dict) -> dict:
    """{distribution: "module (file)"} for each third-party module that our code imported."""
    owners = module_owners()
    found = {}
    for module, where in sorted(direct.items()):
        top = module.split(".")[0]
        if top in sys.stdlib_module_names or top in PACKAGES or top == "__future__":
            continue
        for dist in owners.get(distribution_key(module)) or owners.get(top) or {f"?{module}"}:
            found.setdefault(dist, f"{module} ({where})")
    return found


def problems(direct: dict, requirements) -> list:
    """What is wrong with ``requirements`` (the job's table rows) for the imports ``direct``."""
    allowed = set(worker_requirements.closure(requirements))
    imported = imported_distributions(direct)
    out = [f"{what} needs {dist}, which the job's worker requirements lack"
           for dist, what in imported.items() if dist not in allowed]
    out += [f"{name} is in the job's requirements, but its code never imports it"
            for name in (canonicalize_name(r.split("[")[0]) for r in requirements) if name not in imported]
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, sentences):
    root = tmp_path_factory.mktemp("worker_corpus")
    (root / "c.txt").write_text("\n\n".join("\n".join(sentences(k, 8)) for k in range(40)) + "\n")
    return root / "c.txt"


def make_vocab(tmp_path, corpus, kind: str, output: str, size: int) -> str:
    from testing import run_module

    run_module("data_pipelines.make_vocab", f"--tokenizer={kind}", f"--input={corpus}",
               f"--output={tmp_path / output}", f"--vocab_size={size}")
    return str(tmp_path / output)


def test_a_wordpiece_bert_job_imports_its_table_rows_and_never_tensorflow(tmp_path, corpus, tiny_vocab_path):
    record = run_recorded(tmp_path, "data_pipelines.make_pretrain", "--objective=bert", f"--input={corpus}",
                          f"--output_dir={tmp_path / 'out'}", f"--vocab={tiny_vocab_path}",
                          "--max_seq_length=32", "--max_predictions_per_seq=5", "--num_shards=1")
    assert (tmp_path / "out" / "COMPLETED").exists()
    requirements = worker_requirements.roots("wordpiece", tiny_vocab_path, str(corpus), "text")
    assert problems(record["direct"], requirements) == []
    assert "tensorflow" not in record["modules"] and "tensorflow_text" not in record["modules"]
    assert "tensorflow" not in worker_requirements.closure(requirements)
    # Negative control: the same imports against a table row that lacks `tokenizers`.
    without = [r for r in requirements if r != "tokenizers"]
    found = problems(record["direct"], without)
    assert found and all("tokenizers" in p for p in found), found


def test_a_wordpiece_question_answering_job(tmp_path, tiny_vocab_path):
    squad = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{
        "context": "the cat sat on the mat . the dog ran far away .",
        "qas": [{"id": "q1", "question": "where the cat sat ?", "is_impossible": False,
                 "answers": [{"text": "on the mat", "answer_start": 12}]},
                {"id": "q2", "question": "the bird sang ?", "is_impossible": True, "answers": []}]}]}]}
    (tmp_path / "dev.json").write_text(json.dumps(squad))
    record = run_recorded(tmp_path, "data_pipelines.make_finetune", "--task=question_answering",
                          f"--input={tmp_path / 'dev.json'}", f"--output_dir={tmp_path / 'out'}",
                          f"--vocab={tiny_vocab_path}", "--num_shards=1", "--split=dev")
    assert (tmp_path / "out" / "COMPLETED").exists()
    requirements = worker_requirements.roots("wordpiece", tiny_vocab_path, str(tmp_path / "dev.json"), "files")
    assert problems(record["direct"], requirements) == []
    assert "tensorflow" not in record["modules"]


@pytest.mark.parametrize("objective,kind,output,size", [
    ("gpt2", "bpe", "bpe/vocab.json", 300),
    ("albert", "sentencepiece", "sp.model", 60),
])
def test_graph_tokenizer_jobs_need_tensorflow(objective, kind, output, size, tmp_path, corpus):
    (tmp_path / "bpe").mkdir()
    vocab = make_vocab(tmp_path, corpus, kind, output, size)
    record = run_recorded(tmp_path, "data_pipelines.make_pretrain", f"--objective={objective}",
                          f"--input={corpus}", f"--output_dir={tmp_path / 'out'}", f"--vocab={vocab}",
                          "--max_seq_length=32", "--num_shards=1")
    assert (tmp_path / "out" / "COMPLETED").exists()
    requirements = worker_requirements.roots(kind, vocab, str(corpus), "text")
    assert "tensorflow" in requirements
    assert problems(record["direct"], requirements) == []


def test_remote_paths_and_tfds_add_their_readers():
    roots = worker_requirements.roots
    assert roots("wordpiece", "v.txt", "gs://b/*.txt", "text") == ["apache-beam", "numpy", "google-crc32c",
                                                                    "tokenizers"]
    assert "tensorflow" in roots("wordpiece", "gs://b/vocab.txt", "c/*.txt", "text")
    assert "tensorflow" in roots("wordpiece", "v.txt", "gs://b/train.conll", "files")
    assert {"tensorflow-datasets", "tensorflow"} <= set(roots("wordpiece", "v.txt", "tfds:squad", "tfds"))
    assert roots("wordpiece", gcp=True)[0] == "apache-beam[gcp]"


class Args:
    tokenizer, vocab, input, input_format, output_dir = "wordpiece", "vocab.txt", "gs://b/c/*.txt", "text", "out"


def test_a_remote_runner_gets_the_jobs_file_and_a_wheel_without_dependencies(tmp_path):
    import zipfile

    local = worker_requirements.with_worker_packages(["--direct_num_workers=2"], Args(), directory=str(tmp_path))
    assert local == ["--direct_num_workers=2"]
    beam_args = ["--runner=DataflowRunner", "--project=p"]
    added = worker_requirements.with_worker_packages(beam_args, Args(), directory=str(tmp_path))[len(beam_args):]
    flags = dict(a.split("=", 1) for a in added)
    assert flags["--requirements_cache"] == "skip"
    pins = pathlib.Path(flags["--requirements_file"]).read_text()
    assert "\ntokenizers==" in pins and "apache-beam[gcp]==" in pins
    assert "\ntensorflow==" not in pins and "\nmatplotlib==" not in pins and "\nscikit-learn==" not in pins
    with zipfile.ZipFile(flags["--extra_package"]) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "data_pipelines/objectives/bert.py" in names and "text/wordpiece.py" in names
    assert not any(n.startswith("garden/") for n in names)
    assert "Requires-Dist" not in metadata  # else Beam's `pip install WHEEL` brings TensorFlow back
    # A Flink job on local paths gets plain Beam (no Google Cloud packages on its workers).
    class Local(Args):
        input = "/data/c/*.txt"
    flink = worker_requirements.with_worker_packages(["--runner=FlinkRunner"], Local(), directory=str(tmp_path / "f"))
    pins = pathlib.Path(dict(a.split("=", 1) for a in flink[1:])["--requirements_file"]).read_text()
    assert "\napache-beam==" in pins and "google-cloud-storage" not in pins
    # What the user chose stays: no second requirements file, no second package.
    chosen = ["--runner=DataflowRunner", "--requirements_file=mine.txt", "--extra_package=my.whl"]
    assert worker_requirements.with_worker_packages(chosen, Args(), directory=str(tmp_path)) == chosen


def test_the_worker_wheel_installs_and_imports_without_dependencies(tmp_path):
    wheel = worker_requirements.build_worker_wheel(str(tmp_path))
    target = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "-q",
                           "--target", str(target), wheel], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    code = ("import data_pipelines.objectives.bert as b, text.wordpiece as w; print(b.__file__); "
            "print(w.__file__)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert all(line.startswith(str(target)) for line in proc.stdout.split()), proc.stdout
