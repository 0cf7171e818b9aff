"""Sentence and sentence-pair classification or regression (GLUE-style) as a task of the
shared trainer.

Reads TSV, CSV or JSONL files with the columns `text_a`, optional `text_b` and `label`, packs
them in tf.data with the same in-graph TextPacker the export runs (garden.serving.text: any of
the three tokenizer kinds, each family's layout), so serving sees exactly the training ids;
fine-tunes from a pretraining checkpoint (docs/objectives.md section 12: pooled output -> dropout
0.1 -> dense) and names its ServingModule (garden.serving.modules.TextClassifierServing).

Classification: string labels, softmax cross-entropy, accuracy next to the majority class.
Regression (`regression=True`, e.g. STS-B): numeric labels, one output trained with the mean
squared error, evaluated with Pearson and Spearman correlations (scipy.stats).

GLUE (`glue_task='mrpc'`, 'sst2', 'stsb', 'mnli', ...): the files are the task's official TSVs,
read by data_pipelines.finetune.glue (its column layout, label set and file:line errors); text_b
and regression follow the task, the class order is BERT's (glue.label_names; recorded in the
model_dir's summary.json and the export's metadata) unless `label_names` permutes it, and
evaluate adds the official metric (garden.metrics.glue: CoLA MCC, MRPC/QQP F1 of class "1",
STS-B Pearson and Spearman; MNLI's mismatched accuracy from `eval_mismatched_file`).

The backbone's weights come from one object of the pretraining checkpoint: `backbone` for the
families whose pretraining task saves it under that name (BERT, RoBERTa, ALBERT, SpanBERT,
DistilBERT), `discriminator` for ELECTRA (its generator is dropped; docs/objectives.md section 6),
with `init_checkpoint_object` naming which.
"""

from __future__ import annotations

import collections
import csv
import io
import json
import posixpath
from typing import Callable, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from data_pipelines.finetune import FinetuneDataError, glue, tfds_sources
from garden import data, pretrained
from garden.metrics import glue as glue_metrics
from garden.models.classifier import SequenceClassifier
from garden.serving.modules import TextClassifierServing
from garden.serving.text import load_packer
from garden.tasks.base import Stage, Task
from garden.tasks.shared import make_backbone, restore_backbone


class TaskDataError(ValueError):
    """A fine-tuning data file is missing, malformed or has unknown labels."""


# csv dialects: a TSV is GLUE's (tab-separated, no quoting: a quote is text); a CSV is RFC 4180
# (Excel's dialect: quoted fields may hold commas and newlines).
_DIALECTS = {".tsv": dict(delimiter="\t", quoting=csv.QUOTE_NONE, strict=True),
             ".csv": dict(dialect="excel", strict=True)}


def _read_text(path: str) -> str:
    try:
        return glue.read_text(path)
    except FinetuneDataError as e:
        raise TaskDataError(str(e)) from None


def _read_delimited(path: str, text: str, columns: List[str], numeric_label: bool) -> List[dict]:
    """Rows of a TSV/CSV with a header; newline="" lets the csv module alone decide where a
    record ends (a quoted CSV field may span lines; U+2028 or a form feed is text)."""
    ext = posixpath.splitext(path)[1].lower()
    reader = csv.DictReader(io.StringIO(text, newline=""), **_DIALECTS[ext])
    try:
        header = reader.fieldnames or []
        missing = [c for c in columns if c not in header]
        if missing:
            raise TaskDataError(f"{path}:1: header {header} lacks columns {missing}")
        rows = []
        for row in reader:
            line = reader.line_num
            if None in row:  # DictReader's restkey: more fields than the header names
                raise TaskDataError(f"{path}:{line}: row has {len(header) + len(row[None])} "
                                    f"fields but the header names {len(header)} (a tab or "
                                    f"delimiter inside a text? quote it in a .csv)")
            if any(row.get(c) is None for c in columns):
                raise TaskDataError(f"{path}:{line}: row has fewer fields than the header")
            rows.append({c: row[c] for c in columns})
            if numeric_label:
                rows[-1]["label"] = _number(row["label"], f"{path}:{line}")
        return rows
    except csv.Error as e:
        raise TaskDataError(f"{path}:{reader.line_num}: {e}") from None


