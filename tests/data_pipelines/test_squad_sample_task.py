"""The SQuAD v2.0 sample task (data_pipelines/sample_tasks/squad.py): official format, the
documented question rule, determinism across processes, the always-null baseline, and its
windows equal to Model Garden's squad_lib."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from text import tokenizers
from data_pipelines import sample_corpus
from text.finetune.question_answering import SquadOptions
from text.finetune.question_answering_sources import read_examples
from data_pipelines.sample_tasks import squad as sample_squad

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_squad_features import assert_same_as_model_garden  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    out = tmp_path_factory.mktemp("squad_task")
    documents = sample_corpus.topic_documents()
    result = sample_squad.write(documents, str(out))
    return out, result


def test_files_are_official_squad_v2(task):
    out, result = task
    assert result["files"] == ["train-v2.0.json", "dev-v2.0.json"]
    for split, name in (("train", "train-v2.0.json"), ("dev", "dev-v2.0.json")):
        examples = read_examples(str(out / name))  # every answer_start checked there
        counts = result["counts"][split]
        assert len(examples) == counts["questions"] > 0
        assert sum(e.is_impossible for e in examples) == counts["unanswerable"] > 0
        assert json.load(open(out / name))["version"] == "v2.0"
    train = {e.context for e in read_examples(str(out / "train-v2.0.json"))}
    dev = {e.context for e in read_examples(str(out / "dev-v2.0.json"))}
    assert not train & dev


def test_questions_follow_the_documented_rule(task):
    out, _ = task
    for name in ("train-v2.0.json", "dev-v2.0.json"):
        for e in read_examples(str(out / name)):
            # "which <kind> ?"
            which, kind, mark = e.question.split(" ")
            assert (which, mark) == ("which", "?") and kind in sample_squad.KINDS, e.qas_id
            mentions = re.findall(rf"\b{kind}", e.context, flags=re.IGNORECASE)
            if e.is_impossible:  # the kind word is nowhere in the paragraph
                assert not mentions, e.qas_id
                continue
            # The kind word (or its plural) stands once, right after the answer (a name).
            (text, start), = e.answers
            assert len(re.findall(rf"\b{kind}s?\b", e.context, flags=re.IGNORECASE)) == 1
            assert len(text) >= 3 and text.isalpha() and text.lower() not in sample_squad.STOP
            after = e.context[start + len(text):]
            assert re.match(rf'"? {kind}s?\b', after, flags=re.IGNORECASE), e.qas_id


def test_relations_on_a_hand_checked_paragraph():
    context = ('Import the "json" module first. The loads function parses a string, and '
               'the dumps function writes one; the value is returned.')
    # "function" stands twice (ambiguous, no question); "value" follows a stop word.
    assert sample_squad.relations(context) == {"module": ("json", 12)}
    qas = sample_squad._questions("doc#0", [context], 2, True)
    assert [q["question"] for q in qas] == ["which module ?", qas[1]["question"]]
    assert qas[0]["answers"] == [{"text": "json", "answer_start": 12}]
    assert qas[1]["is_impossible"] and qas[1]["question"].split()[1] not in (
        "module", "function", "value")
    assert sample_squad._questions("doc#1", ["Nothing to ask about here."], 2, True) == []


def test_paragraphs_are_consecutive_sentence_groups():
    documents = [("doc", ["One sentence here.", "Two sentence here.", "Three here.",
                          "Four here.", "Five alone."])]
    paras = sample_squad.paragraphs(documents)
    assert paras["train"] + paras["dev"] == [
        (f"doc#{k}", [s]) for k, s in enumerate(documents[0][1])]  # PARAGRAPH_SENTENCES = 1
    paras = sample_squad.paragraphs(documents, 2)
    assert paras["train"] + paras["dev"] == [
        ("doc#0", ["One sentence here.", "Two sentence here."]),
        ("doc#1", ["Three here.", "Four here."])]  # a last single sentence is dropped


def test_baseline_is_always_null_on_dev(task):
    _, result = task
    dev = result["counts"]["dev"]
    expected = round(100.0 * dev["unanswerable"] / dev["questions"], 2)
    assert result["baseline"]["always_null"] == {"split": "dev", "exact": expected, "f1": expected}
    assert 30 < expected < 60
    json.dumps(result)  # JSON-serialisable, as the sample_tasks CLI writes it


def test_same_bytes_in_another_process(task, tmp_path):
    out, _ = task
    code = ("import sys; from data_pipelines import sample_corpus; "
            "from data_pipelines.sample_tasks import squad; "
            "squad.write(sample_corpus.topic_documents(), sys.argv[1])")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, env=env, check=True)
    for name in ("train-v2.0.json", "dev-v2.0.json"):
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes()


def test_windows_equal_model_garden_on_the_sample_task(task, bert_data, tmp_path):
    """squad_lib (with BERT's FullTokenizer) against ours on the sample task's paragraphs. The
    two WordPiece implementations differ on some characters, which is not what this test is
    about: tensorflow-text's normaliser maps "…" (frequent in pydoc) to "...", FullTokenizer to
    [UNK], so both get "." in its place (one character for one: answer offsets stay); any
    other paragraph whose pieces differ is left out (at most 10%); the rest must give equal
    windows."""
    from official.nlp.tools import tokenization

    out, _ = task
    full = tokenization.FullTokenizer(bert_data.vocab, do_lower_case=True)
    tokenizer = tokenizers.load_tokenizer("wordpiece", bert_data.vocab)
    vocab = tokenizer.vocab.tokens
    doc = json.loads((out / "train-v2.0.json").read_text(encoding="utf-8").replace("\u2026", "."))
    paras = [(a["title"], p) for a in doc["data"] for p in a["paragraphs"]][:150]
    texts = [t for _, p in paras for t in [p["context"]] + [qa["question"] for qa in p["qas"]]]
    ours = iter(tokenizer.tokenize(texts))
    kept = []
    for title, p in paras:
        same = all([vocab[i] for i in next(ours)] == full.tokenize(t)
                   for t in [p["context"]] + [qa["question"] for qa in p["qas"]])
        if same:
            kept.append({"title": title, "paragraphs": [p]})
    assert len(kept) >= 0.9 * len(paras)
    path = tmp_path / "kept.json"
    path.write_text(json.dumps({"version": "v2.0", "data": kept}), encoding="utf-8")
    windows = assert_same_as_model_garden(str(path), bert_data.vocab, tokenizer,
                                          SquadOptions(32, 8, 8))
    # The geometry (contexts are one sentence) made several windows per question, some
    # holding the answer.
    questions = sum(len(a["paragraphs"][0]["qas"]) for a in kept)
    assert len(windows) > 2 * questions, (len(windows), questions)
    assert sum(w["start_position"] > 0 for w in windows) > len(kept)


def test_cloze_rule_for_benchmarks():
    """build(rule="cloze") keeps the dense v1.1 cloze questions benchmarks/squad_features.py
    times; it makes no unanswerable questions."""
    sentence = "Return a copy of the string with leading whitespace removed."
    built = sample_squad.build([("doc", [sentence, sentence])], sentences_per_paragraph=2,
                               answerable=2, unanswerable=False, max_paragraphs={},
                               rule="cloze")
    qas = [q for split in built.values() for a in split["data"] for p in a["paragraphs"]
           for q in p["qas"]]
    assert len(qas) == 2 and built["train"]["version"] == "1.1"
    context = sentence + " " + sentence
    for qa in qas:
        (answer,) = qa["answers"]
        words = qa["question"][:-2].split()
        k = words.index("what")
        filled = " ".join(words[:k] + [answer["text"]] + words[k + 1:])
        assert context[answer["answer_start"]:].startswith(answer["text"])
        assert filled.rstrip(".") in context
    with pytest.raises(ValueError, match="cloze"):
        sample_squad.build([("doc", [sentence])], rule="cloze")
