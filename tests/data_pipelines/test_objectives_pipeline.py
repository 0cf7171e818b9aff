"""Every objective through the real Beam job: output contract, byte-identical shards whatever
the number of workers, and an offline Dataflow dry run.

The objectives' own statistics are tested per objective (test_<name>_objective.py) on the
plain functions; here each one runs end to end on a small slice of the sample corpus with its
default tokenizer kind (vocabularies learned by make_vocab in a session fixture).
"""

from __future__ import annotations

import json
import os
import socket

import pytest
import tensorflow as tf

from text import features, tokenizers
from data_pipelines import make_pretrain, objectives
from testing import run_fixture_tool

# Small sizes per objective so that every run takes seconds; flags are the objectives' own.
FLAGS = {
    "bert": ["--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=2"],
    "albert": ["--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=2"],
    "roberta": ["--max_seq_length=64"],
    "spanbert": ["--max_seq_length=64", "--max_predictions_per_seq=12", "--dupe_factor=2"],
    "ernie": ["--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=2"],
    "electra": ["--max_seq_length=64"],
    "xlnet": ["--max_seq_length=64", "--reuse_len=32", "--num_predict=10"],
    "t5": ["--inputs_length=64"],
    "bart": ["--max_seq_length=64"],
    "gpt2": ["--max_seq_length=64"],
    "bilm": ["--max_seq_length=32", "--characters"],
}
VOCAB_SIZE = {"wordpiece": 1500, "sentencepiece": 800, "bpe": 800}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """About 80 documents of the sample corpus, plus one JSONL file of the same text."""
    root = tmp_path_factory.mktemp("objectives")
    run_fixture_tool("data_pipelines.sample_corpus", f"--output={root / 'sample'}")
    first = sorted((root / "sample").glob("*.txt"))[0]
    docs = first.read_text(encoding="utf-8").split("\n\n")[:80]
    (root / "corpus").mkdir()
    path = root / "corpus" / "part-0.txt"
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    vocabs = {}
    for kind in ("wordpiece", "sentencepiece", "bpe"):
        out = {"wordpiece": root / "vocab.txt", "sentencepiece": root / "spm.model",
               "bpe": root / "bpe" / "vocab.json"}[kind]
        # WordPiece (BERT family) is uncased; SentencePiece and byte-level BPE keep case
        # (ALBERT lower-cases its input before a cased model; XLNet, T5, RoBERTa, GPT-2 do not).
        run_fixture_tool("data_pipelines.make_vocab", f"--tokenizer={kind}", f"--input={first}",
                         f"--output={out}", f"--vocab_size={VOCAB_SIZE[kind]}",
                         *(["--lower_case"] if kind == "wordpiece" else []))
        vocabs[kind] = str(out)
    return {"root": root, "pattern": str(root / "corpus" / "*.txt"), "vocabs": vocabs}


def _argv(name, corpus, out, *extra):
    kind = objectives.get(name).tokenizer
    return [f"--objective={name}", f"--input={corpus['pattern']}", f"--output_dir={out}",
            f"--vocab={corpus['vocabs'][kind]}", "--num_shards=2", "--seed=5",
            "--random_document_pool_size=30", *FLAGS[name], *extra]


def _shard_bytes(out):
    return {f: open(os.path.join(out, f), "rb").read() for f in sorted(os.listdir(out)) if ".tfrecord" in f}


@pytest.mark.parametrize("name", objectives.NAMES)
def test_objective_end_to_end_and_deterministic(name, corpus, tmp_path):
    out1 = str(tmp_path / "one")
    stats = make_pretrain.run(_argv(name, corpus, out1, "--direct_num_workers=1"))
    info = json.load(open(os.path.join(out1, "info.json")))
    objective = objectives.get(name)
    args, _ = make_pretrain.parse_args(_argv(name, corpus, out1))
    spec = objective.feature_spec(objective.make_options(args))
    tok = tokenizers.load_tokenizer(objective.tokenizer, corpus["vocabs"][objective.tokenizer],
                                    lower_case=args.do_lower_case)
    assert info["objective"] == name and info["tokenizer"] == objective.tokenizer
    # Byte-level BPE and the cased SentencePiece models keep case by default.
    assert info["lower_case"] == (name in ("bert", "albert", "spanbert", "ernie", "electra", "bilm"))
    assert info["vocab_fingerprint"] == tok.fingerprint and info["vocab_size"] == tok.vocab.size
    assert info["feature_spec"] == features.spec_to_json(spec)
    assert stats["instances"] > 0 and stats["documents_read"] == 80
    assert sum(stats["instances_per_shard"]) == stats["instances"]

    # Every record parses with the declared spec (exact lengths) and holds real ids.
    n = 0
    for f in info["files"]:
        for rec in tf.data.TFRecordDataset(os.path.join(out1, f)):
            parsed = features.parse_example(spec, rec.numpy())
            for fname, feat in spec.items():
                assert len(parsed[fname]) == feat.length, (name, fname)
                if feat.dtype == "int64" and fname in ("input_ids", "inputs", "input_k", "targets", "labels"):
                    assert parsed[fname].min() >= 0
            n += 1
    assert n == stats["instances"]

    # Two workers in another process: the same bytes. The process has a hash seed of its own
    # (a shard or pool chosen with Python's str hash() would move) and splits the input over
    # two workers (an order- or worker-dependent draw would move). For BERT the workers are
    # two fresh interpreters (Beam's multi_processing, as Dataflow's are): the DoFns every
    # objective runs in (pretrain_transforms) pickled, set up and run away from the launcher.
    # For the others, whose own code is pure functions of (documents, PoolContext) called in
    # those DoFns, two threads of one `python -m data_pipelines.make_pretrain` forked from a
    # server that has imported TensorFlow: ~1 CPU-s instead of ~8 for two interpreters that
    # import it (11 objectives: ~75 CPU-s of this file's ~150).
    out2 = str(tmp_path / "two")
    if name == "bert":
        make_pretrain.run(_argv(name, corpus, out2, "--direct_num_workers=2",
                                "--direct_running_mode=multi_processing"))
    else:
        run_fixture_tool("data_pipelines.make_pretrain",
                         *_argv(name, corpus, out2, "--direct_num_workers=2",
                                "--direct_running_mode=multi_threading"))
    assert _shard_bytes(out2) == _shard_bytes(out1)


@pytest.mark.parametrize("name", objectives.NAMES)
def test_objective_dataflow_dry_run(name, corpus, tmp_path, monkeypatch):
    def no_network(*a, **k):
        raise AssertionError(f"network access during dry run: {a}")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    out = str(tmp_path / "dry")
    argv = _argv(name, corpus, out, "--runner=DataflowRunner", "--dry_run=True", "--project=my-project",
                 "--region=us-central1", "--temp_location=gs://my-bucket/tmp")
    argv[1] = "--input=gs://my-bucket/corpus/*.txt"
    result = make_pretrain.run(argv)
    job = json.load(open(result["dry_run"]))
    names = {t["uniqueName"] for t in job["pipeline"]["components"]["transforms"].values()}
    for stage in ("ReadDocuments", "CreateInstances", "WriteShards", "SumStats"):
        assert stage in names
    assert not os.path.exists(os.path.join(out, "COMPLETED"))


def test_objective_help_names_recipe(capsys):
    for name in objectives.NAMES:
        with pytest.raises(SystemExit, match="^0$"):
            make_pretrain.parse_args([f"--objective={name}", "--help"])
        text = capsys.readouterr().out
        assert objectives.get(name).recipe.split(":")[0] in text
