"""The input rules a job's command line states before Beam loads (sources.py applies them):
the input format a path implies, the longest line read, and how many skipped lines of each
reason the log names."""

from __future__ import annotations

FORMATS = ("text", "jsonl", "tfds")

DEFAULT_MAX_LINE_BYTES = 1 << 20  # 1 MiB: no sentence is that long; such a line is a broken file.

SKIPPED_LINES_SHOWN = 5  # per reason and worker; the rest are only counted (sources.SkipLog)


def input_format(pattern: str, requested: str = "auto") -> str:
    """``requested`` unless "auto": tfds: prefix -> tfds, *.jsonl / *.json(.gz) -> jsonl, else text."""
    if requested != "auto":
        return requested
    if pattern.startswith("tfds:"):
        return "tfds"
    if pattern.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz")):
        return "jsonl"
    return "text"
