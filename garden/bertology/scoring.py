"""A fine-tuned sentence classifier made to take a head mask, with its task data packed: what
`garden.analyze heads` and `prune` score the heads with (garden.bertology.heads, prune).

The classifier's own head is put back on the backbone rebuilt with a `head_mask` input
(garden.models.instrument.instrumented, same weights), reading what it read in fine-tuning:
  * the pooled output (BERT, ALBERT, ELECTRA's first token, XLNet's last),
  * the first token through the pre-classifier (DistilBERT; garden.models.classification),
  * the last real token (GPT, GPT-2, GPT-3-style: garden.models.gpt.classifier.LastTokenClassifier).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Sequence

import numpy as np


@dataclasses.dataclass
class Scored:
    """A fine-tuned classifier made to take a head mask, the packed task data and its gold
    label ids (heads and prune score the heads with it)."""

    model: object  # Keras: the backbone's inputs and head_mask [L, A] -> the class logits
    batch: Dict[str, np.ndarray]  # every example, with its gold id under "label"
    gold: np.ndarray

    def accuracy(self, logits: np.ndarray) -> float:
        return float(np.mean(np.asarray(logits).argmax(-1) == self.gold))


def head_features(task_model, outputs: Dict, padding_mask, analysis: str):
    """What the task model's classifier dense reads, from its backbone's `outputs` (module
    docstring); ValueError naming the model when it is none of those."""
    from keras import ops

    from garden.models.gpt.classifier import LastTokenClassifier, last_positions

    if isinstance(task_model, LastTokenClassifier):
        last = last_positions(padding_mask)
        return ops.take_along_axis(outputs["sequence_output"], last[:, None, None], axis=1)[:, 0]
    if "pooled_output" in outputs:
        return outputs["pooled_output"]
    pre_classifier = getattr(task_model, "pre_classifier", None)
    if pre_classifier is not None:
        return pre_classifier(outputs["sequence_output"][:, 0, :])
    raise ValueError(f"{analysis}: the classifier {type(task_model).__name__} reads neither a "
                     f"pooled output, a pre-classifier nor the last token of its backbone")


def scored_classifier(opened, task_data: str, analysis: str) -> Scored:
    """The run's classifier (`opened`: garden.analyze.Opened) on its backbone with a head mask
    input, and --task_data packed; ValueError when --model is no fine-tuned classification run
    or a label is not its."""
    import keras

    from garden.models import instrument
    from garden.tasks.text_files import read_examples

    labels: Optional[Sequence[str]] = opened.labels
    if opened.classifier is None or not labels:
        raise ValueError(f"{analysis} needs a fine-tuned sentence-classification run as "
                         f"--model (its classifier scores the heads)")
    rows = read_examples(task_data, text_b=opened.text_b)
    texts_a, gold_labels = [r["text_a"] for r in rows], [r["label"] for r in rows]
    texts_b = [r["text_b"] for r in rows] if opened.text_b else None
    unknown = sorted(set(gold_labels) - set(labels))
    if unknown:
        raise ValueError(f"--task_data={task_data}: labels {unknown} are not the model's "
                         f"{list(labels)}")
    batch = opened.packer.encode_numpy(texts_a, texts_b)
    masked = instrument.instrumented(opened.backbone, use_head_mask=True)
    features = head_features(opened.task_model, masked(masked.input),
                             masked.input["padding_mask"], analysis)
    model = keras.Model(masked.input, opened.classifier(features))
    gold = np.array([list(labels).index(label) for label in gold_labels])
    return Scored(model, {**batch, "label": gold}, gold)
