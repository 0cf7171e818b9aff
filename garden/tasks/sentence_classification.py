"""Sentence and sentence-pair classification (GLUE-style) as a task of the shared trainer.

Reads TSV, CSV or JSONL files with the columns `text_a`, optional `text_b` and `label`,
tokenizes them in tf.data with the same in-graph encoder the export uses (so serving sees
exactly the training ids), fine-tunes from a pretraining checkpoint and exports a SavedModel
for TensorFlow Serving (OBJECTIVES.md section 12: pooled output -> dropout 0.1 -> dense).

The backbone's weights come from one object of the pretraining checkpoint: `backbone` for the
families whose pretraining task saves it under that name (BERT, RoBERTa, ALBERT, SpanBERT,
DistilBERT), `discriminator` for ELECTRA (its generator is dropped; OBJECTIVES.md section 6),
with `init_checkpoint_object` naming which.
"""

from __future__ import annotations

import collections
import csv
import json
import posixpath
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from data_pipelines import tokenizers
from garden import data
from garden.tasks.classification import SequenceClassifier
from garden.tasks.preprocessing import TextEncoder


class TaskDataError(ValueError):
    """A fine-tuning data file is missing, malformed or has unknown labels."""


def read_examples(path: str, text_b: bool = False) -> List[dict]:
    """Rows of a .tsv / .csv / .jsonl file as dicts with text_a, (text_b), label.

    TSV and CSV need a header line naming the columns; every problem names the file and line.
    """
    if not tf.io.gfile.exists(path):
        raise TaskDataError(f"data file not found: {path}")
    ext = posixpath.splitext(path)[1].lower()
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise TaskDataError(f"{path}:{line}: invalid UTF-8") from e
    columns = ["text_a", "label"] + (["text_b"] if text_b else [])
    rows = []
    if ext in (".tsv", ".csv"):
        reader = csv.DictReader(text.splitlines(), delimiter="\t" if ext == ".tsv" else ",",
                                quoting=csv.QUOTE_NONE if ext == ".tsv" else csv.QUOTE_MINIMAL)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise TaskDataError(f"{path}:1: header {reader.fieldnames} lacks columns {missing}")
        for i, row in enumerate(reader, start=2):
            if any(row.get(c) is None for c in columns):
                raise TaskDataError(f"{path}:{i}: row has fewer fields than the header")
            rows.append({c: row[c] for c in columns})
    elif ext in (".jsonl", ".json"):
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskDataError(f"{path}:{i}: not valid JSON ({e.msg})") from e
            missing = [c for c in columns if c not in obj]
            if missing:
                raise TaskDataError(f"{path}:{i}: record lacks fields {missing}")
            rows.append({c: str(obj[c]) for c in columns})
    else:
        raise TaskDataError(f"{path}: unsupported extension {ext!r}; use .tsv, .csv or .jsonl")
    if not rows:
        raise TaskDataError(f"{path} has no examples")
    return rows


