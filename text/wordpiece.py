"""BERT's WordPiece tokenization, eager and in the graph, equal to the reference on any text.

The reference is BERT's tokenizer as Hugging Face ships it (transformers' BertTokenizer, which
is the ``tokenizers`` library's BertNormalizer + BertPreTokenizer + WordPiece; Google's
tokenization.py gives the same ids but for one rule, below). Its rules, in order:

1. clean: delete NUL, U+FFFD and the "other" characters (Cc, Cf, Co and what the library's
   tables call unassigned), keeping \\t \\n \\r; every whitespace character becomes a space;
2. put spaces around each CJK ideograph (each is a word of its own);
3. uncased only: NFD, delete the non-spacing marks (Mn), then lower-case;
4. split at whitespace, and make each punctuation character (ASCII symbols and Unicode P*) a
   word of its own;
5. WordPiece each word greedily, longest match first, "##" marking a continuation; a word of
   more than 100 characters, or one with a part that matches no piece, is one [UNK].

No compatibility folding: "\u00df" stays "\u00df", "\ufb01" stays "\ufb01", "\u2026" stays one
character, superscript digits stay superscripts (tensorflow-text's FastBertTokenizer, used here
before, applies NFKC-style folding and disagreed with BERT on about half of the sentences of
non-English text; issue 32).

Eager (the Beam jobs, make_finetune's SQuAD windows): ``WordPieceTokenizer``, the ``tokenizers``
library's own pipeline built from the vocabulary (no TensorFlow in the workers).

In the graph (training's packer, every export): ``graph_module``. Steps 1-4 are a map of each
codepoint to a string, read off the same library over every codepoint into
``wordpiece_tables.json.gz`` (``python -m text.wordpiece`` re-derives it; a test
requires the shipped file to equal a fresh derivation): a codepoint keeps itself, is deleted,
becomes a space, is wrapped in spaces (punctuation, CJK) or becomes a fixed string (lower-case,
NFD without marks). The graph looks each codepoint's run up with ``searchsorted``, builds the
normalised text, splits it at spaces and runs tensorflow-text's FastWordpieceTokenizer on the
words (Song et al. 2021: the same pieces as greedy longest-match-first).

Where the per-codepoint map cannot follow the reference: NFD's canonical reordering moves
combining marks, and after the Mn marks are deleted only 25 spacing marks with a non-zero
combining class are left to reorder (viramas of Brahmic scripts coded as Mc, U+302E/302F, six
musical symbols); two of them adjacent in non-canonical order would come out unsorted. Where
one follows a deleted mark of a higher class, the ids agree but the reference's span of the
word follows the reordered position and ends one character early; the graph's covers the
character. Google's
tokenization.py (Python's ``str.lower``) writes a word-final capital sigma as "\u03c2", where the
reference (per-character lower-casing) and this module write "\u03c3".

Offsets are character spans of the original text: a piece starts at the character its first
normalised character came from and ends after the character its last one came from (the
reference's offsets); invalid UTF-8 reaching the graph (gRPC bytes) is read as Python's
``bytes.decode("utf-8", "replace")`` reads it, and U+FFFD is then deleted by step 1.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import sys
from typing import Dict, List, Sequence, Tuple

import numpy as np

TABLES_PATH = os.path.join(os.path.dirname(__file__), "wordpiece_tables.json.gz")
MAX_CODEPOINT = 0x10FFFF
MAX_CHARS_PER_WORD = 100  # BERT's max_input_chars_per_word
SUFFIX = "##"
SELF = -1  # in a template: the codepoint itself


def reference_tokenizer(vocab: Sequence[str], lower_case: bool, unk: str = "[UNK]"):
    """The ``tokenizers`` library's BERT pipeline over ``vocab`` (what transformers'
    BertTokenizer builds), without special tokens: a literal "[MASK]" in text is ordinary text
    (objectives add special ids by id)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    ids = {t: i for i, t in enumerate(vocab)}
    if unk not in ids:
        raise ValueError(f"the vocabulary has no {unk!r} token")
    tok = Tokenizer(models.WordPiece(ids, unk_token=unk, max_input_chars_per_word=MAX_CHARS_PER_WORD,
                                     continuing_subword_prefix=SUFFIX))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=lower_case, lowercase=lower_case)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


