"""BERT WordPiece without TensorFlow: the ids of tensorflow-text's FastBertTokenizer, in Python.

Why a second implementation. The Beam job tokenizes in every worker, and tensorflow-text's ops
need TensorFlow: importing it costs each worker process about 4.4 CPU-seconds and 0.7 GB before
any work, which kept 2 local workers from scaling and the job's start-up above Model Garden's
(benchmarks/README.md, "2026-11-25 (2)"). This module gives the same ids with the standard
library only; it is about half as fast per MB as FastBertTokenizer once TensorFlow is loaded, so
the import pays off only above ~120 MB of text per worker process (``make_pretrain
--in_graph_tokenizer`` then runs FastBertTokenizer in the workers). Training and serving keep
tensorflow-text (``tokenizers.TextTokenizer.in_graph``); the two are compared, not trusted:

* The normaliser (FastBertNormalizer) is a per-codepoint map, and the pre-tokenizer
  (FastWordpieceTokenizer, no_pretokenization=False) splits at per-codepoint classes (whitespace;
  punctuation and CJK characters, each a word of its own). Both are read off tensorflow-text
  itself, over every codepoint, into ``tf_text_tables.json.gz`` (data_pipelines.tf_text_tables);
  a test re-derives them and requires the shipped file to be identical.
* WordPiece is greedy longest-match-first with "##" continuations; a word longer than
  ``max_bytes_per_word`` UTF-8 bytes, or one with a part that matches no piece, is [UNK].
* Tests compare the ids with FastBertTokenizer's on the sample corpus and on random text of every
  script (cased and uncased), and on the edge cases (word lengths around the limit, controls,
  ignorable characters).

Character offsets (``tokenize_with_char_offsets``, what make_finetune's SQuAD windows are cut
with) are FastBertTokenizer's byte offsets as characters: a piece starts at the original
character its first normalised character came from and ends where the character after its
last one starts (so the pieces of one expanded character, "\u2026" -> "...", start at it and only
the last covers it); tests/data_pipelines/test_wordpiece_offsets.py compares them with the op's.

Speed: text is normalised by ``str.translate`` and cut at whitespace by ``str.split``; the ids
of each whitespace-free chunk are cached (the cache is cleared when it reaches
``_CACHE_LIMIT`` chunks, so memory stays bounded), and only a new chunk goes through the
punctuation regex and WordPiece. Figures in benchmarks/README.md (Tokenizers).

Regenerate the tables after a tensorflow-text upgrade: ``python -m data_pipelines.tf_text_tables``
(then run tests/data_pipelines/test_wordpiece.py).
"""

from __future__ import annotations

import functools
import operator
import re
from itertools import chain
from typing import Dict, List, Sequence, Tuple

import numpy as np

from data_pipelines import tf_text_tables

_CACHE_LIMIT = 1 << 18  # chunks; ~50 MB of cached strings and id tuples at most
_IDS, _STARTS, _ENDS, _COUNT = (operator.itemgetter(k) for k in range(4))  # of _chunk_spans' entries
# str.split()'s whitespace among ASCII characters (a normalised ASCII text stays ASCII).
_ASCII_SPACE = np.array([chr(c).isspace() for c in range(128)])


def _chunk_starts(norm: str, chunks: List[str]) -> np.ndarray:
    """Where each of ``norm.split()``'s chunks starts in ``norm``: at a non-whitespace
    character after whitespace (or at 0)."""
    if norm.isascii():
        space = _ASCII_SPACE[np.frombuffer(norm.encode("ascii"), np.uint8)]
    else:
        space = np.isin(np.frombuffer(norm.encode("utf-32-le", "surrogatepass"), np.uint32), _python_space_array())
    return np.flatnonzero(~space & np.concatenate(([True], space[:-1])))


def _fill(cache: dict, chunks: List[str], entries: list, make) -> list:
    """``entries`` (the cache's entry of each chunk, None where missing) with the missing ones
    made by ``make(chunk)`` and cached; the cache is cleared first when it is full."""
    if len(cache) > _CACHE_LIMIT:
        cache.clear()
    return [e if e is not None else cache.setdefault(c, make(c)) for c, e in zip(chunks, entries)]


@functools.lru_cache(maxsize=None)
def _python_space_array() -> np.ndarray:
    return np.array(sorted(_python_whitespace()), np.uint32)