def checkpoint_objects(path: str) -> List[str]:
    """Names of the top-level objects of a tf.train.Checkpoint (e.g. model, backbone,
    generator, discriminator, optimizer), read from its object graph."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(tf.train.load_checkpoint(path).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    return [child.local_name for child in graph.nodes[0].children]


class SentenceClassification:
    """Fine-tunes a pretrained backbone on a labelled text file and exports it.

    Args:
        backbone: callable(default_vocab_size) -> backbone (gin-configured factory).
        vocab: WordPiece vocabulary used in pretraining (copied into the export).
        train_file, eval_file: .tsv/.csv/.jsonl with text_a, (text_b), label.
        max_seq_length: sequence length, 128 for GLUE.
        lower_case: must match the vocabulary's pretraining.
        text_b: whether the task has a second sentence.
        label_names: the classes in order; default: sorted labels of the train file.
        init_checkpoint: pretraining model_dir or checkpoint prefix to start from; None
            trains from scratch.
        init_checkpoint_object: the object of that checkpoint the backbone is restored from:
            "backbone" (the default), or "discriminator" for an ELECTRA pretraining model_dir
            (configs/finetune/classification_electra_tiny.gin).
        dropout: dropout before the classification layer.
        export_base, model_name: where the SavedModel goes (<export_base>/<model_name>/<version>).
    """

    name = "sentence_classification"

    def __init__(self, backbone: Callable, vocab: str, train_file: str, eval_file: str,
                 max_seq_length: int = 128, lower_case: bool = True, text_b: bool = False,
                 label_names: Optional[Sequence[str]] = None, init_checkpoint: Optional[str] = None,
                 init_checkpoint_object: str = "backbone", dropout: float = 0.1,
                 export_base: Optional[str] = None,
                 model_name: str = "classifier"):
        self.backbone_fn = backbone
        self.vocab = vocab
        self.train_file = train_file
        self.eval_file = eval_file
        self.max_seq_length = max_seq_length
        self.lower_case = lower_case
        self.text_b = text_b
        self.label_names = list(label_names) if label_names else None
        self.init_checkpoint = init_checkpoint
        self.init_checkpoint_object = init_checkpoint_object
        self.dropout = dropout
        self.export_base = export_base
        self.model_name = model_name

    def prepare(self) -> None:
        self.vocab_tokens = tokenizers.load_vocab(self.vocab)
        self.train_rows = read_examples(self.train_file, self.text_b)
        self.eval_rows = read_examples(self.eval_file, self.text_b)
        if self.label_names is None:
            self.label_names = sorted({r["label"] for r in self.train_rows})
        index = {name: i for i, name in enumerate(self.label_names)}
        for path, rows in ((self.train_file, self.train_rows), (self.eval_file, self.eval_rows)):
            unknown = sorted({r["label"] for r in rows} - set(index))
            if unknown:
                raise TaskDataError(f"{path}: labels {unknown[:5]} are not among {self.label_names}")
        self.train_labels = np.array([index[r["label"]] for r in self.train_rows], np.int64)
        self.eval_labels = np.array([index[r["label"]] for r in self.eval_rows], np.int64)
        self.encoder = TextEncoder(self.vocab_tokens, lower_case=self.lower_case,
                                   max_seq_length=self.max_seq_length)
        if self.init_checkpoint:
            ckpt = self.init_checkpoint
            if tf.io.gfile.isdir(ckpt):  # a pretraining model_dir, or its checkpoints/ folder
                ckpt = (tf.train.latest_checkpoint(posixpath.join(ckpt, "checkpoints"))
                        or tf.train.latest_checkpoint(ckpt))
                if ckpt is None:
                    raise FileNotFoundError(f"no checkpoint in {self.init_checkpoint} "
                                            f"(nor in its checkpoints/ folder)")
            objects = checkpoint_objects(ckpt)
            if self.init_checkpoint_object not in objects:
                hint = (" (an ELECTRA pretraining checkpoint: bind garden.SentenceClassification"
                        ".init_checkpoint_object = 'discriminator', as configs/finetune/"
                        "classification_electra_tiny.gin does)" if "discriminator" in objects
                        else "")
                raise ValueError(f"checkpoint {ckpt} has no {self.init_checkpoint_object!r} "
                                 f"object to initialise the backbone from; it holds "
                                 f"{sorted(objects)}{hint}")
            self._init_path = ckpt
        print(f"[{self.name}] {len(self.train_rows)} train / {len(self.eval_rows)} eval examples, "
              f"labels {self.label_names}", flush=True)

    def build_model(self):
        backbone = self.backbone_fn(default_vocab_size=len(self.vocab_tokens))
        if self.init_checkpoint:
            status = tf.train.Checkpoint(
                **{self.init_checkpoint_object: backbone}).read(self._init_path)
            status.expect_partial()
            status.assert_existing_objects_matched()
            print(f"[{self.name}] backbone initialised from {self._init_path} "
                  f"(its {self.init_checkpoint_object!r})", flush=True)
        model = SequenceClassifier(backbone, num_classes=len(self.label_names), dropout=self.dropout)
        # "backbone" lets garden.train size layer-wise LR decay (train.layer_decay) from it.
        return model, {"model": model, "backbone": backbone}

    @staticmethod
    def summary_model(backbone):
        """The model `garden.train --summary` prints (a two-class head; labels need data)."""
        return SequenceClassifier(backbone, num_classes=2)

    def _dataset(self, rows, labels, batch_size, shuffle_seed=None, repeat=False, skip=0,
                 input_context=None):
        columns = {"text_a": [r["text_a"] for r in rows]}
        if self.text_b:
            columns["text_b"] = [r["text_b"] for r in rows]
        ds = tf.data.Dataset.from_tensor_slices((columns, labels))
        if repeat:
            ds = ds.repeat()
        if shuffle_seed is not None:
            ds = ds.shuffle(len(rows), seed=shuffle_seed, reshuffle_each_iteration=True)
        ds = ds.batch(batch_size, drop_remainder=repeat)
        ds = data.shard_batches(ds, input_context, skip)

        def encode(cols, label):
            inputs = self.encoder(cols["text_a"], cols.get("text_b"))
            inputs["label_ids"] = label
            return inputs

        return ds.map(encode, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    def schedule(self, train_steps: int):
        def dataset_fn(input_context, batch_size, seed, skip_batches):
            return self._dataset(self.train_rows, self.train_labels, batch_size, shuffle_seed=seed,
                                 repeat=True, skip=skip_batches, input_context=input_context)

        return [(0, train_steps, dataset_fn, self.train_file)]

    @staticmethod
    def loss_weights(batch) -> Dict[str, tf.Tensor]:
        return {}  # a plain mean over equal-sized batches: nothing to normalise globally

    def compute_metrics(self, model, batch, training: bool, weight_shares=None) -> Dict[str, tf.Tensor]:
        inputs = {k: batch[k] for k in ("token_ids", "segment_ids", "padding_mask")}
        logits = tf.cast(model(inputs, training=training)["logits"], tf.float32)
        labels = tf.cast(batch["label_ids"], tf.int64)
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, -1), labels), tf.float32))
        return {"loss": loss, "accuracy": accuracy}

    def evaluate(self, model, batch_size: int = 64) -> dict:
        """Accuracy on eval_file next to the majority-class baseline (the train set's mode)."""
        predictions = []
        for batch in self._dataset(self.eval_rows, self.eval_labels, batch_size):
            inputs = {k: batch[k] for k in ("token_ids", "segment_ids", "padding_mask")}
            logits = model(inputs, training=False)["logits"]
            predictions.append(np.argmax(np.asarray(logits), axis=-1))
        predictions = np.concatenate(predictions)
        majority = collections.Counter(self.train_labels.tolist()).most_common(1)[0][0]
        return {
            "eval_examples": int(len(self.eval_labels)),
            "eval_accuracy": float(np.mean(predictions == self.eval_labels)),
            "majority_class": self.label_names[majority],
            "majority_baseline_accuracy": float(np.mean(self.eval_labels == majority)),
        }

    def finish(self, model, model_dir: str) -> dict:
        result = self.evaluate(model)
        print(f"[{self.name}] eval accuracy {result['eval_accuracy']:.4f} "
              f"(majority-class baseline '{result['majority_class']}': "
              f"{result['majority_baseline_accuracy']:.4f}) on {result['eval_examples']} examples",
              flush=True)
        if self.export_base:
            from garden.export import export_classifier

            result["export_dir"] = export_classifier(
                model, vocab_path=self.vocab, lower_case=self.lower_case,
                max_seq_length=self.max_seq_length, label_names=self.label_names,
                export_base=self.export_base, model_name=self.model_name, text_b=self.text_b,
                warmup_texts=[r["text_a"] for r in self.eval_rows[:3]])
            print(f"[{self.name}] exported SavedModel to {result['export_dir']}", flush=True)
        return result