class WordPieceTokenizer:
    """Text -> BERT WordPiece ids (and character offsets), eagerly, with the reference pipeline.

    >>> tok = WordPieceTokenizer(["[UNK]", "un", "##aff", "##able", ","], lower_case=True)
    >>> tok.tokenize(["Unaffable, unable"])
    [[1, 2, 3, 4, 1, 3]]
    """

    def __init__(self, vocab: Sequence[str], lower_case: bool, unk: str = "[UNK]"):
        self._tok = reference_tokenizer(vocab, lower_case, unk)

    def tokenize(self, texts: Sequence[str]) -> List[List[int]]:
        """The ids of each text."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def tokenize_with_char_offsets(self, texts: Sequence[str]) -> List[Tuple[List[int], List[int], List[int]]]:
        """(ids, starts, ends) of each text: each piece's character span [start, end)."""
        out = []
        for e in self._tok.encode_batch(list(texts), add_special_tokens=False):
            offsets = e.offsets
            out.append((e.ids, [a for a, _ in offsets], [b for _, b in offsets]))
        return out


# ---------------------------------------------------------------------------------------------
# The per-codepoint map, read off the reference


def derive_tables() -> dict:
    """For uncased and cased BERT: the codepoints in runs of one template each, and the
    codepoints on which tensorflow-text's FastBertTokenizer follows BERT (about 15 CPU-s).

    ``runs``: [first codepoint, template index] with first codepoints ascending, from 0 (the
    surrogates, never decoded from UTF-8, join the run before them);
    ``templates``: lists of codepoints, SELF standing for the codepoint being mapped;
    ``fast``: [first, last] ranges of the codepoints whose FastBertNormalizer output, split as
    FastWordpieceTokenizer splits it, is the template (see ``_fast_templates``).
    """
    import tokenizers
    from tokenizers import normalizers

    codepoints = [c for c in range(MAX_CODEPOINT + 1) if not 0xD800 <= c <= 0xDFFF]
    chars = [chr(c) for c in codepoints]
    cjk = {c for c, n in zip(codepoints, _normalize_each(normalizers.BertNormalizer(
        clean_text=False, handle_chinese_chars=True, strip_accents=False, lowercase=False), chars))
        if len(n) == 3}
    tables = {"source": f"tokenizers {tokenizers.__version__}, tensorflow-text {_tf_text_version()}"}
    for name, lower in (("lower", True), ("cased", False)):
        normalized = _normalize_each(normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=False, strip_accents=lower, lowercase=lower), chars)
        reference = _templates(codepoints, normalized, _reference_classes(normalized), cjk)
        fast = _fast_templates(codepoints, lower)
        index: Dict[Tuple[int, ...], int] = {}
        runs: List[List[int]] = []
        for c, t in zip(codepoints, reference):
            t = (SELF,) if t == (c,) else (32, SELF, 32) if t == (32, c, 32) else t
            i = index.setdefault(t, len(index))
            if not runs or runs[-1][1] != i:
                runs.append([c, i])
        safe = [c for c, a, b in zip(codepoints, reference, fast) if a == b]
        tables[name] = {"runs": runs, "templates": [list(t) for t in index], "fast": _ranges(safe)}
    return tables


def _normalize_each(normalizer, chars: List[str]) -> List[str]:
    """normalizer.normalize_str of each character, in one call: joined by U+2042, which no
    character's normalisation but its own yields, and which (combining class 0) stops NFD's
    reordering at it."""
    sep = "\u2042"
    out = normalizer.normalize_str(sep.join(c for c in chars if c != sep)).split(sep)
    if sep in chars:
        out.insert(chars.index(sep), normalizer.normalize_str(sep))
    if len(out) != len(chars):
        raise RuntimeError(f"the normaliser joined or split characters: {len(out)} outputs for {len(chars)}")
    return out


