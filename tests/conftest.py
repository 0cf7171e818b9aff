"""Session fixtures shared by the trainer, export and end-to-end tests.

They build real artefacts with the real tools: a slice of the sample corpus, a WordPiece
vocabulary learned from it, and BERT pretraining TFRecords written by the Beam pipeline
(bert_data); BPE / SentencePiece / WordPiece vocabularies of one sample-corpus file and the
roberta, albert and electra data (family_data); the gpt2, bart, t5 and xlnet data made with
family_data's BPE and SentencePiece vocabularies (generative_data); the 800-piece WordPiece
vocabulary of the recurrent models' tests and their biLM data (lm_vocab, bilm_data).

Under pytest-xdist (`make test` runs `-n 2`) a session fixture would be built once per worker;
`build_once` builds such artefacts once per test run instead, under a file lock in the
directory the workers' temporary roots share.

Order of the files under `--dist loadfile`: pytest-xdist hands whole files to the workers in
the order of its queue, by default the files with the most tests first, which puts the
long single-test learn files last, where one of them can keep a worker busy after the other
has run out of files. Here the queue is the files of LONG_FILES first (longest first), then the
others by number of tests as xdist would order them (pytest_configure turns xdist's own
reordering off, pytest_collection_modifyitems orders the items).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import fcntl
import glob
import json
import os
import pathlib
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Under pytest-xdist (`make test`: one worker per core) each worker's TensorFlow, and each tool
# process a test starts (they inherit the environment), runs its ops on one intra-op and one
# inter-op thread instead of a pool per core: two workers with a pool of two threads each on
# two cores spent the difference waiting on each other's threads. Measured on the quiet 2-core
# Xeon, six model/trainer test files under -n 2: 114-121 s wall with the defaults, 113 s with
# one intra-op thread, 86 s with one inter-op thread, 80 s with both (2026-12-07). What the
# tests check does not depend on the pools' sizes; the tests of garden.generate's thread flags
# set them through tf.config, which takes precedence. A variable set by the caller is kept.
# The same for the OpenMP pools of torch (the reference models of the parity tests) and of the
# BLAS under numpy, set before either loads: six torch-heavy model files under -n 2 on the
# quiet Xeon, 74.5 s wall with the defaults, 72.3 s with one thread each (2026-12-07; with
# another process busy beside them, 125 s against 92 s).
if os.environ.get("PYTEST_XDIST_WORKER"):
    for variable in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS",
                     "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(variable, "1")

# Before anything imports TensorFlow: oneDNN on unless TF_ENABLE_ONEDNN_OPTS is set, as in
# every garden entry point (text/onednn.py), so the suite runs what users run.
import text  # noqa: E402,F401

from testing import close_fixture_tools, run_fixture_tool  # noqa: E402


# Files that take long, with their seconds on the quiet 2-core machine (wall time of each file
# under `make test`, 2026-11-26; fixture builds counted where the file builds them): started
# first, longest first, so that the two workers end close together (a long file handed out
# last kept one worker busy ~50 s after the other had run out). Only the order matters.
# "est." (2026-12-07): scaled from CPU seconds measured under load (2 cores shared, load 5-12)
# before and after a change; no quiet machine was at hand.
LONG_FILES = {
    # est. from 232 CPU-s under load; first: it reads no session fixture, so it waits on no
    # lock while the other worker's first file builds family_data and generative_data.
    "tests/garden/test_converted_checkpoints.py": 150,
    # 110 s, but early: it builds family_data and generative_data while the other worker's
    # files build bert_data, so neither waits on the other's lock.
    "tests/garden/tasks/pretraining/test_t5_training.py": 140,
    "tests/garden/test_train.py": 106,  # 131 before 2026-11-28, 108 before 2026-12-06
    "tests/test_bad_input_matrix.py": 112,  # 228 s before its fork servers
    "tests/garden/tasks/test_glue_sample_task_learning.py": 107,  # 114 before 2026-11-28
    # est. (80 -> 65 CPU-s: forked workers and killed runs); 94 before 2026-11-28, 80 before
    # 2026-12-06, 70, 62
    "tests/garden/test_distributed.py": 50,
    "tests/serving/test_finetune_families.py": 66,  # est.; 74 before 2026-12-07
    "tests/data_pipelines/test_objectives_pipeline.py": 62,  # est. (124 -> 77 CPU-s); 100 before
    "tests/garden/tasks/pretraining/test_family_learning_mlm.py": 62,  # 66 before 2026-11-28
    "tests/garden/tasks/test_generation_tasks.py": 65,
    "tests/garden/tasks/pretraining/test_albert_sop_learning.py": 62,  # est.; 65 at 200 steps
    "tests/garden/tasks/test_distilbert_learning.py": 65,
    # 63 before 2026-11-28
    "tests/garden/tasks/pretraining/test_family_learning_electra_spanbert.py": 57,
    "tests/garden/tasks/test_generation_tasks_families.py": 59,
    "tests/garden/tasks/test_spanbert_distill_training.py": 51,
    "tests/serving/test_generation_export.py": 49,
    "tests/garden/tasks/pretraining/test_bart_training.py": 49,
    "tests/bertology/test_int8.py": 48,  # est. from 87 CPU-s under load
    "tests/serving/test_export.py": 45,  # est.; 49 before 2026-12-07
    "tests/serving/test_bfloat16_export.py": 50,  # est. from 85-170 s under load 8-12
    "tests/garden/tasks/pretraining/test_family_training.py": 33,  # est. (62 -> 45 CPU-s); 45
    "tests/serving/test_qa_windows.py": 44,  # est.; 48 before 2026-12-07
    "tests/test_docs_and_installs.py": 40,
    "tests/models/test_decoding.py": 32,
    "tests/garden/tasks/test_question_answering.py": 29,  # est.; 33 before 2026-12-07
    "tests/garden/tasks/test_electra_finetune.py": 24,  # est. (49 -> 37 CPU-s and a process); 34
    # 2026-12-07, one process, nothing else running: 49 s and 43 s (its one test would otherwise
    # be handed out last, by its count of tests).
    "tests/garden/tasks/test_task_distillation.py": 49,
    "tests/benchmarks/test_task_distillation_bench.py": 43,
}


DOCS_AND_INSTALLS = "tests/test_docs_and_installs.py"
_PIP_DRY_RUNS = []  # the background pip dry runs this process started (pytest_configure)


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist's; the order is set below
        config.option.loadscopereorder = False
    _start_pip_dry_runs(config)


def _selects(config, relpath: str) -> bool:
    """Whether the command line's paths include the file at `relpath` (from the rootdir)."""
    target = os.path.join(str(config.rootpath), relpath)
    for arg in config.args:
        path = os.path.abspath(os.path.join(config.invocation_params.dir, arg.split("::")[0]))
        if target == path or target.startswith(path.rstrip(os.sep) + os.sep):
            return True
    return False


