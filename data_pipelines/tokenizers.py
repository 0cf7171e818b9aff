"""Vocabularies and tokenizers shared by pipelines, training and serving.

Three kinds, each learnt by ``data_pipelines.make_vocab --tokenizer=KIND``:

* ``wordpiece`` (BERT, SpanBERT, ERNIE, ELECTRA, DistilBERT): a one-token-per-line
  ``vocab.txt`` with [PAD] [UNK] [CLS] [SEP] [MASK] first; tokenized by BERT's rules (basic
  tokenization + WordPiece, lower-casing with NFD accent stripping when ``lower_case``) as
  data_pipelines.wordpiece implements them, equal to Hugging Face's BertTokenizer.
* ``sentencepiece`` (ALBERT, XLNet, T5): a SentencePiece unigram ``.model`` (Kudo 2018;
  Kudo & Richardson 2018) with <pad>=0 </s>=1 <unk>=2 and control symbols [CLS] [SEP] [MASK]
  <eod>; tokenized by tensorflow-text's SentencepieceTokenizer, after Unicode lower-casing
  (``tf.strings.lower``) when ``lower_case`` (ALBERT's do_lower_case; accents are kept).
* ``bpe`` (RoBERTa, GPT-2, BART): GPT-2 byte-level BPE (Radford et al. 2019), a ``vocab.json``
  with its ``merges.txt`` beside it (``X-vocab.json`` pairs with ``X-merges.txt``); the path
  that names it is the vocab.json (or the folder holding both). Tokenized by keras-hub's
  BytePairTokenizer (TF graph implementation of GPT-2's encoder). GPT-2 and RoBERTa are cased:
  pipelines should pass ``lower_case=False`` for it. Known keras-hub limitation: it uses
  U+096C (Devanagari digit six) as an internal marker and drops that character from the text.

``TextTokenizer.in_graph()`` is the module for tf.function and SavedModel signatures.
``TextTokenizer.tokenize`` (eager, used by the Beam job) runs that very module for sentencepiece
and bpe; for wordpiece it runs the ``tokenizers`` library's BERT pipeline (the reference itself,
without TensorFlow, so Beam workers need not load it), and the graph module is tested against it
on random text of every script (tests/data_pipelines/test_wordpiece.py). (The sentencepiece
library alone is not exact: it segmented 1,190 of 21,988 random texts of every script
differently from tensorflow-text's op, which bundles another version of it; most were long
runs of one letter, where segmentations tie.) Either way a served model sees exactly the ids it was trained on. Text never produces
special ids (a literal "[MASK]" or "<mask>" in the input is ordinary text); objectives add
specials by id.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from data_pipelines import wordpiece

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
    vocab: a ``data_pipelines.objectives.base.Vocab`` (roles, special ids, word starts).
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
        import tensorflow as tf

        out: List[List[int]] = []
        for i in range(0, len(texts), _CHUNK):
            # module.tokenize: the ops of module.__call__ run eagerly (WordPiece and SentencePiece
            # are one op each, and eager skips the tf.function call: 28 vs 23 MB per CPU-second).
            ids = self._module.tokenize(tf.constant(list(texts[i:i + _CHUNK]), dtype=tf.string))
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
        (the graph module's spans are tested against them: tests/data_pipelines/test_wordpiece.py)."""
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
        batch = tf.constant(texts, dtype=tf.string)
        lowered = self._module.lower(batch)
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
    low_chars = tf.strings.lower(chars, encoding="utf-8")
    for j, k in enumerate(todo):
        orig_len = np.array([len(c) for c in chars[j].numpy().tolist()], dtype=np.int64)
        low_len = np.array([len(c) for c in low_chars[j].numpy().tolist()], dtype=np.int64)
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