def _classes_by_offsets(words_offsets, n: int) -> List[str]:
    """Characters 1, 3, 5, ... of "a x1 a x2 a ... a" (2n + 1 characters): "punct" where a word
    of its own, "space" where in no word, else "letter"."""
    kind = ["space"] * n
    for start, end in words_offsets:
        for pos in range(start | 1, end, 2):
            kind[pos // 2] = "punct" if (start, end) == (pos, pos + 1) else "letter"
    return kind


def _reference_classes(normalized: List[str]) -> Dict[str, str]:
    """Each character of the normalised outputs: how BertPreTokenizer splits it."""
    from tokenizers import pre_tokenizers

    outputs = sorted({x for n in normalized for x in n})
    words = pre_tokenizers.BertPreTokenizer().pre_tokenize_str("a" + "a".join(outputs) + "a")
    return dict(zip(outputs, _classes_by_offsets([o for _, o in words], len(outputs))))


def _templates(codepoints, normalized, kind: Dict[str, str], wrap=frozenset()) -> List[Tuple[int, ...]]:
    """Each codepoint's normalised output as codepoints, a space for whitespace and spaces
    around each character that is a word of its own (and around the codepoints in ``wrap``)."""
    def one(x):
        k, v = kind[x], ord(x)
        return (v,) if k == "letter" else (32,) if k == "space" else (32, v, 32)

    return [(32, c, 32) if c in wrap else one(n) if len(n) == 1 else tuple(v for x in n for v in one(x))
            for c, n in zip(codepoints, normalized)]


def _tf_text_version() -> str:
    import tensorflow_text as tf_text

    return tf_text.__version__


def _ranges(codepoints) -> List[List[int]]:
    out: List[List[int]] = []
    for c in sorted(codepoints):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def _fast_templates(codepoints: List[int], lower_case: bool) -> List[Tuple[int, ...]]:
    """What tensorflow-text's FastBertTokenizer does to each codepoint, as a template: its
    normaliser's output (a per-codepoint map by construction), each character of it a space,
    a word of its own or part of a word as FastWordpieceTokenizer's pre-tokenizer treats it."""
    import tensorflow as tf
    import tensorflow_text as tf_text

    normalizer = tf_text.FastBertNormalizer(lower_case_nfd_strip_accents=lower_case)
    normalized = [b.decode("utf-8") for b in normalizer.normalize(
        tf.constant([chr(c).encode("utf-8") for c in codepoints])).numpy().tolist()]
    # "a<x>a" with only a / ##a known: whitespace -> [a, a]; a word of its own -> [a, UNK, a]
    probe = tf_text.FastWordpieceTokenizer(
        vocab=["[UNK]", "a", "##a"], suffix_indicator="##", max_bytes_per_word=100, token_out_type=tf.int64,
        unknown_token="[UNK]", no_pretokenization=False, support_detokenization=False)
    outputs = sorted({x for n in normalized for x in n})
    ids = probe.tokenize(tf.constant([("a" + x + "a").encode("utf-8") for x in outputs]))
    lengths, first = ids.row_lengths().numpy(), ids.row_splits.numpy()[:-1]
    values = np.append(ids.flat_values.numpy(), [0, 0])
    kind = np.where((lengths == 2) & (values[first] == 1) & (values[first + 1] == 1), "space",
                    np.where((lengths == 3) & (values[first + 1] == 0), "punct", "letter"))
    return _templates(codepoints, normalized, dict(zip(outputs, kind.tolist())))


def write_tables(path: str = TABLES_PATH) -> None:
    data = json.dumps(derive_tables(), sort_keys=True, separators=(",", ":")).encode("utf-8")
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # mtime 0: the same bytes for the same tables
        f.write(data)


@functools.lru_cache(maxsize=None)
def load_tables(path: str = TABLES_PATH) -> dict:
    with gzip.open(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))


def normalize(text: str, lower_case: bool) -> str:
    """Steps 1-4 of the module docstring with the shipped tables, in Python (what the graph
    computes; for tests and for reading the tables)."""
    import bisect

    table = load_tables()["lower" if lower_case else "cased"]
    starts = [r[0] for r in table["runs"]]
    out = []
    for ch in text:
        c = ord(ch)
        t = table["templates"][table["runs"][bisect.bisect_right(starts, c) - 1][1]]
        out.append("".join(ch if v == SELF else chr(v) for v in t))
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# In the graph


