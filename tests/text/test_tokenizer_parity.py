"""SentencePiece and byte-level BPE against their references on any Unicode text (issue 32).

Each tokenizer kind is fuzzed with 3,000 sentences of a fixed seed drawn from every Unicode
block a real corpus can hold (Latin and its extensions, IPA, Greek, Cyrillic, Armenian, Hebrew,
Arabic and its presentation forms, Devanagari, Bengali, Tamil, Thai, Georgian, Hangul syllables
and jamo, kana, CJK ideographs and compatibility forms, punctuation, letterlike and math
symbols, ligatures, fullwidth forms, combining marks, emoji with skin tones, ZWJ sequences and
flags, runs of every kind of whitespace, control characters), plus a hand-picked table, and
checked eagerly (``TextTokenizer.tokenize``, what the Beam jobs run) and in the graph (the
``in_graph()`` module through a SavedModel, what the trainer's packer and every export run).
Vocabularies are learnt here with make_vocab's own functions on English and multi-script text
(no download); character coverage 0.98 leaves many characters <unk> to SentencePiece.

References (the oracles):

* sentencepiece: the ``sentencepiece`` library with the same model: its normalizer
  (``normalize``: the model's normalizer spec, nmt_nfkc for ALBERT/XLNet/T5, dummy prefix,
  whitespace) and its piece scores, decoded by SentencePiece's lattice Viterbi
  (``Lattice::Viterbi`` and ``PopulateNodes`` of unigram_model.cc, float32 sums, transcribed in
  ``lattice_viterbi``), which is what tensorflow-text's op runs with nbest_size=1 and what the
  library ran until 0.1.90. The library's default ``encode`` (its "optimized" encoder since 0.1.90)
  agrees except where two segmentations have exactly the same score: each such row is checked to
  be an exact float32 tie.
* bpe: Hugging Face ``tokenizers``' ByteLevelBPETokenizer on the same vocab.json and merges.txt,
  and transformers' GPT2Tokenizer and RobertaTokenizer on that folder (with
  split_special_tokens: a literal "<|endoftext|>" is text to the garden); GPT-2's own
  pre-tokenizer regex, run with the ``regex`` module, for the word boundaries. (transformers 5
  has no SentencePiece-library tokenizer class left: its AlbertTokenizer, XLNetTokenizer and
  T5Tokenizer are ``tokenizers`` Unigram ports, which also read the model through a protobuf
  module this venv's protobuf runtime refuses.)
* lower_case: Python's ``str.lower`` before either (ALBERT's do_lower_case). The fuzz draws only
  characters assigned in both Unicode databases in play (Python 3.11's 14.0 and TensorFlow's
  ICU, 13.0): on the 838 characters new in 14.0 TensorFlow cannot lower-case as Python does.
"""

import os
import random
import unicodedata

import numpy as np
import pytest
import regex

from text import bpe, tokenizers, utf8, vocab_files
from data_pipelines import make_vocab, sample_corpus

SEED, SENTENCES = 32, 3000

