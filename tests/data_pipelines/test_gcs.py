"""gs:// without credentials fails fast with one line (issue 13, item 7).

Offline and honest: the environment holds no credentials (no GOOGLE_APPLICATION_CREDENTIALS,
an empty gcloud config directory) and NO_GCE_CHECK=true tells google-auth that this is not a
GCE VM, as it finds out itself on any other machine. Before the check, make_pretrain went on
anonymously and retried the listing for minutes (134 s seen) with four tracebacks.
"""

import time

import pytest

from data_pipelines import gcs
from testing import run_module


def _no_credentials(tmp_path) -> dict:
    return {"CLOUDSDK_CONFIG": str(tmp_path / "gcloud"), "NO_GCE_CHECK": "true", "GCE_METADATA_TIMEOUT": "1",
            "GOOGLE_APPLICATION_CREDENTIALS": ""}


@pytest.mark.parametrize("module,flags", [
    ("data_pipelines.make_pretrain", ["--objective=bert", "--input=gs://garden-test-bucket/corpus/*.txt",
                                      "--output_dir=OUT", "--vocab=VOCAB"]),
    ("data_pipelines.make_vocab", ["--input=gs://garden-test-bucket/corpus/*.txt", "--output=OUT/v.txt",
                                   "--vocab_size=100"]),
])
def test_gs_without_credentials_fails_fast_in_one_line(module, flags, tmp_path, tiny_vocab_path, monkeypatch):
    env = _no_credentials(tmp_path)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    args = [f.replace("OUT", str(tmp_path / "out")).replace("VOCAB", tiny_vocab_path) for f in flags]
    start = time.monotonic()
    proc = run_module(module, *args, check=False, timeout=90, env_extra=env)
    took = time.monotonic() - start
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: --input=gs://garden-test-bucket/corpus/*.txt needs Google Cloud credentials")
    assert "gcloud auth application-default login" in last and "GOOGLE_APPLICATION_CREDENTIALS" in last
    assert took < 60, f"took {took:.0f} s"  # the imports of a fresh process; the check itself is instant
    assert not (tmp_path / "out").exists()


def test_local_paths_need_no_credentials():
    gcs.check_credentials({"--input": "/tmp/x/*.txt", "--output_dir": "/tmp/out", "--tfds_data_dir": ""})
