"""Pre-training objectives: one module per objective, each exposing ``OBJECTIVE`` (base.Objective).

The table below is the whole registry: explicit, imported on demand (no import side effects).
"""

from __future__ import annotations

import importlib

from data_pipelines.objectives.base import Objective

_MODULES = {
    "bert": "data_pipelines.objectives.bert",
    "albert": "data_pipelines.objectives.albert",
    "roberta": "data_pipelines.objectives.roberta",
    "spanbert": "data_pipelines.objectives.spanbert",
    "ernie": "data_pipelines.objectives.ernie",
    "electra": "data_pipelines.objectives.electra",
    "xlnet": "data_pipelines.objectives.xlnet",
    "t5": "data_pipelines.objectives.t5",
    "bart": "data_pipelines.objectives.bart",
    "gpt2": "data_pipelines.objectives.gpt2",
    "bilm": "data_pipelines.objectives.bilm",
}
NAMES = tuple(_MODULES)


def get(name: str) -> Objective:
    if name not in _MODULES:
        raise ValueError(f"unknown objective {name!r}; choose one of {', '.join(NAMES)}")
    return importlib.import_module(_MODULES[name]).OBJECTIVE