def _char_class(ranges: Sequence[Sequence[int]]) -> str:
    def one(c):
        return "\\x%02x" % c if c < 0x80 and not chr(c).isalnum() else re.escape(chr(c))

    return "".join(one(a) if a == b else f"{one(a)}-{one(b)}" for a, b in ranges)


@functools.lru_cache(maxsize=None)
def _python_whitespace() -> frozenset:
    """The characters ``str.split()`` splits at (this Python's Unicode tables)."""
    return frozenset(c for c in range(tf_text_tables.MAX_CODEPOINT + 1) if chr(c).isspace())


class WordPieceTokenizer:
    """Text -> WordPiece ids, equal to tensorflow-text's FastBertTokenizer with ``vocab``,
    suffix_indicator "##", ``max_bytes_per_word``, unknown_token ``unk`` and
    lower_case_nfd_strip_accents ``lower_case`` (as ``tokenizers.wordpiece_tokenizer`` builds it).

    >>> tok = WordPieceTokenizer(["[UNK]", "un", "##aff", "##able", ","], lower_case=True)
    >>> tok.tokenize(["Unaffable, unable"])
    [[1, 2, 3, 4, 1, 3]]

    How: a text is normalised with ``str.translate`` (a 128-entry table for pure-ASCII text),
    cut at whitespace with ``str.split`` and each chunk's ids are looked up in a cache; only a
    chunk not seen before goes through the punctuation regex and WordPiece. Both C-level steps
    are exact: the constructor checks that every character ``str.split`` cuts at is whitespace
    for tensorflow-text too (a chunk may still hold tensorflow-text whitespace that Python does
    not split at: the regex splits it).
    """

    def __init__(self, vocab: Sequence[str], lower_case: bool, unk: str = "[UNK]",
                 max_bytes_per_word: int = 100, tables: dict = None):
        tables = tables or tf_text_tables.load_tables()
        self._ids: Dict[str, int] = {t: i for i, t in enumerate(vocab)}
        if unk not in self._ids:
            raise ValueError(f"the vocabulary has no {unk!r} token")
        self._unk = (self._ids[unk],)
        self._max_bytes = max_bytes_per_word
        norm = {int(c): s for c, s in tables["normalize_lower" if lower_case else "normalize_cased"].items()}
        self._table = str.maketrans(norm)
        self._ascii_table = str.maketrans({c: norm.get(c, chr(c)) for c in range(0x80)})
        space, punct = tables["space"], tables["punct"]
        punct_class = _char_class(punct)
        words = re.compile(f"[^{_char_class(space)}{punct_class}]+|[{punct_class}]")
        self._words, self._word_spans = words.findall, words.finditer
        # Normalised length of each character the map does not keep one for one (offsets).
        self._lengths = {c: len(t) for c, t in norm.items() if len(t) != 1}
        odd = sorted(self._lengths)
        runs = [[a, a] for a in odd[:1]]
        for c in odd[1:]:
            if c == runs[-1][1] + 1:
                runs[-1][1] = c
            else:
                runs.append([c, c])
        self._changes_length = re.compile(f"[{_char_class(runs)}]").search if runs else (lambda text: None)
        # Characters that can be left after normalisation: those it keeps, and its outputs.
        space_set = {c for a, b in space for c in range(a, b + 1)}
        outputs = {ord(ch) for text in norm.values() for ch in text}
        wrong = sorted(c for c in _python_whitespace() - space_set if c not in norm or c in outputs)
        if wrong:
            raise RuntimeError(
                f"str.split() cuts at {', '.join('U+%04X' % c for c in wrong)}, which tensorflow-text does not "
                f"treat as whitespace ({tables['source']}): data_pipelines.wordpiece cannot give its ids")
        self._cache: Dict[str, Tuple[int, ...]] = {}
        self._span_cache: Dict[str, tuple] = {}  # chunk -> (ids, starts, ends), for offsets

    def tokenize(self, texts: Sequence[str]) -> List[List[int]]:
        """The ids of each text."""
        cache, get = self._cache, self._cache.get
        ascii_table, table = self._ascii_table, self._table
        out = []
        for text in texts:
            chunks = text.translate(ascii_table if text.isascii() else table).split()
            pieces = list(map(get, chunks))
            if None in pieces:
                pieces = _fill(cache, chunks, pieces, self._chunk_pieces)
            out.append(list(chain.from_iterable(pieces)))
        return out

    def tokenize_with_char_offsets(self, texts: Sequence[str]) -> List[Tuple[List[int], List[int], List[int]]]:
        """(ids, starts, ends) of each text: the ids of ``tokenize`` and each piece's CHARACTER
        span [start, end) in the original text, as FastBertTokenizer's byte offsets give them
        once converted to characters (tests/data_pipelines/test_wordpiece_offsets.py compares
        the two; the module docstring says how expanded characters come out).

        How: the normaliser maps each character to zero or more characters, so a position in
        the normalised text comes from one original character (``origin``; the identity for
        ASCII text, where the map keeps lengths). Each whitespace-free chunk's pieces and their
        spans within the chunk are cached as for ``tokenize``. All texts are handled as one:
        their normalised forms joined by spaces are split once, and numpy places each chunk's
        pieces at the chunk's start (a per-text pass cost about a third more).
        Starts and ends are int64 arrays.
        """
        cache, get = self._span_cache, self._span_cache.get
        ascii_table, table, lengths = self._ascii_table, self._table, self._lengths
        norms, origins = [], {}
        for k, text in enumerate(texts):
            if text.isascii():
                norms.append(text.translate(ascii_table))
                continue
            norm = text.translate(table)
            norms.append(norm)
            if len(norm) != len(text) or self._changes_length(text):
                origin = [i for i, c in enumerate(text) for _ in range(lengths.get(ord(c), 1))]
                origin.append(len(text))
                origins[k] = np.asarray(origin, np.int64)
        joined = " ".join(norms)  # a space between texts: no chunk spans two of them
        chunks = joined.split()
        entries = list(map(get, chunks))
        if None in entries:
            entries = _fill(cache, chunks, entries, self._chunk_spans)
        ids = list(chain.from_iterable(map(_IDS, entries)))
        n = len(ids)
        counts = np.fromiter(map(_COUNT, entries), np.int64, len(entries))
        chunk_at = _chunk_starts(joined, chunks)
        text_at = np.cumsum([0] + [len(t) + 1 for t in norms])
        # Each piece's text, and its chunk's start within that text.
        chunk_text = np.searchsorted(text_at, chunk_at, side="right") - 1
        at = np.repeat(chunk_at - text_at[chunk_text], counts)
        starts = at + np.fromiter(chain.from_iterable(map(_STARTS, entries)), np.int64, n)
        ends = at + np.fromiter(chain.from_iterable(map(_ENDS, entries)), np.int64, n)
        bounds = np.cumsum(np.concatenate([[0], np.bincount(chunk_text, weights=counts, minlength=len(norms))
                                           .astype(np.int64)])).tolist()
        out = []
        for k in range(len(norms)):
            a, b = bounds[k], bounds[k + 1]
            if k in origins:
                out.append((ids[a:b], origins[k][starts[a:b]], origins[k][ends[a:b]]))
            else:
                out.append((ids[a:b], starts[a:b], ends[a:b]))
        return out

    def _chunk_spans(self, chunk: str) -> tuple:
        """(ids, starts, ends, number of pieces) of a normalised chunk's pieces, spans relative
        to the chunk."""
        ids, starts, ends = [], [], []
        for match in self._word_spans(chunk):
            at = match.start()
            word_ids, cuts = self._word_pieces_at(match.group())
            ids += word_ids
            starts += [at] + [at + c for c in cuts[:-1]]
            ends += [at + c for c in cuts]
        return tuple(ids), tuple(starts), tuple(ends), len(ids)

    def _chunk_pieces(self, chunk: str) -> Tuple[int, ...]:
        """Ids of a normalised chunk without Python whitespace: its words (runs between
        whitespace and punctuation; each punctuation or CJK character is a word) in pieces."""
        return tuple(chain.from_iterable(self._word_pieces_at(w)[0] for w in self._words(chunk)))

    def _word_pieces_at(self, word: str) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
        """Greedy longest-match-first WordPiece of one normalized word: the piece ids and where
        each piece ends in the word; [UNK] (the whole word) for a word of more than
        max_bytes_per_word bytes or with a part no piece matches."""
        if len(word.encode("utf-8")) > self._max_bytes:
            return self._unk, (len(word),)
        ids, pieces, cuts, start, n = self._ids, [], [], 0, len(word)
        while start < n:
            end = n
            while end > start:
                piece = ids.get(word[start:end] if start == 0 else "##" + word[start:end])
                if piece is not None:
                    break
                end -= 1
            else:
                return self._unk, (n,)
            pieces.append(piece)
            cuts.append(end)
            start = end
        return tuple(pieces), tuple(cuts)