def _start_pip_dry_runs(config) -> None:
    """The PyPI dry runs of tests/test_docs_and_installs.py (tests/pip_dry_runs.py), started
    now by the process that starts the session (the xdist controller, or the only process), so
    that they wait on the index while the suite runs, not while a worker waits for them: about
    100 s of a worker's time otherwise. Not under a worker (it inherits the directory's name),
    nor when the docs test file is not selected, nor when PyPI cannot be reached."""
    import tempfile

    import pip_dry_runs

    if (os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get(pip_dry_runs.ENV_VAR)
            or not _selects(config, DOCS_AND_INSTALLS) or not pip_dry_runs.pypi_reachable()):
        return
    directory = tempfile.mkdtemp(prefix="garden-pip-dry-runs-")
    os.environ[pip_dry_runs.ENV_VAR] = directory  # read by the workers, which inherit it
    _PIP_DRY_RUNS.append((directory, pip_dry_runs.start(pathlib.Path(directory))))


def pytest_unconfigure(config):
    import pip_dry_runs

    while _PIP_DRY_RUNS:
        directory, procs = _PIP_DRY_RUNS.pop()
        pip_dry_runs.stop(procs)
        shutil.rmtree(directory, ignore_errors=True)
        os.environ.pop(pip_dry_runs.ENV_VAR, None)


def pytest_collection_modifyitems(session, config, items):
    """Items of LONG_FILES' files first (longest first), then the other files by number of
    tests (most first, as xdist orders them); within a file the collection order."""
    root = str(config.rootpath)

    def file_of(item):
        return os.path.relpath(str(item.path), root)

    counts = collections.Counter(file_of(item) for item in items)
    first_seen = {}
    for item in items:
        first_seen.setdefault(file_of(item), len(first_seen))
    items.sort(key=lambda item: (-LONG_FILES.get(file_of(item), 0), -counts[file_of(item)],
                                 first_seen[file_of(item)]))


