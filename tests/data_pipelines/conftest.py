"""Tiny vocabulary and corpora for the data pipeline tests (written per test session)."""

import pytest

# ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4, then these in order (5, 6, ...).
WORDS = ["the", "cat", "sat", "on", "mat", ".", "a", "dog", "ran", "far", "away", "and", "then",
         "it", "slept", "sun", "was", "warm", "bird", "sang", "tree", "in", "park", "big",
         "small", "red", "blue", "day", "night", "##s", "##ed", "##ing"]
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS


def token_id(word):
    return TINY_VOCAB.index(word)


def _sentences(seed, n):
    import random
    r = random.Random(seed)
    plain = [w for w in WORDS if not w.startswith("##") and w != "."]
    return [" ".join(r.choice(plain) for _ in range(r.randint(3, 9))) + " ." for _ in range(n)]


@pytest.fixture(scope="session")
def sentences():
    """_sentences(seed, n): n random sentences of the tiny vocabulary (a fixture, because a
    `from conftest import` would find whichever tests/*/conftest.py was imported first)."""
    return _sentences


@pytest.fixture(scope="session")
def tiny_vocab():
    return list(TINY_VOCAB)


@pytest.fixture(scope="session")
def tiny_vocab_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("".join(t + "\n" for t in TINY_VOCAB), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory):
    """Three files with the bad inputs make_pretrain must count and skip:
    an invalid UTF-8 line, a line with a NUL byte, a one-sentence document, an over-long line (with --max_line_bytes=200), an empty file, a
    document made only of bad lines, whitespace-only separator lines, a sentence longer than
    max_seq_length."""
    root = tmp_path_factory.mktemp("corpus")
    docs = [_sentences(k, 6 + k % 5) for k in range(12)]
    # ... and a one-sentence document at the end of part-a.
    a = "\n\n".join("\n".join(d) for d in docs[:6]) + "\n\nthe dog ran .\n"
    # A whitespace-only line separates documents; a 40-token sentence (> max_seq_length 32)
    # of 159 bytes (< --max_line_bytes=200); a 400-byte line (> 200) is skipped.
    long_sentence = " ".join(["cat"] * 40)
    b = ("\n".join(docs[6]) + "\n   \t \n" + "\n".join(docs[7]) + "\n" + long_sentence + "\n\n")
    b_bytes = b.encode("utf-8")
    b_bytes += b"the cat \xff\xfe sat .\nthe \x00 dog .\n" + "\n".join(docs[8]).encode("utf-8") + b"\n\n"
    b_bytes += ("dog " * 100).encode("utf-8") + b"\n\xc3\x28 bad\n\n"  # a document of bad lines only
    b_bytes += "\n".join(docs[9] + docs[10]).encode("utf-8") + b"\n"
    (root / "part-a.txt").write_text(a, encoding="utf-8")
    sub = root / "sub"
    sub.mkdir()
    (sub / "part-b.txt").write_bytes(b_bytes)
    (root / "part-c.txt").write_bytes(b"")
    return {"root": str(root), "pattern": str(root) + "/**.txt", "docs": docs}
