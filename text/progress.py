"""Progress lines with an ETA for work of a known size, one line per interval.

The tools that otherwise run silently for minutes (make_vocab's reading of the corpus,
garden.analyze, garden.fewshot) know their amount of work before they start (the corpus's
bytes, the number of sentences or examples): ``Eta`` turns what is done so far into one line
every ``seconds`` (never one per item), in the format of garden.train's log line:

  [make_vocab] reading the corpus: 12.3/40.1 MB (31%) | 2.1 MB/s | ETA 0:00:13

The ETA is the remaining amount at the mean rate since the start. text/ is the lowest layer
(data_pipelines and garden both import it), so both kinds of tool share this one helper.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Iterable, Iterator, Optional, TypeVar

T = TypeVar("T")

# Seconds between two lines when the caller does not say (analyze, fewshot).
DEFAULT_SECONDS = 10.0


def format_eta(seconds: float) -> str:
    """H:MM:SS of a non-negative duration (negative: 0:00:00); 3725.9 s -> "1:02:05"."""
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _amount(n: float, unit: str) -> str:
    return f"{n / 1e6:.1f}" if unit == "MB" else f"{n:.0f}"


class Eta:
    """``Eta("[analyze] sentences", total=1000)``; ``.add(n)`` / ``.update(done)`` print the
    progress line when ``seconds`` have passed since the last one (``seconds`` <= 0: never).
    ``unit="MB"`` shows byte counts in MB; ``seconds`` None: DEFAULT_SECONDS. ``emit`` takes
    each line (default: stderr)."""

    def __init__(self, what: str, total: float, *, unit: str = "", seconds: Optional[float] = None,
                 emit: Optional[Callable[[str], None]] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.what, self.total, self.unit = what, max(float(total), 0.0), unit
        self.seconds = DEFAULT_SECONDS if seconds is None else seconds
        self.emit = emit or (lambda line: print(line, file=sys.stderr, flush=True))
        self.clock, self.done_amount = clock, 0.0
        self._start = self._last = clock()

    def line(self) -> str:
        """'<what>: 120/1000 sentences (12%) | 3.4 sentences/s | ETA 0:04:18'."""
        elapsed = max(self.clock() - self._start, 1e-9)
        rate = self.done_amount / elapsed
        # Compressed input reads more bytes than the files hold: never past 100%.
        done = min(self.done_amount, self.total) if self.total else self.done_amount
        unit = f" {self.unit}" if self.unit else ""
        if self.total:
            eta = format_eta((self.total - done) / rate) if rate > 0 else "?"
            where = (f"{_amount(done, self.unit)}/{_amount(self.total, self.unit)}{unit} "
                     f"({100 * done / self.total:.0f}%)")
        else:
            eta, where = "?", f"{_amount(done, self.unit)}{unit}"
        speed = f"{rate / 1e6:.2f}" if self.unit == "MB" else f"{rate:.1f}"
        return f"{self.what}: {where} | {speed}{unit or ' items'}/s | ETA {eta}"

    def update(self, done: float) -> Optional[str]:
        """Sets the amount done; returns (and emits) the line when an interval has passed."""
        self.done_amount = done
        now = self.clock()
        if self.seconds <= 0 or now - self._last < self.seconds:
            return None
        self._last = now
        line = self.line()
        self.emit(line)
        return line

    def add(self, n: float = 1) -> Optional[str]:
        return self.update(self.done_amount + n)

    def wrap(self, items: Iterable[T], size: Callable[[T], float] = lambda _: 1) -> Iterator[T]:
        """``items`` unchanged, counting ``size(item)`` of each once it is done (when the next
        one is asked for): ``for s in eta.wrap(sentences): slow(s)``."""
        for item in items:
            yield item
            self.add(size(item))
