"""Vocabularies and tokenizers shared by pipelines, training and serving.

Three kinds, each learnt by ``data_pipelines.make_vocab --tokenizer=KIND``:

* ``wordpiece`` (BERT, SpanBERT, ERNIE, ELECTRA, DistilBERT): a one-token-per-line
  ``vocab.txt`` with [PAD] [UNK] [CLS] [SEP] [MASK] first; tokenized by BERT's rules (basic
  tokenization + WordPiece, lower-casing with NFD accent stripping when ``lower_case``) as
  text.wordpiece implements them, equal to Hugging Face's BertTokenizer.
* ``sentencepiece`` (ALBERT, XLNet, T5): a SentencePiece unigram ``.model`` (Kudo 2018;
  Kudo & Richardson 2018) with <pad>=0 </s>=1 <unk>=2 and control symbols [CLS] [SEP] [MASK]
  <eod>; tokenized by tensorflow-text's SentencepieceTokenizer, which applies the model's own
  normalizer spec (nmt_nfkc for make_vocab's models and the released ALBERT, XLNet and T5
  ones), after lower-casing when ``lower_case`` (ALBERT's do_lower_case: Python's
  ``str.lower``, as ``lower_in_graph`` computes it; accents are kept, see below). The op is
  asked for its 1-best (``return_nbest``, ``nbest_size=1``), which is SentencePiece's lattice
  Viterbi: the decoder the sentencepiece library defines, the only one until its 0.1.90 (2020),
  so the one ALBERT, XLNet and T5 were pretrained with, and the reference here. The op's plain
  Encode is the "optimized" encoder of the sentencepiece 0.1.96 it bundles, built so that a
  candidate's score is a double: it broke exact score ties (long runs of one letter) otherwise,
  on 27 of 3,000 random texts of every script; the library's own optimized encoder (float
  scores) differs from the lattice Viterbi on exact ties only, 4 of 20,000 texts. The 1-best
  costs 2.4x the plain op's CPU time (4.0 vs 9.7 MB of English per CPU-second).
  ALBERT's and XLNet's own preprocessing (and Hugging Face's AlbertTokenizer / XLNetTokenizer,
  keep_accents=False) also strips accents (NFKD, combining marks dropped) and XLNet's turns ``
  and '' into "; this module does not: make_vocab's vocabularies are learnt on the text it
  gives, but a converted ALBERT or XLNet checkpoint gets other ids than Hugging Face's on
  accented text.
* ``bpe`` (RoBERTa, GPT-2, BART): GPT-2 byte-level BPE (Radford et al. 2019), a ``vocab.json``
  with its ``merges.txt`` beside it (``X-vocab.json`` pairs with ``X-merges.txt``); the path
  that names it is the vocab.json (or the folder holding both). GPT-2 and RoBERTa are cased:
  pipelines should pass ``lower_case=False`` for it. Tokenized by this module's graph of core
  TF ops (``_bytepair_module``): GPT-2's pre-tokenizer regex as rules over character classes,
  its byte-to-symbol map, Hugging Face's merge order; the same ids as Hugging Face's
  ByteLevelBPETokenizer (transformers' GPT2Tokenizer and RobertaTokenizer) on every test text.
  It replaced keras-hub's BytePairTokenizer, which emulates the regex's lookahead with U+096C as
  a marker and so dropped that character, cut a text at a NUL (tensorflow-text's regex_split),
  split runs of whitespace other than spaces differently (47 of 3,052 test texts differed from
  Hugging Face's) and ran at 0.04 MB per CPU-second on text of every script (now 0.6-0.9;
  English 1.4 -> 3.4-3.9, Hugging Face's 1.5-2.4 on the same busy machine).

Both graphs read ill-formed UTF-8 (bytes a gRPC client may send) as Python's
``decode("utf-8", "replace")`` reads it (``valid_utf8``) and lower-case without
``tf.strings.lower``'s cut at a NUL. Where TensorFlow's ICU (Unicode 13.0) and Python's
(14.0 on 3.11) disagree, i.e. on lower-casing next to one of the 838 characters new in 14.0,
``lower_case`` follows ICU. The eager methods refuse a Python string holding an unpaired
surrogate, naming the text (it has no UTF-8 form; the reference libraries refuse it too).

``TextTokenizer.in_graph()`` is the module for tf.function and SavedModel signatures.
``TextTokenizer.tokenize`` (eager, used by the Beam job) runs that very module for sentencepiece
and bpe; for wordpiece it runs the ``tokenizers`` library's BERT pipeline (the reference itself,
without TensorFlow, so Beam workers need not load it), and the graph module is tested against it
on random text of every script (tests/text/test_wordpiece.py); sentencepiece and bpe
against their references likewise (tests/text/test_tokenizer_parity.py). Either way a
served model sees exactly the ids it was trained on. Text never produces special ids (a literal
"[MASK]" or "<mask>" in the input is ordinary text); objectives add specials by id.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from text import wordpiece
from text import vocab as text_vocab

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
RESERVED_TOKENS = [PAD, UNK, CLS, SEP, MASK]

KINDS = ("wordpiece", "sentencepiece", "bpe")

# SentencePiece layout written by make_vocab (T5's ids for pad/eos/unk; no bos), then the
# control symbols the objectives need (ALBERT [CLS]/[SEP]/[MASK], XLNet <eod>).
SP_PAD, SP_EOS, SP_UNK = "<pad>", "</s>", "<unk>"
SP_CONTROL = ["[CLS]", "[SEP]", "[MASK]", "<eod>"]
SP_WORD_START = "\u2581"

# Byte-level BPE special tokens (RoBERTa's four + <mask>, GPT-2's <|endoftext|>), ids 0..5.
BPE_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "<|endoftext|>"]
BPE_WORD_START = "\u0120"  # GPT-2's printable stand-in for the space byte

# How many texts one call of the TF tokenizer gets: large batches amortise the per-call
# cost (about 2x the throughput of batches of 64, see benchmarks/README.md "Tokenizers").
_CHUNK = 4096


class VocabularyError(ValueError):
    """A vocabulary file is missing, empty, of the wrong kind or lacks the reserved tokens."""


def _is_remote(path: str) -> bool:
    return "://" in path  # gs://, s3://, hdfs://: through tf.io.gfile


def _exists(path: str) -> bool:
    if not _is_remote(path):
        return os.path.exists(path)
    import tensorflow as tf

    return tf.io.gfile.exists(path)


def _isdir(path: str) -> bool:
    if not _is_remote(path):
        return os.path.isdir(path)
    import tensorflow as tf

    return tf.io.gfile.isdir(path)


def _read_bytes(path: str) -> bytes:
    """The file's bytes: local paths with plain Python (no TensorFlow import: a Beam launcher
    that only checks the vocabulary stays light), remote ones through tf.io.gfile."""
    if not _exists(path):
        raise VocabularyError(f"vocabulary file not found: {path} (create one with "
                              f"`python -m data_pipelines.make_vocab --output={path} ...`)")
    if not _is_remote(path):
        with open(path, "rb") as f:
            return f.read()
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def load_vocab(path: str) -> List[str]:
    """Returns the tokens of a one-token-per-line vocabulary, checking the reserved ones."""
    data = _read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise VocabularyError(f"vocabulary {path} is not valid UTF-8 (byte {e.start})") from e
    tokens = text.splitlines()
    if not tokens:
        raise VocabularyError(f"vocabulary {path} is empty")
    missing = [t for t in RESERVED_TOKENS if t not in tokens]
    if missing:
        raise VocabularyError(f"vocabulary {path} lacks reserved tokens {missing}; "
                              f"is it a WordPiece vocabulary made by data_pipelines.make_vocab?")
    if len(set(tokens)) != len(tokens):
        raise VocabularyError(f"vocabulary {path} has duplicate tokens")
    return tokens


def vocab_fingerprint(path: str) -> str:
    """A content hash of the vocabulary, recorded in info.json and checked by the trainer."""
    return "sha256:" + hashlib.sha256(_read_bytes(path)).hexdigest()


# ---------------------------------------------------------------------------------------------
# Kinds and files


def detect_kind(path: str) -> str:
    """The kind a vocabulary path names: ``*.model`` -> sentencepiece; ``*vocab.json`` or a
    folder holding vocab.json -> bpe; anything else -> wordpiece."""
    if path.endswith(".model"):
        return "sentencepiece"
    if path.endswith(".json"):
        return "bpe"
    if _isdir(path):
        return "bpe" if _exists(_join(path, "vocab.json")) else "wordpiece"
    return "wordpiece"


def _join(folder: str, name: str) -> str:
    return folder.rstrip("/") + "/" + name


def bpe_files(path: str) -> Tuple[str, str]:
    """(vocab.json, merges.txt) of a byte-level BPE vocabulary named by its vocab.json (merges
    beside it: ``vocab.json`` -> ``merges.txt``, ``X-vocab.json`` -> ``X-merges.txt``) or by
    the folder holding both."""
    if not path.endswith(".json") and _isdir(path):
        path = _join(path, "vocab.json")
    folder, name = os.path.split(path)
    merges = name[:-len("vocab.json")] + "merges.txt" if name.endswith("vocab.json") else "merges.txt"
    return path, (_join(folder, merges) if folder else merges)


def _fingerprint_files(paths: Sequence[str]) -> str:
    """sha256 over the files' bytes; with several files, over each one's length and bytes in
    order, so that moving bytes from one file to the other changes it."""
    if len(paths) == 1:
        return vocab_fingerprint(paths[0])
    h = hashlib.sha256()
    for p in paths:
        data = _read_bytes(p)
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return "sha256:" + h.hexdigest()


def bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters (its encoder.py
    ``bytes_to_unicode``): printable Latin-1 bytes map to themselves, the others to U+0100..."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


# ---------------------------------------------------------------------------------------------
# The tokenizer object


class TextTokenizer:
    """A vocabulary and the one TF tokenizer that maps text to its ids.

    kind: "wordpiece" | "sentencepiece" | "bpe".
    path: the vocabulary path it was loaded from (vocab.txt, .model, vocab.json).
    vocab: a ``text.vocab.Vocab`` (roles, special ids, word starts).
    fingerprint: "sha256:..." over the vocabulary file(s), recorded in info.json.
    lower_case: whether text is lower-cased first (must match make_vocab --lower_case).
    """

    def __init__(self, kind: str, path: str, vocab, fingerprint: str, lower_case: bool, make_module,
                 make_eager=None):
        self.kind = kind
        self.path = path
        self.vocab = vocab
        self.fingerprint = fingerprint
        self.lower_case = lower_case
        # Built on first use: a caller that only needs the vocabulary and its fingerprint
        # (make_pretrain's launcher) skips building the TF tokenizer (about 1 s of CPU).
        self._make_module = make_module
        self._module_instance = None
        # wordpiece: the reference pipeline of the ``tokenizers`` library, the same ids as the TF
        # module (tested) without importing TensorFlow: a Beam worker that only tokenizes never
        # loads it.
        self._make_eager = make_eager
        self._eager_instance = None
        self._piece_bytes: Optional[List[bytes]] = None

    @property
    def _module(self):
        if self._module_instance is None:
            self._module_instance = self._make_module()
        return self._module_instance

    @property
    def _eager(self):
        if self._eager_instance is None:
            self._eager_instance = self._make_eager()
        return self._eager_instance

    def __repr__(self) -> str:
        return (f"TextTokenizer(kind={self.kind!r}, path={self.path!r}, size={self.vocab.size}, "
                f"lower_case={self.lower_case})")

    def in_graph(self):
        """A tf.Module whose ``__call__`` maps a tf.string batch [batch] to int64 ids
        RaggedTensor [batch, (pieces)]; usable inside tf.function and SavedModel signatures
        (keep it as an attribute of the exported module so its resources are saved)."""
        return self._module

    def tokenize(self, texts: Sequence[str]) -> List[List[int]]:
        """Ids of each text (eager, batched): wordpiece with the ``tokenizers`` library (no
        TensorFlow), the other kinds with the in-graph module's ops on chunks of texts."""
        if self._make_eager is not None:
            return self._eager.tokenize(texts)
        return self.tokenize_in_graph(texts)

    def tokenize_in_graph(self, texts: Sequence[str]) -> List[List[int]]:
        """Ids of each text from the in-graph module's ops (what a served model computes), run
        eagerly on chunks of texts."""
        out: List[List[int]] = []
        for i in range(0, len(texts), _CHUNK):
            # SentencePiece: its op and tf.strings.lower one by one, which for Python strings
            # without a NUL is what __call__ computes, without the function call's cost (see
            # tokenize_strings); otherwise module.tokenize.
            chunk = texts[i:i + _CHUNK]
            if self.kind == "sentencepiece" and not any("\x00" in t for t in chunk):
                ids = self._module.tokenize_strings(_string_batch(chunk))
            else:
                ids = self._module.tokenize(_string_batch(chunk))
            out.extend(_ragged_to_lists(ids.flat_values.numpy(), ids.row_splits.numpy()))
        return out

    def tokenize_with_offsets(self, texts: Sequence[str]) -> Tuple[List[List[int]], List[List[int]], List[List[int]]]:
        """(ids, starts, ends): ids as ``tokenize`` and each piece's UTF-8 byte span
        [start, end) in the original text. A span leaves out the leading whitespace a
        word-start piece carries ("\u2581the", "\u0120the" start at "t"); a whitespace-only
        piece is the empty span at the end of its whitespace; a piece of a character that
        lower-casing or normalisation expanded covers the whole character."""
        ids_all, starts_all, ends_all = [], [], []
        for i in range(0, len(texts), _CHUNK):
            chunk = list(texts[i:i + _CHUNK])
            ids, starts, ends = self._offsets_chunk(chunk)
            ids_all.extend(ids)
            starts_all.extend(starts)
            ends_all.extend(ends)
        return ids_all, starts_all, ends_all

    def tokenize_with_char_offsets(self, texts: Sequence[str]) -> List[Tuple[List[int], List[int], List[int]]]:
        """(ids, starts, ends) of each text with CHARACTER spans: ``tokenize_with_offsets``'s
        byte spans converted (a start inside a character moves to its start, an end inside one
        covers it). WordPiece computes them with the ``tokenizers`` library, without TensorFlow
        (the graph module's spans are tested against them: tests/text/test_wordpiece.py)."""
        if self._make_eager is not None:
            return self._eager.tokenize_with_char_offsets(texts)
        ids, starts, ends = self.tokenize_with_offsets(texts)
        return [(i, *byte_to_char_spans(t, a, b)) for t, i, a, b in zip(texts, ids, starts, ends)]

    def _offsets_chunk(self, texts: List[str]):
        import tensorflow as tf

        if self.kind == "wordpiece":
            ids, starts, ends = [], [], []
            for text, (i, s, e) in zip(texts, self._eager.tokenize_with_char_offsets(texts)):
                s, e = char_to_byte_spans(text, s, e)
                ids.append(i)
                starts.append(s)
                ends.append(e)
            return ids, starts, ends
        lowered = self._module.prepare(_string_batch(texts))
        lowered_bytes = lowered.numpy().tolist()
        if self.kind == "sentencepiece":
            ids, starts, ends = self._module.tokenizer.tokenize_with_offsets(lowered)
            ids_l = _ragged_to_lists(ids.flat_values.numpy().astype(np.int64), ids.row_splits.numpy())
            starts_l = _ragged_to_lists(starts.flat_values.numpy(), starts.row_splits.numpy())
            ends_l = _ragged_to_lists(ends.flat_values.numpy(), ends.row_splits.numpy())
        else:
            # Byte-level BPE pieces are the text's bytes: find each piece from where the last
            # one ended (a find, not a running sum, so that a byte the splitter drops, e.g.
            # keras-hub's marker character, cannot shift the later spans).
            ids_l = self.tokenize(texts)
            pieces = self._bpe_piece_bytes()
            starts_l, ends_l = [], []
            for row, data in zip(ids_l, lowered_bytes):
                pos, s_row, e_row = 0, [], []
                for t in row:
                    piece = pieces[t]
                    at = data.find(piece, pos) if piece else -1
                    start = at if at >= 0 else pos
                    end = start + len(piece) if at >= 0 else pos
                    s_row.append(start)
                    e_row.append(end)
                    pos = end
                starts_l.append(s_row)
                ends_l.append(e_row)
        starts_l, ends_l = _strip_leading_space(lowered_bytes, starts_l, ends_l)
        return ids_l, *_map_lowered_offsets(texts, lowered_bytes, starts_l, ends_l, self.lower_case)

    def _bpe_piece_bytes(self) -> List[bytes]:
        if self._piece_bytes is None:
            byte_of = {c: b for b, c in bytes_to_unicode().items()}
            specials = set(self.vocab.special_ids)
            self._piece_bytes = [
                b"" if i in specials or any(c not in byte_of for c in tok) else bytes(byte_of[c] for c in tok)
                for i, tok in enumerate(self.vocab.tokens)]
        return self._piece_bytes


