"""The reading stage's ETA of the Beam jobs' progress lines, from the input's size
(data_pipelines/jobs.py ReadingEta)."""

import gzip

from data_pipelines.jobs import ReadingEta


def _corpus(path, documents, sentence="A sentence of the corpus, about fifty bytes long."):
    path.write_text("".join(f"{sentence}\n{sentence}\n\n" for _ in range(documents)))
    return path


def test_expected_chunks_follow_the_input_size(tmp_path):
    _corpus(tmp_path / "a.txt", 100)
    _corpus(tmp_path / "b.txt", 30)  # 30 documents: 3 chunks of 10
    eta = ReadingEta.of_input(str(tmp_path / "*.txt"), "text", None, per_chunk=10)
    # Documents per byte counted on a.txt (whole: under SAMPLE_BYTES): 10 + 3 chunks.
    size = (tmp_path / "a.txt").stat().st_size + (tmp_path / "b.txt").stat().st_size
    assert eta == ReadingEta(input_bytes=size, expected_chunks=13)
    # 4 of 13 chunks in 20 s: 9 left at 0.2 chunks/s.
    assert eta.describe(4, 20.0) == f" | reading 31% of {size / 1e3:.1f} kB, ETA 0:00:45"
    assert eta.describe(0, 3.0) == f" | reading 0% of {size / 1e3:.1f} kB, ETA ?"
    assert ReadingEta(40_100_000, 10).describe(5, 1.0) == " | reading 50% of 40.1 MB, ETA 0:00:01"
    assert eta.describe(13, 60.0).endswith(": done (estimated)")
    assert eta.describe(9, 60.0, read=True) == f" | reading {size / 1e3:.1f} kB: done"


def test_jsonl_counts_lines_and_unknown_sizes_give_no_eta(tmp_path):
    (tmp_path / "c.jsonl").write_text('{"text": "One. Two."}\n' * 40)
    assert ReadingEta.of_input(str(tmp_path / "c.jsonl"), "jsonl", None, 8).expected_chunks == 5
    with gzip.open(tmp_path / "d.txt.gz", "wt") as f:
        f.write("a\n\nb\n")
    assert ReadingEta.of_input(str(tmp_path / "d.txt.gz"), "text", None, 8) is None
    assert ReadingEta.of_input("wikipedia/20230601.en:train", "tfds", None, 8) is None
    assert ReadingEta.of_input(str(tmp_path / "none*.txt"), "text", None, 8) is None