def _number(value: str, where: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise TaskDataError(f"{where}: label {value!r} is not a number (a regression task "
                            f"needs numeric labels)") from None


def _read_jsonl(path: str, text: str, columns: List[str], numeric_label: bool) -> List[dict]:
    """One JSON object per line ("\\n"-separated, as JSON Lines says; U+2028 is text).
    Texts must be strings and labels strings (classification) or numbers (regression)."""
    rows = []
    for i, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise TaskDataError(f"{path}:{i}: not valid JSON ({e.msg})") from e
        if not isinstance(obj, dict):
            raise TaskDataError(f"{path}:{i}: expected a JSON object, got {type(obj).__name__}")
        missing = [c for c in columns if c not in obj]
        if missing:
            raise TaskDataError(f"{path}:{i}: record lacks fields {missing}")
        for c in columns:
            value = obj[c]
            if c == "label" and numeric_label:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
                want = "a number (regression)"
            else:
                ok, want = isinstance(value, str), "a string"
            if not ok:
                raise TaskDataError(f"{path}:{i}: field {c!r} is {json.dumps(value)}, expected "
                                    f"{want}; fix the record (labels are not converted)")
        rows.append({c: obj[c] for c in columns})
    return rows


def read_examples(path: str, text_b: bool = False, numeric_label: bool = False) -> List[dict]:
    """Rows of a .tsv / .csv / .jsonl file as dicts with text_a, (text_b), label.

    TSV and CSV need a header line naming the columns; every problem names the file and line.
    numeric_label: labels are numbers (regression); in TSV/CSV they must parse as floats.
    """
    columns = ["text_a", "label"] + (["text_b"] if text_b else [])
    return read_records(path, columns, numeric_label)


def read_records(path: str, columns: List[str], numeric_label: bool = False) -> List[dict]:
    """Rows {column: value} of a .tsv / .csv (header naming the columns) / .jsonl file; the
    errors of read_examples (file and line). A column "label" may be numeric (numeric_label);
    every other column is text."""
    text = _read_text(path)
    ext = posixpath.splitext(path)[1].lower()
    if ext in _DIALECTS:
        rows = _read_delimited(path, text, columns, numeric_label)
    elif ext in (".jsonl", ".json"):
        rows = _read_jsonl(path, text, columns, numeric_label)
    else:
        raise TaskDataError(f"{path}: unsupported extension {ext!r}; use .tsv, .csv or .jsonl")
    if not rows:
        raise TaskDataError(f"{path} has no examples")
    return rows


def checkpoint_objects(path: str) -> List[str]:
    """Names of the top-level objects of a tf.train.Checkpoint (e.g. model, backbone,
    generator, discriminator, optimizer), read from its object graph."""
    return pretrained.checkpoint_objects(path)


def resolve_init_checkpoint(path: str, wanted_object: str) -> str:
    """The checkpoint prefix of a pretraining model_dir, a garden.convert output directory
    (garden/pretrained.py) or a prefix, checked to hold the object the backbone is restored
    from."""
    return pretrained.resolve_checkpoint(path, wanted_object)


def batches(ds: tf.data.Dataset, size: int, batch_size: int, shuffle_seed=None,
            repeat: bool = False, skip: int = 0, input_context=None) -> tf.data.Dataset:
    """A fine-tuning dataset of `size` examples as batches: repeated and shuffled for training
    (full batches only), dealt to input pipelines after `skip` batches (garden.data)."""
    if repeat:
        ds = ds.repeat()
    if shuffle_seed is not None:
        ds = ds.shuffle(size, seed=shuffle_seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size, drop_remainder=repeat)
    return data.shard_batches(ds, input_context, skip)


def softmax_metrics(logits: tf.Tensor, label_ids: tf.Tensor) -> dict:
    """Softmax cross-entropy over the last axis (the loss) and accuracy of one batch."""
    labels = tf.cast(label_ids, tf.int64)
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, -1), labels), tf.float32))
    return {"loss": loss, "accuracy": accuracy}


def build_backbone(task, output_hidden_states: bool = False):
    """The backbone of a fine-tuning task (task.backbone_fn sized by task.packer; of the
    converted checkpoint's architecture when task.init_checkpoint is a garden.convert directory,
    garden/pretrained.py), restored from task._init_path's `task.init_checkpoint_object` when
    task.init_checkpoint is set."""
    converted = getattr(task, "_converted", None)
    if converted is not None:
        backbone = pretrained.build_backbone(
            converted, task.backbone_fn, f"garden.{type(task).__name__}", output_hidden_states,
            task.packer.vocab_size, getattr(task, "max_seq_length", None))
    else:
        backbone = make_backbone(task.backbone_fn, task.packer, output_hidden_states)
    if task.init_checkpoint:
        restore_backbone(backbone, task._init_path, task.init_checkpoint_object, task.name)
    return backbone