def byte_to_char_spans(text: str, starts: Sequence[int], ends: Sequence[int]) -> Tuple[List[int], List[int]]:
    """UTF-8 byte spans [start, end) in ``text`` -> character spans; a start inside a character
    moves to its start, an end inside one covers that whole character."""
    if text.isascii():
        return list(starts), list(ends)
    # Byte offset at which each character starts, and the text's length in bytes last.
    at = np.concatenate([[0], np.cumsum([len(c.encode("utf-8")) for c in text])])
    return ((np.searchsorted(at, np.asarray(starts, np.int64), side="right") - 1).tolist(),
            np.searchsorted(at, np.asarray(ends, np.int64), side="left").tolist())


def char_to_byte_spans(text: str, starts: Sequence[int], ends: Sequence[int]) -> Tuple[List[int], List[int]]:
    """Character spans [start, end) in ``text`` -> UTF-8 byte spans."""
    if text.isascii():
        return list(starts), list(ends)
    at = np.concatenate([[0], np.cumsum([len(c.encode("utf-8", "surrogatepass")) for c in text])])
    return at[np.asarray(starts, np.int64)].tolist(), at[np.asarray(ends, np.int64)].tolist()


def _string_batch(texts: Sequence[str]):
    """A tf.string vector of `texts` (UTF-8), or ValueError naming the first text that has no
    UTF-8 form: a Python string can hold an unpaired surrogate (U+D800..U+DFFF, e.g. from
    ``errors="surrogateescape"``), which the reference tokenizers refuse too."""
    import tensorflow as tf

    try:
        return tf.constant(list(texts), dtype=tf.string, shape=[len(texts)])
    except (UnicodeEncodeError, ValueError):  # TF says "Error converting unicode string"
        for k, text in enumerate(texts):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(
                    f"text {k} holds an unpaired surrogate U+{ord(text[e.start]):04X} at character "
                    f"{e.start}, which UTF-8 cannot encode: decode the input with "
                    f"errors=\"replace\" (or pass its bytes to a served model, which reads "
                    f"ill-formed UTF-8 as U+FFFD)") from None
        raise


