"""Shared by the "the objective learns" tests of the encoder families
(tests/garden/tasks/pretraining/test_*_learning*.py,
tests/garden/tasks/test_distilbert_learning.py): the tiny-data sizes of the family_data session
fixture (tests/conftest.py) and the benchmark's train-restore-score path for one family."""

from __future__ import annotations

import os

from benchmarks import objectives_learn as learn

SEQ = 64  # family_data's 64-token sequences: 15% of 64 -> 10 predictions (ALBERT)
VOCAB_SIZE = 1000


def train_and_score(family: str, vocab: str, data_dir: str, root: str, steps: int,
                    extra=(), num_batches: int = 20) -> dict:
    """The benchmark's path for one family's tiny config: train `steps` steps of 32 on
    `data_dir` (shuffle buffer 1000), restore the model and score it on the same data."""
    spec = learn.FAMILIES[family]
    bindings = learn.bindings(family, vocab, data_dir, data_dir, SEQ, steps=steps, batch_size=32,
                              extra=[*extra, f"garden.{spec.task}.shuffle_buffer = 1000"])
    model_dir = os.path.join(root, f"learn-{family}")
    learn.train_family(family, model_dir, bindings)
    task, model = learn._restored_task(family, model_dir, bindings)
    return learn.score(task, model, batch_size=32, num_batches=num_batches)
