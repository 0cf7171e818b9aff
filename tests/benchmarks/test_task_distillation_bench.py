"""benchmarks.task_distillation --tiny: the harness end to end on a synthetic task (a BERT-tiny
teacher, the three *_tiny.gin students, a few steps each): every model trains, exports and is
timed, and the report's ratios are computed against the teacher's own figures."""

from __future__ import annotations

import json

import pytest

from benchmarks import task_distillation


def test_tiny_report_sets_each_student_beside_the_teacher(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert task_distillation.main(
        ["--tiny", f"--work_dir={tmp_path / 'work'}", f"--output_json={out}",
         "--teacher_steps=30", "--student_steps=6", "--batch_size=16", "--max_seq_length=16",
         "--reps=2"]) == 0
    report = json.loads(out.read_text())
    rows = {r["name"]: r for r in report["rows"]}
    assert list(rows) == ["teacher", "pkd", "tinybert", "bilstm"]
    teacher = rows["teacher"]
    assert teacher["parameter_ratio"] == 1.0 and teacher["speedup"] == 1.0
    for name in ("pkd", "tinybert", "bilstm"):
        row = rows[name]
        # The student's own parameters (not the distiller's, which holds the teacher too).
        assert row["parameters"] < teacher["parameters"], row
        assert row["parameter_ratio"] == pytest.approx(teacher["parameters"] / row["parameters"])
        assert row["speedup"] == pytest.approx(teacher["latency_ms"] / row["latency_ms"])
        assert row["accuracy_delta"] == pytest.approx(row["dev_accuracy"]
                                                      - teacher["dev_accuracy"])
        # The teacher the student run restored scores as the teacher's own run did.
        assert row["teacher_eval_accuracy_in_run"] == pytest.approx(teacher["dev_accuracy"])
    assert report["table"].count("\n") == 5  # header, rule, four models
    assert report["table"] in capsys.readouterr().out
