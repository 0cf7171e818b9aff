"""data_pipelines.wordpiece's character offsets (what make_finetune --task=squad cuts windows
and answers with, without TensorFlow) against tensorflow-text's FastBertTokenizer offsets
converted to characters, on the sample corpus and on random text of every script."""

from __future__ import annotations

import numpy as np
import pytest

from data_pipelines import tokenizers, wordpiece
from test_wordpiece import _vocab, english, random_texts  # noqa: F401  (english: a fixture)


@pytest.fixture(scope="module")
def vocab(english):  # noqa: F811
    return _vocab(english)


def tf_char_spans(vocab, lower_case, texts):
    """FastBertTokenizer's (ids, byte starts, byte ends) of each text, spans in characters."""
    import tensorflow as tf

    tok = tokenizers.wordpiece_tokenizer(list(vocab), lower_case)
    ids, starts, ends = tok.tokenize_with_offsets(tf.constant([t.encode("utf-8") for t in texts]))
    return [(i, *tokenizers.byte_to_char_spans(t, s, e))
            for t, i, s, e in zip(texts, ids.to_list(), starts.to_list(), ends.to_list())]


@pytest.mark.parametrize("lower_case", [True, False])
def test_char_offsets_equal_fast_bert_tokenizer(english, vocab, lower_case):  # noqa: F811
    rng = np.random.default_rng(11)
    texts = english[:1000] + random_texts(rng, english, 3000) + [
        "", "   ", "\u2026", "a\u2026b", "e\u0301t\u00e9", "\u01c4a", "\u0130stanbul", "\ufb01ne",
        "x\u00ady", "\u4e2d\u6587", "a\x00b\tc", "\u212b\u00c5A\u030a"]
    ours = wordpiece.WordPieceTokenizer(vocab, lower_case).tokenize_with_char_offsets(texts)
    theirs = tf_char_spans(vocab, lower_case, texts)
    wrong = [(t, [list(x) for x in a], b) for t, a, b in zip(texts, ours, theirs)
             if [list(x) for x in a] != [list(x) for x in b]]
    assert not wrong, f"{len(wrong)} of {len(texts)} texts differ, e.g. {wrong[:2]}"
    # not vacuous: non-ASCII texts whose normalisation changes lengths (expanded characters
    # such as "\u2026" -> "...", deleted combining marks) and several pieces per word occur
    odd = [t for t in texts if len(t.translate(str.maketrans(
        {c: None for c in range(0x300, 0x370)}))) != len(t) or "\u2026" in t]
    assert len(odd) > 50
    assert sum(len(a[0]) for a in ours) > 30000


def test_text_tokenizer_char_offsets_match_its_byte_offsets(tmp_path, english, vocab):  # noqa: F811
    """TextTokenizer.tokenize_with_char_offsets (pure Python for wordpiece) agrees with its own
    tokenize_with_offsets (the TF op) converted, and with tokenize's ids."""
    path = tmp_path / "vocab.txt"
    path.write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    tok = tokenizers.load_tokenizer("wordpiece", str(path), lower_case=True)
    texts = english[:200] + ["Caf\u00e9 \u2026 na\u00efve", "\u0130I \u00df"]
    ids, starts, ends = tok.tokenize_with_offsets(texts)
    got = tok.tokenize_with_char_offsets(texts)
    assert [list(g[0]) for g in got] == ids == tok.tokenize(texts)
    for text, g, s, e in zip(texts, got, starts, ends):
        assert (list(g[1]), list(g[2])) == tuple(tokenizers.byte_to_char_spans(text, s, e))