def _ragged_to_lists(values: np.ndarray, splits: np.ndarray) -> List[List[int]]:
    # Much faster than RaggedTensor.to_list() (one tolist() and slices), which otherwise takes
    # a third of the eager tokenizer's time on large batches.
    flat = values.tolist()
    s = splits.tolist()
    return [flat[a:b] for a, b in zip(s[:-1], s[1:])]


_SPACES = frozenset(b" \t\n\r\x0b\x0c")


def _strip_leading_space(texts: List[bytes], starts, ends):
    out_s = []
    for data, s_row, e_row in zip(texts, starts, ends):
        row = []
        for s, e in zip(s_row, e_row):
            while s < e and data[s] in _SPACES:
                s += 1
            row.append(s)
        out_s.append(row)
    return out_s, ends


def _map_lowered_offsets(texts: List[str], lowered: List[bytes], starts, ends, lower_case: bool):
    """Maps byte offsets in the lower-cased texts back to the originals. Lower-casing maps
    characters one to one but may change their UTF-8 length ("İ" 2 -> 3 bytes, "ẞ" 3 -> 2),
    so non-ASCII texts are aligned character by character with the same TF op."""
    if not lower_case:
        return starts, ends
    import tensorflow as tf

    todo = [k for k, (t, low) in enumerate(zip(texts, lowered)) if len(t.encode("utf-8")) != len(low)
            or not t.isascii()]
    if not todo:
        return starts, ends
    starts, ends = list(starts), list(ends)
    chars = tf.strings.unicode_split(tf.constant([texts[k] for k in todo]), "UTF-8")
    # Each character's UTF-8 length before and after lower-casing, flat (one numpy array, not a
    # ragged row per text: indexing a RaggedTensor eagerly costs about a millisecond a row).
    splits = chars.row_splits.numpy()
    orig_all = tf.strings.length(chars.flat_values).numpy().astype(np.int64)
    low_all = tf.strings.length(lower_in_graph(chars.flat_values)).numpy().astype(np.int64)
    for j, k in enumerate(todo):
        orig_len, low_len = orig_all[splits[j]:splits[j + 1]], low_all[splits[j]:splits[j + 1]]
        if np.array_equal(orig_len, low_len):
            continue
        orig_at = np.concatenate([[0], np.cumsum(orig_len)])
        low_at = np.concatenate([[0], np.cumsum(low_len)])

        def back(xs, is_end):
            xs = np.asarray(xs, dtype=np.int64)
            if is_end:  # an end inside a character covers the whole character
                idx = np.searchsorted(low_at, xs, side="left")
            else:
                idx = np.searchsorted(low_at, xs, side="right") - 1
            return orig_at[np.clip(idx, 0, len(orig_at) - 1)].tolist()

        starts[k], ends[k] = back(starts[k], False), back(ends[k], True)
    return starts, ends


