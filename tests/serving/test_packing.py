"""In-graph packing (garden.serving.text.TextPacker) equals the Beam job's tokenizer packed by
hand, for all three tokenizer kinds, on the sample corpus.

The reference side: `load_tokenizer(kind, path).tokenize` (what make_pretrain runs; for
WordPiece the pure-Python text.wordpiece, not the TF op), BERT's
`_truncate_seq_pair` and the layouts spelled with the special tokens' strings:
    BERT / ALBERT / ELECTRA   [CLS] A [SEP] B [SEP], segment ids 0 / 1, [PAD] or <pad>
    RoBERTa                   <s> A </s></s> B </s>, no segment ids, <pad>
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from text import tokenizers
from garden.serving.text import TextPacker

SPECIALS = {"wordpiece": ("[CLS]", "[SEP]", "[PAD]"),
            "sentencepiece": ("[CLS]", "[SEP]", "<pad>"),
            "bpe": ("<s>", "</s>", "<pad>")}
LAYOUT = {"wordpiece": "bert", "sentencepiece": "bert", "bpe": "roberta"}
MAX_LEN = 24  # short: most corpus pairs need truncation
EXTRA = ["", "Café NAÏVE résumé", "  spaced\tout  ", "x" * 300, "日本語のテキスト", "a"]


def truncate_seq_pair(a: list, b: list, budget: int):
    """BERT run_classifier.py: pop from the longer, from B on a tie."""
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        (a if len(a) > len(b) else b).pop()
    return a, b


def reference(ids_a, ids_b, layout, cls, sep, pad):
    if ids_b is None:
        body, segments = [cls] + ids_a[:MAX_LEN - 2] + [sep], None
        segments = [0] * len(body)
    elif layout == "bert":
        a, b = truncate_seq_pair(ids_a, ids_b, MAX_LEN - 3)
        body = [cls] + a + [sep] + b + [sep]
        segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    else:
        a, b = truncate_seq_pair(ids_a, ids_b, MAX_LEN - 4)
        body, segments = [cls] + a + [sep, sep] + b + [sep], None
    fill = MAX_LEN - len(body)
    out = {"token_ids": body + [pad] * fill, "padding_mask": [1] * len(body) + [0] * fill}
    if layout == "bert":
        out["segment_ids"] = segments + [0] * fill
    return out


@pytest.fixture(scope="module")
def texts(serving_corpus):
    with open(serving_corpus.corpus_slice, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f if l.strip()][:300]
    return lines + EXTRA


@pytest.mark.parametrize("kind", ["wordpiece", "sentencepiece", "bpe"])
def test_packer_equals_the_beam_tokenizer_packed_by_hand(serving_corpus, texts, kind):
    tokenizer = tokenizers.load_tokenizer(kind, serving_corpus.vocab[kind], lower_case=True)
    packer = TextPacker(tokenizer, MAX_LEN)
    assert packer.layout == LAYOUT[kind]
    tokens = tokenizer.vocab.tokens
    cls, sep, pad = (tokens.index(t) for t in SPECIALS[kind])
    pieces = tokenizer.tokenize(texts)  # the Beam job's ids
    assert sum(len(p) > MAX_LEN for p in pieces) > 20  # truncation is exercised
    texts_b = texts[1:] + texts[:1]
    pieces_b = pieces[1:] + pieces[:1]
    for second, second_pieces in ((None, [None] * len(texts)), (texts_b, pieces_b)):
        got = packer.encode_numpy(texts, second)
        assert set(got) == set(reference([], None, packer.layout, cls, sep, pad))
        for row, (a, b) in enumerate(zip(pieces, second_pieces)):
            want = reference(list(a), None if b is None else list(b), packer.layout, cls, sep,
                             pad)
            for key, value in want.items():
                np.testing.assert_array_equal(got[key][row], value,
                                              err_msg=f"{kind} {key} row {row}: {texts[row]!r}")


def test_roberta_layout_inside_tf_data_and_a_tf_function(serving_corpus):
    """The same ids where fine-tuning and serving run them: Dataset.map and a traced graph."""
    tokenizer = tokenizers.load_tokenizer("bpe", serving_corpus.vocab["bpe"], lower_case=True)
    packer = TextPacker(tokenizer, MAX_LEN)
    a, b = ["The for statement.", "", "Return a list."], ["x", "y z", ""]
    eager = packer.encode_numpy(a, b)
    ds = tf.data.Dataset.from_tensor_slices((a, b)).batch(2).map(packer)
    mapped = {k: np.concatenate([batch[k].numpy() for batch in ds]) for k in eager}
    traced = tf.function(packer)(tf.constant(a), tf.constant(b))
    for key in eager:
        np.testing.assert_array_equal(mapped[key], eager[key])
        np.testing.assert_array_equal(traced[key].numpy(), eager[key])
    # <s> A </s></s> B </s>: two </s> between the texts, one at the end.
    sep = tokenizer.vocab.tokens.index("</s>")
    row = eager["token_ids"][0][eager["padding_mask"][0] == 1].tolist()
    assert row[0] == tokenizer.vocab.tokens.index("<s>") and row[-1] == sep
    assert sum(t == sep for t in row) == 3 and "segment_ids" not in eager
