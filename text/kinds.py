"""Task kinds: one name per kind in every layer, and the one table of retired names.

A fine-tuning kind's name is the name of its module in each layer that has one (docs/tasks.md,
"Task kinds and retired names", lists them per layer):

    text/finetune/<kind>.py   the reader of the kind's official format (classification: GLUE
                              TSVs; tagging: CoNLL-2003; question_answering: SQuAD JSON;
                              multiple_choice: SWAG CSV)
    garden/metrics/<kind>.py  its metrics (classification, tagging, question_answering)
    garden/models/<kind>.py   its head (classification, tagging, question_answering,
                              multiple_choice; generation runs a family's GenerativeLM)
    garden/serving/<kind>.py  its ServingModule (every kind)
    garden/tasks/<kind>.py    its garden.train task (every kind)

and the value of `--task` for the kinds `python -m data_pipelines.make_finetune` writes
(text/finetune/__init__.py KINDS).

RENAMED is the only place an old user-facing name survives: the gin task names and
parameters, `--task` values and config files that were replaced, each with what to write
instead. It is no alias table: nothing looks a name up here to run it. A name that is not
found where it is read (a gin configurable or parameter, a --task value, a data directory's
recorded objective, a config file) is looked up here only to say what replaced it, in the
error that refuses it.
"""

from __future__ import annotations

import re
from typing import Dict, Optional

KINDS = ("classification", "tagging", "question_answering", "multiple_choice", "generation")

# Retired name, as a user writes it -> what to write instead. Gin names are given with their
# module (garden.X); an error that names one without it (a binding of X.param) is matched too.
RENAMED: Dict[str, str] = {
    # Encoder pretraining: one task, garden.Pretraining, whose `family` binding picks the
    # family's record (an old name bound beside a run file that uses garden.Pretraining would
    # be silently ignored, so they are refused, never aliased).
    "garden.BertPretraining":
        "garden.Pretraining with garden.Pretraining.family = 'bert' (ERNIE: also objective = "
        "'ernie')",
    "garden.AlbertPretraining": "garden.Pretraining with garden.Pretraining.family = 'albert'",
    "garden.RobertaPretraining": "garden.Pretraining with garden.Pretraining.family = 'roberta'",
    "garden.SpanBertPretraining":
        "garden.Pretraining with garden.Pretraining.family = 'spanbert'",
    "garden.ElectraPretraining":
        "garden.Pretraining with garden.Pretraining.family = 'electra'",
    "garden.EncoderPretraining": "garden.Pretraining with garden.Pretraining.family = ...",
    # Fine-tuning tasks: the gin name follows the kind.
    "garden.SentenceClassification": "garden.Classification",
    "garden.TokenTagging": "garden.Tagging",
    # python -m data_pipelines.make_finetune --task (and the `task` its output directory records)
    "--task=conll": "--task=tagging",
    "--task=squad": "--task=question_answering",
    # Config files, named after the kind (by file name: a path names them wherever it starts)
    "finetune_qa.gin": "configs/runs/finetune_question_answering.gin",
    "qa_base.gin": "configs/finetune/question_answering_base.gin",
    "qa_tiny.gin": "configs/finetune/question_answering_tiny.gin",
    "qa_xlnet_base.gin": "configs/finetune/question_answering_xlnet_base.gin",
    "qa_xlnet_tiny.gin": "configs/finetune/question_answering_xlnet_tiny.gin",
    # garden.train's parameters (gin names the binding line, train.<old> = ..., in its error).
    "train.mixed_precision":
        "train.precision = 'float32' | 'mixed_bfloat16' | 'mixed_float16' (or --precision)",
}

_GIN_MODULE = "garden."


def _pattern(old: str) -> re.Pattern:
    """Where `old` is named in a message: whole, not inside a longer name or path; a gin name
    also without its module (X.param = ... names the configurable X)."""
    if old.startswith(_GIN_MODULE):
        body = f"(?:{re.escape(_GIN_MODULE)})?{re.escape(old[len(_GIN_MODULE):])}"
    else:
        body = re.escape(old)
    return re.compile(rf"(?<![\w.=-]){body}(?![\w-])")


_PATTERNS = {old: _pattern(old) for old in RENAMED}


def renamed(old: str) -> Optional[str]:
    """"OLD is now NEW" when `old` (exactly as written: "garden.TokenTagging", "--task=conll")
    is a retired name, else None."""
    new = RENAMED.get(old)
    return None if new is None else f"{old} is now {new}"


def hint(message: str) -> str:
    """"OLD is now NEW" for every retired name `message` names (a gin error, a path), joined
    by "; "; "" when it names none."""
    return "; ".join(f"{old} is now {new}" for old, new in RENAMED.items()
                     if _PATTERNS[old].search(message))
