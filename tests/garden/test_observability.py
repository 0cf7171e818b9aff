"""Seeing what a run does (issue 35, item 4): every evaluation in TensorBoard model_dir/eval,
garden.curves on a fine-tuning run without TensorFlow's deprecated event reader, TensorFlow's
C++ log lines off by default on CPU hosts, progress lines with an ETA."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import warnings

import pytest

from testing import REPO_ROOT, train_in_process

STEPS = 4


@pytest.fixture(scope="module")
def finetuned(bert_data, tmp_path_factory):
    """A 4-step classification fine-tuning from scratch, evaluated at its end only
    (train.eval_every=0: the final scores are the task's finish(), nothing periodic)."""
    model_dir = tmp_path_factory.mktemp("observed") / "run"
    cwd = os.getcwd()
    os.chdir(REPO_ROOT)
    try:
        summary = train_in_process([
            "--config=configs/finetune/classification_tiny.gin", f"--model_dir={model_dir}",
            f"--gin_param=VOCAB='{bert_data.vocab}'",
            f"--gin_param=TRAIN_FILE='{bert_data.task_dir}/train.tsv'",
            f"--gin_param=EVAL_FILE='{bert_data.task_dir}/dev.tsv'",
            "--gin_param=INIT_CHECKPOINT=None", "--gin_param=EXPORT_BASE=None",
            f"--gin_param=TRAIN_STEPS={STEPS}", "--gin_param=train.log_every=2",
            "--gin_param=train.eval_every=0", "--gin_param=train.global_batch_size=8",
            "--gin_param=garden.Classification.max_seq_length=32"], model_dir, steps=STEPS)
    finally:
        os.chdir(cwd)
    return model_dir, summary


def test_final_scores_are_the_eval_run_of_tensorboard(finetuned):
    from garden import curves

    model_dir, summary = finetuned
    evals = curves.read_scalars(str(model_dir), runs=("eval",))
    final = {k: v for k, v in summary.items() if k.startswith("eval_")
             and isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert "eval_accuracy" in final, summary
    # Every final number of summary.json is eval/<name> at the last step ("eval_" dropped:
    # eval/accuracy shares the training accuracy's chart), with its value (float32 in the
    # event: equal to 1e-6).
    for name, value in final.items():
        step, logged = evals["eval/" + name[len("eval_"):]][-1]
        assert step == STEPS and logged == pytest.approx(value, rel=1e-6, abs=1e-6), name
    assert [s for s, _ in evals["eval/accuracy"]] == [STEPS]  # (periodic ones: test_train.py)
    # The training run holds the training scalars only.
    train = curves.read_scalars(str(model_dir), runs=("train",))
    assert "loss" in train and not [t for t in train if t.startswith("eval/")]


def test_curves_draw_a_finetuning_run_without_the_deprecated_reader(finetuned, tmp_path,
                                                                     monkeypatch, caplog, capsys):
    import tensorflow as tf
    from tensorflow.python.lib.io import tf_record

    from garden import curves

    run_dir = tmp_path / "run"
    shutil.copytree(finetuned[0], run_dir)

    def deprecated(*args, **kwargs):
        raise AssertionError("garden.curves called a deprecated TensorFlow event reader")

    # summary_iterator and the tf_record_iterator it wraps are what logged the deprecation
    # warning in the demo's log (a notice TensorFlow logs once per process, so assert the
    # call itself).
    monkeypatch.setattr(tf.compat.v1.train, "summary_iterator", deprecated)
    monkeypatch.setattr(tf_record, "tf_record_iterator", deprecated)
    monkeypatch.setattr(tf.compat.v1.io, "tf_record_iterator", deprecated)
    caplog.set_level(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert curves.main([f"--model_dir={run_dir}"]) == 0
    assert not [r for r in caplog.records if "deprecated" in r.getMessage()]
    png = (run_dir / "curves.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert re.search(r"wrote \S+curves.png: \d+ scalars \([1-9]\d* eval/\)", capsys.readouterr().out)
    # Several runs in one process (what the demo does for its three fine-tunings).
    other = tmp_path / "other"
    shutil.copytree(finetuned[0], other)
    (run_dir / "curves.png").unlink()
    assert curves.main([f"--model_dir={run_dir}", f"--model_dir={other}"]) == 0
    assert (run_dir / "curves.png").exists() and (other / "curves.png").exists()


CPP_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:.]+: [IWEF] \S+:\d+\]", re.M)


@pytest.mark.skipif(bool(__import__("glob").glob("/dev/nvidia[0-9]*")),
                    reason="TensorFlow's C++ lines are quieted on CPU-only hosts")
def test_tensorflow_cpp_lines_are_off_on_cpu_unless_asked_for(finetuned, tmp_path):
    """A fresh garden.curves process (TensorFlow loads and runs ops): no 'E ... cuInit' or
    oneDNN line by default; TF_CPP_MIN_LOG_LEVEL=0 shows them."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "GARDEN_SET_TF_CPP_MIN_LOG_LEVEL")}

    def curves(**extra):
        return subprocess.run(
            [sys.executable, "-m", "garden.curves", f"--model_dir={finetuned[0]}",
             f"--output={tmp_path / 'c.png'}"], cwd=REPO_ROOT, env={**env, **extra},
            capture_output=True, text=True, timeout=300, check=True)

    quiet = curves()
    assert not CPP_LINE.search(quiet.stderr), quiet.stderr[-2000:]
    loud = curves(TF_CPP_MIN_LOG_LEVEL="0")
    assert CPP_LINE.search(loud.stderr), loud.stderr[-2000:]


def test_tf_logging_keeps_a_level_the_user_chose(monkeypatch):
    from text import tf_logging

    for name in (tf_logging.VARIABLE, tf_logging.MARKER):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")  # no GPU visible, whatever the host
    tf_logging.quiet()
    assert os.environ[tf_logging.VARIABLE] == "3" and os.environ[tf_logging.MARKER] == "1"
    monkeypatch.setenv(tf_logging.VARIABLE, "1")
    monkeypatch.delenv(tf_logging.MARKER)
    tf_logging.quiet()
    assert os.environ[tf_logging.VARIABLE] == "1" and tf_logging.MARKER not in os.environ


def test_eta_lines_one_per_interval():
    from text.progress import Eta

    now, lines = [0.0], []
    eta = Eta("[analyze] sentences", 100, seconds=10, emit=lines.append, clock=lambda: now[0])
    for _ in range(30):  # 30 items in 15 s: one line at 10 s
        now[0] += 0.5
        eta.add()
    assert lines == ["[analyze] sentences: 20/100 (20%) | 2.0 items/s | ETA 0:00:40"]
    now[0] = 30.0
    eta.update(60)  # 60 of 100 in 30 s: 40 left at 2/s
    assert lines[-1] == "[analyze] sentences: 60/100 (60%) | 2.0 items/s | ETA 0:00:20"
    # wrap counts an item once the loop asks for the next one (it is done).
    seen, counted = [], Eta("[fewshot] swag", 3, seconds=0, emit=lines.append)
    for item in counted.wrap("abc"):
        seen.append((item, counted.done_amount))
    assert seen == [("a", 0), ("b", 1), ("c", 2)] and counted.done_amount == 3
    data = Eta("[make_vocab] reading the corpus", 40e6, unit="MB", seconds=1,
               emit=lines.append, clock=lambda: now[0])
    now[0] = 40.0
    data.update(10e6)  # 10 MB in 10 s: 30 MB left at 1 MB/s
    assert lines[-1] == ("[make_vocab] reading the corpus: 10.0/40.0 MB (25%) | 1.00 MB/s | "
                         "ETA 0:00:30")


def test_make_vocab_prints_progress_with_an_eta(bert_data, tmp_path):
    from testing import run_module

    proc = run_module("data_pipelines.make_vocab", f"--input={bert_data.corpus_glob}",
                      f"--output={tmp_path / 'vocab.txt'}", "--vocab_size=500",
                      "--progress_seconds=0.001")
    lines = [l for l in proc.stderr.splitlines() if l.startswith("[make_vocab] reading")]
    assert lines and all(re.search(r"MB \(\d+%\) \| [\d.]+ MB/s \| ETA \d+:\d\d:\d\d$", l)
                         for l in lines), proc.stderr[-2000:]


def test_fewshot_scoring_prints_progress_with_an_eta(monkeypatch, capsys):
    """garden.fewshot.evaluate's batches of generation report progress (a stub scorer: the
    line is what is checked, not the model)."""
    import time
    import types

    from garden import fewshot
    from text import progress

    class Stub:
        model = types.SimpleNamespace(is_encoder_decoder=False)

        def tokenize(self, texts):
            return [[1] * len(t) for t in texts]

        def generate(self, prompts, max_new_tokens, width):
            time.sleep(0.01)
            return ["a"] * len(prompts)

    monkeypatch.setattr(progress, "DEFAULT_SECONDS", 0.005)
    examples = [fewshot.Example(f"Q{i}?", ("a",)) for i in range(16)]
    result = fewshot.evaluate(Stub(), "freeform", examples, examples, k=0, batch_size=4)
    assert result["exact_match"] == 1.0
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("[garden.fewshot]")]
    assert lines and all(re.fullmatch(r"\[garden.fewshot\] freeform, k=0: examples: \d+/16 \(\d+%\) "
                                      r"\| [\d.]+ items/s \| ETA \d+:\d\d:\d\d", l) for l in lines), lines