BLOCKS = {
    "basic_latin": [(0x41, 0x5A), (0x61, 0x7A)],
    "latin1": [(0xA1, 0xFF)],
    "latin_ext": [(0x100, 0x24F), (0x1E00, 0x1EFF)],
    "ipa": [(0x250, 0x2AF)],
    "greek": [(0x370, 0x3FF), (0x1F00, 0x1FFF)],
    "cyrillic": [(0x400, 0x52F)],
    "armenian": [(0x531, 0x58A)],
    "hebrew": [(0x591, 0x5F4)],
    "arabic": [(0x600, 0x6FF)],
    "devanagari": [(0x900, 0x97F)],
    "bengali": [(0x980, 0x9FE)],
    "tamil": [(0xB82, 0xBFA)],
    "thai": [(0xE01, 0xE5B)],
    "georgian": [(0x10A0, 0x10FF)],
    "hangul_jamo": [(0x1100, 0x11FF), (0x3131, 0x318E)],
    "general_punctuation": [(0x2010, 0x205E)],
    "super_subscripts": [(0x2070, 0x209C)],
    "currency": [(0x20A0, 0x20C0)],
    "letterlike": [(0x2100, 0x214F)],
    "number_forms": [(0x2150, 0x218B)],
    "math": [(0x2190, 0x22FF), (0x1D400, 0x1D7FF)],
    "enclosed": [(0x2460, 0x24FF)],
    "cjk_symbols": [(0x3001, 0x303F)],
    "kana": [(0x3041, 0x30FF), (0xFF66, 0xFF9D)],
    "cjk_compatibility": [(0x3300, 0x33FF), (0xF900, 0xFAD9)],
    "cjk": [(0x4E00, 0x9FFF), (0x20000, 0x2A6DF)],
    "hangul": [(0xAC00, 0xD7A3)],
    "ligatures": [(0xFB00, 0xFB4F)],
    "arabic_forms": [(0xFB50, 0xFDFF), (0xFE70, 0xFEFC)],
    "fullwidth": [(0xFF01, 0xFF60), (0xFFE0, 0xFFEE)],
    "emoji": [(0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F900, 0x1F9FF)],
}
COMBINING = [(0x300, 0x36F), (0x1AB0, 0x1AFF), (0x20D0, 0x20F0)]
SPACES = [" "] * 12 + ["  ", "   ", "\t", "\n", "\r\n", " \t ", "\u00a0", "\u3000", "\u2009", "\u202f",
                       "\u2028", "\x0b", "\x0c", "\x85", "\u200b", "\u1680", "\u2003", " \u00a0 ", "\x1c"]
CONTROLS = ([chr(c) for c in [*range(0, 32), 0x7F, *range(0x80, 0xA0)]]
            + ["\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u2060", "\ufeff", "\u00ad", "\ufffd"])
ENGLISH = "the of and to in is was for on that with as by it from at his an are were which".split()
PUNCTUATION = list(".,;:!?'\"()[]{}-_/\\@#$%^&*+=<>|~`") + [
    "``", "''", "'s", "'t", "'re", "'ve", "'ll", "'m", "'d", "'S", "...", "9,", "1,000"]
SKIN_TONES = [chr(c) for c in range(0x1F3FB, 0x1F400)]

# The hand-picked table: every case the issue names, and the edges of both pre-tokenizers.
HAND = [
    "", " ", "   ", "\t\n", "Straße STRASSE ß ẞ", "ŉ ǅ ǈ ǋ Ǳ", "İstanbul ıi İI", "ΟΔΟΣ ΣΑΣ. σς Σ",
    "ﬁ ﬀ ﬃ ﬄ ﬅ ﬆ œ Æ Ĳ", "ＡＢＣ ａｂｃ １２３ ！？ ｶﾀｶﾅ", "é é Å Å Å ñ ñ", "a\u0301\u0302\u0303",
    "zero\u200bwidth\u200cnon\u200djoiner", "👨\u200d👩\u200d👧\u200d👦 family", "👍🏽 👋🏿 🧑🏻\u200d💻",
    "🇯🇵🇫🇷 flags", "❤️ ☺︎ variation selectors", "中文字符測試 漢字", "𠀀𠀁𪚥 extension B",
    "ภาษาไทย ไม่มีช่องว่าง", "한국어 텍스트", "각 ᄒᆞᆫ jamo", "ㄱㅏㄴ compatibility jamo",
    "control\x00nul \x01\x07\x1b\x7f \x85 \x9f end", "bell\a tab\tvt\x0bff\x0ccr\r",
    "a  b   c    d", "a \tb", "a\t b", "a\u3000b\u00a0c\u2009d", "trailing   ", "   leading",
    "it's they're we've I'm you'll he'd don't", "IT'S 'S 'T 'RE", "''s ' 's !'s 's's",
    "1,000,000 9, 3.14 ½ ⅓ ① ⑳ ²³", "㎏ ㎞ ℃ № ™ K Å Ω", "ﷺ ﷻ ﷲ", "… ‥ ‼ ⁇",
    "क्षत्रिय हिन्दी ६ ६६", "אֱלֹהִים עִבְרִית", "العَرَبِيَّة", "ⅰⅱⅲ Ⅻ",
    "[MASK] <mask> <|endoftext|> [CLS] <s> </s> <pad> <unk>", "\ufeffBOM \ufffd replacement",
    "soft\u00adhyphen", "\u202eright-to-left\u202c \u200f", "a" * 60, "ab" * 40, "ii" * 30,
    "‷‷‷ ′′′′ ‵‵‵ ⅡⅡⅡⅡⅡ", "中" * 200, "x" + "\u0301" * 30,
]

