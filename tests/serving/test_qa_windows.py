"""QuestionAnsweringServing's in-graph windows equal make_finetune's (data_pipelines.finetune.
squad.examples_features): token ids, segments, padding, max-context flags and the character
spans of the context pieces, on contexts that need many windows, non-ASCII text whose UTF-8
byte offsets differ from character offsets, a question longer than max_query_length and an
empty context; and the served answer's offsets are characters."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from data_pipelines import tokenizers
from data_pipelines.finetune import squad
from garden.models.bert.presets import bert_backbone_from_preset
from garden.models.question_answering import SpanExtractor, decode_all
from garden.serving.qa import QuestionAnsweringServing
from garden.serving.text import load_packer

COMPARED = ("example_index", "window_index", "token_ids", "segment_ids", "padding_mask",
            "token_is_max_context", "context_char_start", "context_char_end")
LONG = ("Assert statements are a convenient way to insert debugging assertions into a "
        "program. The simple form is equivalent to a test. ") * 4


@pytest.fixture(scope="module")
def module(bert_data):
    packer = load_packer(bert_data.vocab, 32)
    backbone = bert_backbone_from_preset("bert_tiny", vocab_size=packer.vocab_size, dropout=0.0)
    return QuestionAnsweringServing(SpanExtractor(backbone), packer, bert_data.vocab,
                                    doc_stride=7, max_query_length=6)


def _examples():
    cases = [("what is an assert statement used for in a program?", LONG),
             ("Où est le café?", "Le café «Flore» est à Saint-Germain-des-Prés, près de l'église. "
                                 "Naïve façade; Ærø ß İstanbul — 東京 tower. " * 2),
             ("short", "One piece."),
             ("empty context", ""),
             ("x", "a  b\tc\n d   ")]
    return [squad.SquadExample(f"q{i}", q, c, (), True) for i, (q, c) in enumerate(cases)]


# (max_seq_length, doc_stride, max_query_length): window lengths odd and even (a piece can tie
# between two windows), a stride longer than a window could be, and a short question budget.
GEOMETRIES = [(32, 7, 6), (24, 4, 5), (29, 5, 6), (20, 40, 3)]


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_in_graph_windows_equal_make_finetune_windows(module, bert_data, geometry):
    max_seq_length, doc_stride, max_query_length = geometry
    graph_module = QuestionAnsweringServing(
        module.model, load_packer(bert_data.vocab, max_seq_length), bert_data.vocab,
        doc_stride=doc_stride, max_query_length=max_query_length)
    examples = _examples()
    options = squad.SquadOptions(max_seq_length, doc_stride, max_query_length)
    tokenizer = tokenizers.load_tokenizer("wordpiece", bert_data.vocab, lower_case=True)
    expected = [w for rows in squad.examples_features(examples, tokenizer, options) for w in rows]
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
