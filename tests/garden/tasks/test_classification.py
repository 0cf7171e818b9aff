"""The fine-tuning readers (issue 13 item 2) and the regression objective of
garden.tasks.classification: strict csv dialects, file:line errors, no silent
conversions; MSE loss and Pearson / Spearman in evaluate."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from garden.tasks.classification import Classification
from garden.tasks.text_files import TaskDataError, read_examples


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return str(path)


def test_tsv_extra_field_is_an_error_with_file_and_line(tmp_path):
    path = _write(tmp_path, "t.tsv", "text_a\tlabel\ngood movie\tpos\na tab\there\tneg\n")
    with pytest.raises(TaskDataError, match=r"t\.tsv:3: row has 3 fields but the header names 2"):
        read_examples(path)


def test_tsv_keeps_unicode_line_separators_inside_text(tmp_path):
    # U+2028, form feed and NEL are text in a TSV: str.splitlines() used to split on them.
    texts = ["a\u2028b", "c\x0cd", "e\x85f"]
    body = "".join(f"{t}\tx\n" for t in texts)
    rows = read_examples(_write(tmp_path, "u.tsv", "text_a\tlabel\n" + body))
    assert [r["text_a"] for r in rows] == texts and [r["label"] for r in rows] == ["x"] * 3


def test_csv_quoted_field_keeps_its_newline_and_comma(tmp_path):
    path = _write(tmp_path, "q.csv", 'text_a,label\n"line one\nline two, still",pos\nplain,neg\n')
    rows = read_examples(path)
    assert rows == [{"text_a": "line one\nline two, still", "label": "pos"},
                    {"text_a": "plain", "label": "neg"}]


def test_tsv_short_row_names_its_line(tmp_path):
    path = _write(tmp_path, "s.tsv", "text_a\ttext_b\tlabel\na\tb\tpos\nonly two\tneg\n")
    with pytest.raises(TaskDataError, match=r"s\.tsv:3: row has fewer fields"):
        read_examples(path, text_b=True)


@pytest.mark.parametrize("record, field", [
    ({"text_a": "fine", "label": None}, "label"),
    ({"text_a": "fine", "label": 1}, "label"),
    ({"text_a": None, "label": "pos"}, "text_a"),
    ({"text_a": ["a"], "label": "pos"}, "text_a"),
])
def test_jsonl_non_string_values_are_rejected(tmp_path, record, field):
    good = json.dumps({"text_a": "ok", "label": "pos"})
    path = _write(tmp_path, "d.jsonl", good + "\n" + json.dumps(record) + "\n")
    with pytest.raises(TaskDataError, match=rf"d\.jsonl:2: field '{field}' is .*expected a string"):
        read_examples(path)


def test_jsonl_regression_labels_must_be_numbers(tmp_path):
    rows = [{"text_a": "a", "label": 0.5}, {"text_a": "b\u2028c", "label": 3}]
    path = _write(tmp_path, "r.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    assert [r["label"] for r in read_examples(path, numeric_label=True)] == [0.5, 3]
    bad = _write(tmp_path, "b.jsonl", json.dumps({"text_a": "a", "label": "0.5"}) + "\n")
    with pytest.raises(TaskDataError, match=r"b\.jsonl:1: .*expected a number"):
        read_examples(bad, numeric_label=True)
    tsv = _write(tmp_path, "b.tsv", "text_a\tlabel\na\t1.5\nb\thigh\n")
    with pytest.raises(TaskDataError, match=r"b\.tsv:3: label 'high' is not a number"):
        read_examples(tsv, numeric_label=True)


@pytest.fixture
def regression_task(tmp_path):
    vocab = _write(tmp_path, "vocab.txt",
                   "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    data = _write(tmp_path, "sts.tsv", "text_a\tlabel\na\t1.0\nb\t2.0\na b\t4.0\nb a\t3.0\n")
    task = Classification(backbone=None, vocab=vocab, train_file=data, eval_file=data,
                          max_seq_length=8, regression=True)
    task.prepare()
    return task


def test_regression_loss_is_mse_and_evaluate_reports_correlations(regression_task, monkeypatch):
    task = regression_task
    np.testing.assert_array_equal(task.eval_labels, [1.0, 2.0, 4.0, 3.0])

    class Fixed:  # a stand-in model with known outputs, to check the arithmetic exactly
        def __init__(self, values):
            self.values = iter(values)

        def __call__(self, inputs, training=False):
            n = int(tf.shape(inputs["token_ids"])[0])
            return {"logits": tf.constant([[next(self.values)] for _ in range(n)], tf.float32)}

    batch = {k: tf.constant(v) for k, v in task.packer.encode_numpy(["a", "b"]).items()}
    batch["label_ids"] = tf.constant([1.0, 2.0])
    metrics = task.compute_metrics(Fixed([2.0, 4.0]), batch, training=True)
    assert float(metrics["loss"]) == pytest.approx((1.0 + 4.0) / 2)  # (2-1)^2, (4-2)^2
    result = task.evaluate(Fixed([1.0, 2.0, 3.0, 10.0]))
    # Scores 1, 2, 3, 10 against 1, 2, 4, 3: ranks 1 2 3 4 vs 1 2 4 3 -> Spearman 0.8.
    assert result["eval_spearman"] == pytest.approx(0.8)
    assert result["eval_pearson"] == pytest.approx(np.corrcoef([1, 2, 3, 10], [1, 2, 4, 3])[0, 1])
    assert result["eval_mse"] == pytest.approx((0 + 0 + 1 + 49) / 4)
    assert "eval_accuracy" not in result


def test_regression_refuses_label_names(tmp_path):
    with pytest.raises(ValueError, match="a regression task has none"):
        Classification(backbone=None, vocab="v", train_file="t", eval_file="e",
                       label_names=["a", "b"], regression=True)


def test_a_train_file_smaller_than_one_batch_is_announced_once(regression_task, capsys):
    # 4 examples in batches of 32: the repeated dataset fills each batch with copies.
    stage = regression_task.schedule(10)[0]
    stage.dataset_fn(None, 32, 0, 0)
    stage.dataset_fn(None, 32, 0, 0)  # a second input pipeline: no second warning
    out = capsys.readouterr().out
    assert out.count("fewer than one batch of 32") == 1, out
    assert "sts.tsv has 4 examples" in out
    regression_task.schedule(10)[0].dataset_fn(None, 4, 0, 0)  # a batch the file fills
    assert "fewer than one batch" not in capsys.readouterr().out