# Ill-formed UTF-8 (what a gRPC client can send in a string tensor): stray continuation
# bytes, cut sequences, overlong forms, encoded surrogates (CESU-8), code points past U+10FFFF,
# bytes that never occur in UTF-8.
BAD_BYTES = [b"\xff", b"\x80abc", b"a\xc3", b"\xe2\x82", b"\xe2\x82x\xe2", b"\xc0\xaf", b"\xe0\x80\xaf",
             b"\xed\xa0\x80", b"\xed\xbf\xbfX", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xfe\xfe",
             b"ok \xe2\x82\xac \xf0\x9f\x98", b"\xf0\x9f\x98\x80\xf0\x9f", b"caf\xe9", b"\x00\xff\x00",
             "Straße İ".encode("utf-8") + b"\xc3", b"\xed\xa0\xbd\xed\xb8\x80 emoji in CESU-8"]


def _assigned_in_both():
    """Code points assigned in Python's Unicode database and known to TensorFlow's ICU."""
    import tensorflow as tf

    cps = [c for lo, hi in [r for rs in BLOCKS.values() for r in rs] + COMBINING for c in range(lo, hi + 1)
           if unicodedata.category(chr(c)) not in ("Cn", "Cs", "Co")]
    unknown = 103  # USCRIPT_UNKNOWN: not assigned in ICU's Unicode version
    scripts = tf.strings.unicode_script(tf.constant(cps, tf.int32)).numpy()
    return {chr(c) for c, s in zip(cps, scripts) if s != unknown}


class Fuzz:
    def __init__(self):
        known = _assigned_in_both()
        self.pools = {name: [chr(c) for lo, hi in rs for c in range(lo, hi + 1) if chr(c) in known]
                      for name, rs in BLOCKS.items()}
        self.marks = [chr(c) for lo, hi in COMBINING for c in range(lo, hi + 1) if chr(c) in known]

    def emoji(self, rng):
        e, r = rng.choice(self.pools["emoji"]), rng.random()
        if r < 0.3:
            return e + rng.choice(SKIN_TONES)
        if r < 0.5:
            return e + "\u200d" + rng.choice(self.pools["emoji"]) + ("\ufe0f" if rng.random() < 0.5 else "")
        if r < 0.6:
            return chr(0x1F1E6 + rng.randrange(26)) + chr(0x1F1E6 + rng.randrange(26))
        return e

    def word(self, rng, pool):
        r = rng.random()
        if r < 0.15:
            w = rng.choice(ENGLISH)
            return w.capitalize() if rng.random() < 0.3 else w
        if r < 0.22:
            return str(rng.randrange(10 ** rng.randrange(1, 7)))
        if r < 0.30:
            return rng.choice(PUNCTUATION)
        if r < 0.35:
            return self.emoji(rng)
        if r < 0.38:
            return rng.choice(CONTROLS)
        if rng.random() < 0.05:  # a run of one character: segmentations tie
            return rng.choice(pool) * rng.randrange(5, 40)
        chars = []
        for _ in range(rng.choice([1, 1, 2, 3, 4, 5, 6, 8, 12])):
            chars.append(rng.choice(pool))
            if rng.random() < 0.08:
                chars.append(rng.choice(self.marks))
        return "".join(chars)

    def sentence(self, rng):
        blocks = rng.sample(sorted(self.pools), rng.choice([1, 1, 2, 3]))
        parts = []
        for _ in range(rng.randrange(1, 14)):
            parts += [self.word(rng, self.pools[rng.choice(blocks)]),
                      rng.choice(SPACES) if rng.random() < 0.9 else ""]
        text = "".join(parts[:-1])
        if rng.random() < 0.1:
            text = rng.choice(SPACES) + text
        if rng.random() < 0.1:
            text += rng.choice(SPACES)
        return text

    def corpus(self, n, seed):
        rng = random.Random(seed)
        return [self.sentence(rng) for _ in range(n)]