# ---------------------------------------------------------------------------------------------
# In-graph modules (one per kind)


def valid_utf8(text):
    """In the graph: `text` with every ill-formed UTF-8 sequence (a stray byte, a cut or overlong
    sequence, an encoded surrogate such as ED A0 80, a code point above U+10FFFF) replaced by
    U+FFFD, as Python's ``bytes.decode("utf-8", "replace")`` does (one U+FFFD per maximal
    ill-formed subsequence; tests/text/test_tokenizer_parity.py compares the two);
    valid text passes unchanged. A string tensor that a client sends over gRPC is bytes: the
    SentencePiece and BPE modules start with this, so that a served model answers for such bytes
    as for their replacement-decoded text instead of failing on them."""
    import tensorflow as tf

    return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace",
                                        replacement_char=0xFFFD)


def lower_in_graph(text):
    """In the graph: ``tf.strings.lower(text, encoding="utf-8")`` (Unicode's full lower-casing,
    Python's ``str.lower``: "İ" -> "i" + U+0307, a final "Σ" -> "ς") without its truncation: the
    op cuts a string at its first NUL ("a\\x00B" -> "a"). The parts between NULs are lowered one
    by one and joined again (a NUL is neither cased nor case-ignorable, so no character's lower
    case depends on text across one). `text`: a string vector, or a ragged tensor of strings."""
    import tensorflow as tf

    if isinstance(text, tf.RaggedTensor):
        return text.with_flat_values(lower_in_graph(text.flat_values))
    parts = tf.strings.split(text, sep="\x00")
    # Each part but a row's last gets its NUL back (reduce_join's separator is an attribute, a C
    # string: a NUL separator would be empty).
    last = tf.range(tf.size(parts.flat_values, out_type=tf.int64)) == \
        tf.gather(parts.row_splits[1:], parts.value_rowids()) - 1
    nul = tf.where(last, tf.constant(""), tf.constant("\x00"))
    lowered = tf.strings.join([tf.strings.lower(parts.flat_values, encoding="utf-8"), nul])
    return tf.strings.reduce_join(parts.with_flat_values(lowered), axis=-1)


def char_spans(text, starts, ends):
    """In the graph: UTF-8 byte spans [start, end) of text[i] (ragged [batch, (pieces)]) ->
    character spans, as text.finetune.squad.char_offsets computes them eagerly: a
    start inside a character moves to that character's start, an end inside one covers it."""
    import tensorflow as tf

    _, char_bytes = tf.strings.unicode_decode_with_offsets(text, "UTF-8")
    # Byte offset at which each character starts, then the text's length, per row.
    lengths = tf.expand_dims(tf.cast(tf.strings.length(text), tf.int64), 1)
    at = tf.concat([char_bytes, tf.RaggedTensor.from_tensor(lengths)], axis=1)
    table = at.to_tensor(default_value=tf.int64.max)

    def search(offsets, side):
        values = tf.cast(offsets, tf.int64).to_tensor(default_value=0)
        found = tf.searchsorted(table, values, side=side, out_type=tf.int64)
        return tf.RaggedTensor.from_tensor(found, lengths=offsets.row_lengths())

    return search(starts, "right") - 1, search(ends, "left")


