"""tfds:glue/<task> and tfds:hellaswag through tensorflow_datasets.testing.mock_data (no
downloads: MockPolicy.USE_CODE takes features and ClassLabel names from the builders' code;
the examples are ours, through as_dataset_fn), and the refusals for tfds:swag and a dataset
that is not prepared."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from text.finetune import FinetuneDataError, classification, tfds_sources


def _mocked(records):
    def as_dataset(self, *args, **kwargs):
        columns = {k: [r[k] for r in records] for k in records[0]}
        return tf.data.Dataset.from_tensor_slices(columns)

    return tfds.testing.mock_data(policy=tfds.testing.MockPolicy.USE_CODE,
                                  as_dataset_fn=as_dataset)


def test_glue_labels_become_the_tsv_strings(tmp_path):
    records = [{"premise": b"A man sleeps.", "hypothesis": b"A man is awake.", "label": 2,
                "idx": 0},
               {"premise": b"A dog runs.", "hypothesis": b"An animal moves.", "label": 0,
                "idx": 1},
               {"premise": b"Test.", "hypothesis": b"Unknown.", "label": -1, "idx": 2}]
    with _mocked(records):
        examples = tfds_sources.read_glue("tfds:glue/mnli:validation_matched", str(tmp_path))
    # TFDS's MNLI order is [entailment, neutral, contradiction]: 2 -> contradiction.
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [
        ("A man sleeps.", "A man is awake.", "contradiction"),
        ("A dog runs.", "An animal moves.", "entailment"), ("Test.", "Unknown.", None)]
    assert tfds.builder("glue/mnli").info.features["label"].names == list(
        classification.LABEL_ORDERS["mnli"]["tfds"])


@pytest.mark.parametrize("task, record, expected", [
    ("mrpc", {"sentence1": b"a", "sentence2": b"b", "label": 1, "idx": 0}, ("a", "b", "1")),
    ("wnli", {"sentence1": b"a", "sentence2": b"b", "label": 1, "idx": 0}, ("a", "b", "1")),
    ("qnli", {"question": b"q?", "sentence": b"s", "label": 1, "idx": 0},
     ("q?", "s", "not_entailment")),
    ("cola", {"sentence": b"ok", "label": 0, "idx": 0}, ("ok", None, "0")),
    ("stsb", {"sentence1": b"a", "sentence2": b"b", "label": np.float32(3.5), "idx": 0},
     ("a", "b", 3.5)),
])
def test_each_layout_maps_to_glue_examples(tmp_path, task, record, expected):
    with _mocked([record]):
        (example,) = tfds_sources.read_glue(f"tfds:glue/{task}:train", str(tmp_path))
    assert (example.text_a, example.text_b, example.label) == expected


def test_hellaswag_becomes_four_choice_examples(tmp_path):
    endings = [b"runs.", b"sleeps.", b"eats.", b"sits."]
    record = {"context": b"A man", "endings": endings, "label": 2, "activity_label": b"x",
              "source_id": b"s", "split_type": b"indomain"}
    with _mocked([record]):
        (example,) = tfds_sources.read_choices("tfds:hellaswag:validation", str(tmp_path))
    assert example.context == "A man" and example.label == 2
    assert example.pairs()[2] == ("A man", "eats.")
    with _mocked([dict(record, endings=endings[:3] + [b"x", b"y"])]):
        with pytest.raises(FinetuneDataError, match="record 0: 5 endings, expected 4"):
            tfds_sources.read_choices("tfds:hellaswag:validation", str(tmp_path))


def test_refusals(tmp_path):
    with pytest.raises(FinetuneDataError, match="no SWAG builder"):
        tfds_sources.read_choices("tfds:swag:train", str(tmp_path))
    with pytest.raises(FinetuneDataError, match="expected tfds:glue/<task>"):
        tfds_sources.read_glue("tfds:glue/nope:train", str(tmp_path))
    # Not mocked: an unprepared dataset is named, nothing is downloaded.
    with pytest.raises(FinetuneDataError, match=r"tfds:glue/rte:train: not a prepared"):
        tfds_sources.read_glue("tfds:glue/rte:train", str(tmp_path))