@pytest.fixture(scope="module")
def fuzz():
    return Fuzz()


@pytest.fixture(scope="module")
def texts(fuzz):
    return fuzz.corpus(SENTENCES, SEED) + HAND


@pytest.fixture(scope="module")
def vocabularies(fuzz, tmp_path_factory):
    """(kind, lower_case, normalizer) -> path, learnt on English sentences of the sample corpus
    and multi-script sentences of another seed (line breaks of every kind made spaces)."""
    import sentencepiece as spm

    root = tmp_path_factory.mktemp("parity_vocabs")
    lines = []
    for _, sentences in sample_corpus.topic_documents():
        lines += sentences
        if len(lines) >= 1500:
            break
    breaks = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})
    lines += [t.translate(breaks) for t in fuzz.corpus(1500, SEED + 1)]
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(t for t in lines if t.strip() and "\x00" not in t) + "\n", encoding="utf-8")
    out = {}
    for lower_case in (True, False):
        path = str(root / f"sp-{lower_case}.model")
        make_vocab.write_sentencepiece(make_vocab.learn_sentencepiece(
            [str(corpus)], 3000, lower_case, character_coverage=0.98), path)
        out["sentencepiece", lower_case, "nmt_nfkc"] = path
        bpe = make_vocab.learn_bpe([str(corpus)], 2000, lower_case)
        out["bpe", lower_case, None] = make_vocab.write_bpe(bpe, str(root / f"bpe-{lower_case}"))[0]
    # Another normalizer spec: no normalization at all, no dummy prefix, whitespace kept.
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(root / "sp-identity"), vocab_size=6000, hard_vocab_limit=False,
        character_coverage=0.98, normalization_rule_name="identity", add_dummy_prefix=False,
        remove_extra_whitespaces=False, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
    out["sentencepiece", False, "identity"] = str(root / "sp-identity.model")
    return out


KINDS = [("sentencepiece", True, "nmt_nfkc"), ("sentencepiece", False, "nmt_nfkc"),
         ("sentencepiece", False, "identity"), ("bpe", False, None), ("bpe", True, None)]
IDS = ["sp-uncased", "sp-cased", "sp-identity", "bpe-cased", "bpe-uncased"]


# ---------------------------------------------------------------------------------------------
# The oracles


