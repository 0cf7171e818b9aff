"""One way to open a trained model: a garden.train run, a garden.convert directory, an export or
a garden.generate model directory, with its tokenizer, text packer and settings.

    from garden import runs
    run = runs.open("runs/sst2")        # or a garden.convert OUT, an export <base>/<name>/<N>
    packer = run.packer(128)            # raw text -> the backbone's inputs, as in fine-tuning
    backbone = run.backbone(output_hidden_states=True, output_attentions=True,
                            use_head_mask=True)    # Keras, weights restored
    out = backbone({**packer.encode_numpy(["a text"]), "head_mask": mask})

A directory is the first kind whose marker file it holds (KINDS):
    model_dir  a garden.train run: operative_config.gin (the task is rebuilt from it) and the
               newest checkpoint of checkpoints/
    converted  a garden.convert output: convert_info.json (architecture, tokenizer, casing,
               layout), checkpoints/ckpt-0 and the tokenizer files (garden/pretrained.py)
    export     an export version directory <export_base>/<name>/<N>: saved_model.pb and
               assets.extra/garden_export.json (tokenizer, casing, layout, assets/ vocabulary)
    generate   a garden.generate model directory: generation.json, lm.keras, the vocabulary

What each kind gives; anything else is a RunError naming the path, what it is and what to open
instead:
    run.backbone(...)    model_dir (its task's encoder), converted: a Keras backbone with its
                         weights; switches output_hidden_states, output_attentions, use_head_mask
    run.task_model()     model_dir: the task's Keras model (reads the task's files, as training
                         did); export: the `serving_ids` signature as a callable on packed ids
    run.lm()             model_dir of an LM task, converted generative family, generate: the
                         GenerativeLM
    run.generation()     garden.generate_dir.GenerationModel (model, tokenizer, prompt ids):
                         generate (as recorded); model_dir of an LM task (the restored LM, the
                         task's vocabulary, the ids of generation_ids); converted (its generate/
                         model directory). open_generation(path, who) is the one loader
                         garden.generate and garden.fewshot call.
    run.packer(n), run.tokens()   every kind with a vocabulary (run.text: vocab,
                         tokenizer_kind, lower_case, layout)
    run.family, run.checkpoint, run.description
A Keras backbone cannot come from an export: the SavedModel holds the task's traced signatures,
not the Keras layers; open the run directory it was exported from.

The package: base.py (the kinds' names and markers, RunError, TextSettings, Run), a module per
kind (model_dir.py, converted.py, export.py, generate.py) and, here, the table and open().
"""

from __future__ import annotations

import dataclasses
import posixpath
from typing import Callable, Optional, Sequence, Tuple

from garden.generate_dir import CONFIG_FILE as GENERATE_CONFIG
from garden.pretrained import INFO_FILE
from garden.runs.base import (CONVERTED, CONVERTED_GENERATE_DIR, EXPORT, EXPORT_METADATA,
                              GENERATE, KIND_NAMES, MARKERS, MODEL_DIR, OPERATIVE_CONFIG, Run,
                              RunError, TextSettings, family_of)
from garden.runs.converted import ConvertedRun
from garden.runs.export import ExportRun, SignatureModel
from garden.runs.generate import GenerateRun
from garden.runs.model_dir import ModelDirRun, generation_ids

__all__ = ["CONVERTED", "CONVERTED_GENERATE_DIR", "EXPORT", "EXPORT_METADATA", "GENERATE",
           "GENERATE_CONFIG", "INFO_FILE", "KINDS", "KIND_NAMES", "LM_KINDS", "MODEL_DIR",
           "OPERATIVE_CONFIG", "ConvertedRun", "ExportRun", "GenerateRun", "Kind", "ModelDirRun",
           "Run", "RunError", "SignatureModel", "TextSettings", "detect", "family_of",
           "generation_ids", "open", "open_generation"]


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    marker: str        # the file, relative to the directory, that says what it is
    what: str          # "a garden.train run directory"
    opener: Callable   # (path, who, gin_params) -> Run


KINDS: Tuple[Kind, ...] = (
    Kind(MODEL_DIR, MARKERS[MODEL_DIR], KIND_NAMES[MODEL_DIR],
         lambda path, who, gin_params: ModelDirRun(path, who, gin_params)),
    Kind(CONVERTED, MARKERS[CONVERTED], KIND_NAMES[CONVERTED],
         lambda path, who, gin_params: ConvertedRun(path, who)),
    Kind(EXPORT, MARKERS[EXPORT], KIND_NAMES[EXPORT],
         lambda path, who, gin_params: ExportRun(path, who)),
    Kind(GENERATE, MARKERS[GENERATE], KIND_NAMES[GENERATE],
         lambda path, who, gin_params: GenerateRun(path, who)),
)


LM_KINDS = (MODEL_DIR, CONVERTED, GENERATE)  # the directories a GenerativeLM opens from


def open_generation(path: str, who: str):
    """The one loader of garden.generate and garden.fewshot: the GenerationModel (the restored
    GenerativeLM, its tokenizer, its prompt ids) of a garden.train run of an LM task (GPT,
    GPT-2, GPT-3, T5, BART pretraining; causal LM or text-to-text fine-tuning), a garden.convert
    directory with its generate/ model directory, or a garden.generate model directory.
    RunError in one line naming the path when it is none, or its run is no GenerativeLM's.
    What a run's task prints while it reads its files goes to stderr: stdout is the tool's."""
    import contextlib
    import sys

    with contextlib.redirect_stdout(sys.stderr):
        return open(path, LM_KINDS, who=who).generation()


def detect(path: str) -> Optional[Kind]:
    """The kind of the directory at `path` (the first whose marker it holds), or None."""
    import tensorflow as tf

    return next((k for k in KINDS if tf.io.gfile.exists(posixpath.join(path, k.marker))), None)


def open(path: str, kinds: Optional[Sequence[str]] = None, *,  # noqa: A001 - runs.open(path)
         who: str = "garden.runs", gin_params: Sequence[str] = ()) -> Run:
    """The model directory at `path`, opened (nothing is built until asked); `kinds` limits what
    is accepted (default: every kind). RunError in one line naming `path` when it is none of
    them. gin_params: extra bindings for a model_dir's operative config."""
    import tensorflow as tf

    wanted = [k for k in KINDS if kinds is None or k.name in kinds]
    unknown = sorted(set(kinds or ()) - set(KIND_NAMES))
    if unknown:
        raise ValueError(f"unknown run kinds {unknown}; choose from {list(KIND_NAMES)}")
    found = detect(path)
    if found is not None and found in wanted:
        return found.opener(path, who, gin_params)
    # One kind: the file that is missing, by its path; several: their names.
    expected = " nor ".join(f"{k.what} ({posixpath.join(path, k.marker)} does not exist)"
                            if len(wanted) == 1 else f"{k.what} (no {k.marker})" for k in wanted)
    if found is not None:
        raise RunError(f"{path} is {found.what}, but {who} takes "
                       f"{' or '.join(k.what for k in wanted)}")
    versions = sorted(int(n.rstrip("/")) for n in tf.io.gfile.listdir(path)
                      if n.rstrip("/").isdigit()) if tf.io.gfile.isdir(path) else []
    hint = (f"; it holds export versions {versions}: pass {posixpath.join(path, str(versions[-1]))}"
            if versions and any(k.name == EXPORT for k in wanted) else "")
    raise RunError(f"{path} is {'neither' if len(wanted) > 1 else 'not'} {expected}{hint}")
