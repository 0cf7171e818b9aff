"""Progress lines from the files a job has written so far (data_pipelines/progress.py)."""

import logging
import time

from data_pipelines import progress


def test_progress_counts_files_as_they_appear_and_stops_with_the_block(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    seen = []

    def describe(counts, elapsed):
        seen.append(counts["parts"])
        return f"parts {counts['parts']} after {elapsed:.2f} s"

    with progress.Progress({"parts": str(tmp_path / "work" / "*.bin")}, describe, 0.01):
        for k in range(3):
            (tmp_path / "work").mkdir(exist_ok=True)  # absent at first: counted as 0
            (tmp_path / "work" / f"{k}.bin").write_bytes(b"x")
            (tmp_path / "work" / f"{k}.bin.tmp-1").write_bytes(b"x")  # not a finished part
            deadline = time.monotonic() + 30
            while k + 1 not in seen and time.monotonic() < deadline:
                time.sleep(0.005)
    assert {1, 2, 3} <= set(seen) and seen == sorted(seen)
    assert any(r.getMessage().startswith("parts 3 after ") for r in caplog.records)
    calls = len(seen)
    time.sleep(0.1)
    assert len(seen) == calls  # the thread ended with the block


def test_progress_off_at_zero_seconds(tmp_path):
    calls = []
    with progress.Progress({"parts": str(tmp_path / "*")}, lambda c, e: calls.append(c) or "", 0):
        time.sleep(0.05)
    assert calls == []
    assert progress.count_files(str(tmp_path / "missing" / "*.bin")) == 0