class LatticeViterbi:
    """SentencePiece's unigram decoding as Lattice::Viterbi does it (sentencepiece 0.1.8x to
    0.2.x, unigram_model.cc), over the library's own normalization and scores: for each position,
    each piece starting there (found in the trie order: shortest first; <unk> of one character
    where no one-character piece exists, scored min_score - 10) takes as predecessor the first
    node ending there with the highest float32 sum (strict >); consecutive <unk> pieces are
    joined, as the library's Encode does."""

    def __init__(self, path):
        import sentencepiece as spm

        self.sp = spm.SentencePieceProcessor(model_file=path)
        sp = self.sp
        self.pieces = {sp.IdToPiece(i): i for i in range(sp.GetPieceSize())
                       if not (sp.IsControl(i) or sp.IsUnknown(i) or sp.IsUnused(i))}
        self.score = [np.float32(sp.GetScore(i)) for i in range(sp.GetPieceSize())]
        self.unk = sp.unk_id()
        self.unk_score = np.float32(min(self.score[i] for i in self.pieces.values()) - np.float32(10))
        self.longest = max(len(p) for p in self.pieces)

    def encode(self, text):
        s = self.sp.normalize(text)
        n = len(s)
        ending = [[] for _ in range(n + 1)]
        ending[0].append((-1, np.float32(0), None))  # BOS: (id, best sum, predecessor)
        for begin in range(n + 1):
            nodes = []
            if begin < n:
                nodes = [(length, self.pieces[s[begin:begin + length]])
                         for length in range(1, min(self.longest, n - begin) + 1)
                         if s[begin:begin + length] in self.pieces]
                if not any(length == 1 for length, _ in nodes):
                    nodes.append((1, self.unk))
            else:
                nodes = [(0, None)]  # EOS
            for length, i in nodes:
                own = np.float32(0) if i is None else (self.unk_score if i == self.unk else self.score[i])
                best = None
                for left in ending[begin]:
                    total = np.float32(left[1] + own)
                    if best is None or total > best[1]:
                        best = (i, total, left)
                if i is None:
                    eos = best
                else:
                    ending[begin + length].append(best)
        out, node = [], eos[2]
        while node[0] != -1:
            if not (node[0] == self.unk and out and out[-1] == self.unk):
                out.append(node[0])
            node = node[2]
        return out[::-1]

    def total(self, ids):
        """float32 sum of a segmentation's scores, in order (<unk> as the decoder scores it)."""
        acc = np.float32(0)
        for i in ids:
            acc = np.float32(acc + (self.unk_score if i == self.unk else self.score[i]))
        return acc


GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def lower(texts, lower_case):
    return [t.lower() for t in texts] if lower_case else list(texts)


def bpe_oracle(path):
    from tokenizers import ByteLevelBPETokenizer

    vocab, merges = vocab_files.bpe_files(path)
    return ByteLevelBPETokenizer(vocab, merges)


# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(vocabularies, tmp_path_factory):
    """Every module in one SavedModel, loaded back: (the tokenizers by key, a function of a
    string batch giving each module's ids and character spans as lists, by key)."""
    import tensorflow as tf

    toks = {key: tokenizers.load_tokenizer(key[0], path, lower_case=key[1])
            for key, path in vocabularies.items()}

    class Export(tf.Module):
        def __init__(self):
            super().__init__()
            self.modules = [toks[key].in_graph() for key in KINDS]

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            out = {}
            for k, module in enumerate(self.modules):
                ids = module(text)
                _, starts, ends = module.tokenize_with_char_offsets(text)
                out[f"ids{k}"], out[f"splits{k}"] = ids.flat_values, ids.row_splits
                out[f"starts{k}"], out[f"ends{k}"] = starts.flat_values, ends.flat_values
            return out

    export = Export()
    path = str(tmp_path_factory.mktemp("parity_export") / "sm")
    tf.saved_model.save(export, path, signatures={"serving_default": export.serve})
    signature = tf.saved_model.load(path).signatures["serving_default"]

    def run(batch):
        out = signature(text=tf.constant(batch, dtype=tf.string))
        result = {}
        for k, key in enumerate(KINDS):
            splits = out[f"splits{k}"].numpy()
            rows = lambda name: utf8.ragged_to_lists(out[name].numpy(), splits)  # noqa: E731
            result[key] = (rows(f"ids{k}"), rows(f"starts{k}"), rows(f"ends{k}"))
        return result

    return toks, run


@pytest.fixture(scope="module")
def exported(served, texts):
    """The exported modules' answers (ids, char starts, char ends) on the fuzz and the table."""
    return served[1](texts)


