"""Reading "one sentence per line, blank line between documents" text files.

Plain functions over file objects and paths, shared by the Beam jobs (which open files through
Beam's FileSystems, so local paths and gs:// both work) and by tests.

Conventions (those of the original BERT input format):
* a line made only of whitespace ends the current document; several in a row are one break;
* every other line is one sentence (stripped of surrounding whitespace);
* a line that is not valid UTF-8, or longer than ``max_line_bytes``, is skipped and reported
  through ``on_skip(reason, line_number)`` with reason ``invalid_utf8`` / ``line_too_long``;
* a line holding a NUL byte (a binary file, or a broken encoding) is skipped as ``nul_byte``;
* a document all of whose lines were skipped is reported as ``empty_document``.

JSONL input (``read_jsonl_documents``): one JSON object per line, one document each; the text is
in ``text_field`` and is split into sentences by ``split_sentences`` (documented below); an
optional ``units_field`` holds [start, end) character spans of multi-word units (phrases,
entities) used by unit-masking objectives (ERNIE).
"""

from __future__ import annotations

import os
import json
import re
from typing import BinaryIO, Callable, Iterator, List, Optional, Sequence, Tuple

INVALID_UTF8 = "invalid_utf8"
NUL_BYTE = "nul_byte"
INVALID_JSON = "invalid_json"
NO_TEXT = "no_text_field"
BAD_UNITS = "bad_units"
LINE_TOO_LONG = "line_too_long"
EMPTY_DOCUMENT = "empty_document"

DEFAULT_MAX_LINE_BYTES = 1 << 20  # 1 MiB: no sentence is that long; such a line is a broken file.
_READ_CHUNK = 1 << 20

SkipFn = Callable[[str, int], None]


