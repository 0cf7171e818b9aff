"""`python -m data_pipelines.make_finetune --task=question_answering` end to end: records parse with
the kind's feature_spec and equal example_features, bytes do not depend on the runner settings or
chunking, the output-directory contract, bad input, and tfds:squad from a local data_dir."""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from text import finetune, tokenizers
from data_pipelines import make_finetune
from text.finetune import base as finetune_base
from text.finetune.question_answering import (KIND, SquadOptions, example_features,
                                              examples_features, feature_spec, parse_record,
                                              record_spec, to_records)
from text.finetune.question_answering_sources import read_examples, read_tfds

EXTRA = ["where", "did", "?"]
WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "far", "away", "and", "then", "it",
         "slept", "sun", "was", "warm", "bird", "sang", "tree", "in", "park", "big", "small"]
GEOMETRY = ["--max_seq_length=24", "--doc_stride=5", "--max_query_length=6"]


def paragraphs(seed: int, n: int):
    """n paragraphs of 8..30 random words, each with an answerable question (a word of it) and
    an unanswerable one."""
    rng = np.random.default_rng(seed)
    out = []
    for p in range(n):
        words = [WORDS[i] for i in rng.integers(0, len(WORDS), rng.integers(8, 31))]
        context = " ".join(words) + " ."
        k = int(rng.integers(0, len(words)))
        start = len(" ".join(words[:k])) + (1 if k else 0)
        out.append({"context": context, "qas": [
            {"id": f"{seed}-{p}-a", "question": f"where did the {words[k]} ?",
             "answers": [{"text": words[k], "answer_start": start}]},
            {"id": f"{seed}-{p}-u", "question": "where did the bird sing ?", "answers": [],
             "is_impossible": True}]})
    return out


def write_squad(path, paras):
    path.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": paras}]}),
                    encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def files(tiny_vocab, tmp_path_factory):
    root = tmp_path_factory.mktemp("squad_mf")
    vocab = root / "vocab.txt"
    vocab.write_text("".join(t + "\n" for t in tiny_vocab + EXTRA), encoding="utf-8")
    (root / "in").mkdir()
    a = write_squad(root / "in" / "a.json", paragraphs(1, 12))
    b = write_squad(root / "in" / "b.json", paragraphs(2, 7))
    return {"root": root, "vocab": str(vocab), "a": a, "b": b, "glob": str(root / "in" / "*.json")}


def run(files, out, *extra):
    return make_finetune.run(["--task=question_answering", f"--input={files['glob']}", f"--vocab={files['vocab']}",
                              f"--output_dir={out}", "--progress_seconds=0", *GEOMETRY, *extra])


def shard_bytes(out):
    return {os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest()
            for p in sorted(glob.glob(os.path.join(out, "train-*")))}


def read_records(out, options):
    files = sorted(glob.glob(os.path.join(out, "train-*.tfrecord")))
    return [{k: v.numpy() for k, v in parse_record(r, options).items()}
            for r in tf.data.TFRecordDataset(files)]


@pytest.fixture(scope="module")
def first_run(files, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("squad_out") / "run1")
    stats = run(files, out, "--num_shards=3", "--examples_per_chunk=5")
    return out, stats


