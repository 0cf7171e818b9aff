"""Classification and regression data: the nine GLUE tasks' TSV files as the GLUE benchmark
distributes them, read strictly.

`read_examples(path, task)` -> [GlueExample(guid, text_a, text_b, label)] in file order;
`read_split(data_dir, task, split)` finds the split's file (train.tsv, dev.tsv, test.tsv; MNLI:
dev_matched.tsv, dev_mismatched.tsv, test_matched.tsv, test_mismatched.tsv).

Column layouts (GLUE's own files; all tab-separated with no quoting: a quote is text):
    task  header  text_a        text_b      label (train/dev)   labels        metric
    cola  none    column 3      -           column 1            0 1           MCC
    sst2  yes     sentence      -           label               0 1           accuracy
    mrpc  yes     #1 String     #2 String   Quality             0 1           F1 (1), accuracy
    qqp   yes     question1     question2   is_duplicate        0 1           F1 (1), accuracy
    stsb  yes     sentence1     sentence2   score               [0, 5] float  Pearson, Spearman
    mnli  yes     sentence1     sentence2   gold_label          see below     accuracy m / mm
    qnli  yes     question      sentence    label               entailment not_entailment
    rte   yes     sentence1     sentence2   label               entailment not_entailment
    wnli  yes     sentence1     sentence2   label               0 1           accuracy
A test file has no label column (CoLA's test.tsv has the header `index<TAB>sentence`); its
examples have label None. MRPC's test.tsv names its first column `index` instead of `Quality`.

Labels are kept as the strings of the files (STS-B: a float); a model's class order is the
`labels` list of LABEL_ORDERS[task][order], stored with the model and the export. The MNLI order
differs between codebases: BERT / Model Garden [contradiction, entailment, neutral], TFDS /
Hugging Face [entailment, neutral, contradiction]; `check_label_order` refuses to score a model
trained with one order against class ids of another (which would silently swap classes).

guid: "<task>-<file name>-<line>" (unique per row; Model Garden's QNLI reader gives every
example the same id). Malformed rows (a wrong number of fields, a label outside the task's set,
a non-numeric STS-B score, invalid UTF-8) raise FinetuneDataError "file:line: what".
"""

from __future__ import annotations

import csv
import dataclasses
import io
import posixpath
from typing import Dict, List, Optional, Sequence, Union

from text.finetune import FinetuneDataError
from text.finetune.base import read_text


@dataclasses.dataclass(frozen=True)
class GlueTask:
    name: str
    text_a: Union[str, int]  # header name, or column index for header-less CoLA
    text_b: Optional[str]
    label: Union[str, int]
    labels: Optional[tuple]  # BERT's order; None: regression (STS-B)
    metric: str  # docs/tasks.md; garden.metrics.classification
    splits: Dict[str, str]  # split -> file name


_SPLITS = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
TASKS: Dict[str, GlueTask] = {
    "cola": GlueTask("cola", 3, None, 1, ("0", "1"), "mcc", _SPLITS),
    "sst2": GlueTask("sst2", "sentence", None, "label", ("0", "1"), "accuracy", _SPLITS),
    "mrpc": GlueTask("mrpc", "#1 String", "#2 String", "Quality", ("0", "1"), "f1", _SPLITS),
    "qqp": GlueTask("qqp", "question1", "question2", "is_duplicate", ("0", "1"), "f1", _SPLITS),
    "stsb": GlueTask("stsb", "sentence1", "sentence2", "score", None, "correlation", _SPLITS),
    "mnli": GlueTask("mnli", "sentence1", "sentence2", "gold_label",
                     ("contradiction", "entailment", "neutral"), "accuracy",
                     {"train": "train.tsv", "dev_matched": "dev_matched.tsv",
                      "dev_mismatched": "dev_mismatched.tsv", "test_matched": "test_matched.tsv",
                      "test_mismatched": "test_mismatched.tsv"}),
    "qnli": GlueTask("qnli", "question", "sentence", "label", ("entailment", "not_entailment"),
                     "accuracy", _SPLITS),
    "rte": GlueTask("rte", "sentence1", "sentence2", "label", ("entailment", "not_entailment"),
                    "accuracy", _SPLITS),
    "wnli": GlueTask("wnli", "sentence1", "sentence2", "label", ("0", "1"), "accuracy", _SPLITS),
}

# The class order of each convention, as label strings of the GLUE files. TFDS's ClassLabel
# names map onto them: its integer i is GLUE's "i" for the 0/1 tasks (MRPC 1 = equivalent,
# WNLI 1 = entailment, ...), and names the same strings for MNLI / QNLI / RTE.
LABEL_ORDERS: Dict[str, Dict[str, tuple]] = {
    name: {"bert": t.labels, "tfds": t.labels} for name, t in TASKS.items() if t.labels
}
LABEL_ORDERS["mnli"] = {"bert": ("contradiction", "entailment", "neutral"),
                        "tfds": ("entailment", "neutral", "contradiction")}
ORDER_NAMES = {"bert": "BERT / Model Garden", "tfds": "TFDS / Hugging Face"}


@dataclasses.dataclass(frozen=True)
class GlueExample:
    guid: str
    text_a: str
    text_b: Optional[str]
    label: Union[str, float, None]  # None in test files


