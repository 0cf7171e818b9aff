"""Session fixtures shared by the trainer, export and end-to-end tests.

They build real artefacts with the real tools: a slice of the sample corpus, a WordPiece
vocabulary learned from it, and BERT pretraining TFRecords written by the Beam pipeline.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from testing import run_module  # noqa: E402


@dataclasses.dataclass
class BertData:
    corpus_glob: str
    vocab: str
    data_dir: str  # max_seq_length 64, max_predictions_per_seq 10
    task_dir: str
    data_dir_128: str  # max_seq_length 128, max_predictions_per_seq 20


@pytest.fixture(scope="session")
def bert_data(tmp_path_factory) -> BertData:
    root = tmp_path_factory.mktemp("bert_data")
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
    return BertData(corpus_glob=first, vocab=str(vocab), data_dir=str(data_dir),
                    task_dir=str(task), data_dir_128=str(data_dir_128))
