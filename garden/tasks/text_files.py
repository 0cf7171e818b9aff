"""Labelled text files of the fine-tuning tasks: .tsv (GLUE's: tab-separated, no quoting),
.csv (RFC 4180) with a header line naming the columns, or .jsonl (one JSON object a line).

read_examples gives Classification's rows (text_a, (text_b), label); read_records any
columns (the generative tasks' source / target). Every problem is a TaskDataError that names
the file and the line.
"""

from __future__ import annotations

import csv
import io
import json
import posixpath
from typing import List

from text.finetune import FinetuneDataError
from text.finetune.base import read_text


class TaskDataError(ValueError):
    """A fine-tuning data file is missing, malformed or has unknown labels."""


# csv dialects: a TSV is GLUE's (tab-separated, no quoting: a quote is text); a CSV is RFC 4180
# (Excel's dialect: quoted fields may hold commas and newlines).
_DIALECTS = {".tsv": dict(delimiter="\t", quoting=csv.QUOTE_NONE, strict=True),
             ".csv": dict(dialect="excel", strict=True)}


def _read_text(path: str) -> str:
    try:
        return read_text(path)
    except FinetuneDataError as e:
        raise TaskDataError(str(e)) from None


def _read_delimited(path: str, text: str, columns: List[str], numeric_label: bool) -> List[dict]:
    """Rows of a TSV/CSV with a header; newline="" lets the csv module alone decide where a
    record ends (a quoted CSV field may span lines; U+2028 or a form feed is text)."""
    ext = posixpath.splitext(path)[1].lower()
    reader = csv.DictReader(io.StringIO(text, newline=""), **_DIALECTS[ext])
    try:
        header = reader.fieldnames or []
        missing = [c for c in columns if c not in header]
        if missing:
            raise TaskDataError(f"{path}:1: header {header} lacks columns {missing}")
        rows = []
        for row in reader:
            line = reader.line_num
            if None in row:  # DictReader's restkey: more fields than the header names
                raise TaskDataError(f"{path}:{line}: row has {len(header) + len(row[None])} "
                                    f"fields but the header names {len(header)} (a tab or "
                                    f"delimiter inside a text? quote it in a .csv)")
            if any(row.get(c) is None for c in columns):
                raise TaskDataError(f"{path}:{line}: row has fewer fields than the header")
            rows.append({c: row[c] for c in columns})
            if numeric_label:
                rows[-1]["label"] = _number(row["label"], f"{path}:{line}")
        return rows
    except csv.Error as e:
        raise TaskDataError(f"{path}:{reader.line_num}: {e}") from None


def _number(value: str, where: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise TaskDataError(f"{where}: label {value!r} is not a number (a regression task "
                            f"needs numeric labels)") from None


def _read_jsonl(path: str, text: str, columns: List[str], numeric_label: bool) -> List[dict]:
    """One JSON object per line ("\\n"-separated, as JSON Lines says; U+2028 is text).
    Texts must be strings and labels strings (classification) or numbers (regression)."""
    rows = []
    for i, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise TaskDataError(f"{path}:{i}: not valid JSON ({e.msg})") from e
        if not isinstance(obj, dict):
            raise TaskDataError(f"{path}:{i}: expected a JSON object, got {type(obj).__name__}")
        missing = [c for c in columns if c not in obj]
        if missing:
            raise TaskDataError(f"{path}:{i}: record lacks fields {missing}")
        for c in columns:
            value = obj[c]
            if c == "label" and numeric_label:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
                want = "a number (regression)"
            else:
                ok, want = isinstance(value, str), "a string"
            if not ok:
                raise TaskDataError(f"{path}:{i}: field {c!r} is {json.dumps(value)}, expected "
                                    f"{want}; fix the record (labels are not converted)")
        rows.append({c: obj[c] for c in columns})
    return rows


def read_examples(path: str, text_b: bool = False, numeric_label: bool = False) -> List[dict]:
    """Rows of a .tsv / .csv / .jsonl file as dicts with text_a, (text_b), label.

    TSV and CSV need a header line naming the columns; every problem names the file and line.
    numeric_label: labels are numbers (regression); in TSV/CSV they must parse as floats.
    """
    columns = ["text_a", "label"] + (["text_b"] if text_b else [])
    return read_records(path, columns, numeric_label)


def read_records(path: str, columns: List[str], numeric_label: bool = False) -> List[dict]:
    """Rows {column: value} of a .tsv / .csv (header naming the columns) / .jsonl file; the
    errors of read_examples (file and line). A column "label" may be numeric (numeric_label);
    every other column is text."""
    text = _read_text(path)
    ext = posixpath.splitext(path)[1].lower()
    if ext in _DIALECTS:
        rows = _read_delimited(path, text, columns, numeric_label)
    elif ext in (".jsonl", ".json"):
        rows = _read_jsonl(path, text, columns, numeric_label)
    else:
        raise TaskDataError(f"{path}: unsupported extension {ext!r}; use .tsv, .csv or .jsonl")
    if not rows:
        raise TaskDataError(f"{path} has no examples")
    return rows
