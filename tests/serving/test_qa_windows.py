"""QuestionAnsweringServing's in-graph windows equal make_finetune's (text.finetune.
examples_features): token ids, segments, padding, max-context flags and the character
spans of the context pieces, on contexts that need many windows, non-ASCII text whose UTF-8
byte offsets differ from character offsets, a question longer than max_query_length and an
empty context, for WordPiece, SentencePiece and byte-level BPE vocabularies (the graph's
offsets, text.tokenizers' tokenize_with_char_offsets, against the eager ones); and
the served answer's offsets are characters."""

from __future__ import annotations

import glob
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from benchmarks import objectives_learn as learn

from text import tokenizers
from text.finetune.question_answering import DEFAULT_LAYOUT, SquadOptions, examples_features
from text.finetune.question_answering_sources import SquadExample
from garden.models import factory
from garden.models.bert.presets import untrained_bert_backbone
from garden.models.question_answering import SpanExtractor, decode_all
from garden.serving import export
from garden.serving.question_answering import QuestionAnsweringServing
from garden.serving.text import load_packer
from testing import run_code

COMPARED = ("example_index", "window_index", "token_ids", "segment_ids", "padding_mask",
            "token_is_max_context", "context_char_start", "context_char_end")
LONG = ("Assert statements are a convenient way to insert debugging assertions into a "
        "program. The simple form is equivalent to a test. ") * 4


@pytest.fixture(scope="module")
def module(bert_data):
    packer = load_packer(bert_data.vocab, 32)
    backbone = untrained_bert_backbone("bert_tiny", vocab_size=packer.vocab_size, dropout=0.0)
    return QuestionAnsweringServing(SpanExtractor(backbone), packer, bert_data.vocab,
                                    doc_stride=7, max_query_length=6)


@pytest.fixture(scope="module")
def vocabularies(bert_data, tmp_path_factory):
    """kind -> vocabulary made by make_vocab from the sample corpus (lower-cased)."""
    root = str(tmp_path_factory.mktemp("qa_vocabs"))
    corpus = sorted(glob.glob(bert_data.corpus_glob))[0]
    return {"wordpiece": bert_data.vocab,
            **{kind: learn.vocabulary(root, kind, corpus, 600) for kind in ("sentencepiece", "bpe")}}


def _examples():
    cases = [("what is an assert statement used for in a program?", LONG),
             ("Où est le café?", "Le café «Flore» est à Saint-Germain-des-Prés, près de l'église. "
                                 "Naïve façade; Ærø ß İstanbul — 東京 tower. " * 2),
             ("short", "One piece."),
             ("empty context", ""),
             ("x", "a  b\tc\n d   ")]
    return [SquadExample(f"q{i}", q, c, (), True) for i, (q, c) in enumerate(cases)]


# (max_seq_length, doc_stride, max_query_length): window lengths odd and even (a piece can tie
# between two windows), a stride longer than a window could be, and a short question budget.
GEOMETRIES = [(32, 7, 6), (24, 4, 5), (29, 5, 6), (20, 40, 3)]


@pytest.mark.parametrize("kind,geometry", [("wordpiece", g) for g in GEOMETRIES] + [
    ("sentencepiece", GEOMETRIES[0]), ("sentencepiece", GEOMETRIES[1]),
    ("bpe", GEOMETRIES[0]), ("bpe", GEOMETRIES[2])])
def test_in_graph_windows_equal_make_finetune_windows(module, vocabularies, kind, geometry):
    max_seq_length, doc_stride, max_query_length = geometry
    vocab = vocabularies[kind]
    # The windows do not run the model: the WordPiece module's model serves every kind.
    graph_module = QuestionAnsweringServing(
        module.model, load_packer(vocab, max_seq_length), vocab,
        doc_stride=doc_stride, max_query_length=max_query_length)
    examples = _examples()
    # make_finetune's default layout of the kind (BPE: RoBERTa's <s> q </s></s> c </s>).
    options = SquadOptions(max_seq_length, doc_stride, max_query_length,
                           DEFAULT_LAYOUT[kind])
    tokenizer = tokenizers.load_tokenizer(kind, vocab, lower_case=True)
    expected = [w for rows in examples_features(examples, tokenizer, options) for w in rows]
    graph = graph_module.windows(tf.constant([e.question for e in examples]),
                                 tf.constant([e.context for e in examples]))
    got = {k: graph[k].numpy() for k in COMPARED}
    assert len(got["example_index"]) == len(expected) > 12  # the long contexts: many windows
    for name in COMPARED:
        np.testing.assert_array_equal(got[name], np.array([w[name] for w in expected]),
                                      err_msg=name)


