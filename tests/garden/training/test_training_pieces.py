"""The pieces garden.train composes (garden/training/*, the task table), tested one by one."""

from __future__ import annotations

import dataclasses
import os
import re
import signal

import numpy as np
import pytest

from garden.training import checkpoints, progress, report, settings, setup


# -- progress: ETA, bar, log line, windows, MFU --------------------------------------------
def test_eta_is_hours_minutes_seconds():
    assert progress.format_eta(0) == "0:00:00"
    assert progress.format_eta(59.9) == "0:00:59"
    assert progress.format_eta(3725.9) == "1:02:05"
    assert progress.format_eta(-5) == "0:00:00"
    assert progress.format_eta(100 * 3600) == "100:00:00"


def test_log_line_keeps_the_readme_format():
    line = progress.log_line(7, 20, means={"loss": 6.1234567, "tokens": 99.0}, lr=1e-3, rate=3.25,
                             global_batch_size=16, mfu=0.0123, precision="mixed_bfloat16")
    assert line == ("[train] step 7/20 [=======>............] 35% | loss 6.1235 | lr 1.00e-03 | "
                    "3.2 steps/s 52 ex/s MFU 1.2% | mixed_bfloat16 | ETA 0:00:04")
    # Without a token count there is no MFU.
    line = progress.log_line(1, 2, means={"loss": 1.0}, lr=1e-3, rate=1.0, global_batch_size=8,
                             mfu=None, precision="float32")
    assert " MFU " not in line and "ex/s | float32 | ETA" in line


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_progress_logs_window_means_every_log_every_steps_and_at_the_end(capsys):
    import tensorflow as tf

    clock = _Clock()
    p = progress.Progress(tf.summary.create_noop_writer(), train_steps=5, log_every=2,
                          global_batch_size=8, shares=2, flops_per_token=10.0, peak_flops=1e3,
                          precision="float32", clock=clock)
    lines = []
    for step, loss in enumerate([4.0, 2.0, 1.0, 3.0, 5.0], start=1):
        clock.now += 0.5  # 2 steps/s
        lines.append(p.add(step, {"loss": loss, "tokens": 5.0}, lambda: 0.01))
    assert [ln is not None for ln in lines] == [False, True, False, True, True]
    assert p.first["loss"] == 3.0 and p.last["loss"] == 5.0  # windows (4+2)/2, then 5
    assert "step 2/5" in lines[1] and "loss 3.0000" in lines[1] and "2.0 steps/s 16 ex/s" in lines[1]
    # MFU = flops/token x tokens/s / peak = 10 x (2 steps/s x 5 tokens x 2 shares) / 1000.
    assert p.mfu == pytest.approx(0.2)
    assert "MFU 20.0%" in lines[4]
    assert capsys.readouterr().out.count("[train] step") == 3


# -- checkpoints: round trip, resume, a foreign checkpoint, preemption ---------------------
def _model_and_opt(width=3):
    import keras

    inputs = keras.Input([4])
    model = keras.Model(inputs, keras.layers.Dense(width, name="dense")(keras.layers.Dropout(0.1, seed=1)(inputs)))
    opt = keras.optimizers.Adam(0.1)
    opt.build(model.trainable_variables)
    return model, opt


