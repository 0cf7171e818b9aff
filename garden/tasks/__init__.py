"""The task table: every task `garden.train` can run, by the name gin knows it as.

Explicit, like data_pipelines/objectives/__init__.py: a dict of gin name -> "module:Class",
imported on demand, and one function that registers the table with gin as garden.<Name>.
Nothing is registered by importing a module. Adding a task is one module plus one row here.
"""

from __future__ import annotations

import importlib
from typing import Dict

TASKS: Dict[str, str] = {
    "Pretraining": "garden.tasks.pretraining:Pretraining",
    "Distillation": "garden.tasks.distillation:Distillation",
    "SentenceClassification": "garden.tasks.sentence_classification:SentenceClassification",
    "TokenTagging": "garden.tasks.tagging:TokenTagging",
    "MultipleChoice": "garden.tasks.multiple_choice:MultipleChoice",
    "QuestionAnswering": "garden.tasks.question_answering:QuestionAnswering",
    "TextToText": "garden.tasks.lm_finetuning:TextToText",
    "CausalLMFinetuning": "garden.tasks.lm_finetuning:CausalLMFinetuning",
    "LastTokenClassification": "garden.tasks.last_token_classification:LastTokenClassification",
    "CovePretraining": "garden.tasks.cove_pretraining:CovePretraining",
    "CvtTagging": "garden.tasks.cvt_tagging:CvtTagging",
}

# Gin names of the tasks Pretraining replaced -> the binding that selects the same family, for
# the message a config using an old name gets (not aliases: an old name bound beside a run
# file that uses garden.Pretraining would be silently ignored).
RENAMED: Dict[str, str] = {
    "BertPretraining": "family = 'bert' (ERNIE: also objective = 'ernie')",
    "AlbertPretraining": "family = 'albert'",
    "RobertaPretraining": "family = 'roberta'",
    "SpanBertPretraining": "family = 'spanbert'",
    "ElectraPretraining": "family = 'electra'",
    "EncoderPretraining": "family = ...",
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

    # The backbone factories (@bert_backbone, @roberta_backbone, ...) the task configs name.
    importlib.import_module("garden.models.factory")
    for name in TASKS:
        gin.external_configurable(get(name), name=name, module="garden")
    _registered = True


def renamed_hint(message: str) -> str:
    """What to bind instead, when a gin error names a task that Pretraining replaced."""
    hints = [f"garden.{old} is now garden.Pretraining with garden.Pretraining.{new}"
             for old, new in RENAMED.items() if f"garden.{old}" in message]
    return "; ".join(hints)