def char_spans(text, starts, ends):
    """In the graph: UTF-8 byte spans [start, end) of text[i] (ragged [batch, (pieces)]) ->
    character spans, as data_pipelines.finetune.squad.char_offsets computes them eagerly: a
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
    """Character spans in tf.strings.lower(text) -> spans in text. Lower-casing maps each
    character to one or more ("İ" -> "i" + U+0307), so each original character's lowered
    length is summed and searched, as tokenizers._map_lowered_offsets does with bytes."""
    import tensorflow as tf

    chars = tf.strings.unicode_split(text, "UTF-8")
    lowered_lengths = tf.strings.length(tf.strings.lower(chars, encoding="utf-8"),
                                        unit="UTF8_CHAR")
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


@functools.lru_cache(maxsize=None)
def _sentencepiece_module():
    """The SentencePiece tokenizer module class (defined on first use)."""
    import tensorflow as tf

    spec = [tf.TensorSpec([None], tf.string, name="text")]

    class SentencePieceModule(tf.Module):
        def __init__(self, model: bytes, lower_case: bool):
            import tensorflow_text as tf_text

            super().__init__(name="sentencepiece_tokenizer")
            self.lower_case = lower_case
            # int32: the only integer type of its offsets op; ids are cast to int64 below.
            self.tokenizer = tf_text.SentencepieceTokenizer(model=model, out_type=tf.int32)

        def lower(self, text):
            return tf.strings.lower(text, encoding="utf-8") if self.lower_case else text

        def tokenize(self, text):
            return tf.cast(self.tokenizer.tokenize(self.lower(text)), tf.int64)

        def tokenize_with_char_offsets(self, text):
            """(ids, starts, ends) ragged int64, spans in characters of the original text as
            TextTokenizer.tokenize_with_offsets gives them in bytes."""
            lowered = self.lower(text)
            ids, starts, ends = self.tokenizer.tokenize_with_offsets(lowered)
            starts, ends = tf.cast(starts, tf.int64), tf.cast(ends, tf.int64)
            starts = _strip_leading_space_in_graph(lowered, starts, ends)
            return (tf.cast(ids, tf.int64),
                    *_original_spans(text, lowered, starts, ends, self.lower_case))

        @tf.function(input_signature=spec)
        def __call__(self, text):
            return self.tokenize(text)

    return SentencePieceModule


@functools.lru_cache(maxsize=None)
def _bytepair_module():
    """The byte-level BPE tokenizer module class (defined on first use)."""
    import tensorflow as tf

    spec = [tf.TensorSpec([None], tf.string, name="text")]

    class BytePairModule(tf.Module):
        def __init__(self, vocabulary: Dict[str, int], merges: List[str], lower_case: bool):
            import keras_hub

            super().__init__(name="bpe_tokenizer")
            self.lower_case = lower_case
            # unsplittable_tokens=[]: text never yields special ids. _allow_python_workflow=False:
            # keras-hub would otherwise run eager calls through Hugging Face tokenizers with a
            # different (Llama 3) pre-tokenizer regex, i.e. not the graph's ids.
            self.tokenizer = keras_hub.tokenizers.BytePairTokenizer(
                vocabulary=vocabulary, merges=merges, unsplittable_tokens=[], dtype="int64",
                _allow_python_workflow=False)
            # Each piece's length in bytes of the text (byte-level pieces are the text's
            # bytes), for offsets in the graph; 0 for a token that is not bytes.
            byte_of = {c: b for b, c in bytes_to_unicode().items()}
            lengths = np.zeros(max(vocabulary.values()) + 1, np.int64)
            for token, i in vocabulary.items():
                if all(c in byte_of for c in token):
                    lengths[i] = len(token)
            self.piece_lengths = tf.constant(lengths)

        def lower(self, text):
            return tf.strings.lower(text, encoding="utf-8") if self.lower_case else text

        @tf.function(input_signature=spec)
        def __call__(self, text):
            ids = self.tokenizer(self.lower(text))
            # An all-empty batch comes back as a dense [batch, 0] tensor.
            if not isinstance(ids, tf.RaggedTensor):
                ids = tf.RaggedTensor.from_tensor(ids)
            return tf.cast(ids, tf.int64)

        # keras-hub's graph runs a while loop over merges with a lookup cache: as a graph it is
        # faster than op by op (0.91 vs 0.74 MB per CPU-second), so eager calls use it too.
        tokenize = __call__

        def tokenize_with_char_offsets(self, text):
            """(ids, starts, ends) ragged int64, spans in characters of the original text: the
            pieces laid end to end over the (lowered) text's bytes, then as
            TextTokenizer.tokenize_with_offsets (leading whitespace left out)."""
            lowered = self.lower(text)
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
    from data_pipelines.objectives import base

    tokens = load_vocab(path)
    vocab = base.make_vocab(
        tokens, {"pad": PAD, "unk": UNK, "cls": CLS, "sep": SEP, "mask": MASK},
        word_start=lambda t: not t.startswith("##"), name=path)
    # The TF module is built (and TensorFlow imported) on first use, not here.
    return TextTokenizer("wordpiece", path, vocab, vocab_fingerprint(path), lower_case,
                         lambda: wordpiece.graph_module(tokens, lower_case, unk=UNK),
                         make_eager=lambda: wordpiece.WordPieceTokenizer(tokens, lower_case, unk=UNK))


def _load_sentencepiece(path: str, lower_case: bool) -> TextTokenizer:
    import sentencepiece as spm
    from data_pipelines.objectives import base

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
    vocab = base.make_vocab(tokens, roles, word_start=lambda t: t.startswith(SP_WORD_START),
                            control=control, name=path)
    return TextTokenizer("sentencepiece", path, vocab, vocab_fingerprint(path), lower_case,
                         lambda: _sentencepiece_module()(model, lower_case))


def _load_bpe(path: str, lower_case: bool) -> TextTokenizer:
    from data_pipelines.objectives import base

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
    tokens = [None] * len(ids)
    for piece, i in vocabulary.items():
        tokens[i] = piece
    roles = {"bos": "<s>", "cls": "<s>", "pad": "<pad>", "eos": "</s>", "sep": "</s>", "unk": "<unk>",
             "mask": "<mask>", "eod": "<|endoftext|>"}
    vocab = base.make_vocab(tokens, roles, word_start=lambda t: t.startswith(BPE_WORD_START),
                            control=BPE_SPECIALS, name=vocab_path)
    return TextTokenizer("bpe", vocab_path, vocab, _fingerprint_files([vocab_path, merges_path]),
                         lower_case, lambda: _bytepair_module()(vocabulary, merges, lower_case))
