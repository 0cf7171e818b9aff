"""Sentence and sentence-pair classification or regression (GLUE-style) as a task of the
shared trainer.

Reads TSV, CSV or JSONL files with the columns `text_a`, optional `text_b` and `label`, packs
them in tf.data with the same in-graph TextPacker the export runs (garden.serving.text: any of
the three tokenizer kinds, each family's layout), so serving sees exactly the training ids;
fine-tunes from a pretraining checkpoint (docs/objectives.md section 12: pooled output -> dropout
0.1 -> dense) and names its ServingModule (garden.serving.classification.ClassificationServing).

Classification: string labels, softmax cross-entropy, accuracy next to the majority class.
Regression (`regression=True`, e.g. STS-B): numeric labels, one output trained with the mean
squared error, evaluated with Pearson and Spearman correlations (scipy.stats).

GLUE (`glue_task='mrpc'`, 'sst2', 'stsb', 'mnli', ...): the files are the task's official TSVs,
read by text.finetune.classification (its column layout, label set and file:line errors);
text_b and regression follow the task, the class order is BERT's (label_names; recorded in the
model_dir's summary.json and the export's metadata) unless `label_names` permutes it, and
evaluate adds the official metric (garden.metrics.classification: CoLA MCC, MRPC/QQP F1 of
class "1", STS-B Pearson and Spearman; MNLI's mismatched accuracy from `eval_mismatched_file`).

The backbone's weights come from one object of the pretraining checkpoint: `backbone` for the
families whose pretraining task saves it under that name (BERT, RoBERTa, ALBERT, SpanBERT,
DistilBERT), `discriminator` for ELECTRA (its generator is dropped; docs/objectives.md section 6),
with `init_checkpoint_object` naming which.
"""

from __future__ import annotations

import collections
from typing import Callable, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from text.finetune import FinetuneDataError, classification, tfds_sources
from garden.metrics.classification import accuracy, glue_metrics
from garden.models.classification import SequenceClassifier
from garden.serving.classification import ClassificationServing
from garden.tasks.base import Stage
from garden.tasks.finetuning import EncoderFinetuning, softmax_metrics
from garden.tasks.shared import batches
from garden.tasks.text_files import TaskDataError, read_examples


