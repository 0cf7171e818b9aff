"""What every fine-tuning kind gives the Beam job (``data_pipelines.make_finetune``), as one
plain record, like the pre-training ``Objective`` (data_pipelines/objectives/base.py): the
job knows nothing kind-specific.

The job reads each input file (or tfds shard) with ``read_examples`` (``read_tfds``), cuts the
examples into chunks, and asks ``records(examples, tokenizer, options, first_index, on_error)``
for the serialized tf.train.Examples of each chunk; ``record_spec(options)`` is what they are
serialized with and what info.json records.

The readers share ``read_text`` (a data file's UTF-8 text, errors naming the file and line).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from text import features
from text.finetune import FinetuneDataError

# An example the kind cannot featurize: on_error(its index in the input, the error); the
# example gets no records (the job names the first few in its log and counts them).
OnError = Callable[[int, FinetuneDataError], None]
# records(examples, tokenizer, options, first_index, on_error) -> [(example index, record index
# within the example, serialized tf.train.Example)] in example then record order; example k of
# the chunk has index first_index + k. Without on_error a FinetuneDataError is raised.
RecordsFn = Callable[[Sequence, Any, Any, int, Optional[OnError]], List[Tuple[int, int, bytes]]]


@dataclasses.dataclass(frozen=True)
class FinetuneKind:
    """One fine-tuning data kind as make_finetune sees it.

    name: the --task value.
    add_flags: adds the kind's own flags (with documented defaults) to an argparse group.
    make_options: parsed flags (common + own; ``tokenizer`` resolved) -> the kind's frozen
      options; ValueError for a bad combination.
    read_examples: path -> the examples of one file, in file order; FinetuneDataError naming
      the file and line (or record) of a malformed one ends the job.
    record_spec: options -> features.Spec of the written records (no TensorFlow needed).
    records: see RecordsFn; the one featurisation path of the job.
    read_tfds: (name, split, data_dir) -> the examples of a prepared tensorflow-datasets split
      (``split`` may be "train[3shard]"), for --input=tfds:NAME[/CONFIG][:SPLIT]; None when the
      kind has no tfds source.
    """

    name: str
    add_flags: Callable[[Any], None]
    make_options: Callable[[argparse.Namespace], Any]
    read_examples: Callable[[str], list]
    record_spec: Callable[[Any], features.Spec]
    records: RecordsFn
    read_tfds: Optional[Callable[[str, str, Optional[str]], list]] = None


def spec_of_parsing(tf_spec) -> features.Spec:
    """A {name: tf.io.FixedLenFeature} parsing spec as text.features' Spec (a scalar is
    one value)."""
    spec = {}
    for name, f in tf_spec.items():
        length = 1
        for d in f.shape:
            length *= int(d)
        spec[name] = features.Feature("float32" if f.dtype.is_floating else "int64", length)
    return spec


def _values(record: Dict, spec: features.Spec, index: int) -> Dict:
    """A record (name -> int | list) as lists of values, with example_index set to ``index``."""
    row = {name: (value if isinstance(value, (list, tuple)) else [value]) for name, value in record.items()}
    if "example_index" in spec:
        row["example_index"] = [index]
    return row


def records_by_example(example_features: Callable[..., List[Dict]], record_spec: Callable[[Any], features.Spec],
                       to_records: Optional[Callable[[Dict], Dict]] = None) -> RecordsFn:
    """A kind's ``records`` from its per-example features:
    ``example_features(example, tokenizer, options, example_index=i)`` -> one dict per record
    (name -> int | list of int), optionally turned into their stored form by ``to_records``,
    serialized with ``record_spec(options)``."""

    def records(examples: Sequence, tokenizer, options, first_index: int = 0,
                on_error: Optional[OnError] = None) -> List[Tuple[int, int, bytes]]:
        spec = record_spec(options)
        keys, rows = [], []
        for k, example in enumerate(examples):
            index = first_index + k
            try:
                made = example_features(example, tokenizer, options, example_index=index)
            except FinetuneDataError as e:
                if on_error is None:
                    raise
                on_error(index, e)
                continue
            for j, record in enumerate(made):
                keys.append((index, j))
                rows.append(_values(to_records(record) if to_records else record, spec, index))
        return [(i, j, r) for (i, j), r in zip(keys, features.serialize_examples(spec, rows))]

    return records


def records_of_columns(spec: features.Spec, columns: Dict) -> List[Tuple[int, int, bytes]]:
    """(example index, record index within the example, tf.train.Example bytes) of each row of
    int64 columns (name -> [N, length]; rows in example order, an example's records in order),
    serialized by features.serialize_columns: the reference that a kind's faster records (e.g.
    question_answering.examples_records) are tested against."""
    if not columns or not len(next(iter(columns.values()))):
        return []
    n = len(columns["example_index"])
    lengths = {name: [spec[name].length] * n for name in spec}
    serialized = features.serialize_columns(spec, columns, lengths)
    index = columns["example_index"][:, 0].tolist()
    within = [0] * n
    for r in range(1, n):  # the position of a row among its example's rows
        within[r] = within[r - 1] + 1 if index[r] == index[r - 1] else 0
    return list(zip(index, within, serialized))


def read_text(path: str) -> str:
    """The UTF-8 text of a data file (local or gs://); FinetuneDataError names the file (and
    line) otherwise. The readers of classification and multiple-choice files share it."""
    import tensorflow as tf  # only when a file is read: the Beam job imports this module

    if not tf.io.gfile.exists(path):
        raise FinetuneDataError(f"data file not found: {path}")
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise FinetuneDataError(f"{path}:{line}: invalid UTF-8") from e