def _lowered_to_original(text, lowered_starts, lowered_ends):
    """Character spans in lower_in_graph(text) -> spans in text. Lower-casing maps each
    character to one or more ("İ" -> "i" + U+0307), so each original character's lowered
    length is summed and searched, as tokenizers._map_lowered_offsets does with bytes."""
    import tensorflow as tf

    chars = tf.strings.unicode_split(text, "UTF-8")
    lowered_lengths = tf.strings.length(lower_in_graph(chars), unit="UTF8_CHAR")
    zero = tf.zeros_like(lowered_lengths[:, :1])
    at = tf.cast(tf.concat([zero, tf.math.cumsum(lowered_lengths, axis=1)], axis=1), tf.int64)
    table = at.to_tensor(default_value=tf.int64.max)

    def search(offsets, side):
        found = tf.searchsorted(table, offsets.to_tensor(default_value=0), side=side,
                                out_type=tf.int64)
        return tf.RaggedTensor.from_tensor(found, lengths=offsets.row_lengths())

    return search(lowered_starts, "right") - 1, search(lowered_ends, "left")


def _strip_leading_space_in_graph(text, starts, ends):
    """The graph twin of _strip_leading_space: a piece's span starts after the whitespace it
    carries ("\u2581the" starts at "t"); a whitespace-only piece becomes empty at its end."""
    import tensorflow as tf

    rows = tf.gather(text, starts.value_rowids())
    pieces = tf.strings.substr(rows, starts.flat_values, ends.flat_values - starts.flat_values)
    stripped = tf.strings.regex_replace(pieces, "^[ \t\n\r\x0b\x0c]+", "")
    shift = tf.cast(tf.strings.length(pieces) - tf.strings.length(stripped), starts.dtype)
    return starts.with_flat_values(starts.flat_values + shift)


def _original_spans(text, lowered, starts, ends, lower_case: bool):
    """Byte spans in the (lowered) text the tokenizer saw -> character spans in `text`."""
    starts, ends = char_spans(lowered, starts, ends)
    return _lowered_to_original(text, starts, ends) if lower_case else (starts, ends)


def _has_lattice(model: bytes) -> bool:
    """Whether a SentencePiece model decodes by a lattice (unigram) and so has an n-best list:
    the sentencepiece library refuses NBestEncode for the other model types (BPE)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(model)
    try:
        sp.NBestEncodeAsIds("a", 1)
    except RuntimeError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def _sentencepiece_module():
    """The SentencePiece tokenizer module class (defined on first use)."""
    import tensorflow as tf
    from tensorflow_text.python.ops import sentencepiece_tokenizer

    spec = [tf.TensorSpec([None], tf.string, name="text")]

    class _SentencePieceResource(tf.saved_model.experimental.TrackableResource):
        """tensorflow-text's model resource, named after the model's sha256."""

        def __init__(self, model: bytes):
            self._model = model
            self._shared_name = "sentencepiece_" + hashlib.sha256(model).hexdigest()
            super().__init__()
            _ = self.resource_handle  # made now, as tensorflow-text's own resource is

        def _create_resource(self):
            return sentencepiece_tokenizer.gen_sentencepiece_tokenizer.sentencepiece_op(
                model=self._model, shared_name=self._shared_name)

    class SentencePieceModule(tf.Module):
        def __init__(self, model: bytes, lower_case: bool):
            import tensorflow_text as tf_text

            super().__init__(name="sentencepiece_tokenizer")
            self.lower_case = lower_case
            # int32: the only integer type of its offsets op; ids are cast to int64 below.
            # return_nbest with nbest_size=1: the op's 1-best list is SentencePiece's lattice
            # Viterbi (Lattice::Viterbi, float scores), the encoder the sentencepiece library
            # defines and ran when ALBERT, XLNet and T5 were pretrained; the op's default Encode
            # is the "optimized" encoder of its bundled 0.1.96, whose candidate scores are
            # doubles and which breaks exact ties differently (see the module docstring).
            # Only a unigram model has a lattice: a BPE-type SentencePiece model (some released
            # checkpoints) refuses NBestEncode and takes the op's plain Encode, its only one.
            nbest = {"nbest_size": 1, "return_nbest": True} if _has_lattice(model) else {}
            self.tokenizer = tf_text.SentencepieceTokenizer(model=model, out_type=tf.int32, **nbest)
            # The op's model resource is made with an empty shared name, and a loaded SavedModel
            # holding two SentencePiece models ran both with the first one (found by
            # tests/text/test_tokenizer_parity.py): each model gets a name of its own,
            # from its bytes (the same model may share it).
            self.tokenizer._model_resource = _SentencePieceResource(model)

        def prepare(self, text):
            """The text the model's normalizer gets: valid UTF-8, lower-cased when lower_case."""
            text = valid_utf8(text)
            return lower_in_graph(text) if self.lower_case else text

        def ids(self, text):
            """Ids of a string vector, int64 ragged [batch, (pieces)] (the ops)."""
            return tf.cast(self.tokenizer.tokenize(self.prepare(text)), tf.int64)

        @tf.function(input_signature=spec)
        def __call__(self, text):
            return self.ids(text)

        # Eager calls go through the graph too: op by op, the UTF-8 check and the lower-casing
        # around the tokenizer's op cost more than the function call (one short text: 6.2 ms
        # op by op, 1.5 ms as a graph).
        tokenize = __call__

        def tokenize_strings(self, text):
            """The ids of __call__, op by op, for `text` made from Python strings without a NUL
            (TextTokenizer's eager path): valid UTF-8 already, so that tf.strings.lower is
            lower_in_graph and the check is a no-op; two ops cost less than a function call
            (one short text: 0.3 ms)."""
            lowered = tf.strings.lower(text, encoding="utf-8") if self.lower_case else text
            return tf.cast(self.tokenizer.tokenize(lowered), tf.int64)

        def tokenize_with_char_offsets(self, text):
            """(ids, starts, ends) ragged int64, spans in characters of the original text (its
            replacement-decoded text when it is not valid UTF-8) as
            TextTokenizer.tokenize_with_offsets gives them in bytes."""
            text = valid_utf8(text)
            lowered = lower_in_graph(text) if self.lower_case else text
            ids, starts, ends = self.tokenizer.tokenize_with_offsets(lowered)
            starts, ends = tf.cast(starts, tf.int64), tf.cast(ends, tf.int64)
            starts = _strip_leading_space_in_graph(lowered, starts, ends)
            return (tf.cast(ids, tf.int64),
                    *_original_spans(text, lowered, starts, ends, self.lower_case))

    return SentencePieceModule


