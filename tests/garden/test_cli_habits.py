"""Habits users bring from gin, t5x and TensorBoard (issue 35, item 3): --gin_file and
--gin_bindings bind as --config and --gin_param; --mode=eval scores a checkpoint and trains
nothing; boolean flags have one spelling (--name / --no-name), old ones refused by name;
--help of every tool parses before TensorFlow, Keras or Beam is imported."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys

import pytest

from testing import REPO_ROOT, pretrain_args, python_env, train_in_process, train_refused


def _argv(bert_data, model_dir, *extra, steps=1):
    return pretrain_args(bert_data, model_dir, *extra, steps=steps)[2:]  # without -m garden.train


def _as_gin_flags(argv):
    """The same run in gin's / t5x's flag names, the bindings alternating between the two
    spellings (both repeated and mixed, as a user's script may have them)."""
    out, bindings = [], 0
    for arg in argv:
        if arg.startswith("--config="):
            out.append("--gin_file=" + arg[len("--config="):])
        elif arg.startswith("--gin_param="):
            flag = "--gin_bindings=" if bindings % 2 == 0 else "--gin_param="
            out.append(flag + arg[len("--gin_param="):])
            bindings += 1
        else:
            out.append(arg)
    assert bindings > 3 and "--gin_file=configs/bert_tiny.gin" in out
    return out


def _files(directory) -> dict:
    """{relative path: sha256} of every file under directory."""
    found = {}
    for path in glob.glob(os.path.join(directory, "**", "*"), recursive=True):
        if os.path.isfile(path):
            with open(path, "rb") as f:
                found[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
    return found


@pytest.fixture(scope="module")
def trained(bert_data, tmp_path_factory):
    """A 1-step tiny BERT run with --config / --gin_param."""
    model_dir = tmp_path_factory.mktemp("habits") / "run"
    train_in_process(_argv(bert_data, model_dir), model_dir, steps=1)
    return model_dir


def test_gin_file_and_gin_bindings_bind_as_config_and_gin_param(bert_data, trained, tmp_path):
    model_dir = tmp_path / "aliased"
    argv = _as_gin_flags(_argv(bert_data, model_dir))
    train_in_process(argv, model_dir, steps=1)
    with open(trained / "operative_config.gin") as f:
        original = f.read()
    with open(model_dir / "operative_config.gin") as f:
        aliased = f.read()
    # The bindings given only through --gin_bindings took effect (the tiny config says 300).
    assert "train.train_steps = 1" in aliased
    assert aliased == original


def test_gin_file_alone_satisfies_the_required_config(capsys):
    from garden import train as train_lib

    with pytest.raises(SystemExit) as stopped:
        train_lib.main(["--model_dir=/nonexistent"])
    assert stopped.value.code == 2
    assert "--config/--gin_file" in capsys.readouterr().err


def test_eval_mode_scores_the_checkpoint_and_trains_nothing(bert_data, trained):
    before = _files(trained / "checkpoints")
    summary_before = json.loads((trained / "summary.json").read_text())
    argv = _argv(bert_data, trained, "--mode=eval",
                 f"--gin_param=garden.Pretraining.eval_data_dir='{bert_data.data_dir}'",
                 "--gin_param=garden.Pretraining.eval_batches=2")
    from garden import train as train_lib

    assert train_lib.main(argv) == 0
    assert _files(trained / "checkpoints") == before  # nothing saved, nothing rewritten
    summary = json.loads((trained / "summary.json").read_text())
    record = summary.pop("evaluations")["ckpt-1"]
    assert summary == summary_before  # training's own keys as training wrote them
    assert record["step"] == 1 and record["checkpoint"].endswith("ckpt-1")
    assert record["metrics"]["loss"] > 0
    events = glob.glob(str(trained / "eval" / "events.out.tfevents.*"))
    assert events
    import tensorflow as tf

    tags = {v.tag for e in tf.compat.v1.train.summary_iterator(events[0]) for v in e.summary.value}
    assert "eval/loss" in tags
    # The finished run's command again (it trains no step) rewrites summary.json: the
    # evaluation is kept.
    again = train_in_process(_argv(bert_data, trained), trained, steps=1)
    assert again["evaluations"]["ckpt-1"] == record


def test_eval_mode_without_a_checkpoint_is_refused_in_one_line(bert_data, tmp_path, capsys):
    line = train_refused(_argv(bert_data, tmp_path / "empty", "--mode=eval"), capsys)
    assert "holds no checkpoint" in line and "--checkpoint" in line


def test_checkpoint_flag_only_with_eval_mode(capsys):
    from garden import train as train_lib

    with pytest.raises(SystemExit) as stopped:
        train_lib.main(["--config=configs/bert_tiny.gin", "--model_dir=x", "--checkpoint=y"])
    assert stopped.value.code == 2 and "--mode=eval" in capsys.readouterr().err


# --- one spelling of each boolean flag --------------------------------------------------------

# (tool, argv before the boolean flag, the old spelling, the new one named in the refusal)
OLD_SPELLINGS = [
    ("garden.convert", "--nolower_case", "--no-lower_case"),
    ("garden.convert", "--no_lower_case", "--no-lower_case"),
    ("garden.convert", "--do_lower_case", "--lower_case"),
    ("garden.extract_features", "--lower_case=false", "--no-lower_case"),
    ("garden.fewshot", "--nolower_case", "--no-lower_case"),
    ("garden.generate", "--no_jit", "--no-jit"),
    ("garden.serve", "--noenable_model_warmup", "--no-enable_model_warmup"),
    ("garden.serve", "--enable_model_warmup=false", "--no-enable_model_warmup"),
    ("data_pipelines.make_vocab", "--nolower_case", "--no-lower_case"),
    ("data_pipelines.make_vocab", "--do_lower_case", "--lower_case"),
    ("data_pipelines.make_pretrain", "--nodo_lower_case", "--no-lower_case"),
    ("data_pipelines.make_pretrain", "--do_lower_case", "--lower_case"),
    ("data_pipelines.make_finetune", "--no-do_lower_case", "--no-lower_case"),
    ("data_pipelines.make_pretrain", "--compress=true", "--compress"),
]


def _parse_in_process(tool: str, argv) -> tuple:
    """(exit code, stderr) of `python -m tool argv` stopped at its argument parsing."""
    code = ("import runpy, sys\n"
            f"sys.argv = [{tool!r}] + {list(argv)!r}\n"
            f"runpy.run_module({tool!r}, run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=python_env(),
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("tool,old,new", OLD_SPELLINGS)
def test_old_boolean_spellings_are_refused_naming_the_new_one(tool, old, new):
    code, err = _parse_in_process(tool, [old])
    errors = [ln for ln in err.splitlines() if "error:" in ln]
    assert code == 2 and "Traceback" not in err, err[-2000:]
    assert len(errors) == 1 and new in errors[0], err[-2000:]


def test_one_spelling_parses_on_every_tool():
    import argparse

    from text.flags import add_bool

    p = argparse.ArgumentParser()
    add_bool(p, "lower_case", None, "casing", retired=["do_lower_case"])
    assert p.parse_args([]).lower_case is None
    assert p.parse_args(["--lower_case"]).lower_case is True
    assert p.parse_args(["--no-lower_case"]).lower_case is False
    # argparse's BooleanOptionalAction adds --no-lower_case itself: no --no-no-lower_case
    assert "--lower_case, --no-lower_case\n" in p.format_help()
    with pytest.raises(SystemExit):
        p.parse_args(["--no-no-lower_case"])


# --- --help before the heavy imports ------------------------------------------------------------

TOOLS = ["garden.convert", "garden.export", "garden.generate", "garden.bertology.int8",
         "garden.extract_features", "garden.export_features", "garden.analyze", "garden.fewshot",
         "garden.train", "garden.serve", "garden.curves", "garden.demo",
         "data_pipelines.make_vocab", "data_pipelines.make_pretrain",
         "data_pipelines.make_finetune"]
HEAVY = ("tensorflow", "keras", "apache_beam", "torch")


@pytest.mark.parametrize("tool", TOOLS)
def test_help_imports_no_tensorflow_keras_or_beam(tool):
    code = ("import runpy, sys\n"
            f"sys.argv = [{tool!r}, '--help']\n"
            "try:\n"
            f"    runpy.run_module({tool!r}, run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    assert e.code in (0, None), e.code\n"
            f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=python_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY []"
