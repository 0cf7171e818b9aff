"""Token tagging (CoNLL-2003 NER) as a task of the shared trainer.

Data, train and eval alike, is either
  * a CoNLL-2003 file (or `tfds:conll2003:<split>` with `tfds_data_dir`), read by
    text.finetune.tagging and turned into first-sub-token records in this process by
    the same `example_features` that make_finetune runs, or
  * a `python -m data_pipelines.make_finetune --task=tagging` output directory (COMPLETED,
    info.json, <split>-*.tfrecord shards of text.finetune.tagging.feature_spec records).
Every word's first sub-token carries its label, the other positions -1; the loss is the
softmax cross-entropy over labelled positions only (divided by the labelled positions of the
whole global batch). Long sentences are non-overlapping pieces; evaluation rejoins a
sentence's pieces (example_index, piece_index) before scoring, so every word is scored.

Evaluation: seqeval entity-level micro F1 per sentence (garden.metrics.tagging), lenient
(conlleval) by default or strict IOB2 (`metric_mode`), keys eval_f1 / eval_precision /
eval_recall with the mode and scheme stated beside them, and the all-O baseline (F1 0).

Model (garden.models.tagging.TokenTagger): fine-tuned, or feature-based with
`feature_layers = 4` (frozen backbone, its last four hidden states concatenated; BERT table 7)
and optionally `lstm_units` for a BiLSTM over them. Exported through
garden.serving.tagging.TaggingServing: raw sentences in, word-level entities out.
"""

from __future__ import annotations

import json
import posixpath
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from text import kinds
from text.finetune import FinetuneDataError
from text.finetune.tagging import (CONLL2003_LABELS, NAME, SCHEMES, ConllOptions, ConllSentence,
                                   example_features, feature_spec, labels_of, read_examples)
from garden import data
from garden.metrics.tagging import MODES, entity_scores
from garden.models.tagging import TokenTagger
from garden.serving.tagging import TaggingServing
from garden.tasks.base import Stage
from garden.tasks.finetuning import EncoderFinetuning

RECORD_KEYS = ("token_ids", "segment_ids", "padding_mask", "label_ids", "example_index",
               "piece_index")


def records_to_arrays(records: Sequence[Dict]) -> Dict[str, np.ndarray]:
    """A list of example_features dicts as int64 arrays ([N, T] or [N])."""
    return {k: np.asarray([r[k] for r in records], np.int64) for k in RECORD_KEYS}


def rejoin(arrays: Dict[str, np.ndarray], predicted: np.ndarray) -> Dict[int, tuple]:
    """{example_index: (gold label ids, predicted label ids)} over each sentence's words:
    its pieces in piece_index order, the labelled (first sub-token) positions of each."""
    order = np.lexsort((arrays["piece_index"], arrays["example_index"]))
    out: Dict[int, tuple] = {}
    for i in order:
        where = arrays["label_ids"][i] >= 0
        gold, pred = out.setdefault(int(arrays["example_index"][i]), ([], []))
        gold.extend(arrays["label_ids"][i][where].tolist())
        pred.extend(predicted[i][where].tolist())
    return out


def read_data_dir(path: str, options: Optional[ConllOptions] = None,
                  vocab_fingerprint: Optional[str] = None) -> tuple:
    """(info, files) of a make_finetune --task=tagging output directory, checked: complete, of
    the tagging kind, and (when given) made with these options and this vocabulary."""
    if not tf.io.gfile.exists(posixpath.join(path, "COMPLETED")):
        raise data.DataDirError(f"{path} has no COMPLETED marker: make_finetune did not finish "
                                f"writing it")
    with tf.io.gfile.GFile(posixpath.join(path, "info.json")) as f:
        info = json.load(f)
    made_for = info.get("task", info.get("objective"))
    if made_for != NAME:
        retired = kinds.renamed(f"--task={made_for}")
        raise data.DataDirError(f"{path} holds {made_for!r} records, not {NAME}" + (
            f" (make_finetune {retired}: make the directory again with --task={NAME})"
            if retired else ""))
    made = info.get("options") or {}
    if options is not None:
        for key, want in (("max_seq_length", options.max_seq_length),
                          ("label_names", list(options.label_names))):
            if key in made and made[key] != want:
                raise data.DataDirError(f"{path} was made with {key} {made[key]}, the task "
                                        f"has {want}")
    if vocab_fingerprint and info.get("vocab_fingerprint") not in (None, vocab_fingerprint):
        raise data.DataDirError(f"{path} was tokenized with another vocabulary "
                                f"({info.get('vocab_fingerprint')}) than {vocab_fingerprint}")
    files = data.listed_shards(path, info)
    return info, files