# GPT-2's pre-tokenizer (its encoder.py) splits text with the Python `regex` pattern
#   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
# (Hugging Face's ByteLevel pre-tokenizer runs the same pattern). Its characters fall into four
# classes; \s is Unicode's White_Space set in both engines (not the \x1c-\x1f that str.isspace
# adds).
_LETTER, _NUMBER, _OTHER, _SPACE = 0, 1, 2, 3
_WHITE_SPACE = frozenset([0x9, 0xA, 0xB, 0xC, 0xD, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                          0x2028, 0x2029, 0x202F, 0x205F, 0x3000])


@functools.lru_cache(maxsize=None)
def gpt2_char_classes() -> Tuple[np.ndarray, np.ndarray]:
    """(starts, classes): the class of every code point (_LETTER \\p{L}, _NUMBER \\p{N}, _SPACE
    \\s, _OTHER) as sorted ranges, range k being [starts[k], starts[k + 1]). Letters and numbers
    are the general categories L* and N* of Python's Unicode database (unicodedata 14.0 on
    Python 3.11): equal to Hugging Face's classes on every code point assigned in that version;
    the 9,392 code points assigned later are _OTHER here (onig, Hugging Face's engine, reads
    them as letters or numbers). An export keeps the table it was made with."""
    import unicodedata

    classes = np.full(0x110000, _OTHER, np.int8)
    # Planes 4 to 13 hold no character and 14 to 16 no letter or number (tags, selectors,
    # private use): only planes 0 to 3 are looked up.
    for cp in range(0x40000):
        kind = unicodedata.category(chr(cp))[0]
        if kind == "L":
            classes[cp] = _LETTER
        elif kind == "N":
            classes[cp] = _NUMBER
    classes[list(_WHITE_SPACE)] = _SPACE
    starts = np.concatenate([[0], np.flatnonzero(np.diff(classes)) + 1]).astype(np.int32)
    return starts, classes[starts].astype(np.int32)


