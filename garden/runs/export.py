"""export: a SavedModel version directory <export_base>/<name>/<N> (garden.runs, the package
docstring): its text settings from garden_export.json, its serving_ids signature as a model."""

from __future__ import annotations

import posixpath
from typing import Dict

from garden.runs.base import (EXPORT, EXPORT_METADATA, Run, RunError, TextSettings,
                              read_json)


class SignatureModel:
    """A SavedModel signature called like a Keras model on a dict of packed int32 ids."""

    def __init__(self, signature, path: str):
        self.signature, self.path = signature, path
        self.input_names = tuple(sorted(signature.structured_input_signature[1]))

    def __call__(self, inputs: Dict, training: bool = False) -> Dict:
        import tensorflow as tf

        missing = [k for k in self.input_names if k not in inputs]
        if missing:
            raise RunError(f"{self.path}: the export's ids signature takes {self.input_names}; "
                           f"the inputs lack {missing}")
        return self.signature(**{k: tf.cast(inputs[k], tf.int32) for k in self.input_names})


class ExportRun(Run):
    kind = EXPORT
    _no_keras = ("the SavedModel holds the task's traced signatures, not Keras layers; open the "
                 "garden.train run directory it was exported from (or a garden.convert "
                 "directory)")
    cannot = {"backbone": f"no Keras backbone: {_no_keras}",
              "lm": f"no Keras GenerativeLM: {_no_keras}",
              "generation": f"no garden.generate model: {_no_keras}",
              "masked_lm": f"no Keras masked LM: {_no_keras}"}

    def __init__(self, path: str, who: str):
        super().__init__(path, who)
        self.metadata = read_json(posixpath.join(path, EXPORT_METADATA))
        vocab = self.metadata.get("vocab_file")
        self.text = TextSettings(posixpath.join(path, vocab) if vocab else None,
                                 self.metadata.get("tokenizer"),
                                 bool(self.metadata.get("lower_case", True)),
                                 self.metadata.get("layout"))
        self.family = self.metadata.get("family")
        self.checkpoint = None

    @property
    def description(self) -> str:
        return f"{self.metadata.get('task', 'task')} export {self.path}"

    def task_model(self) -> SignatureModel:
        """The export's `serving_ids` signature: packed ids in, the task's outputs out."""
        import tensorflow as tf
        import tensorflow_text  # noqa: F401 - registers the text ops the signatures use

        signatures = tf.saved_model.load(self.path).signatures
        if "serving_ids" not in signatures:
            raise RunError(f"{self.path}: the export has no serving_ids signature (it has "
                           f"{sorted(signatures)}); call its text signatures with "
                           f"tf.saved_model.load")
        return SignatureModel(signatures["serving_ids"], self.path)
