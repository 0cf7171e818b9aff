"""data_pipelines.wordpiece against tensorflow-text's FastBertTokenizer, which it stands in for
in the Beam workers: the shipped tables (data_pipelines.tf_text_tables) are re-derived from
tensorflow-text, and the ids are compared on a real corpus, on random text of every script and
on the edge cases."""

import numpy as np
import pytest

from data_pipelines import sample_corpus, tf_text_tables, tokenizers, wordpiece


@pytest.fixture(scope="module")
def tables():
    return tf_text_tables.load_tables()


@pytest.fixture(scope="module")
def english():
    return [s for _, sentences in sample_corpus.topic_documents() for s in sentences]


def tf_ids(vocab, lower_case, texts):
    import tensorflow as tf

    tok = tokenizers.wordpiece_tokenizer(list(vocab), lower_case)
    return tok.tokenize(tf.constant([t.encode("utf-8") for t in texts])).to_list()


def test_shipped_tables_are_tensorflow_texts(tables):
    """Every codepoint's normalisation and split class, read off the installed tensorflow-text
    again: a tensorflow-text upgrade that changes one fails here (regenerate the tables)."""
    derived = tf_text_tables.derive_tables()
    assert derived == tables
    # what the tables say, for a few known characters
    lower, cased = tables["normalize_lower"], tables["normalize_cased"]
    assert lower[str(ord("A"))] == "a" and lower[str(0xC9)] == "e" and lower[str(0x2026)] == "..."
    assert str(ord("A")) not in cased and cased[str(0x00)] == " "
    punct = {c for a, b in tables["punct"] for c in range(a, b + 1)}
    space = {c for a, b in tables["space"] for c in range(a, b + 1)}
    assert {ord(c) for c in "!,.?_~"} <= punct and 0x4E2D in punct and ord("a") not in punct
    assert {9, 10, 13, 32, 0x3000} <= space


def _vocab(english):
    """A WordPiece vocabulary with English pieces (learnt by make_vocab's learner, through
    tensorflow-text) plus whole-word and ## pieces of random non-ASCII characters, so that
    non-ASCII words tokenize to real pieces and not only to [UNK]."""
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as learn
    import tensorflow as tf

    learnt = learn.bert_vocab_from_dataset(
        tf.data.Dataset.from_tensor_slices(english[:3000]).batch(1000), vocab_size=600,
        reserved_tokens=tokenizers.RESERVED_TOKENS, bert_tokenizer_params={"lower_case": True})
    extra = []
    for c in list(range(0xC0, 0x530)) + list(range(0x4E00, 0x4F00)):  # pools of random_texts
        ch = chr(c).lower()
        extra += [ch, "##" + ch, ch + "a", "##a" + ch]
    seen = set()
    return [t for t in list(learnt) + extra if not (t in seen or seen.add(t))]


def random_texts(rng, english, n):
    """Text that exercises every path: English, accented and mixed-script words, random
    codepoints from all planes (unassigned ones too), combining marks, controls, every kind of
    whitespace, CJK, emoji, and words around the 100-byte limit."""
    pools = [
        np.arange(0x20, 0x7F),            # printable ASCII
        np.arange(0x00, 0x20),            # controls
        np.arange(0xA0, 0x250),           # Latin-1, Latin Extended
        np.arange(0x300, 0x370),          # combining marks
        np.arange(0x370, 0x530),          # Greek, Cyrillic
        np.arange(0x2000, 0x2070),        # spaces, dashes, quotes, invisible characters
        np.arange(0x3000, 0x3100),        # CJK punctuation, kana
        np.arange(0x4E00, 0x4F00),        # CJK ideographs
        np.arange(0xFB00, 0xFB50),        # ligatures
        np.arange(0xFF00, 0xFFF0),        # full-width forms
        np.arange(0x1F300, 0x1F700),      # emoji
        np.arange(0x10000, 0x110000, 97),  # everything else, sampled
    ]
    texts = []
    for _ in range(n):
        kind = rng.integers(4)
        if kind == 0:
            texts.append(str(rng.choice(english)))
        elif kind == 1:  # English with random characters spliced in
            words = str(rng.choice(english)).split()
            for _ in range(rng.integers(1, 4)):
                pool = pools[rng.integers(len(pools))]
                at = rng.integers(len(words) + 1)
                words.insert(at, "".join(chr(c) for c in rng.choice(pool, rng.integers(1, 4))))
            texts.append(" ".join(words) if rng.random() < 0.5 else "".join(words))
        elif kind == 2:  # random characters of one or two pools
            pool = np.concatenate([pools[rng.integers(len(pools))] for _ in range(2)])
            texts.append("".join(chr(c) for c in rng.choice(pool, rng.integers(1, 40))))
        else:  # one long word around the 100-byte limit, ASCII or 2-byte characters
            unit = "a" if rng.random() < 0.5 else "\u00e9"
            texts.append("x " + unit * int(rng.integers(40, 110)) + " y")
    return texts