@functools.lru_cache(maxsize=None)
def _bytepair_module():
    """The byte-level BPE tokenizer module class (defined on first use)."""
    import tensorflow as tf

    spec = [tf.TensorSpec([None], tf.string, name="text")]

    def shift(x, k, fill, within):
        """x[i - k] (k > 0) or x[i + |k|] (k < 0) where `within` says that index is in i's row,
        else `fill`."""
        n = tf.size(x)
        if k > 0:
            moved = tf.pad(x, [[k, 0]], constant_values=fill)[:n]
        else:
            moved = tf.pad(x, [[0, -k]], constant_values=fill)[-k:]
        return tf.where(within, moved, tf.cast(fill, x.dtype))

    class BytePairModule(tf.Module):
        """GPT-2's byte-level BPE in core TF ops: the pre-tokenizer's regex as rules over the
        characters' classes (no regex op: RE2 has no lookahead, and tensorflow-text's
        regex_split cuts a string at a NUL), the bytes of each word mapped to their symbols,
        then Hugging Face's merge order (the lowest-ranked pair first, the leftmost of equal
        pairs) on the batch's distinct words in a while loop."""

        def __init__(self, vocabulary: Dict[str, int], merges: List[str], lower_case: bool):
            super().__init__(name="bpe_tokenizer")
            self.lower_case = lower_case
            size = max(vocabulary.values()) + 1
            self.size = size
            symbol = bytes_to_unicode()
            self.byte_ids = tf.constant([vocabulary[symbol[b]] for b in range(256)], tf.int64)
            # (left id, right id) -> rank * size + merged id; a later duplicate of a merge wins,
            # as in GPT-2's dict of ranks and Hugging Face's map.
            table = {}
            for rank, merge in enumerate(merges):
                left, right = merge.split(" ")
                table[vocabulary[left] * size + vocabulary[right]] = rank * size + vocabulary[left + right]
            self.merges = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(tf.constant(list(table), tf.int64),
                                                    tf.constant(list(table.values()), tf.int64)),
                default_value=-1)
            starts, classes = gpt2_char_classes()
            self.class_starts = tf.constant(starts)
            self.class_codes = tf.constant(classes)
            # Each piece's length in bytes of the text (byte-level pieces are the text's
            # bytes), for offsets in the graph; 0 for a token that is not bytes.
            byte_of = {c: b for b, c in symbol.items()}
            lengths = np.zeros(size, np.int64)
            for token, i in vocabulary.items():
                if all(c in byte_of for c in token):
                    lengths[i] = len(token)
            self.piece_lengths = tf.constant(lengths)

        def prepare(self, text):
            """The text the pre-tokenizer gets: valid UTF-8, lower-cased when lower_case."""
            text = valid_utf8(text)
            return lower_in_graph(text) if self.lower_case else text

        def words(self, text):
            """(words, rows): the pre-tokenizer's words of valid UTF-8 `text`, flat, and the row
            of each. A word starts at a row's first character and wherever the regex's next
            match starts: at a change of class (letter, number, other); at a whitespace run and,
            when a non-space follows the run, at the run's last character (\\s+(?!\\S) leaves
            it out), which is a word of its own unless it is U+0020: that space opens the next
            word ( ?\\p{L}+ etc.); around a contraction ('s 't 're 've 'm 'll 'd), which the
            regex tries first wherever a match starts, i.e. after a letter, a number, a
            whitespace character other than U+0020 or at the row's start (after another "other"
            character the apostrophe is inside a [^\\s\\p{L}\\p{N}]+ run)."""
            chars, at = tf.strings.unicode_decode_with_offsets(text, "UTF-8")
            cp = chars.flat_values
            row = chars.value_rowids()
            pos = tf.range(tf.size(cp, out_type=tf.int64))
            first = tf.gather(chars.row_splits, row)
            end = tf.gather(chars.row_splits[1:], row)
            cls = tf.gather(self.class_codes,
                            tf.searchsorted(self.class_starts, cp, side="right") - 1)
            back = lambda x, k, fill: shift(x, k, fill, pos - k >= first)  # noqa: E731
            ahead = lambda x, k, fill: shift(x, -k, fill, pos + k < end)  # noqa: E731
            prev_cls, next_cls = back(cls, 1, -1), ahead(cls, 1, -1)
            prev_cp, next_cp, next2_cp = back(cp, 1, -1), ahead(cp, 1, -1), ahead(cp, 2, -1)
            is_first = pos == first
            space = cls == _SPACE
            after_space = prev_cls == _SPACE
            start = tf.where(
                space,
                is_first | ~after_space | ((next_cls >= 0) & (next_cls != _SPACE)),
                is_first | tf.where(after_space, prev_cp != 32, cls != prev_cls))
            can_contract = (cp == ord("'")) & (
                is_first | (prev_cls == _LETTER) | (prev_cls == _NUMBER) | (after_space & (prev_cp != 32)))
            short = tf.reduce_any(tf.stack([next_cp == ord(c) for c in "stmd"]), axis=0)
            long = tf.reduce_any(tf.stack([(next_cp == ord(a)) & (next2_cp == ord(b))
                                           for a, b in ("re", "ve", "ll")]), axis=0)
            length = tf.where(can_contract & short, 2, tf.where(can_contract & long, 3, 0))
            inside = back(length > 0, 1, False) | back(length == 3, 2, False)
            after = back(length == 2, 2, False) | back(length == 3, 3, False)
            start = (start & ~inside) | after
            # Byte spans of the words: from a word's first character to the next word's first
            # character, or to the end of its row.
            begin = tf.where(start)[:, 0]
            rows = tf.gather(row, begin)
            byte_begin = tf.gather(at.flat_values, begin)
            next_begin = tf.concat([byte_begin[1:], [0]], 0)
            same_row = tf.concat([rows[1:], [-1]], 0) == rows
            row_bytes = tf.gather(tf.cast(tf.strings.length(text), tf.int64), rows)
            byte_end = tf.where(same_row, next_begin, row_bytes)
            words = tf.strings.substr(tf.gather(text, rows), byte_begin, byte_end - byte_begin)
            return words, rows

        def merge(self, words):
            """Ids of each word (ragged [words, (pieces)]): its bytes' symbols merged pair by
            pair, the lowest rank first and the leftmost of equal pairs first (Hugging Face's
            BPE word merge; GPT-2's merges every occurrence of the best pair at once, which ends
            the same for merges learnt in order). One merge per word and step, over the batch's
            distinct words; a word leaves the loop when no pair of it merges, so that a long
            word costs its own steps only."""
            distinct, index = tf.unique(words)
            byte_strings = tf.strings.bytes_split(distinct)
            values = tf.reshape(tf.io.decode_raw(byte_strings.flat_values, tf.uint8), [-1])
            ids = tf.gather(self.byte_ids, tf.cast(values, tf.int32))
            size = tf.constant(self.size, tf.int64)
            never = tf.int64.max
            empty = tf.zeros([0], tf.int64)

            def step(ids, splits, word, done_ids, done_lengths, done_word):
                rows = tf.ragged.row_splits_to_segment_ids(splits)
                nrows = tf.size(splits, out_type=tf.int64) - 1
                lengths = splits[1:] - splits[:-1]
                found = self.merges.lookup(ids[:-1] * size + ids[1:])
                found = tf.where((rows[:-1] == rows[1:]) & (found >= 0), found, never)
                pair_rows = rows[:-1]
                best = tf.math.unsorted_segment_min(found, pair_rows, nrows)
                # Words with no pair that merges are final.
                final = best == never
                keep = tf.gather(~final, rows)
                done_ids = tf.concat([done_ids, tf.boolean_mask(ids, ~keep)], 0)
                done_lengths = tf.concat([done_lengths, tf.boolean_mask(lengths, final)], 0)
                done_word = tf.concat([done_word, tf.boolean_mask(word, final)], 0)
                # The others merge their leftmost best pair.
                is_best = (found == tf.gather(best, pair_rows)) & (found < never)
                where = tf.range(tf.size(found, out_type=tf.int64))
                leftmost = tf.math.unsorted_segment_min(tf.where(is_best, where, never),
                                                        pair_rows, nrows)
                chosen = is_best & (where == tf.gather(leftmost, pair_rows))
                merged = tf.concat([tf.where(chosen, found % size, ids[:-1]), ids[-1:]], 0)
                ids = tf.boolean_mask(merged, keep & tf.concat([[True], ~chosen], 0))
                lengths = tf.boolean_mask(lengths - 1, ~final)
                splits = tf.concat([[0], tf.cumsum(lengths)], 0)
                return ids, splits, tf.boolean_mask(word, ~final), done_ids, done_lengths, done_word

            _, _, _, done_ids, done_lengths, done_word = tf.while_loop(
                lambda ids, splits, *_: tf.size(splits) > 1, step,
                [ids, byte_strings.row_splits, tf.range(tf.size(distinct, out_type=tf.int64)),
                 empty, empty, empty],
                shape_invariants=[tf.TensorShape([None])] * 6)
            pieces = tf.RaggedTensor.from_row_lengths(done_ids, done_lengths)
            return tf.gather(tf.gather(pieces, tf.argsort(done_word)), index)

        def ids(self, text):
            """Ids of a string vector, int64 ragged [batch, (pieces)] (the ops)."""
            words, rows = self.words(self.prepare(text))
            pieces = tf.RaggedTensor.from_value_rowids(self.merge(words), rows,
                                                       nrows=tf.size(text, out_type=tf.int64))
            return pieces.merge_dims(1, 2)

        @tf.function(input_signature=spec)
        def __call__(self, text):
            return self.ids(text)

        # The merges' while loop runs far faster as a graph than op by op: eager calls use it.
        tokenize = __call__

        def tokenize_with_char_offsets(self, text):
            """(ids, starts, ends) ragged int64, spans in characters of the original text (its
            replacement-decoded text when it is not valid UTF-8): the pieces laid end to end
            over the (lowered) text's bytes, then as TextTokenizer.tokenize_with_offsets
            (leading whitespace left out)."""
            text = valid_utf8(text)
            lowered = lower_in_graph(text) if self.lower_case else text
            ids = self(text)
            lengths = tf.gather(self.piece_lengths, ids.flat_values)
            total = tf.cumsum(lengths)  # over the whole batch, then restarted per row
            before_row = tf.gather(tf.concat([[0], total], 0), ids.row_splits[:-1])
            flat_ends = total - tf.gather(before_row, ids.value_rowids())
            ends = ids.with_flat_values(flat_ends)
            starts = ids.with_flat_values(flat_ends - lengths)
            starts = _strip_leading_space_in_graph(lowered, starts, ends)
            return (ids, *_original_spans(text, lowered, starts, ends, self.lower_case))

    return BytePairModule


