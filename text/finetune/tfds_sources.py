"""GLUE and multiple-choice examples from locally prepared tensorflow-datasets (no downloads).

    tfds:glue/<task>[:split]    -> [classification.GlueExample]   (split default "train"; MNLI's dev sets
                                  are validation_matched / validation_mismatched)
    tfds:hellaswag[:split]      -> [SwagExample]   (context, 4 endings, label)
`tfds:swag` is refused with a message: tensorflow-datasets (4.9) has no SWAG builder; use the
official CSV files (text.finetune.multiple_choice) or HellaSwag, which has SWAG's shape.

The dataset must already be prepared under `data_dir` (tfds build / download_and_prepare); a
missing one raises FinetuneDataError naming the spec and the data_dir. Labels become the
strings of the GLUE files, so a model's class order never depends on the source: TFDS's
ClassLabel id i is the name label_classes[i], which for the 0/1 tasks is GLUE's "i" (MRPC 1 =
equivalent, WNLI 1 = entailment; text.finetune.classification.LABEL_ORDERS) and for MNLI / QNLI /
RTE the same words; TFDS's test label -1 becomes None. A record that breaks the format (not
four endings, a label out of range) names the spec and the record index.
"""

from __future__ import annotations

from typing import List, Optional, Union

from text.finetune import FinetuneDataError, classification, parse_tfds
from text.finetune.multiple_choice import NUM_CHOICES, SwagExample

# GLUE task -> (TFDS text feature of text_a, of text_b)
TFDS_TEXT = {"cola": ("sentence", None), "sst2": ("sentence", None),
             "mrpc": ("sentence1", "sentence2"), "qqp": ("question1", "question2"),
             "stsb": ("sentence1", "sentence2"), "mnli": ("premise", "hypothesis"),
             "qnli": ("question", "sentence"), "rte": ("sentence1", "sentence2"),
             "wnli": ("sentence1", "sentence2")}


def is_tfds(path: str) -> bool:
    return path.startswith("tfds:")


def _examples(spec: str, data_dir: Optional[str]):
    import tensorflow_datasets as tfds

    name, split = parse_tfds(spec)
    try:
        builder = tfds.builder(name, data_dir=data_dir)
        dataset = builder.as_dataset(split=split)
    except Exception as e:  # tfds raises several kinds for a missing dataset/config/split
        raise FinetuneDataError(f"{spec}: not a prepared tensorflow-datasets split under "
                                f"data_dir={data_dir} ({type(e).__name__}: {e}); prepare it first "
                                f"(tfds build), nothing is downloaded here") from e
    return name, builder, tfds.as_numpy(dataset)


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def read_glue(spec: str, data_dir: Optional[str] = None) -> List[classification.GlueExample]:
    """GlueExamples of `tfds:glue/<task>[:split]` (see the module docstring)."""
    name, _ = parse_tfds(spec)
    if not name.startswith("glue/") or name.split("/", 1)[1] not in classification.TASKS:
        raise FinetuneDataError(f"{spec}: expected tfds:glue/<task>[:split] with a task of "
                                f"{', '.join(classification.TASKS)}")
    name, builder, records = _examples(spec, data_dir)
    task = classification.task_spec(name.split("/", 1)[1])
    field_a, field_b = TFDS_TEXT[task.name]
    names = (builder.info.features["label"].names if task.labels else None)
    out = []
    for index, record in enumerate(records):
        label = record["label"]
        if task.labels is None:
            label = float(label)
        elif int(label) == -1:
            label = None  # TFDS's test splits
        elif not 0 <= int(label) < len(names):
            raise FinetuneDataError(f"{spec}: record {index}: label {label} outside "
                                    f"0..{len(names) - 1}")
        else:
            tfds_name = names[int(label)]
            label = tfds_name if tfds_name in task.labels else str(int(label))
        out.append(classification.GlueExample(
            guid=f"{task.name}-{name}-{index}", text_a=_text(record[field_a]),
            text_b=_text(record[field_b]) if field_b else None, label=label))
    if not out:
        raise FinetuneDataError(f"{spec}: the split is empty")
    return out


def read_choices(spec: str, data_dir: Optional[str] = None) -> List[SwagExample]:
    """SwagExamples of `tfds:hellaswag[:split]` (context, 4 endings, label; no start phrase)."""
    name, _ = parse_tfds(spec)
    if name.split("/")[0] == "swag":
        raise FinetuneDataError(f"{spec}: tensorflow-datasets has no SWAG builder; read SWAG's "
                                f"official CSV files, or use tfds:hellaswag (SWAG's shape)")
    if name.split("/")[0] != "hellaswag":
        raise FinetuneDataError(f"{spec}: multiple-choice tfds input must be tfds:hellaswag")
    name, _, records = _examples(spec, data_dir)
    out = []
    for index, record in enumerate(records):
        endings = tuple(_text(e) for e in record["endings"])
        label = int(record["label"])
        if len(endings) != NUM_CHOICES:
            raise FinetuneDataError(f"{spec}: record {index}: {len(endings)} endings, expected "
                                    f"{NUM_CHOICES}")
        if not -1 <= label < NUM_CHOICES:
            raise FinetuneDataError(f"{spec}: record {index}: label {label} outside 0..3")
        out.append(SwagExample(f"{name}-{index}", _text(record["context"]), "", endings,
                               None if label == -1 else label))
    if not out:
        raise FinetuneDataError(f"{spec}: the split is empty")
    return out


def read(spec: str, kind: str, data_dir: Optional[str] = None
         ) -> List[Union[classification.GlueExample, SwagExample]]:
    """kind "glue" -> read_glue, "choice" -> read_choices."""
    return read_glue(spec, data_dir) if kind == "glue" else read_choices(spec, data_dir)
