"""Input sources of the data jobs: text files, JSONL files and locally prepared tfds datasets.

Plain functions over file objects and paths (unit-tested without Beam), the per-element
``DocumentSource`` the Beam jobs call, and ``MatchSources``, the PTransform that spreads the
input's files (or tfds shards) over the workers. Files are opened through Beam's FileSystems,
so local paths and gs:// both work, and ``.gz`` files are decompressed. make_pretrain and
make_vocab read through the same functions, so both follow the same input rules.

Text files (the original BERT input format):
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

tfds input (``tfds:NAME[/CONFIG][:SPLIT]``): one document per example, read from a dataset
already prepared in a local data_dir; nothing is downloaded.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import re
from typing import BinaryIO, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from data_pipelines.counters import count
from data_pipelines.input_rules import DEFAULT_MAX_LINE_BYTES, SKIPPED_LINES_SHOWN
from text.finetune import parse_tfds

INVALID_UTF8 = "invalid_utf8"
NUL_BYTE = "nul_byte"
INVALID_JSON = "invalid_json"
NO_TEXT = "no_text_field"
BAD_UNITS = "bad_units"
LINE_TOO_LONG = "line_too_long"
EMPTY_DOCUMENT = "empty_document"

_LOG = logging.getLogger("data_pipelines.sources")

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


# ---------------------------------------------------------------------------------------------
# Listing the input


class InputError(ValueError):
    """The input matches nothing, holds no text, or cannot be opened; the message says which
    flag and path, and what to do."""


def match_files(pattern: str, flag: str = "--input") -> List[str]:
    """The sorted paths ``pattern`` matches (local or gs://); InputError when there are none."""
    try:
        matched = FileSystems.match([pattern])[0].metadata_list
    except Exception as e:  # Beam raises BeamIOError for an unreachable scheme or bucket
        raise InputError(f"cannot list {flag}={pattern}: {e}") from e
    if not matched:
        raise InputError(f"{flag}={pattern} matches no files; check the path/glob")
    # A local directory matches itself; reading it fails deep inside a worker.
    folders = [m.path for m in matched if "://" not in m.path and os.path.isdir(m.path)]
    if folders:
        raise InputError(f"{flag}={pattern} names a directory ({folders[0]}), not files: give "
                         f"a glob of its files, e.g. {flag}='{folders[0].rstrip('/')}/*.txt'")
    return sorted(m.path for m in matched)


def tfds_shards(spec: str, data_dir: Optional[str]) -> List[int]:
    """The shard indices of a prepared tfds split (nothing is downloaded); InputError when the
    dataset is not prepared in ``data_dir`` or the split is empty."""
    import tensorflow_datasets as tfds

    name, split = parse_tfds(spec)
    try:
        info = tfds.builder(name, data_dir=data_dir).info.splits[split]
    except Exception as e:  # tfds raises several kinds for a missing dataset/config/split
        raise InputError(f"--input={spec}: cannot open the prepared tensorflow-datasets dataset in "
                         f"--tfds_data_dir={data_dir} ({type(e).__name__}: {e}); prepare it first "
                         f"(tfds build / builder.download_and_prepare())") from e
    if not info.num_examples:
        raise InputError(f"--input={spec} has no examples in split {split!r}")
    return list(range(info.num_shards))


# ---------------------------------------------------------------------------------------------
# Reporting skipped lines


class SkipLog:
    """Counts skipped lines by reason and names only the first ``shown`` of each reason (file
    and line) in the log, then says once that the rest of that reason are only counted: a
    broken file of 5000 bad lines gives 5 warnings and one summary, not 5000 warnings.

    ``log(reason, path, line_number)``; ``counts`` (reason -> lines, ``empty_document`` too);
    ``summary()`` for the end of a run. A Beam job holds one per worker (the DoFn's copy), so a
    run names at most ``shown`` lines per reason per worker; stats.json keeps the exact counts.
    """

    SHOWN = SKIPPED_LINES_SHOWN

    def __init__(self, shown: int = SHOWN, logger: Optional[logging.Logger] = None):
        self.shown = shown
        self.counts: collections.Counter = collections.Counter()
        # Apart from ``counts``, which a caller may clear per pass over the files (make_vocab's
        # learner reads them more than once): a line is named once, whatever the passes.
        self._named: Dict[str, set] = collections.defaultdict(set)  # reason -> {(path, line)}
        self._logger = logger

    def __call__(self, reason: str, path: str, line_no: int) -> None:
        self.counts[reason] += 1
        named = self._named[reason]
        # empty_document: a document of skipped lines, whose lines were reported already.
        if reason == EMPTY_DOCUMENT or len(named) > self.shown or (path, line_no) in named:
            return
        log = self._logger or _LOG
        if len(named) < self.shown:
            log.warning("skipping line %d of %s: %s", line_no, path, reason)
        else:
            log.warning("further %s lines are counted, not listed (a count per reason follows at the end)",
                        reason)
        named.add((path, line_no))  # the SHOWN named lines, then the first one only counted

    def summary(self) -> str:
        lines = {r: n for r, n in sorted(self.counts.items()) if r != EMPTY_DOCUMENT}
        return f"skipped {sum(lines.values())} lines {lines}" if lines else "skipped no lines"


# ---------------------------------------------------------------------------------------------
# Sentences of plain files, outside Beam (make_vocab)


def iter_sentences(files: Sequence[str], on_skip: Callable[[str, str, int], None],
                   max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[str]:
    """The sentences of text ``files`` in order, by ``read_documents``' rules (the rules of the
    Beam jobs): bad lines are reported as ``on_skip(reason, path, line_number)`` and skipped."""
    for path in files:
        with FileSystems.open(path) as f:  # compression from the name: .gz is decompressed
            for sentences in read_documents(f, lambda reason, n: on_skip(reason, path, n), max_line_bytes):
                yield from sentences


# ---------------------------------------------------------------------------------------------
# Beam


class DocumentSource:
    """Documents of one input element: a text/JSONL file (a Beam ReadableFile) or a tfds shard.

    ``documents(element, stats)`` -> (source id, iterator of (document id, [sentences], units
    or None)); bad lines, empty files and documents are counted into ``stats`` and skipped.
    Text files: one sentence per line, blank line between documents (id "path:index").
    JSONL files: one document per line, text in ``text_field`` (id "path:line").
    tfds: one document per example, text in ``text_field`` (id "split[Nshard]:index").
    """

    def __init__(self, pattern: str, max_line_bytes: int, input_format: str = "text",
                 text_field: str = "text", units_field: Optional[str] = None):
        self._pattern = pattern
        self._max_line_bytes = max_line_bytes
        self._format = input_format
        self._text_field = text_field
        self._units_field = units_field
        self._skip_log: Optional[SkipLog] = None  # per worker: made on first use

    def documents(self, element, stats: Dict[str, int]):
        if self._format == "tfds":
            name, data_dir, split, shard = element
            return f"{split}[{shard}shard]", self._tfds_documents(name, data_dir, split, shard, stats)
        path = element.metadata.path
        return relative_path(path, self._pattern), self._file_documents(element, stats)

    def _file_documents(self, readable_file, stats):
        path = readable_file.metadata.path
        rel = relative_path(path, self._pattern)
        count(stats, "files_read")
        if self._skip_log is None:
            self._skip_log = SkipLog()

        def on_skip(reason, line_no):
            count(stats, ("documents_dropped/" if reason == EMPTY_DOCUMENT else "lines_skipped/") + reason)
            self._skip_log(reason, path, line_no)

        n = 0
        with readable_file.open() as f:
            if self._format == "jsonl":
                docs = ((f"{rel}:{line}", sentences, units) for line, sentences, units in read_jsonl_documents(
                    f, on_skip, self._text_field, self._units_field, self._max_line_bytes))
            else:
                docs = ((f"{rel}:{index}", sentences, None) for index, sentences in enumerate(
                    read_documents(f, on_skip, self._max_line_bytes)))
            for doc_id, sentences, units in docs:
                n += 1
                count(stats, "documents_read")
                count(stats, "sentences_read", len(sentences))
                yield doc_id, sentences, units
        if n == 0 and readable_file.metadata.size_in_bytes == 0:
            count(stats, "files_skipped/empty_file")
            _LOG.warning("input file %s is empty", path)

    def _tfds_documents(self, name, data_dir, split, shard, stats):
        import tensorflow_datasets as tfds

        builder = tfds.builder(name, data_dir=data_dir)
        ds = builder.as_dataset(split=f"{split}[{shard}shard]", shuffle_files=False)
        count(stats, "files_read")
        for index, example in enumerate(tfds.as_numpy(ds)):
            value = example.get(self._text_field) if isinstance(example, dict) else None
            if not isinstance(value, bytes):
                count(stats, "lines_skipped/" + NO_TEXT)
                continue
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                count(stats, "lines_skipped/" + INVALID_UTF8)
                continue
            sentences = [text[a:b] for a, b in split_sentences(text.replace("\x00", " "))]
            if not sentences:
                count(stats, "documents_dropped/" + EMPTY_DOCUMENT)
                continue
            count(stats, "documents_read")
            count(stats, "sentences_read", len(sentences))
            yield f"{split}[{shard}shard]:{index}", sentences, None


class MatchSources(beam.PTransform):
    """The input's elements for ``DocumentSource``, spread over the workers: a Beam
    ReadableFile per matched file, or (name, data_dir, split, shard) per tfds shard."""

    def __init__(self, pattern: str, input_format: str = "text", tfds_data_dir: Optional[str] = None,
                 tfds_shards: Sequence[int] = ()):
        super().__init__()
        self._pattern = pattern
        self._format = input_format
        self._tfds_data_dir = tfds_data_dir
        self._tfds_shards = list(tfds_shards)

    def expand(self, pbegin):
        if self._format == "tfds":
            name, split = parse_tfds(self._pattern)
            return (pbegin
                    | "TfdsShards" >> beam.Create([(name, self._tfds_data_dir, split, s) for s in self._tfds_shards])
                    | "Reshuffle" >> beam.Reshuffle())
        # The match is one element that fans out to every file: without the reshuffle the
        # runner fuses the reading into that one bundle, and one worker reads them all.
        return (pbegin
                | "Match" >> fileio.MatchFiles(self._pattern)
                | "SpreadFiles" >> beam.Reshuffle()
                | "Open" >> fileio.ReadMatches())