@functools.lru_cache(maxsize=None)
def _graph_module_class():
    """The tf.Module class (defined on first use, so that importing this file needs no TF)."""
    import numpy as np
    import tensorflow as tf
    import tensorflow_text as tf_text

    spec = [tf.TensorSpec([None], tf.string, name="text")]

    def searchsorted_rows(sorted_rows, values, side):
        """Per row: tf.searchsorted of a ragged row of ``values`` in that row of
        ``sorted_rows`` (both ragged [batch, (n)])."""
        table = sorted_rows.to_tensor(default_value=tf.int64.max)
        found = tf.searchsorted(table, values.to_tensor(default_value=0), side=side, out_type=tf.int64)
        return tf.RaggedTensor.from_tensor(found, lengths=values.row_lengths())

    class WordPieceModule(tf.Module):
        def __init__(self, vocab: List[str], lower_case: bool, unk: str = "[UNK]"):
            super().__init__(name="wordpiece_tokenizer")
            table = load_tables()["lower" if lower_case else "cased"]
            runs = np.asarray(table["runs"], np.int64)
            lengths = np.array([len(t) for t in table["templates"]], np.int64)
            self.run_starts = tf.constant(runs[:, 0].astype(np.int32))
            run_template = runs[:, 1]
            self.run_begin = tf.constant(np.concatenate([[0], np.cumsum(lengths)])[run_template])
            self.run_length = tf.constant(lengths[run_template])
            self.template_values = tf.constant(
                np.array([v for t in table["templates"] for v in t] or [0], np.int32))
            self.unk_id = tf.constant(list(vocab).index(unk), tf.int64)
            # Words are cut at MAX_CHARS_PER_WORD characters below; the op's own byte limit
            # only has to let every shorter word through (4 UTF-8 bytes a character at most).
            self.tokenizer = tf_text.FastWordpieceTokenizer(
                vocab=list(vocab), suffix_indicator=SUFFIX, max_bytes_per_word=4 * MAX_CHARS_PER_WORD,
                token_out_type=tf.int64, unknown_token=unk, no_pretokenization=True,
                support_detokenization=False)
            # The fast path: FastBertTokenizer (one fused op, about 7x the throughput of the
            # exact path on the sample corpus) for the texts on which it gives BERT's ids: every
            # character in table["fast"], and no word it could count differently (it limits
            # words to 100 bytes, BERT to 100 characters: equal on ASCII; a non-ASCII text goes
            # the exact way if it holds a run of 26 non-whitespace characters, 104+ bytes).
            self.fast_tokenizer = tf_text.FastBertTokenizer(
                vocab=list(vocab), suffix_indicator=SUFFIX, max_bytes_per_word=MAX_CHARS_PER_WORD,
                token_out_type=tf.int64, unknown_token=unk, no_pretokenization=False,
                support_detokenization=False, lower_case_nfd_strip_accents=lower_case)
            self.fast_pattern = "[" + "".join(
                "\\x{%x}" % a if a == b else "\\x{%x}-\\x{%x}" % (a, b) for a, b in table["fast"]) + "]*"

        def normalize(self, text):
            """(normalised text [batch], the normalised byte offset at which each original
            character ends, ragged int64 [batch, (characters)]): steps 1-4, words separated by
            spaces."""
            text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace",
                                                replacement_char=0xFFFD)
            chars = tf.strings.unicode_decode(text, "UTF-8")
            flat = chars.flat_values
            run = tf.searchsorted(self.run_starts, flat, side="right") - 1
            begin, length = tf.gather(self.run_begin, run), tf.gather(self.run_length, run)
            picks = tf.ragged.range(begin, begin + length)  # [characters, (outputs)]
            values = tf.gather(self.template_values, picks.flat_values)
            values = tf.where(values == SELF, tf.gather(flat, picks.value_rowids()), values)
            out_splits = tf.gather(tf.concat([[0], tf.cumsum(length)], 0), chars.row_splits)
            normalized = tf.strings.unicode_encode(
                tf.RaggedTensor.from_row_splits(values, out_splits), "UTF-8")
            # UTF-8 length of each output character, summed per original character
            width = 1 + tf.cast(values >= 0x80, tf.int64) + tf.cast(values >= 0x800, tf.int64) \
                + tf.cast(values >= 0x10000, tf.int64)
            per_char = tf.math.unsorted_segment_sum(width, picks.value_rowids(), tf.shape(flat, tf.int64)[0])
            total = tf.cumsum(per_char)
            row_base = tf.gather(tf.concat([[0], total], 0), chars.row_splits[:-1])
            char_ends = chars.with_flat_values(total - tf.gather(row_base, chars.value_rowids()))
            return normalized, char_ends

        def _pieces(self, text):
            """(ids, normalised byte starts, ends) ragged [batch, (pieces)], and char_ends."""
            normalized, char_ends = self.normalize(text)
            words, word_starts, _ = tf_text.regex_split_with_offsets(normalized, " ", "")
            flat_words = words.flat_values
            ids, starts, ends = self.tokenizer.tokenize_with_offsets(flat_words)
            # A word of more than MAX_CHARS_PER_WORD characters is one [UNK] (the whole word).
            long = tf.strings.length(flat_words, unit="UTF8_CHAR") > MAX_CHARS_PER_WORD
            piece_word = ids.value_rowids()
            long_piece = tf.gather(long, piece_word)
            first = tf.equal(tf.range(tf.size(ids.flat_values, out_type=tf.int64)),
                             tf.gather(ids.row_splits, piece_word))
            keep = tf.logical_or(tf.logical_not(long_piece), first)
            word_bytes = tf.cast(tf.strings.length(flat_words), tf.int64)
            flat_ids = tf.where(long_piece, self.unk_id, ids.flat_values)
            flat_starts = tf.where(long_piece, tf.zeros_like(starts.flat_values), starts.flat_values)
            flat_ends = tf.where(long_piece, tf.gather(word_bytes, piece_word), ends.flat_values)
            flat_starts += tf.gather(word_starts.flat_values, piece_word)
            flat_ends += tf.gather(word_starts.flat_values, piece_word)
            piece_row = tf.gather(words.value_rowids(), piece_word)
            rows = tf.shape(text, tf.int64)[0]

            def ragged(values):
                return tf.RaggedTensor.from_value_rowids(tf.boolean_mask(values, keep),
                                                         tf.boolean_mask(piece_row, keep), nrows=rows)

            return ragged(flat_ids), ragged(flat_starts), ragged(flat_ends), char_ends

        def tokenize(self, text):
            """Ids, int64 ragged [batch, (pieces)]: each text through the fast path where it
            gives BERT's ids (see __init__), the others through the exact one."""
            # Text that matches the fast pattern is valid UTF-8 (U+FFFD is not in it), so only
            # the exact path reads invalid bytes (as replacement characters).
            fast = tf.logical_and(
                tf.strings.regex_full_match(text, self.fast_pattern),
                tf.logical_or(tf.strings.regex_full_match(text, "[\\x00-\\x7f]*"),
                              tf.logical_not(tf.strings.regex_full_match(
                                  text, "(?s).*[^\\x09\\x0a\\x0d\\x20]{26}.*"))))

            def fast_ids(rows):
                ids = self.fast_tokenizer.tokenize(rows)
                return ids.merge_dims(-2, -1) if ids.ragged_rank > 1 else ids

            def mixed():
                fast_rows, exact_rows = tf.where(fast)[:, 0], tf.where(tf.logical_not(fast))[:, 0]
                both = tf.concat([fast_ids(tf.gather(text, fast_rows)),
                                  self._pieces(tf.gather(text, exact_rows))[0]], 0)
                return tf.gather(both, tf.math.invert_permutation(tf.concat([fast_rows, exact_rows], 0)))

            return tf.cond(tf.reduce_all(fast), lambda: fast_ids(text), mixed)

        def tokenize_with_char_offsets(self, text):
            """(ids, starts, ends) ragged int64: each piece's CHARACTER span [start, end) in the
            original text (the reference's offsets)."""
            ids, starts, ends, char_ends = self._pieces(text)
            return (ids, searchsorted_rows(char_ends, starts, "right"),
                    searchsorted_rows(char_ends, ends - 1, "right") + 1)

        @tf.function(input_signature=spec)
        def __call__(self, text):
            return self.tokenize(text)

    return WordPieceModule