def task_spec(task: str) -> GlueTask:
    key = task.lower().replace("-", "")
    if key not in TASKS:
        raise ValueError(f"unknown GLUE task {task!r}; choose one of {', '.join(TASKS)}")
    return TASKS[key]


def label_names(task: str, order: str = "bert") -> Optional[List[str]]:
    """The task's classes in the order of a convention ("bert" or "tfds"); None for STS-B."""
    spec = task_spec(task)
    if spec.labels is None:
        return None
    if order not in ORDER_NAMES:
        raise ValueError(f"unknown label order {order!r}; choose one of {sorted(ORDER_NAMES)}")
    return list(LABEL_ORDERS[spec.name][order])


def order_of(task: str, labels: Sequence[str]) -> Optional[str]:
    """Which known convention a class list follows (first match), or None."""
    for order, names in LABEL_ORDERS.get(task_spec(task).name, {}).items():
        if tuple(labels) == names:
            return order
    return None


def check_label_order(task: str, model_labels: Sequence[str], data_labels: Sequence[str],
                      where: str) -> None:
    """Refuses to compare class ids of a model trained with one class order against ids of
    data in another (e.g. an MNLI model of BERT's order on TFDS's integer labels)."""
    if list(model_labels) == list(data_labels):
        return
    def describe(labels):
        order = order_of(task, labels)
        return f"{list(labels)}" + (f" ({ORDER_NAMES[order]} order)" if order else "")
    raise FinetuneDataError(
        f"{where}: the model's {task} classes are {describe(model_labels)} but the data's class "
        f"ids follow {describe(data_labels)}; map the labels by name (glue.label_names(task, "
        f"order)) instead of comparing ids")


def _rows(path: str, text: str):
    """(line, fields) of a GLUE TSV: tab-separated, no quoting, "\\n" ends a record."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE,
                        strict=True)
    try:
        for fields in reader:
            if fields:  # a blank line (the files end with one newline)
                yield reader.line_num, fields
    except csv.Error as e:
        raise FinetuneDataError(f"{path}:{reader.line_num}: {e}") from None


def _label(spec: GlueTask, value: str, where: str):
    if spec.labels is None:
        try:
            score = float(value)
        except ValueError:
            raise FinetuneDataError(f"{where}: STS-B score {value!r} is not a number") from None
        if not 0.0 <= score <= 5.0:
            raise FinetuneDataError(f"{where}: STS-B score {score} is outside [0, 5]")
        return score
    if value not in spec.labels:
        raise FinetuneDataError(f"{where}: label {value!r} is not one of {spec.name}'s "
                                f"{list(spec.labels)}")
    return value


def read_examples(path: str, task: str) -> List[GlueExample]:
    """The examples of one GLUE TSV of `task` (train, dev or test file), in file order."""
    spec = task_spec(task)
    rows = list(_rows(path, read_text(path)))
    if not rows:
        raise FinetuneDataError(f"{path} has no rows")
    base = posixpath.basename(path)
    first_line, first = rows[0]
    if spec.name == "cola" and first != ["index", "sentence"]:
        header, columns = None, {"text_a": spec.text_a, "label": spec.label}
        width, body = 4, rows
    else:
        header, body = first, rows[1:]
        width = len(header)
        if spec.name == "cola":
            header = ["index", "sentence"]
        names = {"text_a": "sentence" if spec.name == "cola" else spec.text_a,
                 "text_b": spec.text_b, "label": spec.label}
        if spec.name == "mrpc" and header[0] == "index":  # MRPC's test.tsv
            names["label"] = None
        columns = {}
        for key, name in names.items():
            if name is None:
                continue
            if name in header:
                columns[key] = header.index(name)
            elif key != "label" or header[0] not in ("index", "id"):  # a test file: no label
                raise FinetuneDataError(f"{path}:{first_line}: header {header} lacks the column "
                                        f"{name!r} of GLUE {spec.name} (is this a {spec.name} "
                                        f"file?)")
    examples = []
    for line, fields in body:
        where = f"{path}:{line}"
        if len(fields) != width:
            raise FinetuneDataError(f"{where}: row has {len(fields)} fields, {spec.name} files "
                                    f"have {width} (a tab inside a text?)")
        label = (_label(spec, fields[columns["label"]], where) if "label" in columns else None)
        examples.append(GlueExample(
            guid=f"{spec.name}-{base}-{line}", text_a=fields[columns["text_a"]],
            text_b=fields[columns["text_b"]] if "text_b" in columns else None, label=label))
    if not examples:
        raise FinetuneDataError(f"{path} has a header but no examples")
    return examples


def split_path(data_dir: str, task: str, split: str) -> str:
    spec = task_spec(task)
    if split not in spec.splits:
        raise ValueError(f"GLUE {spec.name} has splits {list(spec.splits)}, not {split!r}")
    return posixpath.join(data_dir, spec.splits[split])


def read_split(data_dir: str, task: str, split: str) -> List[GlueExample]:
    """The examples of a split of a GLUE task directory (e.g. glue_data/MNLI, "dev_matched")."""
    return read_examples(split_path(data_dir, task, split), task)