def pytest_collection_finish(session):
    """After collection (TensorFlow, Keras and the garden imported by the test modules) those
    objects move to gc's permanent generation: the collector no longer walks their ~500k
    objects on each full collection the tests' graph building triggers (measured: gc time of a
    20-step BERT-tiny fine-tuning run in-process 0.62 -> 0.21 s).

    And a full collection is considered after every 50th second-generation one instead of
    every 10th: six model and trainer files in one process spent 5.4 s in 35 full collections
    with the default, 2.4 s in 16 with this, at the same peak memory (2.37 GB; 2026-12-08)."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(*gc.get_threshold()[:2], 50)


# A full collection in an xdist worker late in the suite walks millions of objects (graphs,
# models and traces that earlier tests leave to the collector): 1-2 s each, where the same
# test alone took 0.1 s (tests/models/bert/test_bert_preset_counts.py: 4.7 s a test under
# `make test`, 0.4 s alone; 2026-12-08). So the tests reset Keras' names with
# `keras.backend.clear_session(free_memory=False)` (the default collects) and call no
# gc.collect() of their own.


@pytest.fixture(scope="session", autouse=True)
def _forked_fixture_tools():
    """The data the fixtures and learn tests make with benchmarks.objectives_learn (its `_run`:
    `python -m` of a pipeline) is made by run_fixture_tool (forked from servers that have
    imported TensorFlow) for the session; the servers stop at its end."""
    from benchmarks import objectives_learn as learn

    original, learn._run = learn._run, run_fixture_tool
    yield
    learn._run = original
    close_fixture_tools()


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
    run_fixture_tool("data_pipelines.sample_corpus", f"--output={corpus}", f"--task_output={task}")
    # One corpus file is plenty for a tiny model and keeps the fixture fast.
    first = sorted(glob.glob(str(corpus / "*.txt")))[0]
    vocab = root / "vocab.txt"
    run_fixture_tool("data_pipelines.make_vocab", f"--input={first}", f"--output={vocab}",
                     "--vocab_size=2000", "--lower_case")
    data_dir = root / "pretrain"
    run_fixture_tool("data_pipelines.make_pretrain", "--objective=bert", f"--input={first}",
                     f"--output_dir={data_dir}", f"--vocab={vocab}", "--max_seq_length=64",
                     "--max_predictions_per_seq=10", "--dupe_factor=1", "--num_shards=2")
    data_dir_128 = root / "pretrain_128"
    run_fixture_tool("data_pipelines.make_pretrain", "--objective=bert", f"--input={first}",
                     f"--output_dir={data_dir_128}", f"--vocab={vocab}", "--max_seq_length=128",
                     "--max_predictions_per_seq=20", "--dupe_factor=1", "--num_shards=2",
                     "--seed=7")
    return dict(corpus_glob=first, vocab=str(vocab), data_dir=str(data_dir), task_dir=str(task),
                data_dir_128=str(data_dir_128))


@dataclasses.dataclass
class LmVocab:
    corpus_file: str  # sample-corpus file 0
    vocab: str  # make_vocab --tokenizer=wordpiece --vocab_size=800 --lower_case of that file


@pytest.fixture(scope="session")
def lm_vocab(shared_artefacts) -> LmVocab:
    """The 800-piece WordPiece vocabulary of the recurrent models' tests (CoVe's pair task,
    the biLM data of ELMo and ULMFiT), learnt once per test run: five tests learnt it each."""
    return shared_artefacts("lm_vocab", _build_lm_vocab, LmVocab)


def _build_lm_vocab(root) -> dict:
    run_fixture_tool("data_pipelines.sample_corpus", f"--output={root / 'sample'}")
    first = sorted((root / "sample").glob("*.txt"))[0]
    vocab = root / "lm_vocab.txt"
    run_fixture_tool("data_pipelines.make_vocab", "--tokenizer=wordpiece", f"--input={first}",
                     f"--output={vocab}", "--vocab_size=800", "--lower_case")
    return dict(corpus_file=str(first), vocab=str(vocab))


@pytest.fixture(scope="session")
def bilm_data(shared_artefacts, lm_vocab):
    """bilm_data(*flags, documents=150) -> (vocabulary, data dir): make_pretrain
    --objective=bilm of the first `documents` documents of lm_vocab's corpus file with its
    vocabulary (objective_testing.write_bilm_data), made once per test run for each set of
    flags."""
    from objective_testing import write_bilm_data

    def make(*flags: str, documents: int = 150):
        name = "bilm" + "".join("_" + f.lstrip("-").replace("=", "-") for f in flags)
        return shared_artefacts(
            f"{name}_{documents}",
            lambda root: dict(zip(("vocab", "data"), map(str, write_bilm_data(
                lm_vocab, root, *flags, documents=documents)))),
            lambda vocab, data: (vocab, data))
    return make


# ----------------------------------------------------------------------------------------
# Pretraining data of the other families (benchmarks.objectives_learn's helpers run the
# command-line tools: make_vocab, make_pretrain).
# ----------------------------------------------------------------------------------------

FAMILY_SEQ, FAMILY_VOCAB_SIZE = 64, 1000


@dataclasses.dataclass
class FamilyData:
    root: str
    vocab: dict  # family -> vocabulary path
    data: dict  # family -> make_pretrain output dir


@pytest.fixture(scope="session")
def family_data(shared_artefacts) -> FamilyData:
    """One sample-corpus file -> BPE / SentencePiece / WordPiece vocabularies -> roberta, albert
    and electra data, all made by the project's command-line tools (run side by side); once
    per test run, whichever xdist worker asks first (build_once)."""
    return shared_artefacts("family_data", _build_family_data, FamilyData)


def _build_family_data(root) -> dict:
    from benchmarks import objectives_learn as learn

    root = str(root)
    corpus = learn.sample_corpus(root)[0]
    families = ("roberta", "albert", "electra")
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        vocab_jobs = {f: pool.submit(learn.vocabulary, root, learn.FAMILIES[f].tokenizer, corpus,
                                     FAMILY_VOCAB_SIZE) for f in families}
        vocab = {f: job.result() for f, job in vocab_jobs.items()}
        data_jobs = {f: pool.submit(learn.pretrain_data, root, f, vocab[f], corpus, FAMILY_SEQ, 1,
                                    "train") for f in families}
        data = {f: job.result() for f, job in data_jobs.items()}
    return dict(root=root, vocab=vocab, data=data)


@dataclasses.dataclass
class GenerativeData:
    bpe: str  # family_data's byte-level BPE vocab.json (1000, lower-cased, corpus file 0)
    sentencepiece: str  # family_data's SentencePiece model (1000, lower-cased, corpus file 0)
    data: dict  # "<objective>-<train|eval>" -> make_pretrain output dir (64-token sequences)


# make_pretrain runs of generative_data: name -> (vocabulary kind, corpus file index, flags).
# Training data of sample-corpus file 0 (the vocabularies' own), held-out data of file
# objectives_learn.HELD_OUT (1). Seeds fixed; every run writes one shard.
GENERATIVE_RUNS = {
    "gpt2-train": ("bpe", 0, ["--objective=gpt2", "--seed=12345"]),
    "gpt2-eval": ("bpe", 1, ["--objective=gpt2", "--seed=12345"]),
    # BART: the published noise for training (infilling 0.3 + sentence permutation); infilling
    # only held out, so that an alignment of input and target finds the spans.
    "bart-train": ("bpe", 0, ["--objective=bart", "--seed=12345"]),
    "bart-eval": ("bpe", 1, ["--objective=bart", "--seed=12345", "--permute_sentence_ratio=0"]),
    # T5: three corruptions of file 0 (~3700 chunks): with one (~1200), 300 steps of 32
    # overfit it and the held-out loss stays above the unigram entropy. The data keeps T5's
    # case while the vocabulary is lower-cased: capitals become <unk> (5% of the targets), in
    # the targets and the baselines alike.
    "t5-train": ("sentencepiece", 0, ["--objective=t5", "--seed=12345",
                                      f"--inputs_length={FAMILY_SEQ}", "--dupe_factor=3"]),
    "t5-eval": ("sentencepiece", 1, ["--objective=t5", "--seed=12345",
                                     f"--inputs_length={FAMILY_SEQ}"]),
    "xlnet-train": ("sentencepiece", 0, ["--objective=xlnet", "--reuse_len=32",
                                         "--num_predict=12"]),
    "xlnet-eval": ("sentencepiece", 1, ["--objective=xlnet", "--reuse_len=32",
                                        "--num_predict=12"]),
}


@pytest.fixture(scope="session")
def generative_data(shared_artefacts, family_data) -> GenerativeData:
    """The gpt2, bart, t5 and xlnet pretraining data of GENERATIVE_RUNS, made by make_pretrain
    with family_data's vocabularies (nothing is learned twice), two runs side by side; once
    per test run (build_once)."""
    return shared_artefacts("generative_data",
                            lambda root: _build_generative_data(root, family_data),
                            GenerativeData)


def _build_generative_data(root, family_data: FamilyData) -> dict:
    from benchmarks import objectives_learn as learn

    files = learn.sample_corpus(family_data.root)  # made by family_data: found, not rebuilt
    vocab = {"bpe": family_data.vocab["roberta"], "sentencepiece": family_data.vocab["albert"]}
    assert vocab["bpe"] == learn.vocabulary(family_data.root, "bpe", files[0], FAMILY_VOCAB_SIZE)
    assert vocab["sentencepiece"] == learn.vocabulary(family_data.root, "sentencepiece", files[0],
                                                      FAMILY_VOCAB_SIZE)

    def make(name, kind, file_index, flags):
        out = os.path.join(str(root), name)
        corpus = files[learn.HELD_OUT if file_index else 0]
        learn._run("data_pipelines.make_pretrain", f"--input={corpus}", f"--output_dir={out}",
                   f"--vocab={vocab[kind]}", f"--tokenizer={kind}",
                   f"--max_seq_length={FAMILY_SEQ}", "--num_shards=1", *flags)
        return out

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        jobs = {name: pool.submit(make, name, *run) for name, run in GENERATIVE_RUNS.items()}
        data = {name: job.result() for name, job in jobs.items()}
    return dict(bpe=vocab["bpe"], sentencepiece=vocab["sentencepiece"], data=data)