def test_records_equal_example_features_in_input_order(files, first_run):
    out, stats = first_run
    options = SquadOptions(24, 5, 6)
    tokenizer = tokenizers.load_tokenizer("wordpiece", files["vocab"])
    # Example index: a.json's 24 questions, then b.json's 14 (sorted paths).
    examples = read_examples(files["a"]) + read_examples(files["b"])
    expected = {}
    for i, windows in enumerate(examples_features(examples, tokenizer, options)):
        for w in windows:
            expected[(i, w["window_index"])] = w
    records = read_records(out, options)
    assert stats["examples_read"] == 38 and stats["instances"] == len(expected) == len(records)
    # Stored plus one: no -1 (a 10-byte varint) in the files, 0 where no context piece is.
    raw = [tf.io.parse_single_example(r, feature_spec(options)) for r in
           tf.data.TFRecordDataset(sorted(glob.glob(os.path.join(out, "train-*.tfrecord"))))]
    stored = np.stack([r["context_char_start"].numpy() for r in raw])
    assert stored.min() == 0 and (stored == 0).sum() == sum(
        (r["context_char_start"] == -1).sum() for r in records)
    for r in records:
        want = expected[(int(r["example_index"]), int(r["window_index"]))]
        for name, value in want.items():
            np.testing.assert_array_equal(r[name], value, err_msg=name)
    info = json.load(open(os.path.join(out, "info.json")))
    assert info["objective"] == info["task"] == "question_answering"
    assert info["instances"]["total"] == len(records) and sum(info["instances"]["per_shard"]) == len(records)
    assert info["max_seq_length"] == 24 and info["options"]["doc_stride"] == 5
    assert info["feature_spec"]["token_ids"] == {"dtype": "int64", "length": 24}
    assert os.path.exists(os.path.join(out, "COMPLETED"))
    # Shard s holds examples i % 3 == s, in (example, window) order.
    for s, path in enumerate(sorted(glob.glob(os.path.join(out, "train-*")))):
        keys = [(int(r["example_index"]), int(r["window_index"]))
                for r in (tf.io.parse_single_example(x, feature_spec(options))
                          for x in tf.data.TFRecordDataset(path))]
        assert keys == sorted(keys) and {i % 3 for i, _ in keys} == {s}


def test_bytes_do_not_depend_on_runner_or_chunking(files, first_run, tmp_path):
    out, _ = first_run
    other = str(tmp_path / "run2")
    run(files, other, "--num_shards=3", "--examples_per_chunk=7", "--direct_num_workers=2",
        "--direct_running_mode=multi_threading")
    assert shard_bytes(other) == shard_bytes(out)


def test_per_example_protocol_path_writes_the_same_bytes(files, first_run, tmp_path, monkeypatch):
    """A kind whose records come from its per-example features (finetune.base.records_by_example,
    as conll's, plus squad's to_records) writes the same bytes as squad's own records."""
    out, _ = first_run
    plain = dataclasses.replace(KIND, records=finetune_base.records_by_example(
        example_features, record_spec, to_records))
    monkeypatch.setattr(finetune, "get", lambda name: plain)
    other = str(tmp_path / "plain")
    run(files, other, "--num_shards=3", "--examples_per_chunk=5")
    assert shard_bytes(other) == shard_bytes(out)


def test_output_directory_contract(files, first_run, tmp_path):
    out, _ = first_run
    with pytest.raises(SystemExit, match="already holds a completed dataset"):
        run(files, out, "--num_shards=3")
    # Zero records: a file whose only paragraph has no questions.
    empty = write_squad(tmp_path / "empty.json", [{"context": "the cat .", "qas": []}])
    with pytest.raises(SystemExit, match="0 instances"):
        make_finetune.run(["--task=question_answering", f"--input={empty}", f"--vocab={files['vocab']}",
                           f"--output_dir={tmp_path / 'zero'}", "--progress_seconds=0"])
    assert not os.path.exists(tmp_path / "zero" / "COMPLETED")