def iter_lines(f: BinaryIO, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[Tuple[int, Optional[bytes]]]:
    """Yields ``(line_number, raw_bytes)`` (1-based, without the newline) from a binary file.

    A line longer than ``max_line_bytes`` yields ``(line_number, None)`` and is never held in
    memory whole: reading continues in fixed chunks up to its newline.
    """
    line_no = 0
    pending = bytearray()
    too_long = False
    while True:
        chunk = f.read(_READ_CHUNK)
        if not chunk:
            break
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            piece = chunk[start:] if nl < 0 else chunk[start:nl]
            if not too_long:
                pending += piece
                if len(pending) > max_line_bytes:
                    too_long = True
                    pending = bytearray()
            if nl < 0:
                break
            line_no += 1
            yield line_no, (None if too_long else bytes(pending))
            pending = bytearray()
            too_long = False
            start = nl + 1
    if pending or too_long:
        line_no += 1
        yield line_no, (None if too_long else bytes(pending))


def read_documents(f: BinaryIO, on_skip: SkipFn,
                   max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[List[str]]:
    """Yields the documents of one file, each a non-empty list of sentences."""
    sentences: List[str] = []
    skipped_in_doc = False
    for line_no, raw in iter_lines(f, max_line_bytes):
        if raw is None:
            on_skip(LINE_TOO_LONG, line_no)
            skipped_in_doc = True
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            on_skip(INVALID_UTF8, line_no)
            skipped_in_doc = True
            continue
        if "\x00" in text:
            on_skip(NUL_BYTE, line_no)
            skipped_in_doc = True
            continue
        text = text.strip()
        if text:
            sentences.append(text)
            continue
        if sentences:
            yield sentences
        elif skipped_in_doc:
            on_skip(EMPTY_DOCUMENT, line_no)
        sentences, skipped_in_doc = [], False
    if sentences:
        yield sentences
    elif skipped_in_doc:
        on_skip(EMPTY_DOCUMENT, 0)


def glob_base(pattern: str) -> str:
    """The directory part of a glob before its first wildcard ("gs://b/x/*/a*.txt" -> "gs://b/x/")."""
    cut = min([i for i in (pattern.find(c) for c in "*?[") if i >= 0] or [len(pattern)])
    head = pattern[:cut]
    slash = head.rfind("/")
    return head[:slash + 1] if slash >= 0 else ""


def relative_path(path: str, pattern: str) -> str:
    """The path of a matched file relative to its glob's base: stable across machines/buckets."""
    base = glob_base(pattern)
    if base and path.startswith(base):
        return path[len(base):]
    # Matchers may return absolute paths for a relative glob.
    if not pattern.startswith(("gs://", "/")) and base:
        absolute_base = os.path.abspath(base) + "/"
        if path.startswith(absolute_base):
            return path[len(absolute_base):]
    return path.rsplit("/", 1)[-1] if "://" in path else os.path.basename(path)


# A sentence ends at a newline, or at ".", "!" or "?" (plus closing quotes/brackets) followed by
# whitespace and then something that starts a sentence (an upper-case letter, a digit, an
# opening quote or bracket). So "e.g. the" and "3.5 m" do not split; "Dr. Smith" does: the
# rule is the usual punctuation heuristic, good enough for pre-training chunks; pre-split text
# (one sentence per line) is better when available.
_SENTENCE_BREAK = re.compile(r"""(?<=[.!?])["')\]]*\s+(?=["'(\[]?[A-Z0-9])|\n+""")


def split_sentences(text: str) -> List[Tuple[int, int]]:
    """[start, end) character spans of the sentences of ``text``, stripped, non-empty."""
    spans = []
    start = 0
    for m in _SENTENCE_BREAK.finditer(text):
        end = m.start()
        # keep closing quotes/brackets with the sentence they close
        closing = re.match(r"""["')\]]*""", text[end:m.end()])
        end += closing.end() if closing else 0
        spans.append((start, end))
        start = m.end()
    spans.append((start, len(text)))
    out = []
    for a, b in spans:
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if b > a:
            out.append((a, b))
    return out


JsonlDocument = Tuple[int, List[str], Optional[List[List[Tuple[int, int]]]]]


def read_jsonl_documents(f: BinaryIO, on_skip: SkipFn, text_field: str = "text",
                         units_field: Optional[str] = None,
                         max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[JsonlDocument]:
    """Yields ``(line_number, sentences, units)`` for each JSON-object line of a JSONL file.

    ``units`` (when ``units_field`` is given, else None): per sentence, the annotated unit
    spans as sentence-local UTF-8 *byte* offsets (what tokenizer offsets use); a unit that
    crosses a sentence break or is malformed is reported as ``bad_units`` and ignored.
    Lines that are not UTF-8 / JSON objects / lack a string ``text_field`` are skipped and
    reported; a record whose text has no sentence is reported as ``empty_document``.
    """
    for line_no, raw in iter_lines(f, max_line_bytes):
        if raw is None:
            on_skip(LINE_TOO_LONG, line_no)
            continue
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            on_skip(INVALID_UTF8, line_no)
            continue
        except ValueError:
            on_skip(INVALID_JSON, line_no)
            continue
        text = record.get(text_field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            on_skip(NO_TEXT, line_no)
            continue
        if "\x00" in text:
            on_skip(NUL_BYTE, line_no)
            continue
        spans = split_sentences(text)
        if not spans:
            on_skip(EMPTY_DOCUMENT, line_no)
            continue
        sentences = [text[a:b] for a, b in spans]
        units = None
        if units_field is not None:
            units = [[] for _ in spans]
            raw_units = record.get(units_field) or []
            for unit in raw_units if isinstance(raw_units, list) else [None]:
                placed = False
                if (isinstance(unit, (list, tuple)) and len(unit) == 2
                        and all(isinstance(x, int) for x in unit) and 0 <= unit[0] < unit[1] <= len(text)):
                    for k, (a, b) in enumerate(spans):
                        if a <= unit[0] and unit[1] <= b:
                            sentence = sentences[k]
                            lo = len(sentence[:unit[0] - a].encode("utf-8"))
                            hi = len(sentence[:unit[1] - a].encode("utf-8"))
                            units[k].append((lo, hi))
                            placed = True
                            break
                if not placed:
                    on_skip(BAD_UNITS, line_no)
            units = [sorted(u) for u in units]
        yield line_no, sentences, units
