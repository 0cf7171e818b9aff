"""make_pretrain inputs other than BERT-format text: JSONL, tensorflow-datasets, hostile lines."""

from __future__ import annotations

import json
import os

import pytest

from data_pipelines import make_pretrain, sources


def _argv(pattern, vocab, out, *extra):
    return ["--objective=bert", f"--input={pattern}", f"--output_dir={out}", f"--vocab={vocab}",
            "--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=1", "--num_shards=2",
            "--direct_num_workers=1", *extra]


def test_split_sentences():
    text = 'He said "Go." Then he left. e.g. this stays.\nA new line 3.5 m long!  Done?'
    assert [text[a:b] for a, b in sources.split_sentences(text)] == [
        'He said "Go."', "Then he left. e.g. this stays.", "A new line 3.5 m long!", "Done?"]
    assert sources.split_sentences("   \n ") == []


def test_read_jsonl_units_and_bad_lines():
    import io

    lines = [
        json.dumps({"text": "Angela Merkel met Joe Biden. They talked in Zürich.",
                    "units": [[0, 13], [18, 27], [44, 50], [5, 40], [3]]}),
        "{not json",
        json.dumps({"body": "no text field"}),
        json.dumps({"text": "   "}),
        json.dumps({"text": "nul \x00 inside"}),
    ]
    raw = ("\n".join(lines) + "\n").encode("utf-8") + b'{"text": "\xff"}\n'
    skipped = []
    docs = list(sources.read_jsonl_documents(io.BytesIO(raw), lambda r, n: skipped.append((r, n)),
                                             units_field="units"))
    assert len(docs) == 1
    line, sentences, units = docs[0]
    assert (line, sentences) == (1, ["Angela Merkel met Joe Biden.", "They talked in Zürich."])
    # Byte offsets within each sentence: "Zürich" is 7 bytes from byte 15 of the second one.
    assert units == [[(0, 13), (18, 27)], [(15, 22)]]
    assert sorted(skipped) == sorted([("bad_units", 1), ("bad_units", 1), ("invalid_json", 2),
                                      ("no_text_field", 3), ("empty_document", 4), ("nul_byte", 5),
                                      ("invalid_utf8", 6)])


def test_jsonl_input_end_to_end(tmp_path, tiny_vocab_path, sentences):
    _sentences = sentences

    docs = [" ".join(t.capitalize() for t in _sentences(k, 5)) for k in range(8)]
    path = tmp_path / "docs.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for k, d in enumerate(docs):
            f.write(json.dumps({"id": k, "content": d}) + "\n")
        f.write("{broken\n")
    out = str(tmp_path / "out")
    stats = make_pretrain.run(_argv(str(path), tiny_vocab_path, out, "--text_field=content"))
    assert stats["documents_read"] == 8 and stats["lines_skipped"] == {"invalid_json": 1}
    # "The cat sat ." style sentences end with "." before a capital: 5 per document.
    assert stats["sentences_read"] == 40
    assert stats["instances"] > 0
    info = json.load(open(os.path.join(out, "info.json")))
    assert info["arguments"]["input_format"] == "jsonl"


def test_tfds_input_end_to_end(tmp_path, tiny_vocab_path, sentences):
    import tensorflow as tf
    import tensorflow_datasets as tfds
    _sentences = sentences

    texts = [" ".join(t.capitalize() for t in _sentences(100 + k, 4)) for k in range(12)] + [""]
    builder = tfds.dataset_builders.TfDataBuilder(
        name="garden_tiny_text", config="plain", version="1.0.0", data_dir=str(tmp_path / "tfds"),
        split_datasets={"train": tf.data.Dataset.from_tensor_slices({"text": texts})},
        features=tfds.features.FeaturesDict({"text": tfds.features.Text()}))
    builder.download_and_prepare()  # writes local files only: nothing to download
    out = str(tmp_path / "out")
    stats = make_pretrain.run(_argv("tfds:garden_tiny_text/plain:train", tiny_vocab_path, out,
                                    f"--tfds_data_dir={tmp_path / 'tfds'}"))
    assert stats["documents_read"] == 12 and stats["documents_dropped"] == {"empty_document": 1}
    assert stats["sentences_read"] == 48 and stats["instances"] > 0
    with pytest.raises(SystemExit, match="prepare it first"):
        make_pretrain.run(_argv("tfds:no_such_dataset:train", tiny_vocab_path, str(tmp_path / "o2"),
                                f"--tfds_data_dir={tmp_path / 'tfds'}"))


def test_huge_line_is_skipped_not_loaded(tmp_path, tiny_vocab_path, sentences):
    _sentences = sentences

    path = tmp_path / "big.txt"
    with open(path, "wb") as f:
        f.write("\n".join(_sentences(1, 6)).encode() + b"\n")
        f.write(b"cat " * (50 * 1024 * 1024 // 4) + b"\n")  # one 50 MB line
        f.write("\n".join(_sentences(2, 6)).encode() + b"\n\n")
        f.write("\n".join(_sentences(3, 6)).encode() + b"\n")
    out = str(tmp_path / "out")
    stats = make_pretrain.run(_argv(str(path), tiny_vocab_path, out))  # default --max_line_bytes (1 MiB)
    assert stats["lines_skipped"] == {"line_too_long": 1}
    assert stats["documents_read"] == 2 and stats["sentences_read"] == 18
    assert os.path.exists(os.path.join(out, "COMPLETED"))
