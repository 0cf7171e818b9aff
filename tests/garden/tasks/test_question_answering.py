"""The QuestionAnswering task end to end: fine-tuned through garden.train on a small learnable
SQuAD v2.0 task, scored with the official metric against the always-"" baseline, exported with
the null threshold tuned on held-out training paragraphs, and served in a fresh process with
the Python decoder's answers; make_finetune records give the same training windows as the
in-process features."""

from __future__ import annotations

import json
import math
import os
import random

import numpy as np
import pytest
import tensorflow as tf

from data_pipelines import sample_corpus
from testing import run_code, train_in_process

FACTS = ("code", "port")


def _squad_v2(rng, n_questions, prefix, values):
    """A SQuAD v2.0 dict: contexts of two corpus sentences with "the code is V ." and/or
    "the port is V ." inserted (V a one-piece word of the vocabulary); "what is the code ?" is
    answered by the word after "code", and is unanswerable when the context states no code
    (a quarter of the questions)."""
    sentences = [s for _, doc in sample_corpus.topic_documents() for s in doc
                 if 4 <= len(s.split()) <= 14]
    paragraphs = []
    for i in range(n_questions):
        present = rng.choice([("code",), ("port",), ("code", "port"), ("code", "port")])
        parts = rng.sample(sentences, 2)
        chosen = dict(zip(present, rng.sample(values, len(present))))
        for fact in present:
            parts.insert(rng.randint(0, len(parts)), f"the {fact} is {chosen[fact]} .")
        context = " ".join(parts)
        asked = rng.choice(FACTS)
        qa = {"id": f"{prefix}{i}", "question": f"what is the {asked} ?", "answers": [],
              "is_impossible": asked not in present}
        if asked in present:
            at = context.index(f"the {asked} is ") + len(f"the {asked} is ")
            qa["answers"] = [{"text": chosen[asked], "answer_start": at}]
        paragraphs.append({"context": context, "qas": [qa]})
    return {"version": "v2.0", "data": [{"title": prefix, "paragraphs": paragraphs}]}