# ---------------------------------------------------------------------------------------------
# Loading


def load_tokenizer(kind: str, path: str, *, lower_case: bool = True) -> TextTokenizer:
    """The tokenizer of vocabulary ``path`` of ``kind`` (see the module docstring).

    Raises VocabularyError naming the file and what to do when it is missing, of another kind
    or lacks the tokens every pipeline needs (wordpiece: the five reserved tokens;
    sentencepiece: <pad> and <unk>; bpe: all 256 byte symbols). Roles an objective needs
    beyond those are checked by ``Vocab.special`` when the objective asks for them.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; expected one of {KINDS}")
    try:
        if kind == "wordpiece":
            return _load_wordpiece(path, lower_case)
        if kind == "sentencepiece":
            return _load_sentencepiece(path, lower_case)
        return _load_bpe(path, lower_case)
    except VocabularyError as e:
        guess = detect_kind(path)
        if guess != kind and "not found" not in str(e):
            raise VocabularyError(f"{e} (its name suggests a {guess} vocabulary: "
                                  f"use --tokenizer={guess}, or give a {kind} vocabulary)") from None
        raise


def _load_wordpiece(path: str, lower_case: bool) -> TextTokenizer:

    tokens = load_vocab(path)
    vocab = text_vocab.make_vocab(
        tokens, {"pad": PAD, "unk": UNK, "cls": CLS, "sep": SEP, "mask": MASK},
        word_start=lambda t: not t.startswith("##"), name=path)
    # The TF module is built (and TensorFlow imported) on first use, not here.
    return TextTokenizer("wordpiece", path, vocab, vocab_fingerprint(path), lower_case,
                         lambda: wordpiece.graph_module(tokens, lower_case, unk=UNK),
                         make_eager=lambda: wordpiece.WordPieceTokenizer(tokens, lower_case, unk=UNK))


def _load_sentencepiece(path: str, lower_case: bool) -> TextTokenizer:
    import sentencepiece as spm

    model = _read_bytes(path)
    sp = spm.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(model)
    except (RuntimeError, OSError) as e:
        raise VocabularyError(f"{path} is not a SentencePiece model ({e}); make one with "
                              f"`python -m data_pipelines.make_vocab --tokenizer=sentencepiece "
                              f"--output=X.model ...`") from None
    tokens = [sp.IdToPiece(i) for i in range(sp.GetPieceSize())]
    missing = [t for t in (SP_PAD, SP_UNK) if t not in tokens]
    if missing:
        raise VocabularyError(f"SentencePiece model {path} lacks {missing}; make one with "
                              f"`python -m data_pipelines.make_vocab --tokenizer=sentencepiece ...`")
    present = set(tokens)
    # XLNet's released model spells them <cls> <sep> <mask>; ours (and ALBERT's) [CLS] [SEP] [MASK].
    pick = lambda *names: next((n for n in names if n in present), names[0])
    roles = {"pad": SP_PAD, "eos": SP_EOS, "unk": SP_UNK, "cls": pick("[CLS]", "<cls>"),
             "sep": pick("[SEP]", "<sep>"), "mask": pick("[MASK]", "<mask>"), "eod": "<eod>"}
    control = [tokens[i] for i in range(len(tokens)) if sp.IsControl(i) or sp.IsUnknown(i)]
    vocab = text_vocab.make_vocab(tokens, roles, word_start=lambda t: t.startswith(SP_WORD_START),
                            control=control, name=path)
    return TextTokenizer("sentencepiece", path, vocab, vocab_fingerprint(path), lower_case,
                         lambda: _sentencepiece_module()(model, lower_case))


def _load_bpe(path: str, lower_case: bool) -> TextTokenizer:

    vocab_path, merges_path = bpe_files(path)
    try:
        vocabulary = json.loads(_read_bytes(vocab_path).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise VocabularyError(f"{vocab_path} is not a byte-level BPE vocab.json ({e}); make one with "
                              f"`python -m data_pipelines.make_vocab --tokenizer=bpe ...`") from None
    if not isinstance(vocabulary, dict) or not all(isinstance(v, int) for v in vocabulary.values()):
        raise VocabularyError(f"{vocab_path} is not a byte-level BPE vocab.json (a JSON object piece -> id)")
    ids = sorted(vocabulary.values())
    if ids != list(range(len(ids))):
        raise VocabularyError(f"{vocab_path}: ids are not 0..{len(ids) - 1} without gaps")
    missing_bytes = [c for c in bytes_to_unicode().values() if c not in vocabulary]
    if missing_bytes:
        raise VocabularyError(f"{vocab_path} lacks {len(missing_bytes)} of the 256 byte symbols "
                              f"(e.g. {missing_bytes[:3]}): not a byte-level BPE vocabulary; make one "
                              f"with `python -m data_pipelines.make_vocab --tokenizer=bpe ...`")
    merges_text = _read_bytes(merges_path).decode("utf-8")
    merges = [line for line in merges_text.splitlines() if line and not line.startswith("#version")]
    for n, merge in enumerate(merges, 1):
        parts = merge.split(" ")
        if len(parts) != 2 or parts[0] not in vocabulary or parts[1] not in vocabulary:
            raise VocabularyError(f"{merges_path} line {n}: merge {merge!r} is not two pieces of "
                                  f"{vocab_path}; the two files must come from the same make_vocab run")
        if parts[0] + parts[1] not in vocabulary:  # Hugging Face refuses such a merge too
            raise VocabularyError(f"{merges_path} line {n}: merge {merge!r} makes "
                                  f"{parts[0] + parts[1]!r}, which {vocab_path} lacks; the two files "
                                  f"must come from the same make_vocab run")
    tokens = [None] * len(ids)
    for piece, i in vocabulary.items():
        tokens[i] = piece
    roles = {"bos": "<s>", "cls": "<s>", "pad": "<pad>", "eos": "</s>", "sep": "</s>", "unk": "<unk>",
             "mask": "<mask>", "eod": "<|endoftext|>"}
    vocab = text_vocab.make_vocab(tokens, roles, word_start=lambda t: t.startswith(BPE_WORD_START),
                            control=BPE_SPECIALS, name=vocab_path)
    return TextTokenizer("bpe", vocab_path, vocab, _fingerprint_files([vocab_path, merges_path]),
                         lower_case, lambda: _bytepair_module()(vocabulary, merges, lower_case))