def test_malformed_input_names_file_and_record(files, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [{"paragraphs": [{"context": "the cat sat .", "qas": [\n'
                   '{"id": "x", "question": "q", "answers": [{"text": "dog", "answer_start": 4}]}]}]}]}',
                   encoding="utf-8")
    with pytest.raises(SystemExit, match=r"bad\.json: data\[0\]\.paragraphs\[0\]\.qas\[0\]\.answers\[0\]"):
        make_finetune.run(["--task=question_answering", f"--input={bad}", f"--vocab={files['vocab']}",
                           f"--output_dir={tmp_path / 'o'}", "--progress_seconds=0"])
    assert not os.path.exists(tmp_path / "o" / "COMPLETED")
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n{"paragraphs": }', encoding="utf-8")
    with pytest.raises(SystemExit, match=r"broken\.json:2: invalid JSON"):
        make_finetune.run(["--task=question_answering", f"--input={broken}", f"--vocab={files['vocab']}",
                           f"--output_dir={tmp_path / 'o2'}", "--progress_seconds=0"])


def test_unfeaturizable_example_is_skipped_and_counted(files, tmp_path):
    paras = paragraphs(3, 2)
    paras[1]["qas"].append({"id": "blank", "question": "what ?",
                            "answers": [{"text": " ", "answer_start": paras[1]["context"].index(" ")}]})
    path = write_squad(tmp_path / "s.json", paras)
    out = tmp_path / "o"
    stats = make_finetune.run(["--task=question_answering", f"--input={path}", f"--vocab={files['vocab']}",
                               f"--output_dir={out}", "--progress_seconds=0", *GEOMETRY])
    assert stats["examples_read"] == 5 and stats["examples_skipped"] == 1
    assert stats["skipped_examples"] == ["example 4: question 'blank': answer ' ' at character "
                                         f"{paras[1]['context'].index(' ')} covers no piece of the "
                                         "tokenized context"]
    assert os.path.exists(out / "COMPLETED")


def prepare_tfds_squad(json_path, data_dir, config):
    """A tensorflow-datasets squad/<config> dataset prepared in data_dir from a local SQuAD file,
    with the registered builder's own features (nothing is downloaded)."""
    import tensorflow_datasets as tfds

    feats = tfds.builder(f"squad/{config}", data_dir=str(data_dir)).info.features
    rows = []
    for article in json.load(open(json_path))["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                answers = {"text": [a["text"] for a in qa["answers"]],
                           "answer_start": [a["answer_start"] for a in qa["answers"]]}
                row = {"id": qa["id"], "title": article["title"], "context": para["context"],
                       "question": qa["question"], "answers": answers}
                if config == "v2.0":
                    row.update(is_impossible=qa.get("is_impossible", False),
                               plausible_answers={"text": [], "answer_start": []})
                rows.append(row)
    ds = tf.data.Dataset.from_generator(lambda: iter(rows), output_signature=feats.get_tensor_spec())
    tfds.dataset_builders.TfDataBuilder(
        name="squad", config=config, version="3.0.0", data_dir=str(data_dir),
        split_datasets={"validation": ds}, features=feats).download_and_prepare()


def test_tfds_squad_from_local_data_dir(files, tmp_path):
    data_dir = tmp_path / "tfds"
    prepare_tfds_squad(files["b"], data_dir, "v2.0")
    examples = read_tfds("squad/v2.0", "validation", str(data_dir))
    from_json = read_examples(files["b"])
    assert sorted(examples, key=lambda e: e.qas_id) == sorted(from_json, key=lambda e: e.qas_id)
    out = tmp_path / "out"
    stats = make_finetune.run(["--task=question_answering", "--input=tfds:squad/v2.0:validation",
                               f"--tfds_data_dir={data_dir}", f"--vocab={files['vocab']}",
                               f"--output_dir={out}", "--split=dev", "--num_shards=1",
                               "--progress_seconds=0", *GEOMETRY])
    options = SquadOptions(24, 5, 6)
    tokenizer = tokenizers.load_tokenizer("wordpiece", files["vocab"])
    expected = [w for ws in examples_features(examples, tokenizer, options) for w in ws]
    records = [{k: v.numpy() for k, v in parse_record(r, options).items()}
               for r in tf.data.TFRecordDataset(str(out / "dev-00000-of-00001.tfrecord"))]
    assert stats["examples_read"] == 14 and len(records) == len(expected) > 14
    for r, w in zip(records, expected):
        for name, value in w.items():
            np.testing.assert_array_equal(r[name], value, err_msg=name)
    with pytest.raises(SystemExit, match="prepare it first"):
        make_finetune.run(["--task=question_answering", "--input=tfds:squad/v1.1:validation",
                           f"--tfds_data_dir={data_dir}", f"--vocab={files['vocab']}",
                           f"--output_dir={tmp_path / 'o2'}", "--progress_seconds=0"])
