"""`python -m data_pipelines.sample_tasks` for the GLUE / SWAG kinds: the files are read back by
the official-format readers, the documented rules hold (next-sentence pairs, overlap scores,
the gold SWAG ending), README.json and the table, determinism, and unknown kinds refused."""

from __future__ import annotations

import json
import os

import pytest

from text.finetune import multiple_choice
from text.finetune.classification import read_examples
from data_pipelines.sample_tasks import __main__ as cli
from data_pipelines.sample_tasks import classification
from testing import run_module, run_python

KINDS = "single,pair,similarity,swag"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The CLI's output and the documents it was made from, both from fresh processes: the
    sample corpus's module docstrings depend on what a process imported before (tensorflow
    changes some), so documents of this process could differ."""
    out = str(tmp_path_factory.mktemp("sample_tasks"))
    proc = run_module("data_pipelines.sample_tasks", f"--output={out}", f"--kinds={KINDS}")
    assert "swag" in proc.stdout and "MISSING" not in proc.stdout
    dump = run_python(["-c", "import json; from data_pipelines.sample_tasks.__main__ import "
                             "documents; print(json.dumps(documents()))"])
    return out, {name: sentences for name, sentences in json.loads(dump.stdout)}


def test_files_read_back_and_readme(written, capsys):
    out, _ = written
    with open(os.path.join(out, "README.json")) as f:
        readme = json.load(f)
    assert sorted(readme) == sorted(KINDS.split(","))
    for kind, task in (("single", "sst2"), ("pair", "mrpc"), ("similarity", "stsb")):
        for split in ("train", "dev"):
            examples = read_examples(os.path.join(out, kind, f"{split}.tsv"), task)
            assert len(examples) == readme[kind]["counts"][split]["examples"] > 300
    for split in ("train", "val"):
        examples = multiple_choice.read_examples(os.path.join(out, "swag", f"{split}.csv"))
        assert len(examples) == readme["swag"]["counts"][split]["examples"] >= 400
    # Balanced pairs: the majority baseline is one half.
    assert readme["pair"]["counts"]["dev"]["labels"] == {"0": 200, "1": 200}
    assert readme["pair"]["baseline"]["value"] == 0.5
    assert 0.2 < readme["swag"]["baseline"]["value"] < 0.3


def test_documented_rules_hold(written):
    out, docs = written
    docs = {name: [classification.clean(s) for s in ss] for name, ss in docs.items()}
    pairs = read_examples(os.path.join(out, "pair", "dev.tsv"), "mrpc")
    rows = [line.split("\t") for line in open(os.path.join(out, "pair", "dev.tsv"),
                                              encoding="utf-8").read().splitlines()[1:]]
    for example, row in zip(pairs, rows):
        (doc1, i), (doc2, j) = [(x.rsplit("#", 1)[0], int(x.rsplit("#", 1)[1])) for x in row[1:3]]
        assert docs[doc1][i] == example.text_a and docs[doc2][j] == example.text_b
        assert (doc1 == doc2 and j == i + 1) == (example.label == "1")
        assert classification.split_of(doc1) == "dev"
    for example in read_examples(os.path.join(out, "similarity", "dev.tsv"), "stsb"):
        assert example.label == classification.similarity_score(example.text_a, example.text_b)
    scores = [e.label for e in read_examples(os.path.join(out, "similarity", "train.tsv"),
                                             "stsb")]
    assert min(scores) < 1 and max(scores) > 4  # the scores spread over [0, 5]
    for example in multiple_choice.read_examples(os.path.join(out, "swag", "val.csv"))[:50]:
        sentences = docs[example.guid and _video(out, example.guid)]
        following = [b for a, b in zip(sentences, sentences[1:]) if a == example.context]
        assert f"{example.start} {example.endings[example.label]}" in following


def _video(out, guid):
    """The video-id (document name) column of the val.csv row with this index."""
    import csv

    with open(os.path.join(out, "swag", "val.csv"), encoding="utf-8", newline="") as f:
        return {row[""]: row["video-id"] for row in csv.DictReader(f)}[guid]


def test_deterministic_across_processes(written, tmp_path):
    out, _ = written
    run_module("data_pipelines.sample_tasks", f"--output={tmp_path}", "--kinds=pair,swag")
    for name in ("pair/train.tsv", "pair/dev.tsv", "swag/train.csv", "swag/val.csv"):
        with open(os.path.join(out, name), "rb") as a, open(tmp_path / name, "rb") as b:
            assert a.read() == b.read(), name


def test_unknown_kinds_are_refused_before_anything_is_written(tmp_path, capsys):
    with pytest.raises(SystemExit, match="^2$"):
        cli.main([f"--output={tmp_path}", "--kinds=later,similarity"])
    assert "--kinds: unknown ['later']" in capsys.readouterr().err
    assert not os.listdir(tmp_path)
    assert cli.main([f"--output={tmp_path}", "--kinds=similarity"]) == 0
    assert "similarity" in capsys.readouterr().out
    assert os.path.exists(tmp_path / "similarity" / "train.tsv")
