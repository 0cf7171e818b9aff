"""Doc-stride windows over a tokenized context, the geometry of question answering's features
(text.finetune.question_answering): where each window starts, the window where each piece has
the most context, the pieces an answer's character span covers, and the pieces' character
spans.

A context longer than a window is cut into windows whose starts are doc_stride pieces apart
(BERT's run_squad and Model Garden's squad_lib: doc_stride is the STEP between window starts,
not the overlap of Hugging Face's tokenizers); the last window ends at the context's end. A
piece in several windows counts in the one where min(pieces left of it, pieces right of it) +
0.01 * window length is largest, the first such window on a tie (run_squad's
_check_is_max_context).
"""

from __future__ import annotations

import bisect
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from text import utf8


def char_offsets(text: str, starts: Sequence[int], ends: Sequence[int]) -> Tuple[np.ndarray, np.ndarray]:
    """UTF-8 byte spans [start, end) in ``text`` -> character spans (utf8.byte_to_char_spans
    as int64 arrays); a span that ends inside a character covers that whole character."""
    s, e = utf8.byte_to_char_spans(text, starts, ends)
    return np.asarray(s, np.int64), np.asarray(e, np.int64)



def answer_pieces(starts: np.ndarray, ends: np.ndarray, answer_start: int, answer_end: int
                  ) -> Optional[Tuple[int, int]]:
    """First and last piece (inclusive) that overlap the character span [answer_start,
    answer_end); None when no piece does (an answer of whitespace only)."""
    overlap = np.flatnonzero((ends > answer_start) & (starts < answer_end))
    if not len(overlap):
        return None
    return int(overlap[0]), int(overlap[-1])


def window_spans(num_pieces: int, max_pieces: int, doc_stride: int) -> List[Tuple[int, int]]:
    """(start, length) of each window over ``num_pieces`` context pieces: starts doc_stride
    apart, the last window reaching the end (one empty window for an empty context)."""
    spans, start = [], 0
    while start < num_pieces:
        length = min(num_pieces - start, max_pieces)
        spans.append((start, length))
        if start + length == num_pieces:
            break
        start += min(length, doc_stride)
    return spans or [(0, 0)]


def max_context_windows(spans: Sequence[Tuple[int, int]], num_pieces: int) -> np.ndarray:
    """For each context piece, the window where it has the most context: the largest
    min(left, right) + 0.01 * window length, the first window on a tie."""
    best = np.zeros(num_pieces, np.int64)
    if len(spans) == 1:
        return best
    best_score = np.full(num_pieces, -1.0)
    for w, (start, length) in enumerate(spans):
        p = np.arange(start, start + length)
        score = np.minimum(p - start, start + length - 1 - p) + 0.01 * length
        better = score > best_score[p]
        best[p[better]] = w
        best_score[p[better]] = score[better]
    return best


class Context:
    """A distinct context of a chunk, tokenized once: piece ids and character spans, and what
    its questions share (max-context windows per window width, the stored-form bytes of question_answering's records)."""

    def __init__(self, ids, starts, ends):
        self.ids = np.asarray(ids, np.int64)
        self.starts = np.asarray(starts, np.int64)
        self.ends = np.asarray(ends, np.int64)
        # Piece spans come in text order, so the pieces an answer overlaps are found by
        # bisection (answer_pieces' scan otherwise; same result on sorted spans).
        self.sorted = bool(np.all(self.starts[1:] >= self.starts[:-1]) and np.all(self.ends[1:] >= self.ends[:-1]))
        self.starts_list, self.ends_list = self.starts.tolist(), self.ends.tolist()
        self._windows: Dict[int, tuple] = {}
        self.first = 0  # question_answering's _records: where its pieces start among the chunk's

    def answer(self, answer_start: int, answer_end: int) -> Optional[Tuple[int, int]]:
        if not self.sorted:
            return answer_pieces(self.starts, self.ends, answer_start, answer_end)
        first = bisect.bisect_right(self.ends_list, answer_start)
        last = bisect.bisect_left(self.starts_list, answer_end) - 1
        return (first, last) if first <= last else None

    def windows(self, max_pieces: int, doc_stride: int) -> tuple:
        """(spans, max-context window of each piece) for windows of ``max_pieces`` pieces."""
        got = self._windows.get(max_pieces)
        if got is None:
            spans = window_spans(len(self.ids), max_pieces, doc_stride)
            got = self._windows[max_pieces] = (spans, max_context_windows(spans, len(self.ids)))
        return got
