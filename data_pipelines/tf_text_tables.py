"""Per-codepoint facts read off tensorflow-text's ops, so that the Beam job can tokenize without
TensorFlow and still give tensorflow-text's ids: ``python -m data_pipelines.tf_text_tables``
re-derives them from the installed tensorflow-text into ``tf_text_tables.json.gz`` (shipped
with the package; tests/data_pipelines/test_wordpiece.py re-derives and compares them).

Keys of the tables:

* ``normalize_lower`` / ``normalize_cased``: codepoint -> FastBertNormalizer's output for it
  (lower_case_nfd_strip_accents True / False), for the codepoints it changes. The normaliser is
  a per-codepoint map by construction (a trie from codepoints to strings).
* ``space`` / ``punct``: [first, last] codepoint ranges that FastWordpieceTokenizer's
  pre-tokenization treats as whitespace (a split) and as a one-character word (punctuation,
  CJK characters).
* ``source``: the tensorflow-text version they were read from.
"""

from __future__ import annotations

import gzip
import json
import os
from typing import List

TABLES_PATH = os.path.join(os.path.dirname(__file__), "tf_text_tables.json.gz")
MAX_CODEPOINT = 0x10FFFF


def all_codepoints() -> List[int]:
    return [c for c in range(MAX_CODEPOINT + 1) if not 0xD800 <= c <= 0xDFFF]


def ranges(codepoints) -> List[List[int]]:
    out: List[List[int]] = []
    for c in sorted(codepoints):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def derive_tables() -> dict:
    """The tables, read off the installed tensorflow-text (imports TensorFlow; ~10 s)."""
    import tensorflow as tf
    import tensorflow_text as tf_text

    codepoints = all_codepoints()
    chars = [chr(c).encode("utf-8") for c in codepoints]
    batch = tf.constant(chars)

    def changed(out):
        return {str(c): o.decode("utf-8") for c, b, o in zip(codepoints, chars, out) if o != b}

    tables = {"source": f"tensorflow-text {tf_text.__version__}"}
    for name, lower in (("normalize_lower", True), ("normalize_cased", False)):
        normalizer = tf_text.FastBertNormalizer(lower_case_nfd_strip_accents=lower)
        tables[name] = changed(normalizer.normalize(batch).numpy().tolist())
    # "a<c>a" with only a / ##a known: whitespace -> [a, a]; a word of its own -> [a, UNK, a];
    # a character that joins the word -> [UNK] (the word "a<c>a" has no pieces).
    probe = tf_text.FastWordpieceTokenizer(
        vocab=["[UNK]", "a", "##a"], suffix_indicator="##", max_bytes_per_word=100, token_out_type=tf.int64,
        unknown_token="[UNK]", no_pretokenization=False, support_detokenization=False)
    rows = probe.tokenize(tf.constant([b"a" + c + b"a" for c in chars])).to_list()
    tables["space"] = ranges(c for c, r in zip(codepoints, rows) if r == [1, 1])
    tables["punct"] = ranges(c for c, r in zip(codepoints, rows) if r == [1, 0, 1])
    return tables


def write_tables(path: str = TABLES_PATH) -> None:
    data = json.dumps(derive_tables(), sort_keys=True, separators=(",", ":")).encode("utf-8")
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # mtime 0: the same bytes for the same tables
        f.write(data)


def load_tables(path: str = TABLES_PATH) -> dict:
    with gzip.open(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))


def main() -> None:
    write_tables()
    tables = load_tables()
    print(f"wrote {TABLES_PATH} from {tables['source']}: {len(tables['normalize_lower'])} lower-case and "
          f"{len(tables['normalize_cased'])} cased normaliser mappings, {len(tables['space'])} whitespace and "
          f"{len(tables['punct'])} punctuation ranges")


if __name__ == "__main__":
    main()
