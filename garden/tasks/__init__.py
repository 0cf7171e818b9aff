"""The task table: every task `garden.train` can run, by the name gin knows it as.

Explicit, like data_pipelines/objectives/__init__.py: a dict of gin name -> "module:Class",
imported on demand, and one function that registers the table with gin as garden.<Name>.
Nothing is registered by importing a module. Adding a task is one module plus one row here.
A retired task name is no row: text/kinds.py RENAMED says what replaced it (renamed_hint).
"""

from __future__ import annotations

import importlib
from typing import Dict

from text import kinds

TASKS: Dict[str, str] = {
    "Pretraining": "garden.tasks.pretraining:Pretraining",
    "Distillation": "garden.tasks.distillation:Distillation",
    "ClassifierDistillation": "garden.tasks.task_distillation:ClassifierDistillation",
    "Classification": "garden.tasks.classification:Classification",
    "Tagging": "garden.tasks.tagging:Tagging",
    "MultipleChoice": "garden.tasks.multiple_choice:MultipleChoice",
    "QuestionAnswering": "garden.tasks.question_answering:QuestionAnswering",
    "TextToText": "garden.tasks.text_to_text:TextToText",
    "CausalLMFinetuning": "garden.tasks.causal_lm_finetuning:CausalLMFinetuning",
    "LastTokenClassification": "garden.tasks.last_token_classification:LastTokenClassification",
    "CovePretraining": "garden.tasks.pretraining.cove:CovePretraining",
    "CvtTagging": "garden.tasks.cvt_tagging:CvtTagging",
}


def get(name: str):
    """The task class of a table name."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    module, cls = TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls)


_registered = False


def register_with_gin() -> None:
    """Makes every task of the table configurable as garden.<Name> (once per process: gin
    refuses a second registration of a name, and clear_config keeps registrations)."""
    global _registered
    if _registered:
        return
    import gin

    # The backbone factories (@backbone, @electra_towers, @generative_lm, ...) the task configs name.
    importlib.import_module("garden.models.factory")
    for name in TASKS:
        gin.external_configurable(get(name), name=name, module="garden")
    _registered = True


def renamed_hint(message: str) -> str:
    """What to bind instead, when a gin error names a retired task name (text/kinds.py
    RENAMED, the one table of renames); "" when it names none."""
    return kinds.hint(message)