@pytest.mark.parametrize("lower_case", [True, False])
def test_ids_equal_fast_bert_tokenizer(english, lower_case):
    rng = np.random.default_rng(7)
    vocab = _vocab(english)
    texts = english + random_texts(rng, english, 20000)
    ours = wordpiece.WordPieceTokenizer(vocab, lower_case).tokenize(texts)
    theirs = tf_ids(vocab, lower_case, texts)
    wrong = [(t, a, b) for t, a, b in zip(texts, ours, theirs) if a != b]
    assert not wrong, f"{len(wrong)} of {len(texts)} texts differ, e.g. {wrong[:3]}"
    # the comparison is not vacuous: real pieces, [UNK]s and non-ASCII pieces all occur
    flat = [i for row in ours for i in row]
    non_ascii = {i for i in flat if not vocab[i].isascii()}
    assert len(set(flat)) > 400 and len(non_ascii) > 100 and flat.count(1) > 1000


def test_word_length_limit_and_unknown_parts():
    vocab = tokenizers.RESERVED_TOKENS + ["a", "##a", "\u00e9", "##\u00e9", "b", "##c"]
    tok = wordpiece.WordPieceTokenizer(vocab, lower_case=False)
    a, cont, unk = vocab.index("a"), vocab.index("##a"), 1
    texts = ["a" * 100, "a" * 101, "\u00e9" * 50, "\u00e9" * 51, "a" * 99 + "\u00e9", "bc", "bd", "b c"]
    assert tok.tokenize(texts[:2]) == [[a] + [cont] * 99, [unk]]  # 100 bytes is the limit
    assert tok.tokenize(texts[2:4])[1] == [unk]  # 51 two-byte characters: 102 bytes
    assert tok.tokenize(texts) == tf_ids(vocab, False, texts)


def test_the_word_cache_is_bounded(monkeypatch, english):
    vocab = tokenizers.RESERVED_TOKENS + ["a", "##a", "b", "##b"]
    monkeypatch.setattr(wordpiece, "_CACHE_LIMIT", 50)
    tok = wordpiece.WordPieceTokenizer(vocab, lower_case=True)
    words = [format(i, "b").replace("0", "a").replace("1", "b") for i in range(1, 400)]
    ids = tok.tokenize(words + ["AB ba"])
    assert len(tok._cache) <= 51
    assert ids == tf_ids(vocab, True, words + ["AB ba"])


def test_refuses_tables_where_python_whitespace_is_not_whitespace(tables):
    """str.split() must only cut where tensorflow-text sees whitespace; tables under which a
    character Python splits at (here U+00A0, kept by the cased normaliser) is a word character
    are refused, not tokenized into other ids."""
    changed = dict(tables, space=[r for r in tables["space"] if r != [0xA0, 0xA0]])
    assert len(changed["space"]) == len(tables["space"]) - 1
    with pytest.raises(RuntimeError, match="U\\+00A0"):
        wordpiece.WordPieceTokenizer(["[UNK]", "a"], lower_case=False, tables=changed)
    wordpiece.WordPieceTokenizer(["[UNK]", "a"], lower_case=False, tables=tables)

