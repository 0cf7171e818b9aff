"""make_vocab for every tokenizer kind and text.tokenizers.load_tokenizer.

Vocabularies are learnt here on a few hundred real English sentences (the Python reference
topics of data_pipelines.sample_corpus) plus a few accented/CJK/emoji lines, with tiny sizes
so that each learner takes well under a few seconds. Ids are checked against independent
implementations: the SentencePiece Python library, Hugging Face tokenizers (WordPiece and
byte-level BPE) and the byte-level BPE's own lossless byte map.
"""

import gzip
import json
import shutil

import pytest

from text import bpe, tokenizers, vocab_files
from data_pipelines import make_vocab, sample_corpus, sources

VARIED = [
    "Hello, World!",
    "naïve café Ünïcödé ÀÉÎ résumé",
    "日本語のテキスト、東京。",
    "emoji 😀👍🏽 ok",
    "numbers 12345.678 and 3,14 and 10%",
    "punctuation: (a) [b] {c} — “quoted” ... !? #$&*",
    "",
    "   leading and trailing   ",
    "tabs\tand  double  spaces",
    "İstanbul ΟΔΟΣ ẞtraße Kelvin",
    "[MASK] <mask> <|endoftext|> [CLS] are plain text here",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """~400 English sentences in a plain file and the varied lines (x3) in a .gz file."""
    root = tmp_path_factory.mktemp("tok_corpus")
    docs, n = [], 0
    for _, sentences in sample_corpus.topic_documents():
        docs.append(sentences)
        n += len(sentences)
        if n >= 400:
            break
    (root / "a.txt").write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
    varied = [t for t in VARIED if t.strip()] * 3
    with gzip.open(root / "b.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(varied) + "\n\n")
    english = [s for d in docs for s in d]
    return {"glob": str(root / "*"), "root": root, "english": english}


@pytest.fixture(scope="module")
def vocabs(corpus, tmp_path_factory):
    """One vocabulary per kind, learnt through the command line's main()."""
    out = tmp_path_factory.mktemp("tok_vocabs")
    paths = {
        "wordpiece": str(out / "wp" / "vocab.txt"),
        "sentencepiece": str(out / "sp" / "spm.model"),
        "bpe": str(out / "bpe" / "vocab.json"),
    }
    sizes = {"wordpiece": 400, "sentencepiece": 300, "bpe": 400}
    for kind, path in paths.items():
        extra = ["--lower_thresh=2"] if kind == "wordpiece" else []
        make_vocab.main([f"--tokenizer={kind}", f"--input={corpus['glob']}", f"--output={path}",
                         f"--vocab_size={sizes[kind]}", "--lower_case"] + extra)
    return paths, sizes


@pytest.fixture(scope="module")
def toks(vocabs):
    paths, _ = vocabs
    return {kind: tokenizers.load_tokenizer(kind, path, lower_case=True) for kind, path in paths.items()}


def test_make_vocab_files(vocabs):
    import sentencepiece as spm

    paths, sizes = vocabs
    wp = vocab_files.load_vocab(paths["wordpiece"])
    assert wp[:5] == vocab_files.RESERVED_TOKENS and len(wp) <= sizes["wordpiece"]

    sp = spm.SentencePieceProcessor(model_file=paths["sentencepiece"])
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    assert pieces[:7] == ["<pad>", "</s>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "<eod>"]
    assert sp.pad_id() == 0 and sp.eos_id() == 1 and sp.unk_id() == 2 and sp.bos_id() == -1
    assert all(sp.is_control(i) for i in (3, 4, 5, 6))
    assert 100 < len(pieces) <= sizes["sentencepiece"]
    # lower-cased training text: no piece has an upper-case letter
    assert not [p for p in pieces[7:] if p != p.lower()]
    vocab_lines = open(paths["sentencepiece"][:-len(".model")] + ".vocab", encoding="utf-8").read().splitlines()
    assert [line.split("\t")[0] for line in vocab_lines] == pieces

    vocab = json.load(open(paths["bpe"], encoding="utf-8"))
    merges = open(paths["bpe"].replace("vocab.json", "merges.txt"), encoding="utf-8").read().splitlines()
    assert [p for p, _ in sorted(vocab.items(), key=lambda kv: kv[1])][:6] == vocab_files.BPE_SPECIALS
    byte_symbols = set(bpe.bytes_to_unicode().values())
    assert len(byte_symbols) == 256 and byte_symbols <= set(vocab)
    # 6 specials + 256 bytes + one new piece per merge = 400 (enough text to reach the size)
    assert len(vocab) == sizes["bpe"] and len([m for m in merges if not m.startswith("#")]) == 400 - 262


def test_roles_and_word_starts(toks):
    wp, sp, bpe = toks["wordpiece"], toks["sentencepiece"], toks["bpe"]
    assert dict(wp.vocab.specials) == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert dict(sp.vocab.specials) == {"pad": 0, "eos": 1, "unk": 2, "cls": 3, "sep": 4, "mask": 5, "eod": 6}
    assert dict(bpe.vocab.specials) == {"bos": 0, "cls": 0, "pad": 1, "eos": 2, "sep": 2, "unk": 3,
                                        "mask": 4, "eod": 5}
    assert sp.vocab.special_ids == frozenset(range(7)) and bpe.vocab.special_ids == frozenset(range(6))
    for tok, marker, is_start in ((wp, "##", False), (sp, "\u2581", True), (bpe, "\u0120", True)):
        assert tok.vocab.size == len(tok.vocab.tokens) == len(tok.vocab.is_word_start)
        for i, piece in enumerate(tok.vocab.tokens):
            if i not in tok.vocab.special_ids:
                assert tok.vocab.is_word_start[i] == (piece.startswith(marker) == is_start), piece
        assert all(tok.vocab.is_word_start[i] for i in tok.vocab.special_ids)
    assert sp.kind == "sentencepiece" and bpe.path.endswith("vocab.json") and wp.lower_case


def test_eager_equals_in_graph_and_saved_model(toks, tmp_path):
    import tensorflow as tf

    texts = VARIED + [t.upper() for t in VARIED]

    class Export(tf.Module):
        def __init__(self):
            super().__init__()
            self.wp, self.sp, self.bpe = (toks[k].in_graph() for k in ("wordpiece", "sentencepiece", "bpe"))

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            out = {}
            for name, module in (("wordpiece", self.wp), ("sentencepiece", self.sp), ("bpe", self.bpe)):
                ids = module(text)
                out[name], out[name + "_splits"] = ids.flat_values, ids.row_splits
            return out

    export = Export()
    tf.saved_model.save(export, str(tmp_path / "sm"), signatures={"serving_default": export.serve})
    loaded = tf.saved_model.load(str(tmp_path / "sm")).signatures["serving_default"]
    served = loaded(text=tf.constant(texts))
    for kind, tok in toks.items():
        eager = tok.tokenize(texts)
        assert eager[VARIED.index("")] == []
        assert all(row for t, row in zip(texts, eager) if t.strip()), kind
        in_graph = tf.function(lambda x, m=tok.in_graph(): m(x))(tf.constant(texts))
        assert in_graph.dtype == tf.int64
        assert in_graph.to_list() == eager, kind
        saved = tf.RaggedTensor.from_row_splits(served[kind], served[kind + "_splits"]).to_list()
        assert saved == eager, kind
        # one text at a time gives the same ids as the batch (no cross-talk through caches)
        assert [tok.tokenize([t])[0] for t in texts] == eager, kind


def test_ids_match_independent_implementations(toks, vocabs, corpus):
    import sentencepiece as spm
    import tensorflow as tf
    from tokenizers import BertWordPieceTokenizer, ByteLevelBPETokenizer

    paths, _ = vocabs
    english = corpus["english"][:200]

    hf_wp = BertWordPieceTokenizer(paths["wordpiece"], lowercase=True)
    assert toks["wordpiece"].tokenize(english) == [
        e.ids for e in hf_wp.encode_batch(english, add_special_tokens=False)]

    sp = spm.SentencePieceProcessor(model_file=paths["sentencepiece"])
    texts = english + VARIED
    lowered = [t.decode("utf-8") for t in tf.strings.lower(texts, encoding="utf-8").numpy()]
    assert toks["sentencepiece"].tokenize(texts) == sp.encode(lowered)

    hf_bpe = ByteLevelBPETokenizer(paths["bpe"], paths["bpe"].replace("vocab.json", "merges.txt"))
    ours = toks["bpe"].tokenize(texts)
    assert ours[:len(english)] == [e.ids for e in hf_bpe.encode_batch(lowered[:len(english)])]
    # byte-level BPE is lossless: the pieces' bytes spell the (lower-cased) text exactly
    pieces = toks["bpe"]._bpe_piece_bytes()
    assert [b"".join(pieces[i] for i in row) for row in ours] == [t.encode("utf-8") for t in lowered]


def test_offsets(toks):
    texts = VARIED + ["The quick brown fox jumps over the lazy dog."]
    for kind, tok in toks.items():
        ids, starts, ends = tok.tokenize_with_offsets(texts)
        assert ids == tok.tokenize(texts), kind
        for text, row, s_row, e_row in zip(texts, ids, starts, ends):
            data = text.encode("utf-8")
            assert len(row) == len(s_row) == len(e_row)
            for i, s, e in zip(row, s_row, e_row):
                assert 0 <= s <= e <= len(data), (kind, text)
                piece = tok.vocab.tokens[i]
                surface = data[s:e]
                if text.isascii() and i != tok.vocab.specials["unk"]:
                    expected = {"wordpiece": piece.removeprefix("##").encode(),
                                "sentencepiece": piece.lstrip("\u2581").encode(),
                                "bpe": tok._bpe_piece_bytes()[i].lstrip(b" \t")}[kind]
                    assert surface.lower() == expected, (kind, text, piece, surface)
            # spans never go backwards
            assert s_row == sorted(s_row) and e_row == sorted(e_row), (kind, text)
    # lower-casing that changes UTF-8 lengths ("İ" 2 -> 3 bytes, "ẞ" 3 -> 2): spans of the
    # original text, on character boundaries
    text = "İstanbul ẞtraße ok"
    for kind in ("sentencepiece", "bpe"):
        ids, starts, ends = toks[kind].tokenize_with_offsets([text])
        data = text.encode("utf-8")
        assert ends[0][-1] == len(data)
        assert data[starts[0][-1]:ends[0][-1]].decode("utf-8") in ("ok", "k")
        for s, e in zip(starts[0], ends[0]):
            data[s:e].decode("utf-8")  # raises if a span cuts a character


def test_fingerprints(toks, vocabs, corpus, tmp_path):
    paths, _ = vocabs
    prints = {kind: tok.fingerprint for kind, tok in toks.items()}
    assert len(set(prints.values())) == 3 and all(p.startswith("sha256:") for p in prints.values())
    assert prints["wordpiece"] == vocab_files.vocab_fingerprint(paths["wordpiece"])
    assert prints["sentencepiece"] == vocab_files.vocab_fingerprint(paths["sentencepiece"])
    # same files elsewhere -> same fingerprint; a changed merges.txt -> a different one
    copy = tmp_path / "bpe"
    shutil.copytree(paths["bpe"].rsplit("/", 1)[0], copy)
    assert tokenizers.load_tokenizer("bpe", str(copy)).fingerprint == prints["bpe"]
    merges = (copy / "merges.txt").read_text(encoding="utf-8").splitlines()
    (copy / "merges.txt").write_text("\n".join(merges[:-1]) + "\n", encoding="utf-8")
    assert tokenizers.load_tokenizer("bpe", str(copy / "vocab.json")).fingerprint != prints["bpe"]
    # a cased SentencePiece model of the same text is another vocabulary
    cased = str(tmp_path / "cased.model")
    make_vocab.main(["--tokenizer=sentencepiece", f"--input={corpus['glob']}", f"--output={cased}",
                     "--vocab_size=300"])
    cased_tok = tokenizers.load_tokenizer("sentencepiece", cased, lower_case=False)
    assert cased_tok.fingerprint != prints["sentencepiece"]
    assert any(p != p.lower() for p in cased_tok.vocab.tokens[7:])


def test_detect_kind(vocabs, tmp_path):
    paths, _ = vocabs
    assert {k: vocab_files.detect_kind(p) for k, p in paths.items()} == {k: k for k in paths}
    assert vocab_files.detect_kind(paths["bpe"].rsplit("/", 1)[0]) == "bpe"
    assert vocab_files.detect_kind(str(tmp_path)) == "wordpiece"
    assert vocab_files.bpe_files("/x/y/roberta-vocab.json") == ("/x/y/roberta-vocab.json", "/x/y/roberta-merges.txt")


def test_vocabulary_errors(vocabs, tmp_path):
    paths, _ = vocabs
    with pytest.raises(vocab_files.VocabularyError, match=r"not found: .*nope\.model.*make_vocab"):
        tokenizers.load_tokenizer("sentencepiece", str(tmp_path / "nope.model"))
    with pytest.raises(vocab_files.VocabularyError, match=r"vocab\.txt is not a SentencePiece model.*--tokenizer=wordpiece"):
        tokenizers.load_tokenizer("sentencepiece", paths["wordpiece"])
    with pytest.raises(vocab_files.VocabularyError, match=r"spm\.model.*--tokenizer=sentencepiece"):
        tokenizers.load_tokenizer("wordpiece", paths["sentencepiece"])
    with pytest.raises(vocab_files.VocabularyError, match=r"vocab\.json.*--tokenizer=bpe"):
        tokenizers.load_tokenizer("wordpiece", paths["bpe"])
    with pytest.raises(vocab_files.VocabularyError, match=r"vocab\.txt is not a byte-level BPE vocab\.json"):
        tokenizers.load_tokenizer("bpe", paths["wordpiece"])
    # a vocab.json without its merges.txt
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(paths["bpe"], lone / "vocab.json")
    with pytest.raises(vocab_files.VocabularyError, match=r"not found: .*lone/merges\.txt"):
        tokenizers.load_tokenizer("bpe", str(lone / "vocab.json"))
    # missing role tokens / byte symbols
    vocab = json.load(open(paths["bpe"], encoding="utf-8"))
    del vocab["\u0120"]
    vocab = {p: i for i, p in enumerate(sorted(vocab, key=vocab.get))}
    (lone / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (lone / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    with pytest.raises(vocab_files.VocabularyError, match=r"lacks 1 of the 256 byte symbols"):
        tokenizers.load_tokenizer("bpe", str(lone))
    bad_wp = tmp_path / "vocab.txt"
    bad_wp.write_text("[PAD]\n[UNK]\nthe\n", encoding="utf-8")
    with pytest.raises(vocab_files.VocabularyError, match=r"vocab\.txt lacks reserved tokens \['\[CLS\]'"):
        tokenizers.load_tokenizer("wordpiece", str(bad_wp))
    with pytest.raises(ValueError, match="unknown tokenizer kind"):
        tokenizers.load_tokenizer("unigram", paths["sentencepiece"])


def test_make_vocab_errors(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n\n", encoding="utf-8")
    for kind, out in (("sentencepiece", "x.model"), ("bpe", "bpe")):
        with pytest.raises(sources.InputError, match="no text"):
            (make_vocab.learn_sentencepiece if kind == "sentencepiece" else make_vocab.learn_bpe)(
                [str(empty)], 300, True)
        with pytest.raises(SystemExit, match="matches no files"):
            make_vocab.main([f"--tokenizer={kind}", f"--input={tmp_path}/none-*.txt",
                             f"--output={tmp_path}/{out}", "--vocab_size=300"])
    # sizes below the special tokens (+ 256 bytes for bpe) are refused before any work
    for kind, size, least in (("bpe", 261, 262), ("sentencepiece", 7, 8), ("wordpiece", 5, 6)):
        with pytest.raises(SystemExit, match="^2$"):
            make_vocab.main([f"--tokenizer={kind}", f"--input={empty}", f"--output={tmp_path}/v.model",
                             f"--vocab_size={size}"])
        assert f"at least {least}" in capsys.readouterr().err
    # a size the learner cannot reach with this alphabet: SentencePiece's reason, with the files
    text = tmp_path / "abc.txt"
    text.write_text("".join(chr(c) * 3 + " " for c in range(0x4E00, 0x4E40)) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"SentencePiece could not learn a 20-piece model .*abc\.txt.*required_chars"):
        make_vocab.main(["--tokenizer=sentencepiece", f"--input={text}", f"--output={tmp_path}/v.model",
                         "--vocab_size=20"])
    with pytest.raises(SystemExit, match="^2$"):
        make_vocab.main(["--tokenizer=sentencepiece", f"--input={text}", f"--output={tmp_path}/v.txt",
                         "--vocab_size=100"])
    assert "must end in .model" in capsys.readouterr().err


def test_loading_local_vocabularies_imports_no_tensorflow(vocabs):
    """A launcher (the Beam job's main process, e.g. with --runner=DataflowRunner or several
    local workers) loads the vocabulary to check it, fingerprint it and ship its ids: from
    local files that needs no TensorFlow, which is imported only when a sentencepiece or bpe
    tokenizer first runs (wordpiece tokenizes without it)."""
    import subprocess
    import sys

    paths, _ = vocabs
    script = (
        "import sys, json\n"
        "from data_pipelines import make_pretrain\nfrom text import tokenizers, vocab_files\n"
        "paths = json.loads(sys.argv[1])\n"
        "loaded = {k: tokenizers.load_tokenizer(k, p) for k, p in paths.items()}\n"
        "assert 'tensorflow' not in sys.modules, 'TensorFlow imported by loading'\n"
        "assert all(t.fingerprint.startswith('sha256:') for t in loaded.values())\n"
        "assert vocab_files.detect_kind(paths['bpe'].rsplit('/', 1)[0]) == 'bpe'\n"
        "ids = loaded['wordpiece'].tokenize(['hello world'])\n"
        "assert 'tensorflow' not in sys.modules and len(ids[0]) >= 2  # text.wordpiece\n"
        "ids = loaded['sentencepiece'].tokenize(['hello world'])\n"
        "assert 'tensorflow' in sys.modules and len(ids[0]) >= 2\n")
    done = subprocess.run([sys.executable, "-c", script, json.dumps(paths)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


# ---------------------------------------------------------------------------------------------
# Casing: the check behind make_pretrain's --lower_case warning (issue 13, item 9)


@pytest.fixture(scope="module")
def cased_toks(corpus, vocabs, tmp_path_factory):
    """The same text and sizes as ``vocabs``, learnt without --lower_case."""
    _, sizes = vocabs
    out = tmp_path_factory.mktemp("cased_vocabs")
    paths = {"wordpiece": str(out / "vocab.txt"), "sentencepiece": str(out / "spm.model"),
             "bpe": str(out / "bpe" / "vocab.json")}
    for kind, path in paths.items():
        extra = ["--lower_thresh=2"] if kind == "wordpiece" else []
        make_vocab.main([f"--tokenizer={kind}", f"--input={corpus['glob']}", f"--output={path}",
                         f"--vocab_size={sizes[kind]}"] + extra)
    return {kind: tokenizers.load_tokenizer(kind, path, lower_case=True) for kind, path in paths.items()}


@pytest.mark.parametrize("kind", vocab_files.KINDS)
def test_casing_tells_cased_from_uncased_vocabularies(kind, toks, cased_toks):
    from text import casing

    uncased, cased = casing.casing(toks[kind]), casing.casing(cased_toks[kind])
    # Learnt from lower-cased text: not one capital, whatever the kind's piece spelling
    # (byte-level BPE writes the space byte as "Ġ", itself a capital letter).
    assert uncased.upper == [] and not uncased.cased and uncased.lower > 50
    # (A 400-piece byte-level BPE has few merged pieces with capitals: "The" and not many more.)
    assert cased.cased and not cased.uncased and len(cased.upper) >= (1 if kind == "bpe" else 10)
    assert casing.mismatch(toks[kind], lower_case=True) is None
    assert casing.mismatch(cased_toks[kind], lower_case=False) is None
    warning = casing.mismatch(cased_toks[kind], lower_case=True)
    assert warning.startswith(f"{cased_toks[kind].path} is a cased vocabulary ({len(cased.upper)} of "
                              f"{len(cased.upper) + cased.lower} pieces hold an upper-case letter")
    assert "--no-lower_case" in warning and "make_vocab --lower_case" in warning
    # The reverse is a guess, made only with many lower-case pieces and not one capital.
    reverse = casing.mismatch(toks[kind], lower_case=False)
    if uncased.lower >= casing.UNCASED_MIN_LOWER:
        assert reverse.startswith(f"{toks[kind].path} looks uncased (none of its {uncased.lower} pieces")
        assert "Pass --lower_case" in reverse
    else:
        assert reverse is None


def test_casing_reads_pieces_without_their_markers():
    from text import casing

    assert casing._text("wordpiece", "##The") == "The" and casing._text("wordpiece", "##s") == "s"
    assert casing._text("sentencepiece", "\u2581The") == "The"
    assert casing._text("bpe", "\u0120the") == " the" and casing._text("bpe", "\u0120The") == " The"
    assert casing._text("bpe", "\u0120") == "" and casing._text("bpe", "A") == ""  # the byte alphabet
    assert casing._text("bpe", "caf\u00c3\u00a9") == "caf\u00e9"  # "café": two byte symbols for é
