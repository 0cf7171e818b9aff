"""`python -m data_pipelines.sample_tasks --kinds=seq2seq,freeform`: the documented rules hold
(each target is the sentence that follows the source's first sentence in its document; each
free-form answer is the word after the question's four words in a corpus sentence), splits
share no document, and README.json's baselines are what text.rouge computes from the files."""

from __future__ import annotations

import json
import os
import re

import pytest

from data_pipelines.sample_tasks import __main__ as cli
from data_pipelines.sample_tasks import classification, freeform, seq2seq
from text import rouge


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("generative_sample_tasks"))
    assert cli.main([f"--output={out}", "--kinds=seq2seq,freeform"]) == 0
    with open(os.path.join(out, "README.json")) as f:
        readme = json.load(f)
    docs = {name: [classification.clean(s) for s in ss] for name, ss in cli.documents()}
    return out, readme, docs


def _jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_seq2seq_rules_and_baselines(written):
    out, readme, docs = written
    rows = {s: _jsonl(os.path.join(out, "seq2seq", f"{s}.jsonl")) for s in ("train", "dev", "test")}
    assert {s: len(r) for s, r in rows.items()} == {
        s: readme["seq2seq"]["counts"][s]["examples"] for s in rows}
    assert len(rows["train"]) == 2000 and len(rows["dev"]) == len(rows["test"]) == 200
    pairs = {}
    for name, sentences in docs.items():
        for a, b in zip(sentences, sentences[1:]):
            pairs.setdefault(f"{a} {b}", set()).add((name, b))
    for split, examples in rows.items():
        for e in examples:
            matches = {(n, b) for n, b in pairs[e["source"]] if b == e["target"]}
            assert matches, e  # target = the sentence after the source's first one
            # ... of a document of this split (split by document name: none is in two)
            assert any(seq2seq.split_of(name) == split for name, _ in matches), (split, e)
            words = [len(re.findall(r"\S+", t)) for t in (e["source"][:-len(e["target"])],
                                                          e["target"])]
            assert all(seq2seq.MIN_WORDS <= w <= seq2seq.MAX_WORDS for w in words), e
    dev = rows["dev"]
    expected = rouge.trivial_baselines([e["target"] for e in rows["train"]],
                                       [e["source"] for e in dev], [e["target"] for e in dev])
    written_baselines = readme["seq2seq"]["baselines"]
    assert written_baselines.keys() == expected.keys()
    for name in ("lead", "constant", "empty", "tail"):
        assert written_baselines[name] == pytest.approx(expected[name]), name
    assert [written_baselines[k] for k in ("words", "constant_prediction")] == [
        expected[k] for k in ("words", "constant_prediction")]
    assert readme["seq2seq"]["baseline"]["value"] == pytest.approx(expected["lead"]["rougeL"])
    # The extractive rule that solves the task is far above the trivial ones.
    assert expected["tail"]["rougeL"] > 0.7 > 0.3 > expected["lead"]["rougeL"]


def test_freeform_rules_and_baseline(written):
    out, readme, docs = written
    rows = {s: _jsonl(os.path.join(out, "freeform", f"{s}.jsonl")) for s in ("train", "dev")}
    assert len(rows["train"]) == 300 and len(rows["dev"]) == 100
    starts = {}
    for name, sentences in docs.items():
        for s in sentences:
            words = re.findall(r"\S+", s)
            if len(words) > freeform.PROMPT_WORDS:
                key = " ".join(words[:freeform.PROMPT_WORDS])
                starts.setdefault(key, set()).add((words[freeform.PROMPT_WORDS],
                                                   classification.split_of(name)))
    for split, examples in rows.items():
        for e in examples:
            assert e["question"].startswith("complete: ") and e["answer"].isalpha()
            assert (e["answer"], split) in starts[e["question"][len("complete: "):]], e
    baseline = readme["freeform"]["baseline"]
    answers = [e["answer"] for e in rows["train"]]
    assert answers.count(baseline["answer"]) == max(answers.count(a) for a in answers)
    assert baseline["value"] == sum(e["answer"] == baseline["answer"]
                                    for e in rows["dev"]) / len(rows["dev"])
