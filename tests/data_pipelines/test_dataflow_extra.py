"""The runtime install holds plain apache-beam; gs:// and DataflowRunner need the dataflow extra
(issue 35 item 5), and say so in one line instead of a traceback.

The test venv has the extra (the test extra names it), so its absence is made in a fresh process:
a meta-path finder refuses every module that only the dataflow extra installs (the packages in
the closure of apache-beam[gcp] + google-auth and not in that of install_requires, read from the
installed metadata), as if `pip install -e .` alone had run.
"""

from __future__ import annotations

import configparser
import pathlib
import subprocess
import sys
from importlib import metadata

import pytest

from data_pipelines import worker_requirements

ROOT = pathlib.Path(__file__).resolve().parents[2]


def section(name: str, key: str) -> list:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return [l.split("#")[0].strip() for l in parser[name][key].splitlines() if l.split("#")[0].strip()]


def dataflow_only_modules() -> list:
    """Importable names (google.X.Y for the google namespace) of the distributions that only
    the dataflow extra brings."""
    runtime = set(worker_requirements.closure(section("options", "install_requires")))
    extra = set(worker_requirements.closure(section("options.extras_require", "dataflow")))
    names = set()
    for dist in sorted(extra - runtime):
        for file in metadata.files(dist) or ():
            parts = [p[:-3] if p.endswith(".py") else p for p in file.parts]
            if not parts or parts[0].endswith((".dist-info", ".data")) or parts[0] in ("..", "bin"):
                continue
            depth = 3 if parts[:2] == ["google", "cloud"] else 2 if parts[0] == "google" else 1
            if len(parts) >= depth and not parts[depth - 1].startswith("__"):
                names.add(".".join(parts[:depth]))
    return sorted(names)


BLOCKER = """
import runpy, sys
BLOCKED = {blocked!r}
class NoDataflowExtra:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, NoDataflowExtra())
sys.argv = {argv!r}
runpy.run_module(sys.argv[0], run_name="__main__")
"""


def run_without_extra(module: str, *args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    code = BLOCKER.format(blocked=dataflow_only_modules(), argv=[module, *args])
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "2"})


def test_the_blocked_set_is_the_google_cloud_stack_and_spares_the_runtime():
    blocked = dataflow_only_modules()
    for name in ("google.auth", "google.cloud.storage", "apitools"):
        assert name in blocked, blocked
    for name in ("apache_beam", "numpy", "google.protobuf", "tokenizers", "google_crc32c"):
        assert name not in blocked, name


@pytest.mark.parametrize("module,flags,what", [
    ("data_pipelines.make_pretrain", ["--objective=bert", "--input=gs://b/corpus/*.txt", "--output_dir=OUT",
                                      "--vocab=VOCAB"], "--input=gs://b/corpus/*.txt"),
    ("data_pipelines.make_vocab", ["--input=gs://b/corpus/*.txt", "--output=OUT/v.txt", "--vocab_size=100"],
     "--input=gs://b/corpus/*.txt"),
    ("data_pipelines.make_pretrain", ["--objective=bert", "--input=CORPUS", "--output_dir=OUT", "--vocab=VOCAB",
                                      "--runner=DataflowRunner", "--dry_run=True", "--project=p",
                                      "--region=us-central1", "--temp_location=gs://b/tmp"],
     "--runner=DataflowRunner"),
])
def test_gs_and_dataflow_without_the_extra_end_in_one_line_naming_it(module, flags, what, tmp_path,
                                                                     tiny_vocab_path):
    (tmp_path / "c.txt").write_text("the cat sat .\nthe dog ran .\n")
    args = [f.replace("OUT", str(tmp_path / "out")).replace("VOCAB", tiny_vocab_path)
            .replace("CORPUS", str(tmp_path / "c.txt")) for f in flags]
    proc = run_without_extra(module, *args)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {what} needs the Google Cloud packages"), last
    assert "pip install '.[dataflow]'" in last and "google.auth" in last, last


def test_a_local_bert_job_runs_without_the_extra(tmp_path, tiny_vocab_path, sentences):
    # What `make demo` does on the runtime install: local paths, the local runner.
    (tmp_path / "c.txt").write_text("\n\n".join("\n".join(sentences(k, 8)) for k in range(6)) + "\n")
    proc = run_without_extra("data_pipelines.make_pretrain", "--objective=bert", f"--input={tmp_path}/c.txt",
                             f"--output_dir={tmp_path}/out", f"--vocab={tiny_vocab_path}",
                             "--max_seq_length=32", "--max_predictions_per_seq=5", "--num_shards=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "out" / "COMPLETED").exists()
    # Beam's import-time notes about the absent extra are dropped, and they no longer leave the
    # root logger at WARNING: the job's own INFO lines still show (data_pipelines/gcs.py).
    assert "apitools" not in proc.stderr and "bigquery" not in proc.stderr, proc.stderr[-3000:]
    assert "INFO running DirectRunner: objective=bert" in proc.stderr, proc.stderr[-3000:]