@pytest.fixture(scope="module")
def qa_files(bert_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("qa_task")
    with open(bert_data.vocab, encoding="utf-8") as f:
        words = [w.strip() for w in f]
    values = sorted(w for w in words if w.isalpha() and w.isascii() and len(w) >= 5)[:60]
    rng = random.Random(7)
    paths = {}
    for split, n in (("train", 1000), ("dev", 160)):
        paths[split] = str(root / f"{split}.json")
        with open(paths[split], "w") as f:
            json.dump(_squad_v2(rng, n, split, values), f)
    return paths


def _argv(bert_data, qa_files, model_dir, export_base, steps, extra=()):
    return ["--config=configs/finetune/question_answering_tiny.gin", f"--model_dir={model_dir}",
            f"--gin_param=VOCAB='{bert_data.vocab}'",
            f"--gin_param=TRAIN_FILE='{qa_files['train']}'", "--gin_param=TRAIN_RECORDS=None",
            f"--gin_param=EVAL_FILE='{qa_files['dev']}'", "--gin_param=INIT_CHECKPOINT=None",
            f"--gin_param=EXPORT_BASE='{export_base}'", f"--gin_param=TRAIN_STEPS={steps}",
            "--gin_param=garden.QuestionAnswering.max_seq_length=64",
            "--gin_param=garden.QuestionAnswering.doc_stride=24",
            "--gin_param=garden.QuestionAnswering.max_query_length=12",
            "--gin_param=train.global_batch_size=32", "--gin_param=train.warmup_steps=30",
            "--gin_param=train.learning_rate=2e-3", "--gin_param=train.log_every=100",
            "--gin_param=backbone.dropout=0.0", *extra]


# Runs in a fresh interpreter with only what a model server has (no garden import).
SERVE = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops before loading
export_dir, dev = sys.argv[1], sys.argv[2]
examples = [qa for a in json.load(open(dev))["data"] for p in a["paragraphs"]
            for qa in [dict(q, context=p["context"]) for q in p["qas"]]]
serve = tf.saved_model.load(export_dir).signatures["serving_default"]
out = {}
for i in range(0, len(examples), 64):
    batch = examples[i:i + 64]
    r = serve(question=tf.constant([e["question"] for e in batch]),
              context=tf.constant([e["context"] for e in batch]))
    for j, e in enumerate(batch):
        out[e["id"]] = {"text": r["answer"][j].numpy().decode(), "start": int(r["start"][j]),
                        "end": int(r["end"][j]), "score": float(r["score"][j])}
meta = json.load(open(export_dir + "/assets.extra/garden_export.json"))
refused = []
for bad in ({"question": tf.constant("one"), "context": tf.constant(["c"])},
            {"question": tf.constant(["a", "b"]), "context": tf.constant(["c"])}):
    try:
        serve(**bad)
    except tf.errors.InvalidArgumentError as e:
        refused.append(e.message)
print(json.dumps({"answers": out, "meta": meta, "refused": refused}))
"""


def test_qa_task_learns_beats_the_null_baseline_and_serves_the_same_answers(
        bert_data, qa_files, tmp_path):
    model_dir, export_base = tmp_path / "model", tmp_path / "export"
    summary = train_in_process(_argv(bert_data, qa_files, model_dir, export_base, 250),
                               str(model_dir), task="question_answering", steps=250)
    n = summary["eval_questions"]
    # F1 is a mean of n values in [0, 100]: its standard error is at most 50 / sqrt(n)
    # (~3.2 for 240); the always-"" baseline is exact (the NoAns share).
    margin = 3 * 50 / math.sqrt(n)
    baseline = summary["null_baseline_f1"]
    assert 10 < baseline < 40, baseline
    assert summary["eval_f1"] > baseline + margin, summary
    assert summary["eval_HasAns_f1"] > margin and summary["eval_NoAns_f1"] > margin, summary
    threshold = summary["null_threshold"]
    assert math.isfinite(threshold) and summary["holdout_questions"] == 100

    # Served in a fresh process: the Python decoder's answers, spans and tuned threshold.
    export_dir = summary["export_dir"]
    proc = run_code(SERVE, export_dir, qa_files["dev"])
    served = json.loads(proc.stdout.strip().splitlines()[-1])
    assert served["meta"]["null_threshold"] == pytest.approx(threshold)
    assert served["meta"]["task"] == "question_answering"
    # Bad shapes answer InvalidArgumentError naming the input (no crash, no silent answer).
    assert len(served["refused"]) == 2, served["refused"]
    assert "question must be a batch of strings" in served["refused"][0]
    assert "same number of texts" in served["refused"][1]
    with open(model_dir / "answers.json") as f:
        expected = json.load(f)
    with open(qa_files["dev"]) as f:
        contexts = {q["id"]: p["context"] for p in json.load(f)["data"][0]["paragraphs"]
                    for q in p["qas"]}
    assert served["answers"].keys() == expected.keys()
    differ = [q for q in expected
              if (served["answers"][q]["text"], served["answers"][q]["start"],
                  served["answers"][q]["end"]) != (expected[q]["text"], expected[q]["start"],
                                                   expected[q]["end"])]
    assert not differ, [(q, served["answers"][q], expected[q]) for q in differ[:3]]
    answered = [q for q in expected if expected[q]["text"]]
    assert 0 < len(answered) < n
    for q in answered:
        a = served["answers"][q]
        assert contexts[q][a["start"]:a["end"]] == a["text"]
    for q in expected:  # the answer's score; the null score for ""
        assert served["answers"][q]["score"] == pytest.approx(expected[q]["score"], abs=1e-3)


def test_make_finetune_records_give_the_in_process_training_windows(bert_data, qa_files,
                                                                     tmp_path):
    from data_pipelines import make_finetune
    from garden.tasks.question_answering import QuestionAnswering

    # The first 300 questions (30 paragraphs held out) keep the Beam run short.
    with open(qa_files["train"]) as f:
        doc = json.load(f)
    doc["data"][0]["paragraphs"] = doc["data"][0]["paragraphs"][:300]
    train = str(tmp_path / "train.json")
    with open(train, "w") as f:
        json.dump(doc, f)
    records = str(tmp_path / "records")
    make_finetune.run(["--task=question_answering", f"--input={train}", f"--output_dir={records}",
                       f"--vocab={bert_data.vocab}", "--max_seq_length=64", "--doc_stride=24",
                       "--max_query_length=12", "--num_shards=2"])

    def windows(train_records):
        task = QuestionAnswering(None, bert_data.vocab, train, qa_files["dev"],
                                 train_records=train_records, max_seq_length=64, doc_stride=24,
                                 max_query_length=12)
        task.prepare()
        rows = [{k: v.numpy().tolist() for k, v in w.items()} for w in task._train_windows()]
        return sorted(rows, key=lambda r: r["unique_id"])

    from_records, in_process = windows(records), windows(None)
    assert len(from_records) == len(in_process) >= 270  # 300 questions less 30 held out
    assert from_records == in_process
    assert {r["example_index"] % 10 for r in from_records} == set(range(9))  # none of 9 mod 10

    # Records of another window geometry are refused by name.
    with pytest.raises(ValueError, match=r"records was made with doc_stride=24, this task uses 32"):
        QuestionAnswering(None, bert_data.vocab, train, qa_files["dev"], train_records=records,
                          max_seq_length=64, doc_stride=32, max_query_length=12).prepare()
