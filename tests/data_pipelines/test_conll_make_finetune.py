"""make_finetune --task=tagging: the records equal tagging.example_features of the file's sentences
in input order (long sentences as several pieces), and garden.Tagging reads the directory
(train batches through tf.data, eval records rejoined per sentence) as it reads the file."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from text import tokenizers
from data_pipelines import make_finetune
from text.finetune import tagging

from conll_testing import ENG_TRAIN_HEAD, VOCAB

LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-MISC", "I-MISC"]
TEXT = ENG_TRAIN_HEAD + """
Peter NNP B-NP I-PER
rejects VBZ B-VP O
. . O O
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("conll_mf")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    data = root / "eng.train"
    data.write_text(TEXT, encoding="utf-8")
    out = str(root / "out")
    make_finetune.run(["--task=tagging", f"--input={data}", f"--vocab={vocab}",
                       f"--output_dir={out}", "--max_seq_length=8", "--num_shards=2",
                       f"--conll_labels={','.join(LABELS)}", "--progress_seconds=0"])
    return str(vocab), str(data), out


def test_records_equal_example_features(made):
    vocab, data, out = made
    options = tagging.ConllOptions(8, "iob1", tuple(LABELS))
    tokenizer = tokenizers.load_tokenizer("wordpiece", vocab)
    expected = [r for i, s in enumerate(tagging.read_examples(data))
                for r in tagging.example_features(s, tokenizer, options, i)]
    files = sorted(glob.glob(os.path.join(out, "train-*.tfrecord")))
    spec = tagging.feature_spec(options)
    records = [{k: v.numpy().tolist() for k, v in tf.io.parse_single_example(x, spec).items()}
               for x in tf.data.TFRecordDataset(files)]
    key = lambda r: (r["example_index"], r["piece_index"])  # noqa: E731
    assert sorted(records, key=key) == sorted(expected, key=key)
    assert max(r["piece_index"] for r in records) == 1  # 11 pieces in rows of 6: 5 + 6
    info = json.load(open(os.path.join(out, "info.json")))
    assert info["task"] == "tagging" and info["options"]["label_names"] == LABELS


def test_token_tagging_reads_the_directory_like_the_file(made):
    from garden.tasks.tagging import Tagging, rejoin

    vocab, data, out = made
    from_file = Tagging(backbone=None, vocab=vocab, train_data=data, eval_data=data,
                        max_seq_length=8, label_names=LABELS)
    from_file.prepare()
    from_dir = Tagging(backbone=None, vocab=vocab, train_data=out, eval_data=out,
                       max_seq_length=8)
    from_dir.prepare()  # label names from info.json
    assert list(from_dir.label_names) == LABELS
    a, b = from_file.eval_arrays, from_dir.eval_arrays
    gold_a = rejoin(a, a["label_ids"])
    gold_b = rejoin(b, b["label_ids"])
    assert gold_a == gold_b and [len(gold_a[k][0]) for k in sorted(gold_a)] == [9, 2, 3]

    train_only = Tagging(backbone=None, vocab=vocab, train_data=out, eval_data=data,
                         max_seq_length=8)
    train_only.prepare()
    batch = next(iter(train_only.schedule(10)[0].dataset_fn(None, 4, 0, 0)))
    assert batch["token_ids"].shape == (4, 8) and batch["label_ids"].shape == (4, 8)
    wrong = Tagging(backbone=None, vocab=vocab, train_data=out, eval_data=data,
                    max_seq_length=16)
    with pytest.raises(ValueError, match="made with max_seq_length 8, the task has 16"):
        wrong.prepare()
    np.testing.assert_array_equal(sorted(a["example_index"]), sorted(b["example_index"]))
