"""Cross-View Training for tagging (Clark et al. 2018): garden.CvtTagging.

Labelled batches (the CoNLL train file) and unlabelled batches (sentences of plain text files)
alternate. On a labelled batch the primary module learns the tags (cross-entropy on each
word's first piece); on an unlabelled batch each auxiliary module (forward, backward, future,
past: garden.models.cvt.tagger) learns to match the primary module's soft prediction, which
is computed without dropout and held fixed (no gradient through it):

    loss = CE(primary, tags) on labelled batches
         + sum over views of CE(softmax(primary without dropout), aux_view) on unlabelled ones,

both means over the global batch's words / real pieces. Evaluation, entities and the export
are Tagging's (the primary module's tags). The logged supervised_loss and word_accuracy
are means over the window's batches, unlabelled ones counting 0: half their labelled value
at one labelled batch in two.
"""

from __future__ import annotations

import glob
from typing import Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf

from garden import data
from garden.models.cvt.tagger import VIEWS, CvtTagger
from garden.serving.text import model_inputs
from garden.tasks.tagging import Tagging


class CvtTagging(Tagging):
    """Tagging with CVT's unlabelled batches (module docstring).

    Args: Tagging's (train_data and eval_data CoNLL files), and:
        unlabeled_data: a glob of plain text files; each non-empty line is a sentence. None:
            no unlabelled batches (the same tagger trained on the labels alone).
        max_unlabeled: sentences read from them at most (10,000).
        prediction_hidden: the ReLU layer of each prediction module (1024 in the paper).
        supervised_batches: labelled batches before the first unlabelled one (0: alternate
            from the start, as the paper): the primary module's predictions are the auxiliary
            modules' targets, and a primary that has not yet learned the tags teaches them
            its majority class.
    """

    name = "cvt_tagging"

    def __init__(self, backbone: Callable, vocab: Optional[str], train_data: str,
                 eval_data: str, unlabeled_data: Optional[str], max_unlabeled: int = 10_000,
                 prediction_hidden: int = 1024, supervised_batches: int = 0, **kwargs):
        for switch in ("feature_layers", "lstm_units", "scalar_mix"):
            if kwargs.get(switch):
                # Tagging takes them, but CvtTagger fine-tunes its encoder under its own
                # prediction modules: they would be accepted and ignored.
                raise ValueError(f"garden.CvtTagging.{switch}={kwargs[switch]!r}: CVT trains its "
                                 f"BiLSTM encoder with its prediction modules on top, not a "
                                 f"feature-based tagger; unbind it (garden.Tagging takes it)")
        super().__init__(backbone, vocab, train_data, eval_data, **kwargs)
        self.unlabeled_data, self.max_unlabeled = unlabeled_data, int(max_unlabeled)
        self.prediction_hidden = int(prediction_hidden)
        self.supervised_batches = int(supervised_batches)

    def prepare(self) -> None:
        super().prepare()
        if self.train_arrays is None:
            raise ValueError(f"garden.CvtTagging reads CoNLL files; {self.train_data} is a "
                             f"make_finetune directory")
        self.unlabeled_arrays = None
        if not self.unlabeled_data:
            print(f"[{self.name}] no unlabelled data: the labels alone", flush=True)
            return
        lines = self._unlabeled_sentences()
        packed = self.packer.encode_numpy(lines)
        self.unlabeled_arrays = {k: np.asarray(packed[k], np.int32)
                                 for k in self.packer.input_names}
        print(f"[{self.name}] {len(lines)} unlabelled sentences from {self.unlabeled_data}",
              flush=True)

    def _unlabeled_sentences(self) -> List[str]:
        files = sorted(glob.glob(self.unlabeled_data))
        if not files:
            raise ValueError(f"garden.CvtTagging.unlabeled_data={self.unlabeled_data!r} "
                             f"matches no file")
        lines: List[str] = []
        for name in files:
            with open(name, encoding="utf-8") as f:
                lines.extend(line.strip() for line in f if line.strip())
            if len(lines) >= self.max_unlabeled:
                break
        if not lines:
            raise ValueError(f"{self.unlabeled_data}: no sentence in {files}")
        return lines[:self.max_unlabeled]

    def task_model(self, backbone):
        return CvtTagger(backbone, len(self.label_names), hidden=self.prediction_hidden,
                         dropout=self.dropout)

    # -- the data: labelled and unlabelled batches in turn --------------------------------
    def _batches(self, arrays: Dict[str, np.ndarray], labeled: bool, batch_size: int, seed):
        keys = list(self.packer.input_names)
        columns = {k: np.asarray(arrays[k], np.int32) for k in keys}
        rows = len(columns[keys[0]])
        columns["label_ids"] = (np.asarray(arrays["label_ids"], np.int64) if labeled else
                                np.full(columns["token_ids"].shape, -1, np.int64))
        ds = tf.data.Dataset.from_tensor_slices(columns).repeat()
        ds = ds.shuffle(rows, seed=seed, reshuffle_each_iteration=True)
        flag = 1.0 if labeled else 0.0
        return ds.batch(batch_size, drop_remainder=True).map(
            lambda b: {**b, "labeled": tf.fill([batch_size], flag)})

    def _dataset(self, batch_size, seed, input_context, skip):
        ds = self._batches(self.train_arrays, True, batch_size, seed)
        if self.unlabeled_arrays is not None:
            unlabeled = self._batches(self.unlabeled_arrays, False, batch_size, seed + 1)
            first = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).repeat(
                self.supervised_batches)
            ds = tf.data.Dataset.choose_from_datasets(
                [ds, unlabeled], first.concatenate(tf.data.Dataset.range(2).repeat()))
        return data.shard_batches(ds, input_context, skip).prefetch(tf.data.AUTOTUNE)

    # -- the objective ----------------------------------------------------------------------
    def loss_weights(self, batch):
        unlabeled = (1.0 - tf.cast(batch["labeled"], tf.float32))[:, None]
        return {**super().loss_weights(batch), "unlabeled_pieces": tf.reduce_sum(
            tf.cast(batch["padding_mask"], tf.float32) * unlabeled)}

    def compute_metrics(self, model, batch, training: bool, weight_shares=None):
        inputs = model_inputs(model, {k: tf.cast(batch[k], tf.int32)
                                      for k in self.packer.input_names})
        out = model(inputs, training=training)
        metrics = self._supervised(out["logits"], batch, weight_shares)
        teacher = tf.stop_gradient(tf.nn.softmax(model(inputs, training=False)["logits"]))
        weights = tf.cast(batch["padding_mask"], tf.float32) * (
            1.0 - tf.cast(batch["labeled"], tf.float32))[:, None]
        denominator = (tf.reduce_sum(weights) if weight_shares is None
                       else weight_shares["unlabeled_pieces"]) + 1e-5
        cvt = tf.add_n([tf.reduce_sum(tf.nn.softmax_cross_entropy_with_logits(
            labels=teacher, logits=tf.cast(out[f"aux_{view}"], tf.float32)) * weights)
            for view in VIEWS]) / denominator
        return {"loss": metrics["loss"] + cvt, "supervised_loss": metrics["loss"],
                "cvt_loss": cvt, "word_accuracy": metrics["word_accuracy"],
                "tokens": metrics["tokens"]}

    def _supervised(self, logits, batch, weight_shares) -> Dict[str, tf.Tensor]:
        """Tagging's loss and word accuracy of the primary module's logits."""
        return super().compute_metrics(_Fixed(logits), batch, False, weight_shares)


class _Fixed:
    """A stand-in model that returns given logits (Tagging.compute_metrics calls
    model(inputs)["logits"])."""

    def __init__(self, logits):
        self.logits = logits

    def __call__(self, inputs, training=False):
        return {"logits": self.logits}