def test_served_answer_offsets_count_characters(module):
    examples = _examples()
    question = tf.constant([e.question for e in examples])
    context = tf.constant([e.context for e in examples])
    served = module.answer(question, context)
    windows = module.windows(question, context)
    logits = module.logits(windows)
    records = {k: v.numpy() for k, v in dict(windows, **logits).items()}
    rows = [{k: v[i] for k, v in records.items()} for i in range(len(records["example_index"]))]
    expected = decode_all([e.context for e in examples], rows)
    for i, (e, a) in enumerate(zip(examples, expected)):
        text = served["answer"][i].numpy().decode("utf-8")
        start, end = int(served["start"][i]), int(served["end"][i])
        assert (text, start, end) == (a.text, a.start, a.end)
        assert e.context[start:end] == text if start >= 0 else text == ""
    # The non-ASCII context's answer lies after multi-byte characters in some window.
    assert int(served["start"][1]) >= 0 and len(examples[1].context.encode()) > len(examples[1].context)
    assert (served["answer"][3].numpy(), int(served["start"][3])) == (b"", -1)


FRESH = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the SentencePiece ops before loading
export_dir, questions, contexts = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
r = tf.saved_model.load(export_dir).signatures["serving_default"](
    question=tf.constant(questions), context=tf.constant(contexts))
meta = json.load(open(export_dir + "/assets.extra/garden_export.json"))
print(json.dumps({"answer": [a.decode() for a in r["answer"].numpy().tolist()],
                  "start": r["start"].numpy().tolist(), "end": r["end"].numpy().tolist(),
                  "score": r["score"].numpy().tolist(), "tf_text_ops": meta["tf_text_ops"]}))
"""


SEED = 0


@pytest.mark.parametrize("kind,preset", [("sentencepiece", "albert_base"),
                                         ("bpe", "roberta_base")])
def test_sentencepiece_and_bpe_exports_answer_raw_text_in_a_fresh_process(
        vocabularies, kind, preset, tmp_path):
    """ALBERT's SentencePiece and RoBERTa's byte-level BPE exports take raw text too: loaded in
    a fresh process, serving_default gives the in-process module's answers, character spans
    and scores (random tiny backbones: what is compared is the graph, not the answers'
    quality)."""
    vocab = vocabularies[kind]
    # Seeded: whether a random backbone answers or abstains depends on its draw, and the check
    # below wants answers (unseeded, the draw moved with the tests run before it in the worker).
    # Before the packer: seeding clears TF's eager kernel cache, and with it the SentencePiece
    # op's resource of a tokenizer already made.
    keras.utils.set_random_seed(SEED)
    packer = load_packer(vocab, 32)
    overrides = dict(num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64,
                     dropout=0.0)
    if kind == "sentencepiece":
        overrides["embedding_size"] = 16
    backbone = factory.backbone(packer.vocab_size, packer.pad_id if kind == "bpe" else None,
                                preset=preset, **overrides)
    module = QuestionAnsweringServing(SpanExtractor(backbone), packer, vocab, doc_stride=7,
                                      max_query_length=6)
    export_dir = export.export(module, str(tmp_path), f"{kind}_qa")
    examples = _examples()
    questions, contexts = [e.question for e in examples], [e.context for e in examples]
    proc = run_code(FRESH, export_dir, json.dumps(questions), json.dumps(contexts))
    served = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = module.answer(tf.constant(questions), tf.constant(contexts))
    assert served["answer"] == [a.decode() for a in expected["answer"].numpy().tolist()]
    assert served["start"] == expected["start"].numpy().tolist()
    assert served["end"] == expected["end"].numpy().tolist()
    np.testing.assert_allclose(served["score"], expected["score"].numpy(), atol=1e-4)
    for context, start, end, text in zip(contexts, served["start"], served["end"],
                                         served["answer"]):
        assert context[start:end] == text if start >= 0 else text == ""
    assert sum(s >= 0 for s in served["start"]) >= 3  # answers in most contexts, "" for ""
    if kind == "sentencepiece":
        assert "SentencepieceTokenizeWithOffsetsOp" in served["tf_text_ops"]
