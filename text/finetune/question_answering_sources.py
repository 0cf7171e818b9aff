"""SQuAD v1.1 and v2.0 questions: the JSON reader (and prepared tfds splits) that the
question-answering kind (text.finetune.question_answering) cuts into windows.

The file is the official layout: {"version", "data": [{"title", "paragraphs": [{"context",
"qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"?,
"plausible_answers"?}]}]}]}. answer_start counts characters (not bytes) of the context.

Neither reader loads TensorFlow for a JSON file (Beam's FileSystems reads it, local or gs://);
read_tfds imports tensorflow_datasets.
"""

from __future__ import annotations

import dataclasses
import json
from typing import List, Optional, Tuple

from text.finetune import FinetuneDataError


@dataclasses.dataclass(frozen=True)
class SquadExample:
    qas_id: str
    question: str
    context: str
    # (text, character start in context) for every gold answer; empty when is_impossible.
    answers: Tuple[Tuple[str, int], ...]
    is_impossible: bool
    title: str = ""


def _where(path: str, a: int, p: int, q: int = -1) -> str:
    spot = f"data[{a}].paragraphs[{p}]"
    return f"{path}: {spot}.qas[{q}]" if q >= 0 else f"{path}: {spot}"


def _string(value, what: str) -> str:
    if not isinstance(value, str):
        raise FinetuneDataError(f"{what} must be a string, got {type(value).__name__} {value!r}")
    return value


def make_example(qa, context: str, title: str, where: str, seen: set) -> SquadExample:
    """One question (a dict of the JSON layout) checked and turned into a SquadExample;
    ``where`` names it in errors, ``seen`` holds the ids met so far (duplicates refused)."""
    if not isinstance(qa, dict):
        raise FinetuneDataError(f"{where} is not an object")
    qas_id = _string(qa.get("id"), f"{where}.id")
    if qas_id in seen:
        raise FinetuneDataError(f"{where}: duplicate id {qas_id!r}")
    seen.add(qas_id)
    question = _string(qa.get("question"), f"{where}.question")
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):
        raise FinetuneDataError(f"{where}.is_impossible must be true or false, got {impossible!r}")
    answers = qa.get("answers", [])
    if not isinstance(answers, list):
        raise FinetuneDataError(f"{where}.answers must be a list")
    gold = []
    for k, ans in enumerate(answers):
        what = f"{where}.answers[{k}]"
        if not isinstance(ans, dict):
            raise FinetuneDataError(f"{what} is not an object")
        text = _string(ans.get("text"), f"{what}.text")
        start = ans.get("answer_start")
        if isinstance(start, bool) or not isinstance(start, int):
            raise FinetuneDataError(f"{what}.answer_start must be an integer, got {start!r}")
        if start < 0 or context[start:start + len(text)] != text:
            raise FinetuneDataError(
                f"{what}: answer_start {start} does not point at {text!r} in the context (found "
                f"{context[max(start, 0):max(start, 0) + len(text)]!r}); answer_start counts characters")
        gold.append((text, start))
    if impossible:
        gold = []
    elif not gold:
        raise FinetuneDataError(f"{where}: an answerable question (is_impossible false or absent) "
                                f"has no answers")
    return SquadExample(qas_id, question, context, tuple(gold), impossible, title)


def read_examples(path: str) -> List[SquadExample]:
    """Every question of a SQuAD v1.1 / v2.0 file, in file order.

    Raises FinetuneDataError naming the file and the record (data[i].paragraphs[j].qas[k]) for
    invalid JSON, missing or mistyped fields, an answer_start that does not point at its text in
    the context, an answerable question without answers, or duplicate ids.
    """
    from apache_beam.io.filesystems import FileSystems  # local or gs://, without TensorFlow

    if not FileSystems.exists(path):
        raise FinetuneDataError(f"SQuAD file not found: {path}")
    with FileSystems.open(path, compression_type="uncompressed") as f:
        raw = f.read()
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise FinetuneDataError(f"{path}: invalid UTF-8 at byte {e.start}") from e
    except json.JSONDecodeError as e:
        raise FinetuneDataError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise FinetuneDataError(f"{path}: not a SQuAD file (no top-level 'data' list)")
    examples: List[SquadExample] = []
    seen = set()
    for a, article in enumerate(doc["data"]):
        title = article.get("title", "") if isinstance(article, dict) else ""
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise FinetuneDataError(f"{path}: data[{a}] has no 'paragraphs' list")
        for p, para in enumerate(paragraphs):
            where = _where(path, a, p)
            if not isinstance(para, dict) or not isinstance(para.get("qas"), list):
                raise FinetuneDataError(f"{where} has no 'qas' list")
            context = _string(para.get("context"), f"{where}.context")
            for q, qa in enumerate(para["qas"]):
                examples.append(make_example(qa, context, title, _where(path, a, p, q), seen))
    return examples



def read_tfds(name: str, split: str, data_dir: Optional[str]) -> List[SquadExample]:
    """The questions of a prepared tensorflow-datasets split (``squad/v1.1`` or ``squad/v2.0``;
    ``split`` may select shards, e.g. "train[0shard]"), in the dataset's order. Nothing is
    downloaded. The fields are the JSON's (answers as {text: [...], answer_start: [...]}), so
    the same checks apply; errors name the dataset, split and example index."""
    import tensorflow_datasets as tfds

    ds = tfds.builder(name, data_dir=data_dir).as_dataset(split=split, shuffle_files=False)
    text = lambda v: v.decode("utf-8") if isinstance(v, bytes) else v  # noqa: E731
    examples, seen = [], set()
    for i, row in enumerate(tfds.as_numpy(ds)):
        where = f"tfds:{name}:{split} example {i}"
        answers = row.get("answers", {})
        qa = {"id": text(row.get("id")), "question": text(row.get("question")),
              "is_impossible": bool(row.get("is_impossible", False)),
              "answers": [{"text": text(t), "answer_start": int(a)}
                          for t, a in zip(answers.get("text", []), answers.get("answer_start", []))]}
        examples.append(make_example(qa, _string(text(row.get("context")), f"{where}.context"),
                                     text(row.get("title", b"")), where, seen))
    return examples
