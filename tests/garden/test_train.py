"""garden.train: real training under a tf.distribute strategy on Beam-written TFRecords.

Kept cheap (2026-11-28, 131 s -> see tests/conftest.py LONG_FILES): the trainer's export is
loaded back in this process (the fresh-process serving of the same exporter is
tests/serving/test_export.py's test_fresh_process_matches_keras); the periodic-evaluation and
report tests read one shared run; the two-phase test makes its step-5 checkpoint in its first
run instead of a second one."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil

import pytest

from garden import train as train_lib
from garden.training import progress, setup
from testing import read_summary


def _pretrain_args(bert_data, model_dir, steps, *extra, seq=64, data_dir=None):
    """garden.train arguments of bert_tiny.gin: one phase on data_dir (default: bert_data's)."""
    data_dir = bert_data.data_dir if data_dir is None else str(data_dir)
    phases = [{"start_step": 0, "data_dir": data_dir, "max_seq_length": seq}]
    return ["--config=configs/bert_tiny.gin", f"--model_dir={model_dir}",
            f"--gin_param=VOCAB='{bert_data.vocab}'",
            f"--gin_param=DATA_DIR='{bert_data.data_dir}'",
            f"--gin_param=garden.Pretraining.phases={phases!r}",
            f"--gin_param=train.train_steps={steps}",
            "--gin_param=train.global_batch_size=16",
            "--gin_param=garden.Pretraining.shuffle_buffer=1000",
            *extra]


def _refused(capsys, bert_data, tmp_path, **kwargs) -> str:
    """garden.train of 5 steps (_pretrain_args with kwargs) into tmp_path/run exits 2; its stderr."""
    assert train_lib.main(_pretrain_args(bert_data, tmp_path / "run", 5, **kwargs)) == 2
    return capsys.readouterr().err


@pytest.fixture(autouse=True)
def _cwd_repo(monkeypatch):
    # Config files include each other by repo-relative paths, as on the command line.
    monkeypatch.chdir(train_lib.REPO_ROOT)


def _pretrained_args(bert_data, model_dir, steps):
    return _pretrain_args(bert_data, model_dir, steps, "--gin_param=train.log_every=10",
                          "--gin_param=train.warmup_steps=10")


@pytest.fixture(scope="module")
def pretrained(bert_data, tmp_path_factory):
    """One 120-step run (logged every 10 steps): read by the loss test, continued by the resume
    test (in a copy), the fine-tuning test's INIT_CHECKPOINT. (Each had a run of its own.)"""
    model_dir = tmp_path_factory.mktemp("pretrained") / "run"
    cwd = os.getcwd()
    os.chdir(train_lib.REPO_ROOT)  # (the autouse _cwd_repo is function-scoped)
    try:
        assert train_lib.main(_pretrained_args(bert_data, model_dir, 120)) == 0
    finally:
        os.chdir(cwd)
    return model_dir


def test_tiny_pretraining_lowers_the_loss(pretrained):
    model_dir = pretrained
    summary = read_summary(model_dir)
    first, last = summary["first_logged_metrics"], summary["last_logged_metrics"]
    # Random init predicts ~uniformly over the vocabulary: MLM loss starts near ln(V).
    assert first["mlm_loss"] > 5.0
    assert last["mlm_loss"] < first["mlm_loss"] - 1.0, (first, last)
    assert last["loss"] < first["loss"]
    assert summary["replicas"] >= 1 and summary["steps"] == 120
    # The artefacts a user looks at are there.
    assert os.path.exists(model_dir / "operative_config.gin")
    assert "train.train_steps = 120" in (model_dir / "operative_config.gin").read_text()
    assert list((model_dir / "train").glob("events.out.tfevents.*"))


def test_resume_continues_from_the_saved_step(bert_data, pretrained, tmp_path, capsys):
    # A copy of the shared 120-step run, continued to 130 steps by the same command.
    model_dir = tmp_path / "run"
    shutil.copytree(pretrained, model_dir)
    assert read_summary(model_dir)["steps"] == 120
    capsys.readouterr()
    assert train_lib.main(_pretrained_args(bert_data, model_dir, 130)) == 0
    out = capsys.readouterr().out
    assert "resumed from" in out and "at step 120" in out
    # Progress: a bar, the share done and an ETA on every log line.
    assert "[train] step 130/130 [====================] 100% |" in out
    assert "[train] step 120/130" not in out and "ETA 0:00:00" in out
    summary = read_summary(model_dir)
    assert summary["steps"] == 130 and summary["steps_this_run"] == 10
    assert summary["checkpoint"].endswith("ckpt-130")


def test_progress_bar_fills_with_the_steps():
    assert progress.progress_bar(0, 20) == "[>" + "." * 19 + "]"
    assert progress.progress_bar(7, 20) == "[=======>............]"
    assert progress.progress_bar(10, 40, width=8) == "[==>.....]"
    assert progress.progress_bar(40, 40, width=8) == "[========]"


def test_refuses_data_without_completed(bert_data, tmp_path, capsys):
    data_copy = tmp_path / "data"
    shutil.copytree(bert_data.data_dir, data_copy)
    os.remove(data_copy / "COMPLETED")
    err = _refused(capsys, bert_data, tmp_path, data_dir=data_copy)
    assert "COMPLETED" in err and str(data_copy) in err


def test_refuses_data_of_another_sequence_length(bert_data, tmp_path, capsys):
    err = _refused(capsys, bert_data, tmp_path, seq=128)
    assert "max_seq_length 64" in err and "expects 128" in err


def test_refuses_data_made_with_another_vocabulary(bert_data, tmp_path, capsys):
    other = tmp_path / "vocab.txt"
    tokens = open(bert_data.vocab).read().splitlines()
    other.write_text("\n".join(tokens[:-1] + ["zzzz"]) + "\n")
    args = _pretrain_args(bert_data, tmp_path / "run", 5) + [f"--gin_param=VOCAB='{other}'"]
    assert train_lib.main(args) == 2
    err = capsys.readouterr().err
    assert "vocabulary" in err and bert_data.data_dir in err


def test_unknown_gin_binding_is_a_clear_error(bert_data, tmp_path, capsys):
    rc = train_lib.main(_pretrain_args(bert_data, tmp_path / "run", 5,
                                       "--gin_param=train.learning_rat=0.1"))
    assert rc == 2
    err = capsys.readouterr().err
    assert "learning_rat" in err and "invalid configuration" in err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_missing_vocabulary_is_a_clear_error(bert_data, tmp_path, capsys):
    missing = tmp_path / "nope" / "vocab.txt"
    args = _pretrain_args(bert_data, tmp_path / "run", 5) + [f"--gin_param=VOCAB='{missing}'"]
    assert train_lib.main(args) == 2
    assert f"vocabulary file not found: {missing}" in capsys.readouterr().err


def test_unwritable_model_dir_fails_at_start(bert_data, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert train_lib.main(_pretrain_args(bert_data, blocker / "run", 5)) == 2
    assert "not writable" in capsys.readouterr().err


def test_write_check_of_a_shared_model_dir_is_safe_to_run_at_once(tmp_path):
    # Every worker of a multi-worker job checks the one model_dir at start. Their probes must
    # not collide: with one probe name, one worker removed the file another had just written
    # and the other failed with "No such file or directory".
    import threading

    errors = []

    def check():
        try:
            for _ in range(50):
                setup.check_writable(str(tmp_path))
        except Exception as e:  # noqa: BLE001 - collected and reported below
            errors.append(e)

    threads = [threading.Thread(target=check) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert os.listdir(tmp_path) == []


def test_finetune_from_pretraining_checkpoint_then_export(bert_data, pretrained, tmp_path,
                                                         monkeypatch):
    import csv

    import numpy as np

    from garden.tasks.classification import Classification
    from testing import checkpoint_floats

    pretrain_dir = pretrained  # read only: its newest checkpoint (step 120)
    # The backbone's weights as the task built it, before the first step.
    initial, build_model = {}, Classification.build_model

    def build_and_keep(task):
        model, objects = build_model(task)
        initial.update({w.path: w.numpy() for w in objects["backbone"].weights})
        return model, objects

    monkeypatch.setattr(Classification, "build_model", build_and_keep)
    export_base = tmp_path / "export"
    rc = train_lib.main([
        "--config=configs/finetune/classification_tiny.gin", f"--model_dir={tmp_path / 'ft'}",
        f"--gin_param=VOCAB='{bert_data.vocab}'",
        f"--gin_param=TRAIN_FILE='{bert_data.task_dir}/train.tsv'",
        f"--gin_param=EVAL_FILE='{bert_data.task_dir}/dev.tsv'",
        f"--gin_param=INIT_CHECKPOINT='{pretrain_dir}'",
        f"--gin_param=EXPORT_BASE='{export_base}'",
        "--gin_param=TRAIN_STEPS=30", "--gin_param=train.log_every=10",
        "--gin_param=garden.Classification.max_seq_length=64"])
    assert rc == 0
    # INIT_CHECKPOINT was loaded: every backbone weight at step 0 is a tensor of the
    # pretraining checkpoint, bit for bit; and not a fresh initialisation, whose LayerNorm
    # scales are all 1 and offsets all 0 (120 pretraining steps moved them).
    saved = list(checkpoint_floats(pretrain_dir).values())
    assert len(initial) > 30
    for path, value in initial.items():
        assert any(t.shape == value.shape and np.array_equal(t, value) for t in saved), path
    norms = [v for p, v in initial.items() if p.endswith(("/gamma", "/beta"))]
    assert len(norms) >= 6
    assert not [v for v in norms if np.all(v == 1.0) or np.all(v == 0.0)]

    summary = read_summary(tmp_path / "ft")
    assert summary["export_dir"] == str(export_base / "bert_tiny_classifier" / "1")
    with open(f"{bert_data.task_dir}/dev.tsv", newline="", encoding="utf-8") as f:
        dev = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    assert summary["eval_examples"] == len(dev) > 100
    # The export answers raw text through its serving signature; its predictions on the dev
    # texts give the accuracy the trainer reported (the same model and packing; a near-tie
    # decided differently by float rounding may move one or two). Loaded here: that the
    # exporter's SavedModel serves from a fresh process with only tensorflow and
    # tensorflow_text is tests/serving/test_export.py's test_fresh_process_matches_keras.
    import tensorflow as tf

    loaded = tf.saved_model.load(summary["export_dir"])
    out = loaded.signatures["serving_default"](text_a=tf.constant([row["text_a"] for row in dev]))
    labels = [label.decode() for label in out["label"].numpy()]
    sums = out["probabilities"].numpy().sum(-1).tolist()
    assert len(labels) == len(dev) and set(labels) <= {"library", "reference"}
    assert all(abs(s - 1.0) < 1e-5 for s in sums)
    accuracy = np.mean([label == row["label"] for label, row in zip(labels, dev)])
    assert abs(accuracy - summary["eval_accuracy"]) <= 2 / len(dev), (accuracy, summary)


def test_two_phases_switch_data_and_continue_from_the_same_weights(bert_data, tmp_path, capsys):
    # BERT's recipe in miniature: short sequences first, then longer ones from step 4.
    phases = [{"start_step": 0, "data_dir": bert_data.data_dir, "max_seq_length": 64},
              {"start_step": 4, "data_dir": bert_data.data_dir_128, "max_seq_length": 128}]
    args = _pretrain_args(bert_data, tmp_path, 6, f"--gin_param=garden.Pretraining.phases={phases!r}",
                          "--gin_param=train.checkpoint_every=5", "--gin_param=train.log_every=1")
    # First 5 of the 6 steps (one run fewer than running all 6 and then rebuilding a step-5
    # checkpoint): the switch at step 4 happens inside it.
    assert train_lib.main(args + ["--gin_param=train.train_steps=5"]) == 0
    out = capsys.readouterr().out
    assert f"steps 0-4: {bert_data.data_dir} (max_seq_length 64)" in out
    assert f"steps 4-5: {bert_data.data_dir_128} (max_seq_length 128)" in out
    assert out.index("step 4/5") < out.index("steps 4-5:") < out.index("step 5/5")
    assert read_summary(tmp_path)["steps"] == 5
    # Resuming inside the second phase goes straight to its data.
    assert train_lib.main(args) == 0
    out = capsys.readouterr().out
    assert "at step 5" in out and "steps 0-4" not in out and "steps 4-6" in out
    assert read_summary(tmp_path)["steps"] == 6


def test_weight_decay_skips_layer_norm_and_biases():
    from garden.models.bert.presets import untrained_bert_backbone
    from garden.models.bert.pretrainer import BertPretrainer
    from garden.optimization import create_optimizer

    model = BertPretrainer(untrained_bert_backbone("bert_tiny", vocab_size=50))
    opt = create_optimizer("adamw", 1e-3, 100, 10, weight_decay=0.01)
    opt.build(model.trainable_variables)
    decayed = {v.path for v in model.trainable_variables if opt._use_weight_decay(v)}
    assert any(p.endswith("query/kernel") for p in decayed)
    assert any(p.endswith("token_embedding/embeddings") for p in decayed)
    assert not [p for p in decayed if p.endswith(("/bias", "/gamma", "/beta"))], decayed


@pytest.fixture(scope="module")
def evaluated_run(bert_data, tmp_path_factory):
    """One run read by the periodic-evaluation and report tests: 10 steps, logged every 2,
    evaluated every 5 on 3 batches of the 128-token data. Returns (model_dir, stdout)."""
    model_dir = tmp_path_factory.mktemp("evaluated")
    args = _pretrain_args(bert_data, model_dir, 10, "--gin_param=train.eval_every=5",
                          "--gin_param=train.log_every=2",
                          f"--gin_param=garden.Pretraining.eval_data_dir='{bert_data.data_dir_128}'",
                          "--gin_param=garden.Pretraining.eval_max_seq_length=128",
                          "--gin_param=garden.Pretraining.eval_batches=3")
    out, cwd = io.StringIO(), os.getcwd()
    os.chdir(train_lib.REPO_ROOT)  # (the autouse _cwd_repo is function-scoped)
    try:
        with contextlib.redirect_stdout(out):
            assert train_lib.main(args) == 0
    finally:
        os.chdir(cwd)
    return model_dir, out.getvalue()


def test_periodic_evaluation_on_held_out_data(evaluated_run):
    tmp_path, out = evaluated_run
    assert "eval at step 5 |" in out and "eval at step 10 |" in out
    summary = read_summary(tmp_path)
    evals = summary["last_eval_metrics"]
    # MFU = 6 x non-embedding parameters x tokens/s over a matmul peak measured at start.
    assert summary["peak_flops"] > 1e9 and 0.0 < summary["mfu_last_window"] < 1.0
    # 3 batches of 32 (eval_batch_size): the NSP accuracy is a count of right answers out of
    # 96 (a mean of probabilities or of another number of examples would not be).
    assert evals["mlm_loss"] > 0
    assert abs(evals["nsp_accuracy"] * 96 - round(evals["nsp_accuracy"] * 96)) < 1e-3, evals
    # The scalars reach TensorBoard.
    from garden import curves

    tags = {}
    for run in ("train", "eval"):  # evaluations have a TensorBoard run of their own
        tags[run] = {tag for tag in curves.read_scalars(str(tmp_path), runs=(run,))}
    assert {"loss", "learning_rate", "tokens_per_second", "grad_norm", "mfu"} <= tags["train"]
    assert {"eval/mlm_loss", "eval/nsp_accuracy"} <= tags["eval"], tags
    assert not [t for t in tags["train"] if t.startswith("eval/")], tags


def test_eval_data_of_another_length_is_refused(bert_data, tmp_path, capsys):
    args = _pretrain_args(bert_data, tmp_path, 2,
                          f"--gin_param=garden.Pretraining.eval_data_dir='{bert_data.data_dir_128}'")
    assert train_lib.main(args) == 2
    assert "max_seq_length 128" in capsys.readouterr().err


def test_curves_renders_the_curves_of_a_run(evaluated_run, tmp_path, capsys):
    from garden import curves

    run_dir = tmp_path / "run"  # a copy: garden.curves writes curves.png beside the events
    shutil.copytree(evaluated_run[0], run_dir)
    series = curves.read_scalars(str(run_dir))
    assert [s for s, _ in series["loss"]] == [2, 4, 6, 8, 10]
    assert [s for s, _ in series["eval/mlm_loss"]] == [5, 10]
    assert curves.main([f"--model_dir={run_dir}"]) == 0
    png = (run_dir / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    assert curves.main([f"--model_dir={tmp_path / 'nothing'}"]) == 2
    assert "no TensorBoard event files" in capsys.readouterr().err


def test_xla_on_one_cpu_device_trains_and_lowers_the_loss(bert_data, tmp_path, capsys):
    # jit_compile defaults to off on CPUs; forced on, the per-replica gradient computation is
    # one XLA cluster on the CPU device and must still learn.
    model_dir = tmp_path / "run"
    rc = train_lib.main(_pretrain_args(bert_data, model_dir, 40, "--strategy=one_device",
                                       "--gin_param=train.jit_compile=True",
                                       "--gin_param=train.log_every=10",
                                       "--gin_param=train.warmup_steps=5",
                                       "--gin_param=train.peak_flops=1e12"))
    assert rc == 0
    out = capsys.readouterr().out
    assert "on 1 replica(s) (OneDeviceStrategy), float32, XLA on" in out
    summary = read_summary(model_dir)
    first, last = summary["first_logged_metrics"], summary["last_logged_metrics"]
    # Means over steps 1-10 and 31-40: MLM starts near ln(2000) = 7.6.
    assert first["mlm_loss"] > 5.0
    assert last["mlm_loss"] < first["mlm_loss"] - 0.5, (first, last)
    assert last["loss"] < first["loss"]


def test_non_finite_gradient_with_a_finite_loss_stops_and_keeps_the_good_checkpoint(
        bert_data, tmp_path, capsys, monkeypatch):
    import tensorflow as tf

    from garden.tasks.pretraining import Pretraining

    # From the 4th step on, add the Euclidean norm of a zero vector that depends on a weight w,
    # sqrt(sum((w - stop_gradient(w))^2)), as a distance between identical vectors would in a
    # real model: it adds exactly 0 to the loss, but d sqrt(x)/dx = inf at x = 0 meets
    # d x/dw = 0, so w's gradient is 0 * inf = NaN. (Before: sqrt(x + 1) - 1, also exactly 0,
    # with a zero gradient.)
    calls = tf.Variable(0, dtype=tf.int64, trainable=False)
    compute_metrics = Pretraining.compute_metrics

    def poisoned(self, model, batch, training, weight_shares=None):
        metrics = dict(compute_metrics(self, model, batch, training, weight_shares))
        if training:
            calls.assign_add(1)
            w = model.trainable_variables[0]
            x = tf.reduce_sum(tf.square(w - tf.stop_gradient(w)))
            c = tf.where(calls >= 4, 0.0, 1.0)
            metrics["loss"] = metrics["loss"] + (tf.sqrt(x + c) - tf.sqrt(c))
        return metrics

    monkeypatch.setattr(Pretraining, "compute_metrics", poisoned)
    model_dir = tmp_path / "run"
    rc = train_lib.main(_pretrain_args(bert_data, model_dir, 10, "--strategy=one_device",
                                       "--gin_param=train.checkpoint_every=1",
                                       "--gin_param=train.log_every=1",
                                       "--gin_param=train.peak_flops=1e12"))
    assert rc == 2
    captured = capsys.readouterr()
    err = captured.err
    assert "gradient global norm is nan at step 4" in err, captured.out[-2000:] + err[-2000:]
    # The loss of that step was finite and logged nowhere as NaN.
    assert "loss is nan" not in err
    latest = tf.train.latest_checkpoint(str(model_dir / "checkpoints"))
    assert latest is not None and latest.endswith("ckpt-3"), latest
    assert f"The last good checkpoint is kept: {latest}" in err
    reader = tf.train.load_checkpoint(latest)
    for name, dtype in reader.get_variable_to_dtype_map().items():
        if dtype.is_floating:
            assert tf.reduce_all(tf.math.is_finite(reader.get_tensor(name))), name


def test_refuses_data_made_for_another_objective(bert_data, tmp_path, capsys):
    # The same shards, but info.json says make_pretrain wrote them for RoBERTa.
    data_copy = tmp_path / "data"
    shutil.copytree(bert_data.data_dir, data_copy)
    info = json.loads((data_copy / "info.json").read_text())
    assert info["objective"] == "bert"
    info["objective"] = "roberta"
    (data_copy / "info.json").write_text(json.dumps(info))
    err = _refused(capsys, bert_data, tmp_path, data_dir=data_copy)
    assert "DataDirError" in err and str(data_copy) in err
    assert "objective 'roberta', but the config trains 'bert'" in err
    assert not (tmp_path / "run" / "checkpoints").exists()