@pytest.mark.parametrize("key", KINDS, ids=IDS)
def test_ids_equal_the_reference_on_fuzz_and_table(key, vocabularies, served, exported, texts):
    kind, lower_case, _ = key
    tok = served[0][key]
    eager = tok.tokenize(texts)
    graph = exported[key][0]
    assert graph == eager, "the exported module and the eager tokenizer disagree"
    seen = lower(texts, lower_case)
    if kind == "sentencepiece":
        oracle = LatticeViterbi(vocabularies[key])
        reference = [oracle.encode(t) for t in seen]
        library = oracle.sp.encode(seen)
        # The library's default encoder breaks exact ties its own way: only those may differ.
        ties = [k for k in range(len(texts)) if library[k] != eager[k]]
        assert all(oracle.total(library[k]) == oracle.total(eager[k]) for k in ties), \
            [texts[k] for k in ties if oracle.total(library[k]) != oracle.total(eager[k])][:3]
        assert len(ties) < len(texts) // 100, len(ties)
    else:
        reference = [e.ids for e in bpe_oracle(vocabularies[key]).encode_batch(seen)]
        # transformers' own classes on the same folder: the same tokenizer (special tokens
        # split as text, as the garden reads them).
        transformers = pytest.importorskip("transformers")
        folder = os.path.dirname(vocabularies[key])
        for cls in (transformers.GPT2Tokenizer, transformers.RobertaTokenizer):
            hf = cls.from_pretrained(folder, split_special_tokens=True)
            assert hf(seen, add_special_tokens=False)["input_ids"] == reference, cls.__name__
        # byte-level BPE is lossless: the pieces spell the (lowered) text's bytes exactly
        pieces = tok._bpe_piece_bytes()
        assert [b"".join(pieces[i] for i in row) for row in eager] == [t.encode("utf-8") for t in seen]
    wrong = [(texts[k], eager[k], reference[k]) for k in range(len(texts)) if eager[k] != reference[k]]
    assert not wrong, f"{len(wrong)} of {len(texts)} differ from the reference, e.g. {wrong[:3]}"
    assert eager[len(texts) - len(HAND)] == []  # the empty text


def test_gpt2_pre_tokenizer_rules_equal_the_regex(vocabularies, served, texts):
    """The graph's words (BytePairModule.words) are GPT-2's regex matches, whitespace runs,
    contractions and the single space that opens a word included, on the fuzz, the table and
    contractions after other characters."""
    import tensorflow as tf

    toks, _ = served
    module = toks["bpe", False, None].in_graph()
    batch = texts + ["x'''s", "a \t'll", "\x00'd", "9's", "é's", "\u2028's"]
    words, rows = module.words(module.prepare(tf.constant(batch)))
    ours = utf8.ragged_to_lists(
        words.numpy(), tf.RaggedTensor.from_value_rowids(words, rows, nrows=len(batch)).row_splits.numpy())
    assert [[w.decode("utf-8") for w in row] for row in ours] == [GPT2_PATTERN.findall(t) for t in batch]


def test_gpt2_character_classes_equal_hugging_face_on_assigned_characters():
    """The class table against Hugging Face's pre-tokenizer on a sample of assigned code points
    (every code point: 9,392 differences, all unassigned in Python's Unicode 14.0)."""
    from tokenizers import pre_tokenizers

    hf = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    starts, classes = bpe.gpt2_char_classes()
    table = np.repeat(classes, np.diff(np.append(starts, 0x110000)))
    names = {"L": 0, "N": 1, "O": 2, "S": 3}

    def hf_class(c):
        for cls, probe in (("L", "x{}{}y"), ("N", "1{}{}2"), ("O", "!{}{}!")):
            if len(hf.pre_tokenize_str(probe.format(c, c))) == 1:
                return names[cls]
        return names["S"]

    rng = random.Random(SEED)
    sample = list(range(0x3100)) + rng.sample(range(0x3100, 0x40000), 3000)
    assigned = [cp for cp in sample if unicodedata.category(chr(cp)) not in ("Cn", "Cs")]
    assert [int(table[cp]) for cp in assigned] == [hf_class(chr(cp)) for cp in assigned]


