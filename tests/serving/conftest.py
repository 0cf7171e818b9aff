"""Session fixtures of the serving tests: the sample corpus, a slice of it, and a vocabulary of
each tokenizer kind learnt on that slice by `python -m data_pipelines.make_vocab`."""

from __future__ import annotations

import dataclasses
import glob
import os

import pytest

from testing import run_fixture_tool

SLICE_LINES = 2000  # of the first corpus file: enough text for 1000-piece vocabularies
VOCAB_SIZE = 1000
VOCAB_FILES = {"wordpiece": "wordpiece/vocab.txt", "sentencepiece": "sentencepiece/sp.model",
               "bpe": "bpe/vocab.json"}


@dataclasses.dataclass
class ServingCorpus:
    root: str
    corpus_slice: str  # one sentence per line, blank lines between documents
    task_dir: str  # sample_corpus --task_output: train.tsv / dev.tsv (text_a, label)
    vocab: dict  # tokenizer kind -> vocabulary path (lower-cased)


@pytest.fixture(scope="session")
def serving_corpus(shared_artefacts) -> ServingCorpus:
    """Built once per test run (shared by xdist workers; tests/conftest.py build_once)."""
    return shared_artefacts("serving_corpus", _build_serving_corpus, ServingCorpus)


def _build_serving_corpus(root) -> dict:
    root = str(root)
    corpus, task_dir = os.path.join(root, "corpus"), os.path.join(root, "task")
    run_fixture_tool("data_pipelines.sample_corpus", f"--output={corpus}",
                     f"--task_output={task_dir}")
    first = sorted(glob.glob(os.path.join(corpus, "*.txt")))[0]
    corpus_slice = os.path.join(root, "slice.txt")
    with open(first, encoding="utf-8") as f, open(corpus_slice, "w", encoding="utf-8") as out:
        out.writelines(line for _, line in zip(range(SLICE_LINES), f))
    vocab = {}
    for kind, name in VOCAB_FILES.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        output = os.path.dirname(path) if kind == "bpe" else path
        run_fixture_tool("data_pipelines.make_vocab", f"--tokenizer={kind}",
                         f"--input={corpus_slice}", f"--output={output}",
                         f"--vocab_size={VOCAB_SIZE}", "--lower_case")
        vocab[kind] = path
    return dict(root=root, corpus_slice=corpus_slice, task_dir=task_dir, vocab=vocab)
