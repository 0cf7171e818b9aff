"""SQuAD v1.1 and v2.0: the JSON reader (windowed features follow in this module).

The file is the official layout: {"version", "data": [{"title", "paragraphs": [{"context",
"qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"?,
"plausible_answers"?}]}]}]}. answer_start counts characters (not bytes) of the context.
"""

from __future__ import annotations

import dataclasses
import json
from typing import List, Tuple

import tensorflow as tf

from data_pipelines.finetune import FinetuneDataError


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


def read_examples(path: str) -> List[SquadExample]:
    """Every question of a SQuAD v1.1 / v2.0 file, in file order.

    Raises FinetuneDataError naming the file and the record (data[i].paragraphs[j].qas[k]) for
    invalid JSON, missing or mistyped fields, an answer_start that does not point at its text in
    the context, an answerable question without answers, or duplicate ids.
    """
    if not tf.io.gfile.exists(path):
        raise FinetuneDataError(f"SQuAD file not found: {path}")
    with tf.io.gfile.GFile(path, "rb") as f:
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
                where = _where(path, a, p, q)
                if not isinstance(qa, dict):
                    raise FinetuneDataError(f"{where} is not an object")
                qas_id = _string(qa.get("id"), f"{where}.id")
                if qas_id in seen:
                    raise FinetuneDataError(f"{where}: duplicate id {qas_id!r}")
                seen.add(qas_id)
                question = _string(qa.get("question"), f"{where}.question")
                impossible = qa.get("is_impossible", False)
                if not isinstance(impossible, bool):
                    raise FinetuneDataError(f"{where}.is_impossible must be true or false, "
                                            f"got {impossible!r}")
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
                        raise FinetuneDataError(f"{what}.answer_start must be an integer, "
                                                f"got {start!r}")
                    if context[start:start + len(text)] != text:
                        raise FinetuneDataError(
                            f"{what}: answer_start {start} does not point at {text!r} in the "
                            f"context (found {context[start:start + len(text)]!r}); "
                            f"answer_start counts characters")
                    gold.append((text, start))
                if impossible:
                    gold = []
                elif not gold:
                    raise FinetuneDataError(f"{where}: an answerable question (is_impossible "
                                            f"false or absent) has no answers")
                examples.append(SquadExample(qas_id, question, context, tuple(gold),
                                             impossible, title))
    return examples
