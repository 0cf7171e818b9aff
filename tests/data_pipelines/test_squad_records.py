"""examples_records (text.finetune.question_answering: what make_finetune
--task=question_answering writes, put together from encoded byte strings) against the columnar
reference: features.serialize_columns of
to_records(examples_columns(...)), byte for byte, over single- and multi-window geometries,
both layouts, non-ASCII contexts and skipped examples; and the job running without
TensorFlow."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from text import features, tokenizers
from data_pipelines import sample_corpus
from text.finetune import base as finetune_base
from text.finetune.question_answering import (SquadOptions, examples_columns, examples_records,
                                              feature_spec, record_spec, to_records)
from text.finetune.question_answering_sources import SquadExample


@pytest.fixture(scope="module")
def examples():
    """Sample-corpus paragraphs of 2-9 sentences, each with an answerable question per
    sentence (a word of it), an unanswerable one, a few non-ASCII paragraphs, and one answer of
    whitespace only (covers no piece: skipped)."""
    docs = sample_corpus.topic_documents()[:40]
    out = []
    for d, (_, sentences) in enumerate(docs):
        context = " ".join(sentences[:2 + d % 8])
        if d % 5 == 0:
            context = "Caf\u00e9 na\u00efve \u2026 \u0130stanbul \u4e2d\u6587 e\u0301t\u00e9. " + context
        for q, sentence in enumerate(sentences[:2 + d % 8]):
            word = max(sentence.split(), key=len)
            start = context.index(word)
            out.append(SquadExample(f"{d}/{q}", f"what is {q}?", context, ((word, start),), False))
        out.append(SquadExample(f"{d}/x", "nothing here?", context, (), True))
    blank = out[3].context.index(" ")
    out.insert(4, SquadExample("blank", "space?", out[3].context, ((" ", blank),), False))
    return out


@pytest.fixture(scope="module")
def tokenizer(bert_data):
    return tokenizers.load_tokenizer("wordpiece", bert_data.vocab, lower_case=True)


@pytest.mark.parametrize("options", [SquadOptions(), SquadOptions(64, 16, 12),
                                     SquadOptions(40, 7, 20, "roberta")],
                         ids=["384", "64-multi-window", "40-roberta"])
def test_records_equal_serialized_columns(examples, tokenizer, options):
    spec = record_spec(options)
    errors, errors_ref = [], []
    for first in range(0, len(examples), 150):  # several chunks: indices go on
        part = examples[first:first + 150]
        got = examples_records(part, tokenizer, options, first,
                               on_error=lambda i, e: errors.append(i))
        columns = to_records(examples_columns(part, tokenizer, options, first,
                                              on_error=lambda i, e: errors_ref.append(i)))
        want = finetune_base.records_of_columns(spec, columns)
        assert len(got) == len(want)
        assert got == want
    assert errors == errors_ref == [4]  # the whitespace answer
    # not vacuous: multi-window examples and answers outside a window occur where windows are short
    windows = [features.parse_example(spec, r) for _, _, r in got]
    if options.max_seq_length < 100:
        assert max(int(w["window_index"][0]) for w in windows) >= 3
        assert any(w["start_position"][0] == 0 and not w["is_impossible"][0] for w in windows)
    assert any(w["is_impossible"][0] for w in windows)


def test_record_spec_is_feature_spec(tokenizer):
    """The TensorFlow-free spec make_finetune serializes with is the one records parse with."""
    options = SquadOptions(64, 16, 12)
    assert record_spec(options) == finetune_base.spec_of_parsing(feature_spec(options))


def test_job_runs_without_tensorflow(tmp_path, bert_data):
    """make_finetune --task=question_answering (in-memory runner: the pipeline runs in this process)
    reads, tokenizes, windows and writes without importing TensorFlow (its import was most of the
    job's start-up)."""
    path = tmp_path / "squad.json"
    context = "The cat sat on the mat. Then a dog ran far away."
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{
        "context": context, "qas": [{"id": "q", "question": "Where did the dog run?",
                                     "answers": [{"text": "far away", "answer_start": context.index("far")}]}]}]}]}))
    code = ("import sys; from data_pipelines import make_finetune; "
            "stats = make_finetune.run(sys.argv[1:]); "
            "print('records', stats['instances'], 'tensorflow', 'tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, "--task=question_answering", f"--input={path}",
                           f"--vocab={bert_data.vocab}", f"--output_dir={tmp_path / 'out'}",
                           "--num_shards=1", "--progress_seconds=0"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "records 1 tensorflow False" in done.stdout
