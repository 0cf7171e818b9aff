"""Reading sentence-per-line text: document splitting and bad-line handling."""

import io

from data_pipelines import sources


def _read(data, max_line_bytes=sources.DEFAULT_MAX_LINE_BYTES):
    skips = []
    docs = list(sources.read_documents(io.BytesIO(data), lambda r, n: skips.append((r, n)), max_line_bytes))
    return docs, skips


def test_documents_split_at_blank_and_whitespace_lines():
    docs, skips = _read(b"a b.\nc d.\n\n\n e f. \n \t\ng h.\r\n")
    assert docs == [["a b.", "c d."], ["e f."], ["g h."]]
    assert skips == []


def test_bad_lines_are_skipped_with_line_numbers(monkeypatch):
    monkeypatch.setattr(sources, "_READ_CHUNK", 7)  # lines straddle read chunks
    data = b"ok one.\n\xff\xfe bad\nok two.\n" + b"x" * 50 + b"\nok three.\n\n\xc3\x28\n\nlast."
    docs, skips = _read(data, max_line_bytes=20)
    assert docs == [["ok one.", "ok two.", "ok three."], ["last."]]
    assert skips == [(sources.INVALID_UTF8, 2), (sources.LINE_TOO_LONG, 4),
                     (sources.INVALID_UTF8, 7), (sources.EMPTY_DOCUMENT, 8)]


def test_iter_lines_without_trailing_newline():
    assert list(sources.iter_lines(io.BytesIO(b"a\nb"))) == [(1, b"a"), (2, b"b")]
    assert list(sources.iter_lines(io.BytesIO(b""))) == []


def test_relative_paths_are_stable_across_roots():
    assert sources.glob_base("gs://bucket/data/*/part-*.txt") == "gs://bucket/data/"
    assert sources.relative_path("gs://bucket/data/x/part-1.txt", "gs://bucket/data/*/part-*.txt") == "x/part-1.txt"
    assert sources.relative_path("/tmp/a/b/c.txt", "/tmp/a/**.txt") == "b/c.txt"
    assert sources.relative_path("/other/root/a/b/c.txt", "/other/root/a/**.txt") == "b/c.txt"


def test_skip_log_names_the_first_few_of_each_reason_then_counts(tmp_path, caplog):
    """make_vocab (and each make_pretrain worker) name at most SHOWN skipped lines per reason:
    12 invalid lines and then 3 NUL lines give 5 + 3 named lines and one "further" line, not
    15 warnings, and not 5 that hide the second reason; the counts stay exact."""
    import logging

    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"ok one .\n" + b"bad \xff .\n" * 12 + b"nul \x00 .\n" * 3 + b"ok two .\n")
    caplog.set_level(logging.WARNING)
    log = sources.SkipLog()
    assert list(sources.iter_sentences([str(corpus)], log)) == ["ok one .", "ok two ."]
    messages = [r.getMessage() for r in caplog.records]
    shown = sources.SkipLog.SHOWN
    assert messages == ([f"skipping line {2 + k} of {corpus}: invalid_utf8" for k in range(shown)]
                        + ["further invalid_utf8 lines are counted, not listed (a count per reason follows "
                           "at the end)"]
                        + [f"skipping line {14 + k} of {corpus}: nul_byte" for k in range(3)])
    assert log.counts == {"invalid_utf8": 12, "nul_byte": 3}
    assert log.summary() == "skipped 15 lines {'invalid_utf8': 12, 'nul_byte': 3}"
    # A second pass (make_vocab's learner reads the files again) names nothing more.
    caplog.clear()
    log.counts.clear()
    list(sources.iter_sentences([str(corpus)], log))
    assert not caplog.records and log.counts == {"invalid_utf8": 12, "nul_byte": 3}