def graph_module(vocab: Sequence[str], lower_case: bool, unk: str = "[UNK]"):
    """A tf.Module whose ``__call__`` maps a tf.string batch [batch] to int64 ids, ragged
    [batch, (pieces)], with ``tokenize`` and ``tokenize_with_char_offsets`` for use inside
    other tf.functions and SavedModel signatures.

    Made eagerly, one module serves every caller in the process with the same vocabulary,
    casing and unknown token: it holds no state that a call changes, and building its two
    tf_text tokenizers and tracing its functions is what a new one costs (a fine-tuning run
    makes one for its training data, its evaluation and its export: in three of the test
    suite's files, the tokenizers' construction and traces were 19% of the Python time, py-spy,
    2026-12-07). Made inside a graph (a tf.data map), the module's tensors belong to that graph,
    so it is made afresh there and not kept."""
    import tensorflow as tf

    if not tf.executing_eagerly():
        return _graph_module_class()(list(vocab), lower_case, unk)
    return _shared_graph_module(tuple(vocab), bool(lower_case), unk)


@functools.lru_cache(maxsize=8)
def _shared_graph_module(vocab: Tuple[str, ...], lower_case: bool, unk: str):
    return _graph_module_class()(list(vocab), lower_case, unk)


def main() -> None:
    write_tables()
    tables = load_tables.__wrapped__()
    print(f"wrote {TABLES_PATH} from {tables['source']}: "
          + ", ".join(f"{k}: {len(v['runs'])} runs, {len(v['templates'])} templates"
                      for k, v in tables.items() if k != "source"), file=sys.stderr)


if __name__ == "__main__":
    main()
