"""SQuAD window features (text/finetune/question_answering.py): a hand-checked example, equality
with Model Garden's squad_lib (the original run_squad layout), character offsets of non-ASCII
text, and the three tokenizer kinds."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from text import tokenizers
from text.finetune import FinetuneDataError
from text.finetune.question_answering import (SquadOptions, example_features, examples_features,
                                              feature_spec)
from text.finetune.question_answering_sources import read_examples

CONTEXT = "The cat sat on the mat. Then a dog ran far away, and the cat slept in the park."
QUESTION = "Where did the dog run?"
# The tiny vocabulary of tests/data_pipelines/conftest.py plus a few question words.
EXTRA = ["where", "did", "?"]


def squad_json(path, paragraphs, version="v2.0"):
    doc = {"version": version, "data": [{"title": "t", "paragraphs": paragraphs}]}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def qa(qid, question, context=None, answer=None, impossible=False):
    answers = [] if answer is None else [{"text": answer, "answer_start": context.index(answer)}]
    return {"id": qid, "question": question, "answers": answers, "is_impossible": impossible}


@pytest.fixture(scope="module")
def vocab_path(tiny_vocab, tmp_path_factory):
    path = tmp_path_factory.mktemp("squad_vocab") / "vocab.txt"
    path.write_text("".join(t + "\n" for t in tiny_vocab + EXTRA), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def tokenizer(vocab_path):
    return tokenizers.load_tokenizer("wordpiece", vocab_path, lower_case=True)


@pytest.fixture(scope="module")
def hand_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("squad_hand")
    return squad_json(root / "hand.json", [{"context": CONTEXT, "qas": [
        qa("q1", QUESTION, CONTEXT, "far away"),
        qa("q2", "Where did the bird sing?", impossible=True)]}])


def test_hand_checked_windows(hand_file, tokenizer, tiny_vocab):
    vocab = tiny_vocab + EXTRA
    examples = read_examples(hand_file)
    options = SquadOptions(max_seq_length=16, doc_stride=4, max_query_length=5)
    windows = example_features(examples[0], tokenizer, options, example_index=7)
    # Context pieces: the cat sat on the mat . then a dog ran far away [UNK](,) and the cat
    # slept in the park . = 22; the question "where did the dog [UNK](run) ?" cut to 5 pieces;
    # [CLS] + 5 + [SEP] = 7 before the context, 16 - 7 - 1 = 8 context pieces per window,
    # starts 4 apart: 0, 4, 8, 12, 16 (the last one, 6 pieces, reaches the end).
    assert [w["window_index"] for w in windows] == [0, 1, 2, 3, 4]
    assert [w["unique_id"] for w in windows] == [7000, 7001, 7002, 7003, 7004]
    assert all(w["example_index"] == 7 and w["is_impossible"] == 0 for w in windows)
    words = [[vocab[i] for i in w["token_ids"]] for w in windows]
    question = ["[CLS]", "where", "did", "the", "dog", "[UNK]", "[SEP]"]
    assert words[0] == question + ["the", "cat", "sat", "on", "the", "mat", ".", "then", "[SEP]"]
    assert words[2] == question + ["a", "dog", "ran", "far", "away", "[UNK]", "and", "the", "[SEP]"]
    assert words[4] == question + ["cat", "slept", "in", "the", "park", ".", "[SEP]", "[PAD]", "[PAD]"]
    assert windows[4]["padding_mask"] == [1] * 14 + [0, 0]
    assert windows[4]["segment_ids"] == [0] * 7 + [1] * 7 + [0, 0]
    # "far away" = pieces 11..12: only window 2 (pieces 8..15) holds both; window 1 (4..11)
    # holds "far" alone and points at [CLS].
    assert [(w["start_position"], w["end_position"]) for w in windows] == [
        (0, 0), (0, 0), (7 + 11 - 8, 7 + 12 - 8), (0, 0), (0, 0)]
    # Max context, e.g. piece 6 ("."): window 0 min(6, 1) + 0.08, window 1 min(2, 5) + 0.08
    # -> window 1; piece 5 ("mat"): window 0 min(5, 2) beats window 1 min(1, 6).
    q0 = [0] * 7
    assert windows[0]["token_is_max_context"] == q0 + [1, 1, 1, 1, 1, 1, 0, 0] + [0]
    assert windows[1]["token_is_max_context"] == q0 + [0, 0, 1, 1, 1, 1, 0, 0] + [0]
    assert windows[4]["token_is_max_context"] == q0 + [0, 0, 1, 1, 1, 1] + [0] * 3
    # Every context piece is the max context of exactly one window.
    counts = {}
    for w in windows:
        for k, flag in enumerate(w["token_is_max_context"]):
            if flag:
                key = (w["context_char_start"][k], w["context_char_end"][k])
                counts[key] = counts.get(key, 0) + 1
    assert len(counts) == 22 and set(counts.values()) == {1}
    # Character spans: "far" 39..42, "away" 43..47, the comma 47..48; -1 outside the context.
    w2 = windows[2]
    assert w2["context_char_start"][:7] == [-1] * 7 and w2["context_char_end"][15:] == [-1]
    assert w2["context_char_start"][7:15] == [29, 31, 35, 39, 43, 47, 49, 53]
    assert w2["context_char_end"][7:15] == [30, 34, 38, 42, 47, 48, 52, 56]
    s, e = w2["start_position"], w2["end_position"]
    assert CONTEXT[w2["context_char_start"][s]:w2["context_char_end"][e]] == "far away"

    impossible = example_features(examples[1], tokenizer, options, example_index=8)
    assert len(impossible) == 5
    assert all((w["start_position"], w["end_position"], w["is_impossible"]) == (0, 0, 1) for w in impossible)


def test_roberta_layout(hand_file, tokenizer, tiny_vocab):
    vocab = tiny_vocab + EXTRA
    example = read_examples(hand_file)[0]
    options = SquadOptions(max_seq_length=17, doc_stride=4, max_query_length=5, layout="roberta")
    windows = example_features(example, tokenizer, options)
    first = [vocab[i] for i in windows[0]["token_ids"]]
    # <s> q </s></s> c </s>: 8 pieces before the context, 17 - 8 - 1 = 8 per window again.
    assert first == ["[CLS]", "where", "did", "the", "dog", "[UNK]", "[SEP]", "[SEP]",
                     "the", "cat", "sat", "on", "the", "mat", ".", "then", "[SEP]"]
    assert all(set(w["segment_ids"]) == {0} for w in windows)
    assert [(w["start_position"], w["end_position"]) for w in windows] == [
        (0, 0), (0, 0), (8 + 3, 8 + 4), (0, 0), (0, 0)]


def _model_garden_features(path, vocab_path, options):
    from official.nlp.data import squad_lib
    from official.nlp.tools import tokenization

    full = tokenization.FullTokenizer(vocab_path, do_lower_case=True)
    examples = squad_lib.read_squad_examples(path, is_training=True, version_2_with_negative=True)
    out = []
    squad_lib.convert_examples_to_features(
        examples, full, options.max_seq_length, options.doc_stride, options.max_query_length,
        is_training=True, output_fn=out.append)
    return examples, out


def assert_same_as_model_garden(path, vocab_path, tokenizer, options):
    """Our windows equal squad_lib's features, field by field, mapped explicitly:
    input_ids/input_mask/segment_ids -> token_ids/padding_mask/segment_ids; doc_span_index ->
    window_index; token_is_max_context {position: bool} -> a 0/1 row; start/end positions
    equal; squad_lib's per-window is_impossible ("this window has no answer") -> our
    start_position == 0 (ours keeps the question's flag)."""
    mg_examples, mg = _model_garden_features(path, vocab_path, options)
    examples = read_examples(path)
    assert len(mg_examples) == len(examples)  # squad_lib dropped no example
    ours = [w for ws in examples_features(examples, tokenizer, options) for w in ws]
    assert len(ours) == len(mg)
    t = options.max_seq_length
    for a, b in zip(mg, ours):
        where = f"example {a.example_index} window {a.doc_span_index}"
        assert (a.example_index, a.doc_span_index) == (b["example_index"], b["window_index"]), where
        assert a.input_ids == b["token_ids"], where
        assert a.input_mask == b["padding_mask"], where
        assert a.segment_ids == b["segment_ids"], where
        mc = [int(a.token_is_max_context.get(k, False)) for k in range(t)]
        assert mc == b["token_is_max_context"], where
        assert (a.start_position, a.end_position) == (b["start_position"], b["end_position"]), where
        assert a.is_impossible == (b["start_position"] == 0), where
        # squad_lib's token_to_orig_map marks the context positions: ours have character spans.
        assert sorted(a.token_to_orig_map) == [k for k in range(t) if b["context_char_start"][k] >= 0], where
    return ours


def test_equal_to_model_garden_on_hand_example(hand_file, vocab_path, tokenizer):
    for options in (SquadOptions(16, 4, 5), SquadOptions(20, 3, 3),
                    SquadOptions(40, 128, 64 - 40 + 10)):
        ours = assert_same_as_model_garden(hand_file, vocab_path, tokenizer, options)
        assert any(w["start_position"] > 0 for w in ours)


def test_non_ascii_offsets_are_characters(tmp_path, tokenizer):
    # "café" and "日本" take more bytes than characters: byte offsets would cut "mat" wrong.
    context = "the café and 日本 cat sat on the mat ."
    path = squad_json(tmp_path / "u.json", [{"context": context, "qas": [
        qa("u1", "where did the cat sit ?", context, "mat")]}])
    example = read_examples(path)[0]
    (w,) = example_features(example, tokenizer, SquadOptions(40, 16, 10))
    s, e = w["start_position"], w["end_position"]
    assert s > 0 and s == e
    assert context[w["context_char_start"][s]:w["context_char_end"][e]] == "mat"
    spans = [(a, b) for a, b in zip(w["context_char_start"], w["context_char_end"]) if a >= 0]
    assert [context[a:b] for a, b in spans][:6] == ["the", "café", "and", "日", "本", "cat"]


def test_answer_inside_a_piece_and_uncovered_answer(tmp_path, tokenizer):
    # "cats" is cat ##s: the answer "cat" (a part of the word) is the piece "cat", at 6 after
    # [CLS] [UNK](who) sat ? [SEP] the.
    context = "the cats sat ."
    path = squad_json(tmp_path / "p.json", [{"context": context, "qas": [
        {"id": "p1", "question": "who sat ?", "answers": [{"text": "cat", "answer_start": 4}]},
        {"id": "p2", "question": "what ?", "answers": [{"text": " ", "answer_start": 3}]}]}])
    first, blank = read_examples(path)
    (w,) = example_features(first, tokenizer, SquadOptions(32, 8, 8))
    assert (w["start_position"], w["end_position"]) == (6, 6)
    with pytest.raises(FinetuneDataError, match=r"'p2'.*covers no piece"):
        example_features(blank, tokenizer, SquadOptions(32, 8, 8))
    errors = []
    out = examples_features([first, blank], tokenizer, SquadOptions(32, 8, 8),
                            on_error=lambda i, e: errors.append(i))
    assert [len(x) for x in out] == [1, 0] and errors == [1]


def test_options_are_checked():
    with pytest.raises(ValueError, match="no room"):
        SquadOptions(max_seq_length=64, max_query_length=64)
    with pytest.raises(ValueError, match="layout"):
        SquadOptions(layout="gpt")
    with pytest.raises(ValueError, match="doc_stride"):
        SquadOptions(doc_stride=0)


def test_records_parse_with_feature_spec(hand_file, tokenizer):
    from text import features as F

    options = SquadOptions(16, 4, 5)
    spec = feature_spec(options)
    windows = examples_features(read_examples(hand_file), tokenizer, options)
    flat = [w for ws in windows for w in ws]
    record_spec = {k: F.Feature("int64", max(1, int(np.prod(v.shape)))) for k, v in spec.items()}
    rows = [{k: (v if isinstance(v, list) else [v]) for k, v in w.items()} for w in flat]
    parsed = tf.io.parse_example(F.serialize_examples(record_spec, rows), spec)
    assert parsed["unique_id"].shape == (len(flat),)
    assert parsed["token_ids"].shape == (len(flat), 16)
    np.testing.assert_array_equal(parsed["context_char_start"].numpy(),
                                  [w["context_char_start"] for w in flat])
    np.testing.assert_array_equal(parsed["start_position"].numpy(), [w["start_position"] for w in flat])


@pytest.fixture(scope="module")
def other_kinds(tmp_path_factory):
    """A SentencePiece and a byte-level BPE vocabulary learnt by make_vocab on a few pydoc topics."""
    from data_pipelines import make_vocab, sample_corpus

    root = tmp_path_factory.mktemp("squad_kinds")
    docs = sample_corpus.topic_documents()[:12]
    (root / "text.txt").write_text("\n\n".join("\n".join(s) for _, s in docs) + "\n", encoding="utf-8")
    paths = {"sentencepiece": str(root / "sp.model"), "bpe": str(root / "bpe")}
    for kind, path in paths.items():
        make_vocab.main([f"--tokenizer={kind}", f"--input={root / 'text.txt'}", f"--output={path}",
                         "--vocab_size=400", "--lower_case"])
    return {kind: tokenizers.load_tokenizer(kind, path, lower_case=True) for kind, path in paths.items()}, docs


@pytest.mark.parametrize("kind", ["sentencepiece", "bpe"])
def test_answer_spans_with_other_tokenizer_kinds(kind, other_kinds, tmp_path):
    """With SentencePiece and byte-level BPE pieces (offsets from tokenize_with_offsets), the
    labelled pieces' character spans give back the answer word, in every window that holds it,
    and the packing follows the kind's layout."""
    toks, docs = other_kinds
    tokenizer = toks[kind]
    context = " ".join(docs[3][1][:4]) + " Café naïve"
    words = [w for w in context.split() if w.isalpha() and len(w) > 3][:6] + ["naïve"]
    starts = [context.index(" " + w + " ") + 1 if " " + w + " " in context else context.rindex(w) for w in words]
    path = squad_json(tmp_path / f"{kind}.json", [{"context": context, "qas": [
        {"id": f"w{k}", "question": f"which word is {k} ?", "answers": [{"text": w, "answer_start": s}]}
        for k, (w, s) in enumerate(zip(words, starts))]}])
    layout = "roberta" if kind == "bpe" else "bert"
    options = SquadOptions(48, 12, 10, layout=layout)
    vocab = tokenizer.vocab
    for example, windows in zip(read_examples(path), examples_features(
            read_examples(path), tokenizer, options)):
        (text, start), = example.answers
        holding = [w for w in windows if w["start_position"] > 0]
        assert holding, example.qas_id
        for w in holding:
            s, e = w["start_position"], w["end_position"]
            span = context[w["context_char_start"][s]:w["context_char_end"][e]]
            assert span == text, (kind, text, span)
        first = windows[0]["token_ids"]
        assert first[0] == vocab.special("cls")
        n_q = next(i for i, t in enumerate(first) if t == vocab.special("sep"))
        if layout == "roberta":
            assert first[n_q + 1] == vocab.special("sep")  # <s> q </s></s> c </s>