class SentenceClassification(Task):
    """Fine-tunes a pretrained backbone on a labelled text file; serves it from raw text.

    Args:
        backbone: callable(default_vocab_size[, default_padding_idx]) -> backbone (a gin
            factory: bert_backbone, roberta_backbone, albert_backbone, electra_discriminator).
        vocab: the pretraining vocabulary (vocab.txt, SentencePiece .model or BPE vocab.json;
            copied into the export); None: the tokenizer of a converted init_checkpoint.
        train_file, eval_file: .tsv/.csv/.jsonl with text_a, (text_b), label.
        max_seq_length: sequence length, 128 for GLUE.
        lower_case: must match the vocabulary's pretraining (make_vocab --lower_case); None:
            a converted init_checkpoint's casing, else True.
        text_b: whether the task has a second sentence.
        label_names: the classes in order; default: sorted labels of the train file.
            Not used with regression.
        init_checkpoint: pretraining model_dir, garden.convert output directory (its
            architecture, tokenizer and casing are used: garden/pretrained.py) or checkpoint
            prefix to start from; None trains from scratch.
        init_checkpoint_object: the object of that checkpoint the backbone is restored from:
            "backbone" (the default), or "discriminator" for an ELECTRA pretraining model_dir
            (configs/finetune/classification_electra_tiny.gin).
        dropout: dropout before the output layer.
        export_base, model_name: where the SavedModel goes (<export_base>/<model_name>/<version>).
        tokenizer: "wordpiece" | "sentencepiece" | "bpe"; default from the vocabulary's name.
        layout: "bert" | "roberta" text packing (garden.serving.text); default by tokenizer.
        regression: one output trained with the mean squared error on numeric labels.
        glue_task: read train_file / eval_file as this GLUE task's official TSVs (cola, sst2,
            mrpc, qqp, stsb, mnli, qnli, rte, wnli); sets text_b, regression and label_names.
        eval_mismatched_file: MNLI's dev_mismatched.tsv, scored as eval_accuracy_mismatched.
        tfds_data_dir: where `tfds:glue/<task>:<split>` files are prepared (with glue_task, the
            files may be such specs: data_pipelines.finetune.tfds_sources; no downloads).
    """

    name = "sentence_classification"

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
            spec = glue.task_spec(glue_task)
            self.glue_task = spec.name
            text_b, regression = spec.text_b is not None, spec.labels is None
            if label_names and sorted(label_names) != sorted(spec.labels or ()):
                raise ValueError(f"label_names {list(label_names)} are not GLUE {spec.name}'s "
                                 f"classes {list(spec.labels or ())} (in some order)")
            label_names = label_names or glue.label_names(spec.name)
        if eval_mismatched_file and self.glue_task != "mnli":
            raise ValueError("eval_mismatched_file is MNLI's second dev set; set glue_task='mnli'")
        self.eval_mismatched_file = eval_mismatched_file
        self.tfds_data_dir = tfds_data_dir
        self.backbone_fn = backbone
        self.vocab, self.tokenizer, self.layout = vocab, tokenizer, layout
        self.train_file, self.eval_file = train_file, eval_file
        self.max_seq_length, self.lower_case, self.text_b = max_seq_length, lower_case, text_b
        self.regression = bool(regression)
        if self.regression and label_names:
            raise ValueError("label_names name classes; a regression task has none")
        self.label_names = list(label_names) if label_names else None
        self.init_checkpoint = init_checkpoint
        self.init_checkpoint_object = init_checkpoint_object
        self.dropout = dropout
        self.export_base, self.model_name = export_base, model_name
        (self._converted, self.vocab, self.lower_case, self.tokenizer,
         self.layout) = pretrained.text_settings(f"garden.{type(self).__name__}",
                                                 init_checkpoint, vocab, lower_case,
                                                 tokenizer, layout)

    # -- before anything is built ---------------------------------------------------------
    def prepare(self) -> None:
        self._packer = None
        packer = self.packer  # checks the vocabulary, its special tokens and the layout now
        self._packer = None  # ... and is built again on first use, see `packer`
        self.train_rows = self._read(self.train_file)
        self.eval_rows = self._read(self.eval_file)
        self.train_labels = self._labels(self.train_file, self.train_rows)
        self.eval_labels = self._labels(self.eval_file, self.eval_rows)
        if self.eval_mismatched_file:
            self.mismatched_rows = self._read(self.eval_mismatched_file)
            self.mismatched_labels = self._labels(self.eval_mismatched_file, self.mismatched_rows)
        if self.init_checkpoint:
            self._init_path = resolve_init_checkpoint(self.init_checkpoint,
                                                      self.init_checkpoint_object)
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
                examples = glue.read_examples(path, self.glue_task)
        except FinetuneDataError as e:
            raise TaskDataError(str(e)) from None
        if examples[0].label is None:
            raise TaskDataError(f"{path}: a GLUE {self.glue_task} test file (no labels); "
                                f"training and evaluation need labels")
        return [{"text_a": e.text_a, "label": e.label,
                 **({"text_b": e.text_b} if self.text_b else {})} for e in examples]

    @property
    def packer(self):
        """The TextPacker, built on first use (build_model, the datasets, the export).

        Not kept from prepare(): the trainer seeds after prepare() (keras.utils.set_random_seed
        -> tf.random.set_seed), which clears TensorFlow's eager kernel cache, and with it the
        SentencepieceOp kernel that owns tensorflow-text's SentencePiece model resource
        ("Resource localhost/_0_SentencepieceOp/... does not exist" at the first batch).
        """
        if getattr(self, "_packer", None) is None:
            self._packer = load_packer(self.vocab, self.max_seq_length, kind=self.tokenizer,
                                       lower_case=self.lower_case, layout=self.layout)
        return self._packer

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
    def build_model(self):
        backbone = build_backbone(self)
        model = SequenceClassifier(backbone, num_classes=self.num_outputs, dropout=self.dropout)
        # "backbone" lets garden.train size layer-wise LR decay (train.layer_decay) from it.
        return model, {"model": model, "backbone": backbone}

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
    def _logits(self, model, batch, training: bool):
        inputs = {k: batch[k] for k in self.packer.input_names}
        return tf.cast(model(inputs, training=training)["logits"], tf.float32)

    def compute_metrics(self, model, batch, training: bool, weight_shares=None):
        logits = self._logits(model, batch, training)
        if self.regression:
            error = logits[:, 0] - tf.cast(batch["label_ids"], tf.float32)
            return {"loss": tf.reduce_mean(tf.square(error)),
                    "mean_absolute_error": tf.reduce_mean(tf.abs(error))}
        return softmax_metrics(logits, batch["label_ids"])

    # -- after training ---------------------------------------------------------------------
    def predict(self, model, rows, batch_size: int = 64) -> np.ndarray:
        """Logits float32 [N, outputs] of rows (dicts with text_a, (text_b)) in order."""
        labels = np.zeros(len(rows), np.float32)
        return np.concatenate([self._logits(model, batch, False).numpy()
                               for batch in self._dataset(rows, labels, batch_size)])

    def evaluate(self, model, batch_size: int = 64) -> dict:
        """Classification: accuracy next to the majority-class baseline (the train set's
        mode). Regression: Pearson and Spearman correlations and the mean squared error.
        With glue_task: also the task's official metric (garden.metrics.glue: eval_mcc,
        eval_f1; MNLI's eval_accuracy_mismatched with eval_mismatched_file)."""
        logits = self.predict(model, self.eval_rows, batch_size)
        result = {"eval_examples": int(len(self.eval_labels))}
        if self.glue_task:
            predictions = logits[:, 0] if self.regression else logits.argmax(-1)
            official = glue_metrics.glue_metrics(self.glue_task, predictions, self.eval_labels,
                                                 self.label_names)
            result.update({f"eval_{k}": v for k, v in official.items()})
            if self.eval_mismatched_file:
                mismatched = self.predict(model, self.mismatched_rows, batch_size).argmax(-1)
                result["eval_accuracy_mismatched"] = glue_metrics.accuracy(
                    mismatched, self.mismatched_labels)
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
        metadata): ids of another order would swap classes (glue.check_label_order)."""
        result = self.evaluate(model)
        print(f"[{self.name}] eval {json.dumps(result, sort_keys=True)}", flush=True)
        if not self.regression:
            result["label_names"] = list(self.label_names)
        if self.glue_task:
            result["glue_task"] = self.glue_task
        return result

    def serving_module(self, model) -> TextClassifierServing:
        """Raw text in, labels (or a score) out; a few eval texts are the warmup requests."""
        warmup = [(r["text_a"], r.get("text_b", "")) for r in self.eval_rows[:3]]
        return TextClassifierServing(
            model, self.packer, self.vocab, None if self.regression else self.label_names,
            self.text_b, warmup_texts=warmup)
