"""Session fixtures shared by the trainer, export and end-to-end tests.

They build real artefacts with the real tools: a slice of the sample corpus, a WordPiece
vocabulary learned from it, and BERT pretraining TFRecords written by the Beam pipeline.

Under pytest-xdist (`make test` runs `-n 2`) a session fixture would be built once per worker;
`build_once` builds such artefacts once per test run instead, under a file lock in the
directory the workers' temporary roots share.
"""

from __future__ import annotations

import dataclasses
import fcntl
import glob
import json
import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from testing import run_module  # noqa: E402


def build_once(tmp_path_factory, name: str, build, cls):
    """cls(**build(root)): build(root) writes artefacts under the fresh directory root and
    returns their description (a JSON-able dict). Run once per test run: the first xdist
    worker to take the lock builds, the others wait and read the description it left
    (<shared>/<name>.json, written only after a build that returned). Without xdist: plain
    tmp_path_factory.mktemp(name)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return cls(**build(tmp_path_factory.mktemp(name)))
    shared = tmp_path_factory.getbasetemp().parent  # pytest-N/, above popen-gw0/, popen-gw1/
    done = shared / f"{name}.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            root = shared / name
            shutil.rmtree(root, ignore_errors=True)  # what a failed build left
            root.mkdir()
            done.write_text(json.dumps(build(root)))
        return cls(**json.loads(done.read_text()))


@pytest.fixture(scope="session")
def shared_artefacts(tmp_path_factory):
    """shared_artefacts(name, build, cls): build_once for session fixtures of other test
    files (a fixture, because a `from conftest import` would find whichever
    tests/*/conftest.py was imported first)."""
    return lambda name, build, cls: build_once(tmp_path_factory, name, build, cls)


@dataclasses.dataclass
class BertData:
    corpus_glob: str
    vocab: str
    data_dir: str  # max_seq_length 64, max_predictions_per_seq 10
    task_dir: str
    data_dir_128: str  # max_seq_length 128, max_predictions_per_seq 20


@pytest.fixture(scope="session")
def bert_data(tmp_path_factory) -> BertData:
    return build_once(tmp_path_factory, "bert_data", _build_bert_data, BertData)


def _build_bert_data(root) -> dict:
    corpus, task = root / "corpus", root / "task"
    run_module("data_pipelines.sample_corpus", f"--output={corpus}", f"--task_output={task}")
    # One corpus file is plenty for a tiny model and keeps the fixture fast.
    first = sorted(glob.glob(str(corpus / "*.txt")))[0]
    vocab = root / "vocab.txt"
    run_module("data_pipelines.make_vocab", f"--input={first}", f"--output={vocab}",
               "--vocab_size=2000", "--lower_case")
    data_dir = root / "pretrain"
    run_module("data_pipelines.make_pretrain", "--objective=bert", f"--input={first}",
               f"--output_dir={data_dir}", f"--vocab={vocab}", "--max_seq_length=64",
               "--max_predictions_per_seq=10", "--dupe_factor=1", "--num_shards=2")
    data_dir_128 = root / "pretrain_128"
    run_module("data_pipelines.make_pretrain", "--objective=bert", f"--input={first}",
               f"--output_dir={data_dir_128}", f"--vocab={vocab}", "--max_seq_length=128",
               "--max_predictions_per_seq=20", "--dupe_factor=1", "--num_shards=2", "--seed=7")
    return dict(corpus_glob=first, vocab=str(vocab), data_dir=str(data_dir), task_dir=str(task),
                data_dir_128=str(data_dir_128))