def test_checkpoint_round_trip_resumes_weights_optimizer_and_step(tmp_path):
    model, opt = _model_and_opt()
    ckpt = checkpoints.Checkpoints(str(tmp_path), model, opt, {"model": model}, keep=2)
    assert ckpt.restore() is None  # a fresh model_dir
    opt.apply_gradients([(np.ones(v.shape, np.float32), v) for v in model.trainable_variables])
    opt.apply_gradients([(np.ones(v.shape, np.float32), v) for v in model.trainable_variables])
    path = ckpt.save(2)
    assert path.endswith("ckpt-2") and ckpt.save_final(2) == path  # not saved twice

    fresh, fresh_opt = _model_and_opt()
    resumed = checkpoints.Checkpoints(str(tmp_path), fresh, fresh_opt, {"model": fresh})
    assert resumed.restore() == path
    assert int(fresh_opt.iterations.numpy()) == 2
    for a, b in zip(model.weights + opt.variables, fresh.weights + fresh_opt.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_checkpoint_of_another_model_is_refused_by_name(tmp_path):
    model, opt = _model_and_opt(width=3)
    path = checkpoints.Checkpoints(str(tmp_path), model, opt, {"model": model}).save(1)
    other, other_opt = _model_and_opt(width=5)
    with pytest.raises(checkpoints.CheckpointMismatchError, match="ckpt-1") as e:
        checkpoints.Checkpoints(str(tmp_path), other, other_opt, {"model": other}).restore()
    message = str(e.value)
    assert path in message and "fresh --model_dir" in message
    assert re.search(r"shape|\(3,?\)|\[4,3\]|\[4, 3\]", message), message


def test_sigterm_sets_the_preemption_flag():
    previous = signal.getsignal(signal.SIGTERM)
    try:
        flag = checkpoints.Preemption()
        assert not flag.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag.requested and flag.EXIT_CODE == 143
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- evaluation logging ---------------------------------------------------------------------
def test_evaluation_is_printed_and_written_to_tensorboard(tmp_path, capsys):
    import tensorflow as tf

    from garden.curves import read_scalars
    from garden.tasks.base import Task

    class Scored(Task):
        def evaluate(self, model):
            return {"loss": 1.5, "accuracy": 0.25, "note": "text is not a scalar"}

    writer = tf.summary.create_file_writer(str(tmp_path / "train"))
    numbers = report.evaluate(Scored(), None, writer, step=7)
    writer.flush()
    assert numbers == {"loss": 1.5, "accuracy": 0.25}
    assert "[train] eval at step 7 | loss 1.5000 accuracy 0.2500" in capsys.readouterr().out
    scalars = read_scalars(str(tmp_path))
    assert scalars["eval/loss"] == [(7, 1.5)] and scalars["eval/accuracy"] == [(7, 0.25)]
    # A task without evaluation logs nothing.
    assert report.evaluate(Task(), None, writer, step=8) == {}


def _hardware(precision: str = "float32", export_precision: str = "float32") -> settings.Hardware:
    return settings.Hardware(precision=precision, jit_compile=False, peak_flops=None,
                             export_precision=export_precision)


def test_no_export_without_an_export_base_or_a_serving_module():
    from garden.tasks.base import Task

    task = Task()
    assert report.export(task, None, _hardware()) is None
    task.export_base = "/nonexistent"  # serving_module() is None: still nothing to export
    assert report.export(task, None, _hardware()) is None


# -- argument checks ------------------------------------------------------------------------
def _loop(**fields) -> settings.Loop:
    """A Loop of 10 steps of 16 examples, with `fields` replaced."""
    loop = settings.Loop(train_steps=10, global_batch_size=16, gradient_accumulation_steps=1,
                         seed=42, log_every=100, eval_every=0, checkpoint_every=1000,
                         keep_checkpoints=3)
    return dataclasses.replace(loop, **fields)


def _optimization(**fields) -> settings.Optimization:
    """AdamW at 1e-4 on BERT's linear schedule, with `fields` replaced."""
    optimization = settings.Optimization(
        optimizer="adamw", learning_rate=1e-4, lr_schedule="linear", warmup_steps=10,
        lr_power=1.0, end_learning_rate=0.0, weight_decay=0.01, adam_beta_1=0.9,
        adam_beta_2=0.999, adam_epsilon=1e-6, clip_norm=1.0)
    return dataclasses.replace(optimization, **fields)


@pytest.mark.parametrize("steps", [20.5, "20", 0, True])
def test_train_steps_must_be_a_positive_whole_number(steps):
    with pytest.raises(setup.ConfigError, match=r"train\.train_steps must be a positive whole number"):
        setup.check_arguments(_loop(train_steps=steps), replicas=1)


def test_global_batch_must_split_over_replicas_and_accumulation():
    setup.check_arguments(_loop(gradient_accumulation_steps=2), replicas=2)
    with pytest.raises(setup.ConfigError, match="not divisible by 3 replicas"):
        setup.check_arguments(_loop(), replicas=3)
    with pytest.raises(setup.ConfigError, match=r"train\.gradient_accumulation_steps must be"):
        setup.check_arguments(_loop(gradient_accumulation_steps=0), replicas=1)


# -- the task table -------------------------------------------------------------------------
def test_task_table_registers_every_task_with_gin():
    import gin

    from garden import tasks
    from garden.tasks.base import Task

    tasks.register_with_gin()
    tasks.register_with_gin()  # idempotent
    for name in tasks.TASKS:
        assert gin.config._REGISTRY.get_match(f"garden.{name}") is not None
    assert issubclass(tasks.get("Pretraining"), Task) and issubclass(tasks.get("Distillation"), Task)
    with pytest.raises(ValueError, match="unknown task 'Nope'"):
        tasks.get("Nope")
    assert "family = 'roberta'" in tasks.renamed_hint("No configurable matching 'garden.RobertaPretraining'")


def test_pretraining_refuses_unknown_families_and_options():
    from garden.tasks.pretraining import Pretraining

    phases = [{"start_step": 0, "data_dir": "d", "max_seq_length": 64}]
    with pytest.raises(ValueError, match="unknown pretraining family 'gpt'"):
        Pretraining(None, "v", phases, family="gpt")
    with pytest.raises(ValueError, match=r"takes no \['mask_prob'\]"):
        Pretraining(None, "v", phases, family="bert", mask_prob=0.2)
    task = Pretraining(None, "v", phases, family="electra", mask_prob=0.25)
    assert task.options == {"mask_prob": 0.25, "temperature": 1.0, "disc_weight": 50.0}
    assert task.name == "electra_pretraining" and task.objective == "electra"
    assert Pretraining(None, "v", phases, family="bert", objective="ernie").objective == "ernie"
    with pytest.raises(ValueError, match="start_step 0"):
        Pretraining(None, "v", [{"start_step": 5, "data_dir": "d", "max_seq_length": 64}])


def test_the_trainer_names_no_family_and_no_task():
    import glob

    from garden import train as train_lib

    root = train_lib.REPO_ROOT
    paths = [os.path.join(root, "garden", "train.py")] + glob.glob(os.path.join(root, "garden", "training", "*.py"))
    for path in paths:
        with open(path) as f:
            source = f.read()
        for name in ("Bert", "Albert", "Roberta", "Electra", "Distil", "Pretraining",
                     "Classification", "hasattr(task", "garden.tasks.pretraining"):
            assert name not in source, (path, name)


def test_the_serving_module_goes_to_the_one_exporter(tmp_path, monkeypatch):
    # garden.serving.export is the serving side's; a stand-in records what the trainer hands it.
    import sys
    import types

    from garden.tasks.base import Task

    calls = []
    stand_in = types.ModuleType("garden.serving.export")
    stand_in.export = lambda module, base, name, precision: calls.append(
        (module, base, name, precision)) or f"{base}/{name}/1"
    monkeypatch.setitem(sys.modules, "garden.serving", types.ModuleType("garden.serving"))
    monkeypatch.setitem(sys.modules, "garden.serving.export", stand_in)

    class Served(Task):
        export_base, model_name = str(tmp_path), "clf"

        def serving_module(self, model):
            return ("module of", model)

    assert report.export(Served(), "m", _hardware()) == f"{tmp_path}/clf/1"
    assert calls == [(("module of", "m"), str(tmp_path), "clf", "float32")]


def test_the_export_model_is_rebuilt_under_the_export_precision():
    """A model trained in one precision and exported in another: the task builds a copy under
    the export's Keras policy and the copy gets the trained weights; in the same precision the
    trained model itself is exported."""
    import keras

    from garden.tasks.base import Task

    class Dense(Task):
        def build_model(self):
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
            return model, {"model": model}

    trained, _ = Dense().build_model()
    trained.layers[0].kernel.assign(np.arange(6, dtype="float32").reshape(3, 2))
    assert report.serving_model(Dense(), trained, _hardware()) is trained
    copy = report.serving_model(Dense(), trained, _hardware(export_precision="bfloat16"))
    assert copy is not trained and copy.layers[0].compute_dtype == "bfloat16"
    assert all(np.array_equal(a, b) for a, b in zip(copy.get_weights(), trained.get_weights()))
    back = report.serving_model(Dense(), copy, _hardware("mixed_bfloat16"))
    assert back.layers[0].compute_dtype == "float32"


def test_warmup_longer_than_the_run_is_announced():
    loop = _loop(train_steps=100)
    (warning,) = setup.schedule_warnings(loop, _optimization(warmup_steps=100))
    assert "never leaves warmup" in warning and "(100)" in warning
    assert setup.schedule_warnings(loop, _optimization(warmup_steps=10)) == []
    # ULMFiT's slanted triangular schedule rises for warmup_steps by design of its own.
    slanted = _optimization(warmup_steps=100, lr_schedule="slanted_triangular")
    assert setup.schedule_warnings(loop, slanted) == []
