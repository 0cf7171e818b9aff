"""Multiple choice (SWAG) as a task of the shared trainer.

Reads SWAG CSV files (text.finetune.multiple_choice), packs each example's N = 4 choices as the
pairs (sent1, sent2 + " " + ending_i) with the in-graph TextPacker the export runs
(garden.serving.multiple_choice.pack_choices), fine-tunes MultipleChoiceModel ([B, N, T] -> pooled
-> dense(1) -> softmax over N, softmax cross-entropy on the gold index) from a pretraining
checkpoint, reports SWAG's accuracy (garden.metrics.classification.swag_accuracy) next to the trivial
baseline (the train set's most frequent gold position) and exports MultipleChoiceServing.

Gin (configs/runs/finetune_multiple_choice.gin): backbone, vocab, train_file, eval_file,
max_seq_length, lower_case, init_checkpoint (+ init_checkpoint_object), dropout,
export_base, model_name, tokenizer, layout.
"""

from __future__ import annotations

import collections
from typing import Callable, List, Optional

import numpy as np
import tensorflow as tf

from text.finetune import FinetuneDataError, tfds_sources
from text.finetune.multiple_choice import NUM_CHOICES, SwagExample, read_examples
from garden.metrics.classification import swag_accuracy
from garden.models.multiple_choice import MultipleChoiceModel
from garden.serving.multiple_choice import MultipleChoiceServing, pack_choices
from garden.tasks.base import Stage
from garden.tasks.finetuning import EncoderFinetuning, softmax_metrics
from garden.tasks.shared import batches, rows_schedule


class MultipleChoice(EncoderFinetuning):
    """Fine-tunes a pretrained backbone on SWAG-format CSVs; serves it from raw text.

    Args: those of garden.tasks.finetuning.EncoderFinetuning (backbone, vocab, max_seq_length,
        lower_case, init_checkpoint, init_checkpoint_object, dropout, export_base, model_name
        ("multiple_choice"), tokenizer, layout), and train_file, eval_file: SWAG CSVs with
        labels, or `tfds:hellaswag:<split>` prepared under tfds_data_dir.
    """

    name = "multiple_choice"

    def __init__(self, backbone: Callable, vocab: Optional[str], train_file: str,
                 eval_file: str, max_seq_length: int = 128, lower_case: Optional[bool] = None,
                 init_checkpoint: Optional[str] = None, init_checkpoint_object: str = "backbone",
                 dropout: float = 0.1, export_base: Optional[str] = None,
                 model_name: str = "multiple_choice", tokenizer: Optional[str] = None,
                 layout: Optional[str] = None, tfds_data_dir: Optional[str] = None):
        self.train_file, self.eval_file = train_file, eval_file
        self.num_choices = NUM_CHOICES
        self.tfds_data_dir = tfds_data_dir
        super().__init__(backbone, vocab, max_seq_length, lower_case, tokenizer, layout,
                         init_checkpoint, init_checkpoint_object, dropout, export_base,
                         model_name)

    # -- before anything is built ---------------------------------------------------------
    def prepare(self) -> None:
        packer = self.check_text()
        self.train_examples = self._read(self.train_file)
        self.eval_examples = self._read(self.eval_file)
        print(f"[{self.name}] {len(self.train_examples)} train / {len(self.eval_examples)} eval "
              f"examples of {self.num_choices} choices, {packer.kind} text in the "
              f"{packer.layout!r} layout", flush=True)

    def _read(self, path: str) -> List[SwagExample]:
        examples = (tfds_sources.read_choices(path, self.tfds_data_dir)
                    if tfds_sources.is_tfds(path) else read_examples(path))
        unlabelled = [e.guid for e in examples if e.label is None]
        if unlabelled:
            raise FinetuneDataError(f"{path}: no label column (a test file?); training and "
                                    f"evaluation need labels")
        return examples

    # -- the model -------------------------------------------------------------------------
    def task_model(self, backbone):
        return MultipleChoiceModel(backbone, num_choices=self.num_choices, dropout=self.dropout)

    @staticmethod
    def summary_model(backbone):
        return MultipleChoiceModel(backbone, num_choices=NUM_CHOICES)

    # -- the data ---------------------------------------------------------------------------
    def _dataset(self, examples, batch_size, shuffle_seed=None, repeat=False, skip=0,
                 input_context=None):
        pairs = [e.pairs() for e in examples]
        columns = {"context": [e.context for e in examples],
                   "endings": [[second for _, second in p] for p in pairs]}
        labels = np.array([e.label if e.label is not None else -1 for e in examples], np.int64)
        ds = batches(tf.data.Dataset.from_tensor_slices((columns, labels)), len(examples),
                     batch_size, shuffle_seed, repeat, skip, input_context)
        packer = self.packer  # built eagerly, outside the map's trace

        def encode(cols, label):
            inputs = pack_choices(packer, cols["context"], cols["endings"])
            inputs["label_ids"] = label
            return inputs

        return ds.map(encode, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    def schedule(self, train_steps: int) -> List[Stage]:
        return rows_schedule(self._dataset, self.train_examples, train_steps, self.train_file)

    # -- the objective ----------------------------------------------------------------------
    def compute_metrics(self, model, batch, training: bool, weight_shares=None):
        return softmax_metrics(self._logits(model, batch, training), batch["label_ids"])

    # -- after training ---------------------------------------------------------------------
    def predict(self, model, examples, batch_size: int = 32) -> np.ndarray:
        """Logits float32 [len(examples), N] in order."""
        return np.concatenate([self._logits(model, batch, False).numpy()
                               for batch in self._dataset(examples, batch_size)])

    def evaluate(self, model, batch_size: int = 32) -> dict:
        """SWAG accuracy next to the most frequent train position's accuracy."""
        logits = self.predict(model, self.eval_examples, batch_size)
        gold = np.array([e.label for e in self.eval_examples])
        position = collections.Counter(e.label for e in self.train_examples).most_common(1)[0][0]
        return {"eval_examples": int(len(gold)),
                "eval_accuracy": swag_accuracy(logits.argmax(-1), gold)["accuracy"],
                "baseline_position": int(position),
                "baseline_accuracy": float(np.mean(gold == position))}

    def serving_module(self, model) -> MultipleChoiceServing:
        warmup = [(e.context, [second for _, second in e.pairs()]) for e in self.eval_examples[:2]]
        return MultipleChoiceServing(model, self.packer, self.vocab, warmup=warmup)
