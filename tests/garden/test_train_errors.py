"""garden.train refuses bad data and configuration with one line that names the culprit
(issue 13 items 3, 4 and 8): exit status 2, no traceback, nothing trained."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from garden import train as train_lib
from testing import pretrain_args, run_python, train_refused


@pytest.fixture(autouse=True)
def _cwd_repo(monkeypatch):
    monkeypatch.chdir(train_lib.REPO_ROOT)  # configs include each other by repo-relative paths


def _copy(bert_data, tmp_path):
    """A private copy of the BERT data directory, to break on purpose."""
    target = tmp_path / "data"
    shutil.copytree(bert_data.data_dir, target)
    return target


def _args(bert_data, model_dir, data_dir=None, steps=2, *extra):
    args = pretrain_args(bert_data, model_dir, *extra, steps=steps)[2:]  # no "-m garden.train"
    if data_dir is not None:
        phases = [{"start_step": 0, "data_dir": str(data_dir), "max_seq_length": 64}]
        args.append(f"--gin_param=garden.Pretraining.phases={phases!r}")
    return args + ["--strategy=one_device", "--gin_param=train.peak_flops=1e12"]


def _info(data_dir) -> dict:
    with open(data_dir / "info.json") as f:
        return json.load(f)


def _shard(data_dir, i=0):
    return data_dir / _info(data_dir)["files"][i]


def test_a_missing_shard_is_named_before_training(bert_data, tmp_path, capsys):
    data_dir = _copy(bert_data, tmp_path)
    gone = _shard(data_dir, 1)
    os.remove(gone)
    message = train_refused(_args(bert_data, tmp_path / "run", data_dir), capsys)
    assert gone.name in message and "lacks 1 of the 2 shards" in message
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_truncated_shard_is_named_before_training(bert_data, tmp_path, capsys):
    data_dir = _copy(bert_data, tmp_path)
    shard = _shard(data_dir, 0)
    size = os.path.getsize(shard)
    with open(shard, "r+b") as f:
        f.truncate(size - 100)  # inside the last record
    message = train_refused(_args(bert_data, tmp_path / "run", data_dir), capsys)
    assert str(shard) in message and "truncated or corrupt" in message
    assert "partial record at byte" in message
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_shard_with_recorded_size_mismatch_is_refused(bert_data, tmp_path, capsys):
    data_dir = _copy(bert_data, tmp_path)
    info = _info(data_dir)
    name = info["files"][0]
    info["file_sizes"] = {name: os.path.getsize(data_dir / name) + 1}
    (data_dir / "info.json").write_text(json.dumps(info))
    message = train_refused(_args(bert_data, tmp_path / "run", data_dir), capsys)
    assert name in message and "info.json records" in message


def test_a_corrupt_record_names_the_shard_and_record(bert_data, tmp_path, capsys):
    data_dir = _copy(bert_data, tmp_path)
    shard = _shard(data_dir, 0)  # read first: the stream reads the shards in order
    raw = bytearray(shard.read_bytes())
    raw[200:210] = bytes(b ^ 0xFF for b in raw[200:210])  # same size: only the CRC tells
    shard.write_bytes(bytes(raw))
    message = train_refused(_args(bert_data, tmp_path / "run", data_dir), capsys)
    assert f"shard {shard}, record 0" in message and "corrupt training data" in message


def test_an_empty_dataset_is_refused_by_name(bert_data, tmp_path, capsys):
    data_dir = _copy(bert_data, tmp_path)
    info = _info(data_dir)
    for name in info["files"]:
        open(data_dir / name, "wb").close()
    info["instances"] = {"total": 0, "per_shard": [0] * len(info["files"])}
    (data_dir / "info.json").write_text(json.dumps(info))
    message = train_refused(_args(bert_data, tmp_path / "run", data_dir), capsys)
    assert str(data_dir) in message and "holds no instances" in message


def test_empty_shards_without_counts_are_refused_at_the_first_step(bert_data, tmp_path, capsys):
    # An older info.json without instance counts: the data ends before the first batch.
    data_dir = _copy(bert_data, tmp_path)
    info = _info(data_dir)
    for name in info["files"]:
        open(data_dir / name, "wb").close()
    del info["instances"]
    info.pop("file_sizes", None)  # an info.json written before shard sizes were recorded
    (data_dir / "info.json").write_text(json.dumps(info))
    message = train_refused(_args(bert_data, tmp_path / "run", data_dir), capsys)
    assert "gave no batch at step 1" in message and str(data_dir) in message


def test_unbound_macros_are_named(bert_data, tmp_path, capsys):
    args = [a for a in _args(bert_data, tmp_path / "run") if not a.startswith("--gin_param=VOCAB")]
    message = train_refused(args, capsys)
    assert "%VOCAB" in message and "--gin_param=\"VOCAB='...'\"" in message


def test_fractional_train_steps_are_refused_before_training(bert_data, tmp_path, capsys):
    args = _args(bert_data, tmp_path / "run") + ["--gin_param=train.train_steps=20.5"]
    message = train_refused(args, capsys)
    assert "train.train_steps must be a positive whole number; got 20.5" in message


def test_a_checkpoint_of_another_model_names_checkpoint_and_variable(bert_data, tmp_path, capsys):
    model_dir = tmp_path / "run"
    assert train_lib.main(_args(bert_data, model_dir, steps=1)) == 0
    capsys.readouterr()
    message = train_refused(_args(bert_data, model_dir, None, 2,
                             "--gin_param=backbone.intermediate_size=256"), capsys)
    assert "ckpt-1" in message and "does not fit the configured model" in message
    assert "(128, 512)" in message or "[128,512]" in message, message  # the variable's shape


def test_old_task_names_say_what_to_bind_instead(bert_data, tmp_path, capsys):
    args = _args(bert_data, tmp_path / "run") + ["--gin_param=garden.ElectraPretraining.mask_prob=0.2"]
    message = train_refused(args, capsys)
    assert "garden.Pretraining.family = 'electra'" in message


def test_a_missing_init_checkpoint_is_one_line(bert_data, tmp_path, capsys):
    args = ["--config=configs/finetune/classification_tiny.gin", f"--model_dir={tmp_path / 'ft'}",
            f"--gin_param=VOCAB='{bert_data.vocab}'",
            f"--gin_param=TRAIN_FILE='{bert_data.task_dir}/train.tsv'",
            f"--gin_param=EVAL_FILE='{bert_data.task_dir}/dev.tsv'",
            f"--gin_param=INIT_CHECKPOINT='{tmp_path}/no_such_run'", "--gin_param=EXPORT_BASE=None",
            "--gin_param=TRAIN_STEPS=2", "--strategy=one_device", "--gin_param=train.peak_flops=1e12"]
    message = train_refused(args, capsys)
    assert f"{tmp_path}/no_such_run" in message


def test_the_refusals_are_one_line_in_a_fresh_process(bert_data, tmp_path):
    args = pretrain_args(bert_data, tmp_path / "run", "--gin_param=train.train_steps=20.5")
    proc = run_python(args, check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")] == [
        "error: train.train_steps must be a positive whole number; got 20.5"]