class Tagging(EncoderFinetuning):
    """Fine-tunes a backbone to tag words (CoNLL-2003 NER); serves word-level entities.

    Args (backbone, vocab, lower_case, init_checkpoint, init_checkpoint_object, dropout (before
    the dense layer), export_base, model_name ("tagger"), tokenizer, layout:
    garden.tasks.finetuning.EncoderFinetuning; with feature_layers the backbone factory must
    take output_hidden_states, as the family factories do), and:
        train_data, eval_data: a CoNLL-2003 file, tfds:conll2003:<split>, or a make_finetune
            --task=tagging directory.
        max_seq_length: sub-tokens per row ([CLS]/[SEP] included); longer sentences are cut
            into pieces (128).
        label_names: the tags in order, "O" first; default CoNLL-2003's nine when the train
            data's tags are among them, else "O" and the train data's tags sorted.
        scheme: the data's tagging scheme, "iob1" (CoNLL-2003 as distributed) or "iob2".
        metric_mode: "lenient" (conlleval, default) or "strict" (IOB2) entity matching.
        feature_layers: 0 fine-tunes; 4 freezes the backbone and tags from its last four
            hidden states concatenated (the BERT paper's feature-based setting). The families
            whose backbone gives hidden states: the BERT-kind encoders, GPT-2, ELMo and CoVe
            (embedding_size = lstm_units), CVT and ULMFiT (their narrower layers zero-padded to
            the widest); the others refuse output_hidden_states by name.
        lstm_units: a BiLSTM of this many units per direction over those features (0: none).
        scalar_mix: mix those layers with ELMo's trained scalar weights instead of
            concatenating them (any family: BERT's layers as ELMo's).
        tfds_data_dir: TensorFlow Datasets' data_dir for tfds: data.
    """

    name = "tagging"

    def __init__(self, backbone: Callable, vocab: Optional[str], train_data: str,
                 eval_data: str, max_seq_length: int = 128, lower_case: Optional[bool] = None,
                 label_names: Optional[Sequence[str]] = None, scheme: str = "iob1",
                 metric_mode: str = "lenient", init_checkpoint: Optional[str] = None,
                 init_checkpoint_object: str = "backbone", dropout: float = 0.1,
                 feature_layers: int = 0, lstm_units: int = 0, scalar_mix: bool = False,
                 export_base: Optional[str] = None, model_name: str = "tagger",
                 tokenizer: Optional[str] = None, layout: Optional[str] = None,
                 tfds_data_dir: Optional[str] = None):
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}; expected one of {SCHEMES}")
        if metric_mode not in MODES:
            raise ValueError(f"unknown metric_mode {metric_mode!r}; expected one of {MODES}")
        self.train_data, self.eval_data = train_data, eval_data
        self.label_names = tuple(label_names) if label_names else None
        self.scheme, self.metric_mode = scheme, metric_mode
        self.feature_layers, self.lstm_units = int(feature_layers), int(lstm_units)
        self.scalar_mix = bool(scalar_mix)
        # Feature-based: the frozen backbone's hidden states are the tagger's input.
        self.output_hidden_states = bool(self.feature_layers)
        self.tfds_data_dir = tfds_data_dir
        super().__init__(backbone, vocab, max_seq_length, lower_case, tokenizer, layout,
                         init_checkpoint, init_checkpoint_object, dropout, export_base,
                         model_name)

    # -- before anything is built ---------------------------------------------------------
    def prepare(self) -> None:
        self.text_tokenizer = self.load_text_tokenizer()
        packer = self.check_text()
        self.train_sentences = self._sentences(self.train_data)
        self.eval_sentences = self._sentences(self.eval_data)
        if self.label_names is None:
            self.label_names = self._default_labels()
        self.options = ConllOptions(self.max_seq_length, self.scheme, self.label_names)
        self.train_arrays = self._arrays(self.train_data, self.train_sentences)
        self.eval_arrays = self._arrays(self.eval_data, self.eval_sentences)
        n_train = "records" if self.train_arrays is None else (
            f"{len(self.train_arrays['token_ids'])} rows")
        print(f"[{self.name}] train {self.train_data} ({n_train}), eval {self.eval_data} "
              f"({len(self.eval_arrays['token_ids'])} rows), labels {list(self.label_names)}, "
              f"scheme {self.scheme}, {packer.kind} text", flush=True)

    def _is_dir(self, path: str) -> bool:
        return not path.startswith("tfds:") and tf.io.gfile.isdir(path)

    def _sentences(self, path: str) -> Optional[List[ConllSentence]]:
        if self._is_dir(path):
            return None
        return read_examples(path, self.scheme, data_dir=self.tfds_data_dir)

    def _default_labels(self) -> tuple:
        if self.train_sentences is None:
            info, _ = read_data_dir(self.train_data)
            labels = (info.get("options") or info.get("arguments") or {}).get("label_names")
            if not labels:
                raise ValueError(f"{self.train_data}: info.json records no label_names; bind "
                                 f"garden.Tagging.label_names")
            return tuple(labels)
        found = labels_of(self.train_sentences)
        if set(found) <= set(CONLL2003_LABELS):
            return CONLL2003_LABELS
        return found

    def _arrays(self, path, sentences) -> Optional[Dict[str, np.ndarray]]:
        """Records of a CoNLL source as arrays; for a data directory: None for train (read
        by tf.data), every record for eval."""
        if sentences is None:
            _, files = read_data_dir(path, self.options, self.text_tokenizer.fingerprint)
            if path == self.train_data and path != self.eval_data:
                self._train_files = files
                return None
            spec = feature_spec(self.options)
            ds = tf.data.TFRecordDataset(files).map(lambda x: tf.io.parse_single_example(x, spec))
            rows = list(ds.as_numpy_iterator())
            if not rows:
                raise FinetuneDataError(f"{path} holds no records")
            return {k: np.stack([r[k] for r in rows]) for k in RECORD_KEYS}
        records = []
        for k, s in enumerate(sentences):
            try:
                records.extend(example_features(s, self.text_tokenizer, self.options, k))
            except FinetuneDataError as e:
                raise FinetuneDataError(f"{path}: {e}") from None
        return records_to_arrays(records)

    # -- the model -------------------------------------------------------------------------
    def task_model(self, backbone):
        return TokenTagger(backbone, len(self.label_names), dropout=self.dropout,
                           feature_layers=self.feature_layers, lstm_units=self.lstm_units,
                           scalar_mix=self.scalar_mix)

    @staticmethod
    def summary_model(backbone):
        """The model `garden.train --summary` prints (CoNLL-2003's nine labels)."""
        return TokenTagger(backbone, len(CONLL2003_LABELS))

    # -- the data ---------------------------------------------------------------------------
    def _dataset(self, batch_size, seed, input_context, skip):
        if self.train_arrays is not None:
            ds = tf.data.Dataset.from_tensor_slices(self.train_arrays).repeat()
            ds = ds.shuffle(len(self.train_arrays["token_ids"]), seed=seed,
                            reshuffle_each_iteration=True)
            ds = ds.batch(batch_size, drop_remainder=True)
        else:
            spec = feature_spec(self.options)
            ds = tf.data.TFRecordDataset(self._train_files).repeat()
            ds = ds.shuffle(10_000, seed=seed, reshuffle_each_iteration=True)
            ds = ds.batch(batch_size, drop_remainder=True).map(
                lambda x: tf.io.parse_example(x, spec), num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True)
        ds = data.shard_batches(ds, input_context, skip)
        return ds.prefetch(tf.data.AUTOTUNE)

    def schedule(self, train_steps: int) -> List[Stage]:
        def dataset_fn(input_context, batch_size, seed, skip_batches):
            return self._dataset(batch_size, seed, input_context, skip_batches)

        files = tuple(getattr(self, "_train_files", ()) if self.train_arrays is None else ())
        return [Stage(0, train_steps, dataset_fn, self.train_data, files)]

    # -- the objective ----------------------------------------------------------------------
    def loss_weights(self, batch):
        return {"labelled": tf.reduce_sum(tf.cast(batch["label_ids"] >= 0, tf.float32))}

    def compute_metrics(self, model, batch, training: bool, weight_shares=None):
        logits = self._logits(model, batch, training)
        labels = tf.cast(batch["label_ids"], tf.int64)
        labelled = tf.cast(labels >= 0, tf.float32)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.maximum(labels, 0), logits=logits) * labelled
        denominator = (tf.reduce_sum(labelled) if weight_shares is None
                       else weight_shares["labelled"]) + 1e-5
        correct = tf.cast(tf.equal(tf.argmax(logits, -1), labels), tf.float32) * labelled
        return {"loss": tf.reduce_sum(ce) / denominator,
                "word_accuracy": tf.reduce_sum(correct) / (tf.reduce_sum(labelled) + 1e-5),
                "tokens": tf.reduce_sum(tf.cast(batch["padding_mask"], tf.float32))}

    # -- after training ---------------------------------------------------------------------
    def predict(self, model, arrays: Dict[str, np.ndarray], batch_size: int = 64) -> np.ndarray:
        """Predicted label ids int64 [N, T] of record arrays."""
        out = []
        for i in range(0, len(arrays["token_ids"]), batch_size):
            batch = {k: arrays[k][i:i + batch_size] for k in self.packer.input_names}
            out.append(np.argmax(self._logits(model, batch, False).numpy(), -1))
        return np.concatenate(out)

    def tags(self, model, arrays=None) -> tuple:
        """(gold, predicted): one list of tags per eval sentence, every word."""
        arrays = self.eval_arrays if arrays is None else arrays
        joined = rejoin(arrays, self.predict(model, arrays))
        names = self.label_names
        gold = [[names[i] for i in joined[k][0]] for k in sorted(joined)]
        pred = [[names[i] for i in joined[k][1]] for k in sorted(joined)]
        return gold, pred

    def evaluate(self, model) -> dict:
        gold, pred = self.tags(model)
        scores = entity_scores(gold, pred, self.scheme, self.metric_mode)
        words = sum(len(s) for s in gold)
        accuracy = sum(g == p for gs, ps in zip(gold, pred) for g, p in zip(gs, ps)) / max(words, 1)
        return {"eval_f1": scores["f1"], "eval_precision": scores["precision"],
                "eval_recall": scores["recall"], "eval_word_accuracy": float(accuracy),
                "eval_sentences": len(gold), "eval_words": int(words),
                "eval_entities": scores["entities"], "metric_mode": scores["mode"],
                "metric_scheme": scores["scheme"], "all_o_baseline_f1": 0.0,
                "eval_per_type_f1": scores["per_type_f1"]}

    def serving_module(self, model) -> TaggingServing:
        """Raw sentences in, entities out; a few eval sentences are the warmup requests."""
        if self.eval_sentences:
            warmup = [" ".join(s.words) for s in self.eval_sentences[:3]]
        else:
            warmup = None
        return TaggingServing(model, self.packer, self.text_tokenizer.vocab.special("unk"),
                              self.vocab, self.label_names, self.scheme, warmup)