def test_ill_formed_utf8_answers_as_its_replacement_decoding(served, fuzz):
    """Bytes a gRPC client can send: valid_utf8 equals Python's decode("utf-8", "replace")
    (one U+FFFD per maximal ill-formed subsequence) on the table and on fuzzed bytes, and every
    exported module answers for them as for that text, offsets included."""
    import tensorflow as tf

    toks, run = served
    rng = random.Random(SEED)
    fuzzed = []
    for text in fuzz.corpus(300, SEED + 2):
        data = bytearray(text.encode("utf-8"))
        for _ in range(rng.randrange(1, 4)):  # cut, flip or insert bytes
            at = rng.randrange(len(data) + 1)
            op = rng.random()
            if op < 0.3 and at < len(data):
                del data[at]
            elif op < 0.6 and at < len(data):
                data[at] = rng.randrange(256)
            else:
                data[at:at] = bytes([rng.choice([0x80, 0xBF, 0xC0, 0xC1, 0xE0, 0xED, 0xF0, 0xF4, 0xF5, 0xFF])])
        fuzzed.append(bytes(data))
    raw = BAD_BYTES + fuzzed
    decoded = [b.decode("utf-8", "replace") for b in raw]
    assert [t.encode("utf-8") for t in decoded] == \
        utf8.valid_utf8(tf.constant(raw)).numpy().tolist()
    from_bytes, from_text = run(raw), run(decoded)
    for key, tok in toks.items():
        assert from_bytes[key] == from_text[key], key
        assert from_text[key][0] == tok.tokenize(decoded), key


@pytest.mark.parametrize("key", KINDS, ids=IDS)
def test_offsets_are_spans_of_the_raw_text(key, served, exported, texts):
    """tokenize_with_char_offsets, eager and exported: one span per id, each a span of the text
    (0 <= start <= end <= its length), in order; byte-level BPE pieces spell their span."""
    tok = served[0][key]
    eager = tok.tokenize_with_char_offsets(texts)
    ids, starts, ends = exported[key]
    assert [list(row) for row in zip(ids, starts, ends)] == [list(row) for row in eager]
    pieces = tok._bpe_piece_bytes() if key[0] == "bpe" else None
    for text, (row, s_row, e_row) in zip(texts, eager):
        assert len(row) == len(s_row) == len(e_row)
        assert all(0 <= s <= e <= len(text) for s, e in zip(s_row, e_row)), text
        assert s_row == sorted(s_row) and e_row == sorted(e_row), text
        if pieces is None:
            continue
        # Each character as the whole text's lower-casing has it (a final sigma is "ς").
        chars, at = [], 0
        for c in text:
            width = len(c.lower()) if key[1] else 1
            chars.append(lower([text], key[1])[0][at:at + width])
            at += width
        for i, s, e in zip(row, s_row, e_row):
            piece = pieces[i].lstrip(b" ")
            surface = "".join(chars[s:e]).encode("utf-8")
            # a piece of whole characters is its span; one inside a character lies in it
            assert piece == surface or piece in surface or not piece.strip(), (text, piece, surface)


def test_unpaired_surrogates_are_refused_with_the_row(served):
    toks, _ = served
    for key in KINDS:
        with pytest.raises(ValueError, match=r"text 1 holds an unpaired surrogate U\+D800 at character 2"):
            toks[key].tokenize(["ok", "ab\ud800cd"])


def test_a_merge_whose_result_is_not_in_the_vocabulary_is_refused(vocabularies, tmp_path):
    import json
    import pathlib

    vocab, merges = (pathlib.Path(p) for p in vocab_files.bpe_files(vocabularies["bpe", False, None]))
    pieces = json.loads(vocab.read_bytes())
    left, right = next((a, b) for a in "Qxzj" for b in "Qxzj" if a + b not in pieces)
    (tmp_path / "vocab.json").write_bytes(vocab.read_bytes())
    (tmp_path / "merges.txt").write_text(merges.read_text(encoding="utf-8") + f"{left} {right}\n",
                                         encoding="utf-8")
    with pytest.raises(vocab_files.VocabularyError, match=f"makes '{left}{right}', which .* lacks"):
        tokenizers.load_tokenizer("bpe", str(tmp_path / "vocab.json"), lower_case=False)
