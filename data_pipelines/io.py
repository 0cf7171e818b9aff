"""Reading "one sentence per line, blank line between documents" text files.

Plain functions over file objects and paths, shared by the Beam jobs (which open files through
Beam's FileSystems, so local paths and gs:// both work) and by tests.

Conventions (those of the original BERT input format):
* a line made only of whitespace ends the current document; several in a row are one break;
* every other line is one sentence (stripped of surrounding whitespace);
* a line that is not valid UTF-8, or longer than ``max_line_bytes``, is skipped and reported
  through ``on_skip(reason, line_number)`` with reason ``invalid_utf8`` / ``line_too_long``;
* a document all of whose lines were skipped is reported as ``empty_document``.
"""

from __future__ import annotations

import os
from typing import BinaryIO, Callable, Iterator, List, Optional, Tuple

INVALID_UTF8 = "invalid_utf8"
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
