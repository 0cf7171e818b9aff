"""Every retired name of text/kinds.py RENAMED is refused where it is read, with a message naming
what replaced it, and never runs: a gin task name in a config or --gin_param (garden.train) and
in a run directory's operative_config.gin (garden.runs), a --task value of make_finetune, and the
task a make_finetune directory records (the tasks that read one)."""

from __future__ import annotations

import re

import pytest

from text import kinds

GIN = sorted(old for old in kinds.RENAMED if old.startswith("garden."))
TASK_FLAGS = sorted(old for old in kinds.RENAMED if old.startswith("--task="))


def test_a_retired_gin_name_is_no_task_and_its_replacement_is_one():
    from garden import tasks

    for old in GIN:
        assert old.split(".", 1)[1] not in tasks.TASKS, f"{old} is still a task: an alias"
        new = re.match(r"garden\.(\w+)", kinds.RENAMED[old]).group(1)
        assert new in tasks.TASKS, f"{old} is replaced by garden.{new}, which is no task"


@pytest.mark.parametrize("old", GIN)
def test_garden_train_refuses_a_retired_gin_name_and_names_its_replacement(old):
    from garden import train
    from garden.tasks.base import ConfigError

    for binding in (f"train.task = @{old}()", f"{old}.vocab = 'vocab.txt'"):
        with pytest.raises(ConfigError) as e:
            train.parse_config([], [binding])
        assert kinds.renamed(old) in str(e.value), (binding, str(e.value))


def test_a_run_directory_of_a_retired_task_name_is_refused_by_name(tmp_path):
    """A run written before the rename records the old name in its operative_config.gin;
    opening it names the file and the new name instead of failing inside gin."""
    from garden import runs

    (tmp_path / "operative_config.gin").write_text(
        "train.task = @garden.SentenceClassification()\n"
        "garden.SentenceClassification.vocab = 'vocab.txt'\n")
    with pytest.raises(runs.RunError) as e:
        runs.open(str(tmp_path))
    message = str(e.value)
    assert str(tmp_path / "operative_config.gin") in message
    assert "garden.SentenceClassification is now garden.Classification" in message


def test_every_retired_task_flag_is_replaced_by_a_kind_make_finetune_writes():
    from text import finetune

    for old in TASK_FLAGS:
        assert old.split("=", 1)[1] not in finetune.KINDS, f"{old} is still a kind: an alias"
        assert kinds.RENAMED[old].split("=", 1)[1] in finetune.KINDS, old


@pytest.mark.parametrize("old", TASK_FLAGS)
def test_make_finetune_refuses_a_retired_task_and_names_its_replacement(old, capsys):
    from data_pipelines import make_finetune

    with pytest.raises(SystemExit) as e:
        make_finetune.parse_args([old, "--input=x", "--output_dir=y", "--vocab=v.txt"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"invalid choice: {old.split('=', 1)[1]!r}" in err and kinds.renamed(old) in err


def test_a_tagging_directory_made_under_the_retired_name_is_refused_by_name(tmp_path):
    """A make_finetune directory records the --task it was made for; one made as
    --task=conll is refused, naming --task=tagging, instead of being read as tagging data."""
    import json

    from garden import data
    from garden.tasks.tagging import read_data_dir

    (tmp_path / "COMPLETED").write_text("")
    (tmp_path / "info.json").write_text(json.dumps({"task": "conll", "objective": "conll"}))
    with pytest.raises(data.DataDirError) as e:
        read_data_dir(str(tmp_path))
    assert "--task=conll is now --task=tagging" in str(e.value)


def test_a_question_answering_directory_made_under_the_retired_name_is_refused_by_name(tmp_path):
    """garden.data.open_data_dir (the tasks that read make_finetune records through it) names
    the retired --task a directory was made with, and its replacement."""
    import json

    from garden import data

    (tmp_path / "COMPLETED").write_text("")
    (tmp_path / "info.json").write_text(json.dumps({"task": "squad", "objective": "squad"}))
    with pytest.raises(data.DataDirError) as e:
        data.open_data_dir(str(tmp_path), objective="question_answering")
    assert "--task=squad is now --task=question_answering" in str(e.value)
