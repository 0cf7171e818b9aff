"""The Task contract: what `garden.train` and the exporter may ask of a task, and nothing more.

A task is one object that knows its data, its model and its objective; the trainer owns the
loop, the strategy, checkpoints and logging, the exporter owns the SavedModel layout. Adding a
task is one new module plus one row in the task table (garden/tasks/__init__.py): neither
garden/train.py nor garden/serving/ names a task or a family.

The life of a task in one run (garden.train):
    task.prepare()                       check files, vocabulary and data before building
    model, objects = task.build_model()  under the strategy's scope; `objects` are what the
                                         checkpoint saves (e.g. {"model", "backbone"})
    for stage in task.schedule(steps):   the data, stage by stage (pretraining phases)
        stage.dataset_fn(input_context, per_replica_batch, seed, skip_batches)
        task.loss_weights(batch)         global normalisers, all-reduced by the trainer
        task.compute_metrics(model, batch, training, weight_shares)  {"loss", ...}
    task.evaluate(model)                 every train.eval_every steps, on the chief
    task.finish(model, model_dir)        at the end, on the chief: final scores (a dict)
    task.serving_module(model)           a ServingModule for the exporter, or None; the
                                         trainer exports it when task.export_base is set:
                                         garden.serving.export.export(module,
                                             task.export_base, task.model_name) -> export dir

`Task` below gives the defaults (no global normalisers, no evaluation, nothing to export), so a
task overrides only what it has.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple


class ConfigError(ValueError):
    """The gin configuration cannot be parsed, names something that does not exist, gives an
    argument of the wrong type, or asks a task for what it refuses: raised by garden.train and
    by the tasks before anything trains."""


class Stage(NamedTuple):
    """One stretch of training that reads one stream of batches (a pretraining phase).

    dataset_fn(input_context, batch_size, seed, skip_batches) -> tf.data.Dataset of
    per-replica batches; `skip_batches` batches of this stage's stream were consumed before a
    resume (the trainer computes it), so the resumed stream continues where it stopped.
    """

    first_step: int
    end_step: int
    dataset_fn: Callable
    description: str
    # The TFRecord files the stage reads, for the trainer's message when one turns out corrupt.
    files: Tuple[str, ...] = ()


class Task:
    """Base of every task; see the module docstring for the order of calls.

    Subclasses set `name` (what logs and summary.json call the run) and implement
    prepare, build_model, summary_model, schedule and compute_metrics.
    """

    name: str = "task"
    # Where the trainer exports serving_module(model) (<export_base>/<model_name>/<version>/);
    # None: no export. Tasks that serve take both as constructor arguments.
    export_base: Optional[str] = None
    model_name: str = "model"

    # -- before anything is built ---------------------------------------------------------
    def prepare(self) -> None:
        """Reads and checks the task's files (vocabulary, data directories, labels).

        Raises a ValueError subclass naming the file and what is wrong; nothing is built yet.
        """

    # -- the model -------------------------------------------------------------------------
    def build_model(self) -> Tuple[Any, Dict[str, Any]]:
        """(model, objects): the Keras model trained, and the trackables the checkpoint holds
        by name ("model" always; "backbone" when there is one, for layer-wise LR decay and
        for fine-tuning from this checkpoint)."""
        raise NotImplementedError

    # The task's gin parameter whose factory `garden.train --summary` calls (with
    # default_vocab_size) and hands to summary_model.
    summary_factory: str = "backbone"

    @staticmethod
    def summary_model(backbone):
        """The model `garden.train --summary` prints, built on `backbone` (what the
        `summary_factory` parameter's factory returns) without data."""
        raise NotImplementedError

    @classmethod
    def summary_model_from(cls, backbone, bindings: Dict[str, Any],
                           vocab_size: Optional[int] = None):
        """summary_model for `garden.train --summary`, given the task's literal gin bindings
        (e.g. Pretraining's family) and the bound vocabulary's size (None: none readable);
        the default ignores both."""
        return cls.summary_model(backbone)

    # -- the data ---------------------------------------------------------------------------
    def schedule(self, train_steps: int) -> List[Stage]:
        """The stages that cover steps [0, train_steps), in order."""
        raise NotImplementedError

    # -- the objective ----------------------------------------------------------------------
    def loss_weights(self, batch) -> Dict[str, Any]:
        """Sums a weighted mean divides by (e.g. the MLM weights of a micro-batch); the trainer
        all-reduces them over the global batch and passes the shares back to compute_metrics,
        so the loss does not depend on how a batch is split. {}: plain means."""
        return {}

    def compute_metrics(self, model, batch, training: bool,
                        weight_shares: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Scalar tensors of one micro-batch: "loss" (what is minimised), other losses and
        accuracies, and optionally "tokens" (real tokens, for throughput and MFU)."""
        raise NotImplementedError

    # -- after training ---------------------------------------------------------------------
    def evaluate(self, model) -> Dict[str, Any]:
        """Held-out scores (floats are logged to TensorBoard as eval/<name>); {}: none."""
        return {}

    def finish(self, model, model_dir: str) -> Dict[str, Any]:
        """Final scores merged into summary.json (default: evaluate())."""
        return self.evaluate(model)

    def serving_module(self, model):
        """The garden.serving ServingModule that exports this model, or None (nothing to
        serve, e.g. pretraining). The trainer hands it to the one exporter."""
        return None