class Classification(EncoderFinetuning):
    """Fine-tunes a pretrained backbone on a labelled text file; serves it from raw text.

    Args (backbone, vocab, max_seq_length, lower_case, init_checkpoint, init_checkpoint_object
    (ELECTRA: configs/finetune/classification_electra_tiny.gin), dropout, export_base,
    model_name ("classifier"), tokenizer and layout: garden.tasks.finetuning.EncoderFinetuning),
    and:
        train_file, eval_file: .tsv/.csv/.jsonl with text_a, (text_b), label.
        text_b: whether the task has a second sentence.
        label_names: the classes in order; default: sorted labels of the train file.
            Not used with regression.
        regression: one output trained with the mean squared error on numeric labels.
        glue_task: read train_file / eval_file as this GLUE task's official TSVs (cola, sst2,
            mrpc, qqp, stsb, mnli, qnli, rte, wnli); sets text_b, regression and label_names.
        eval_mismatched_file: MNLI's dev_mismatched.tsv, scored as eval_accuracy_mismatched.
        tfds_data_dir: where `tfds:glue/<task>:<split>` files are prepared (with glue_task, the
            files may be such specs: text.finetune.tfds_sources; no downloads).
    """

    name = "classification"

    def __init__(self, backbone: Callable, vocab: Optional[str], train_file: str, eval_file: str,
                 max_seq_length: int = 128, lower_case: Optional[bool] = None,
                 text_b: bool = False,
                 label_names: Optional[Sequence[str]] = None, init_checkpoint: Optional[str] = None,
                 init_checkpoint_object: str = "backbone", dropout: float = 0.1,
                 export_base: Optional[str] = None, model_name: str = "classifier",
                 tokenizer: Optional[str] = None, layout: Optional[str] = None,
                 regression: bool = False, glue_task: Optional[str] = None,
                 eval_mismatched_file: Optional[str] = None,
                 tfds_data_dir: Optional[str] = None):
        self.glue_task = None
        if glue_task:
            spec = classification.task_spec(glue_task)
            self.glue_task = spec.name
            text_b, regression = spec.text_b is not None, spec.labels is None
            if label_names and sorted(label_names) != sorted(spec.labels or ()):
                raise ValueError(f"label_names {list(label_names)} are not GLUE {spec.name}'s "
                                 f"classes {list(spec.labels or ())} (in some order)")
            label_names = label_names or classification.label_names(spec.name)
        if eval_mismatched_file and self.glue_task != "mnli":
            raise ValueError("eval_mismatched_file is MNLI's second dev set; set glue_task='mnli'")
        self.eval_mismatched_file = eval_mismatched_file
        self.tfds_data_dir = tfds_data_dir
        self.train_file, self.eval_file, self.text_b = train_file, eval_file, text_b
        self.regression = bool(regression)
        if self.regression and label_names:
            raise ValueError("label_names name classes; a regression task has none")
        self.label_names = list(label_names) if label_names else None
        super().__init__(backbone, vocab, max_seq_length, lower_case, tokenizer, layout,
                         init_checkpoint, init_checkpoint_object, dropout, export_base,
                         model_name)

    # -- before anything is built ---------------------------------------------------------
    def prepare(self) -> None:
        packer = self.check_text()
        self.train_rows = self._read(self.train_file)
        self.eval_rows = self._read(self.eval_file)
        self.train_labels = self._labels(self.train_file, self.train_rows)
        self.eval_labels = self._labels(self.eval_file, self.eval_rows)
        if self.eval_mismatched_file:
            self.mismatched_rows = self._read(self.eval_mismatched_file)
            self.mismatched_labels = self._labels(self.eval_mismatched_file, self.mismatched_rows)
        what = "regression" if self.regression else f"labels {self.label_names}"
        print(f"[{self.name}] {len(self.train_rows)} train / {len(self.eval_rows)} eval "
              f"examples, {what}, {packer.kind} text in the {packer.layout!r} layout",
              flush=True)

    def _read(self, path: str) -> List[dict]:
        """Rows {text_a, (text_b), label} of a data file: a GLUE TSV of glue_task (labelled),
        or a .tsv/.csv/.jsonl with the columns text_a, (text_b), label."""
        if not self.glue_task:
            return read_examples(path, self.text_b, self.regression)
        try:
            if tfds_sources.is_tfds(path):
                examples = tfds_sources.read_glue(path, self.tfds_data_dir)
                if not examples[0].guid.startswith(self.glue_task + "-"):
                    raise FinetuneDataError(f"{path} is not GLUE {self.glue_task}")
            else:
                examples = classification.read_examples(path, self.glue_task)
        except FinetuneDataError as e:
            raise TaskDataError(str(e)) from None
        if examples[0].label is None:
            raise TaskDataError(f"{path}: a GLUE {self.glue_task} test file (no labels); "
                                f"training and evaluation need labels")
        return [{"text_a": e.text_a, "label": e.label,
                 **({"text_b": e.text_b} if self.text_b else {})} for e in examples]

    def _labels(self, path: str, rows: List[dict]) -> np.ndarray:
        if self.regression:
            return np.array([r["label"] for r in rows], np.float32)
        if self.label_names is None:  # from the train file, which is read first
            self.label_names = sorted({r["label"] for r in rows})
        index = {name: i for i, name in enumerate(self.label_names)}
        unknown = sorted({r["label"] for r in rows} - set(index))
        if unknown:
            raise TaskDataError(f"{path}: labels {unknown[:5]} are not among {self.label_names}")
        return np.array([index[r["label"]] for r in rows], np.int64)

    @property
    def num_outputs(self) -> int:
        return 1 if self.regression else len(self.label_names)

    # -- the model -------------------------------------------------------------------------
    def task_model(self, backbone):
        return SequenceClassifier(backbone, num_classes=self.num_outputs, dropout=self.dropout)

    @staticmethod
    def summary_model(backbone):
        """The model `garden.train --summary` prints (a two-class head; labels need data)."""
        return SequenceClassifier(backbone, num_classes=2)

    # -- the data ---------------------------------------------------------------------------
    def _dataset(self, rows, labels, batch_size, shuffle_seed=None, repeat=False, skip=0,
                 input_context=None):
        columns = {"text_a": [r["text_a"] for r in rows]}
        if self.text_b:
            columns["text_b"] = [r["text_b"] for r in rows]
        ds = batches(tf.data.Dataset.from_tensor_slices((columns, labels)), len(rows),
                     batch_size, shuffle_seed, repeat, skip, input_context)

        # Built here, eagerly, not inside the map's trace: a tokenizer first made in a tf.data
        # graph holds that graph's tensors, and a second dataset (another input pipeline, the
        # evaluation) could not use it.
        packer = self.packer

        def encode(cols, label):
            inputs = packer(cols["text_a"], cols.get("text_b"))
            inputs["label_ids"] = label
            return inputs

        return ds.map(encode, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    def schedule(self, train_steps: int) -> List[Stage]:
        warned = []

        def dataset_fn(input_context, batch_size, seed, skip_batches):
            if len(self.train_rows) < batch_size and not warned:
                # Repeated to fill the batch: every batch holds the same examples more than once.
                warned.append(True)
                print(f"[{self.name}] warning: {self.train_file} has {len(self.train_rows)} "
                      f"examples, fewer than one batch of {batch_size}: each batch repeats "
                      f"them; lower train.global_batch_size", flush=True)
            return self._dataset(self.train_rows, self.train_labels, batch_size, shuffle_seed=seed,
                                 repeat=True, skip=skip_batches, input_context=input_context)

        return [Stage(0, train_steps, dataset_fn, self.train_file)]

    # -- the objective ----------------------------------------------------------------------
    def head_metrics(self, logits, label_ids) -> dict:
        """The loss of the head's logits [B, outputs] and its accuracy (classification) or
        mean absolute error (regression: the loss is the mean squared error)."""
        if self.regression:
            error = logits[:, 0] - tf.cast(label_ids, tf.float32)
            return {"loss": tf.reduce_mean(tf.square(error)),
                    "mean_absolute_error": tf.reduce_mean(tf.abs(error))}
        return softmax_metrics(logits, label_ids)

    def compute_metrics(self, model, batch, training: bool, weight_shares=None):
        return self.head_metrics(self._logits(model, batch, training), batch["label_ids"])

    # -- after training ---------------------------------------------------------------------
    def predict(self, model, rows, batch_size: int = 64) -> np.ndarray:
        """Logits float32 [N, outputs] of rows (dicts with text_a, (text_b)) in order."""
        labels = np.zeros(len(rows), np.float32)
        return np.concatenate([self._logits(model, batch, False).numpy()
                               for batch in self._dataset(rows, labels, batch_size)])

    def evaluate(self, model, batch_size: int = 64) -> dict:
        """Classification: accuracy next to the majority-class baseline (the train set's
        mode). Regression: Pearson and Spearman correlations and the mean squared error.
        With glue_task: also the task's official metric (garden.metrics.classification:
        eval_mcc, eval_f1; MNLI's eval_accuracy_mismatched with eval_mismatched_file)."""
        logits = self.predict(model, self.eval_rows, batch_size)
        result = {"eval_examples": int(len(self.eval_labels))}
        if self.glue_task:
            predictions = logits[:, 0] if self.regression else logits.argmax(-1)
            official = glue_metrics(self.glue_task, predictions, self.eval_labels,
                                    self.label_names)
            result.update({f"eval_{k}": v for k, v in official.items()})
            if self.eval_mismatched_file:
                mismatched = self.predict(model, self.mismatched_rows, batch_size).argmax(-1)
                result["eval_accuracy_mismatched"] = accuracy(mismatched,
                                                              self.mismatched_labels)
        if self.regression:
            from scipy import stats

            scores, gold = logits[:, 0], self.eval_labels
            result.update(eval_mse=float(np.mean((scores - gold) ** 2)),
                          eval_pearson=float(stats.pearsonr(scores, gold)[0]),
                          eval_spearman=float(stats.spearmanr(scores, gold)[0]))
            return result
        majority = collections.Counter(self.train_labels.tolist()).most_common(1)[0][0]
        result.update(eval_accuracy=float(np.mean(logits.argmax(-1) == self.eval_labels)),
                      majority_class=self.label_names[majority],
                      majority_baseline_accuracy=float(np.mean(self.eval_labels == majority)))
        return result

    def finish(self, model, model_dir: str) -> dict:
        """evaluate(), plus the class order of the trained head (and the GLUE task), which
        the trainer writes to the model_dir's summary.json (the export has it in its
        metadata): ids of another order would swap classes (text.finetune.classification.check_label_order)."""
        result = super().finish(model, model_dir)
        if not self.regression:
            result["label_names"] = list(self.label_names)
        if self.glue_task:
            result["glue_task"] = self.glue_task
        return result

    def serving_module(self, model) -> ClassificationServing:
        """Raw text in, labels (or a score) out; a few eval texts are the warmup requests."""
        warmup = [(r["text_a"], r.get("text_b", "")) for r in self.eval_rows[:3]]
        return ClassificationServing(
            model, self.packer, self.vocab, None if self.regression else self.label_names,
            self.text_b, warmup_texts=warmup)
