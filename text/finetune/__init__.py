"""Fine-tuning data in the official formats of the tasks the BERT family was judged on.

One module per task kind, named after the kind (text/kinds.py; docs/tasks.md):
    classification.py      GLUE TSVs: the nine tasks' column layouts and label sets
                           (classification and STS-B regression); MNLI matched and mismatched
    multiple_choice.py     SWAG CSV (four-way multiple choice)
    question_answering.py  windowed features for extractive QA, of the questions that
                           squad.py reads (SQuAD v1.1 / v2.0 JSON) over the doc-stride
                           windows of windows.py
    tagging.py             CoNLL-2003 (IOB1 as distributed, IOB2 accepted); first-sub-token
                           labels

Readers raise FinetuneDataError naming the file and the line (or record) of a bad row; they
never convert a value of the wrong type into a string or a class.

A kind that `python -m data_pipelines.make_finetune` writes (question_answering, tagging) is a
module whose ``KIND`` is a ``base.FinetuneKind`` record (flags, options, reader, record spec and the
one ``records`` function the job calls); KINDS below is the whole table, imported on demand (no
import side effects). A FinetuneDataError from a reader ends the job with its message; one for
a single example skips that example and is counted.
"""

from typing import Tuple


class FinetuneDataError(ValueError):
    """A fine-tuning data file is missing or malformed; the message names file and line/record."""


# --task -> the module whose KIND the job uses, imported on first use.
KINDS = {"question_answering": "text.finetune.question_answering",
         "tagging": "text.finetune.tagging"}


def get(name: str):
    """The FinetuneKind of --task=name; ImportError naming what is missing."""
    import importlib

    if name not in KINDS:
        from text import kinds

        retired = kinds.renamed(f"--task={name}")
        raise ImportError(retired or f"unknown --task={name!r}; expected one of {sorted(KINDS)}")
    return importlib.import_module(KINDS[name]).KIND


def parse_tfds(spec: str) -> Tuple[str, str]:
    """"tfds:NAME[/CONFIG][:SPLIT]" -> ("NAME[/CONFIG]", SPLIT (default "train"))."""
    body = spec[len("tfds:"):]
    name, _, split = body.partition(":")
    if not name:
        raise ValueError(f"--input={spec}: expected tfds:NAME[/CONFIG][:SPLIT]")
    return name, split or "train"
