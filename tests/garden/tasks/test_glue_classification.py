"""Classification's GLUE options: glue_task reads the official TSVs (text_b, regression
and BERT's class order from the task), evaluate reports the task's official metric (MRPC F1
of class "1", CoLA MCC, MNLI matched and mismatched), bad rows and wrong label sets refused."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from garden.metrics import classification as metrics
from garden.tasks.classification import Classification
from garden.tasks.text_files import TaskDataError

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]
MNLI_HEADER = ("index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2\t"
               "label1\tgold_label")


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


class Fixed:
    """A stand-in model whose logits are given, one row per example in order."""

    def __init__(self, rows):
        self.rows = iter(rows)

    def __call__(self, inputs, training=False):
        n = int(tf.shape(inputs["token_ids"])[0])
        return {"logits": tf.constant([next(self.rows) for _ in range(n)], tf.float32)}


def _task(tmp_path, task, train, dev, **kwargs):
    vocab = _write(tmp_path, "vocab.txt", VOCAB)
    t = Classification(backbone=None, vocab=vocab, train_file=train, eval_file=dev,
                       max_seq_length=8, glue_task=task, **kwargs)
    t.prepare()
    return t


def _mrpc(tmp_path, labels):
    lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    lines += [f"{y}\t{i}\t{i}\ta b\tb c" for i, y in enumerate(labels)]
    return _write(tmp_path, "mrpc.tsv", lines)


def test_mrpc_reads_pairs_and_reports_f1_of_class_one(tmp_path):
    gold = [1, 1, 1, 0, 0, 1, 0, 1]
    path = _mrpc(tmp_path, gold)
    task = _task(tmp_path, "mrpc", path, path)
    assert task.text_b and not task.regression and task.label_names == ["0", "1"]
    assert task.eval_rows[0] == {"text_a": "a b", "text_b": "b c", "label": "1"}
    predicted = [1, 1, 1, 1, 1, 0, 0, 0]
    result = task.evaluate(Fixed([[0.0, 1.0] if p else [1.0, 0.0] for p in predicted]))
    # tp 3, fp 2, fn 2 -> F1 = 6 / 10; accuracy 4 / 8.
    assert result["eval_f1"] == pytest.approx(0.6) and result["eval_accuracy"] == 0.5


def test_permuted_label_names_score_the_same_f1(tmp_path):
    gold = [1, 1, 1, 0, 0, 1, 0, 1]
    path = _mrpc(tmp_path, gold)
    task = _task(tmp_path, "mrpc", path, path, label_names=["1", "0"])
    predicted = [1, 1, 1, 1, 1, 0, 0, 0]  # classes "1"/"0": logit 0 is now class "1"
    result = task.evaluate(Fixed([[1.0, 0.0] if p else [0.0, 1.0] for p in predicted]))
    assert result["eval_f1"] == pytest.approx(0.6)
    # The class order goes into summary.json with the final scores.
    final = task.finish(Fixed([[1.0, 0.0]] * len(gold)), str(tmp_path))
    assert final["label_names"] == ["1", "0"] and final["glue_task"] == "mrpc"
    with pytest.raises(ValueError, match="are not GLUE mrpc's classes"):
        _task(tmp_path, "mrpc", path, path, label_names=["0", "2"])


def test_cola_mcc_and_mnli_mismatched(tmp_path):
    cola = _write(tmp_path, "cola.tsv", ["s\t1\t\ta", "s\t0\t*\tb", "s\t1\t\tc", "s\t0\t*\ta b"])
    task = _task(tmp_path, "cola", cola, cola)
    result = task.evaluate(Fixed([[0, 1], [1, 0], [1, 0], [1, 0]]))
    assert result["eval_mcc"] == pytest.approx(
        metrics.glue_metrics("cola", [1, 0, 0, 0], [1, 0, 1, 0])["mcc"])
    assert result["eval_mcc"] == pytest.approx(1 / np.sqrt(3))  # tp1 tn2 fn1: 2/sqrt(1*2*3*2)

    rows = lambda labels: [MNLI_HEADER] + [  # noqa: E731
        f"{i}\tp\tq\tg\tx\tx\tx\tx\ta\tb\t{y}\t{y}" for i, y in enumerate(labels)]
    matched = _write(tmp_path, "dev_matched.tsv", rows(["neutral", "entailment"]))
    mismatched = _write(tmp_path, "dev_mismatched.tsv", rows(["contradiction", "neutral"]))
    task = _task(tmp_path, "mnli", matched, matched, eval_mismatched_file=mismatched)
    assert task.label_names == ["contradiction", "entailment", "neutral"]
    # matched: neutral, entailment -> predict 2, 0 (one right); mismatched: 0, 2 (both right)
    result = task.evaluate(Fixed([[0, 0, 1], [1, 0, 0], [1, 0, 0], [0, 0, 1]]))
    assert result["eval_accuracy"] == 0.5 and result["eval_accuracy_mismatched"] == 1.0


def test_bad_rows_and_test_files_are_refused(tmp_path):
    bad = _write(tmp_path, "bad.tsv", ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
                                       "1\t1\t1\ta\tb", "2\t2\t2\ta\tb"])
    with pytest.raises(TaskDataError, match=r"bad\.tsv:3: label '2' is not one of mrpc"):
        _task(tmp_path, "mrpc", bad, bad)
    test = _write(tmp_path, "test.tsv", ["index\tsentence", "0\ta b"])
    with pytest.raises(TaskDataError, match=r"test\.tsv: a GLUE sst2 test file"):
        _task(tmp_path, "sst2", test, test)
    with pytest.raises(ValueError, match="set glue_task='mnli'"):
        Classification(backbone=None, vocab="v", train_file="t", eval_file="e",
                       glue_task="rte", eval_mismatched_file="m")
