"""Counters of the data jobs: a plain {name: count} record per element plus the Beam counter
of the same name, and the CombineFn that sums the records into stats.json.

The records, not Beam's metrics, are what stats.json is made of: not every runner reports
metrics back (a dry run, some portable runners), and summed records are exact on retries.
"""

from __future__ import annotations

from typing import Dict

import apache_beam as beam

NAMESPACE = "data_pipelines"  # Beam metrics namespace of every job


def count(stats: Dict[str, int], name: str, n: int = 1) -> None:
    """Adds ``n`` to ``stats[name]`` and to the Beam counter of the same name."""
    if n:
        stats[name] = stats.get(name, 0) + n
        beam.metrics.Metrics.counter(NAMESPACE, name).inc(n)


class SumDictsFn(beam.CombineFn):
    """Sums {name: count} records: the job's counters, independent of the runner's metrics."""

    def create_accumulator(self):
        return {}

    def add_input(self, acc, record):
        for k, v in record.items():
            acc[k] = acc.get(k, 0) + v
        return acc

    def merge_accumulators(self, accs):
        out: Dict[str, int] = {}
        for acc in accs:
            self.add_input(out, acc)
        return out

    def extract_output(self, acc):
        return dict(sorted(acc.items()))
