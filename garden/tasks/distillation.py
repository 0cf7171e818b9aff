"""DistilBERT distillation (Sanh et al., 2019; docs/objectives.md section 10) as a task of the trainer.

A frozen BERT teacher, restored from a garden checkpoint (a `garden.train` model_dir or a
checkpoint prefix), and a DistilBERT student initialised from the teacher's embeddings and
layers [0, 2, 4, 7, 9, 11] (configurable for other depths) see the same dynamically masked
batch; the loss is 5 * KL(T=2) * T^2 + 2 * MLM + 1 * cosine (garden/models/distilbert/
distiller.py).

Data: make_pretrain --objective=bert output (BERT-format TFRecords). Its static masks are
undone -- masked_lm_ids are written back at masked_lm_positions, which restores the original
text -- and the segment ids and NSP labels are ignored (the student has no token types, the
teacher is given segment 0 everywhere). Each batch is then masked afresh, as the released
distillation code does (its `prepare_batch_mlm`):
  - budget: ceil(0.15 * real tokens of the batch) positions, drawn over the whole batch
    without replacement with p proportional to max(count, 1)^-0.7 (count = the piece's corpus
    frequency; rare pieces are favoured), never a special token or padding;
  - each chosen position: 80% [MASK], 10% kept, 10% a uniformly random vocabulary id.
Piece counts come from the first `count_examples` examples of the data (the original counts
its whole binarized corpus). The draws are stateless functions of (seed, index of the batch in
the stream), so a resumed run masks exactly as an uninterrupted one.
"""

from __future__ import annotations

import math
import os
from typing import Callable, Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

from text import tokenizers
from garden import data, pretrained
from garden.models.bert.pretrainer import BertPretrainer
from garden.models.distilbert.distiller import (TEACHER_LAYERS, DistilBertDistiller,
                                                distillation_loss, init_student_from_teacher)
from garden.models.distilbert.pretrainer import DistilBertPretrainer
from garden.tasks import shared
from garden.tasks.base import Stage, Task


def token_weights(counts: np.ndarray, special_ids: Sequence[int], smoothing: float = 0.7) -> np.ndarray:
    """Sampling weight of each vocabulary id: max(count, 1)^-smoothing, 0 for special ids."""
    weights = np.maximum(np.asarray(counts, np.float64), 1.0) ** -float(smoothing)
    weights[list(special_ids)] = 0.0
    return weights.astype(np.float32)


def unmask_bert_batch(batch: Dict[str, tf.Tensor]) -> tf.Tensor:
    """input_ids of a BERT-format batch with the original pieces written back at the masked
    positions (masked_lm_ids where masked_lm_weights > 0): the text before static masking."""
    ids = tf.cast(batch["input_ids"], tf.int32)
    positions = tf.cast(batch["masked_lm_positions"], tf.int32)
    originals = tf.cast(batch["masked_lm_ids"], tf.int32)
    real = tf.cast(batch["masked_lm_weights"], tf.float32) > 0
    length = tf.shape(ids)[1]
    # One-hot over the sequence of each real prediction: [B, P, T] -> which positions change.
    hits = tf.one_hot(positions, length, dtype=tf.int32) * tf.cast(real, tf.int32)[..., None]
    changed = tf.reduce_max(hits, axis=1)  # [B, T]
    restored = tf.reduce_sum(hits * originals[..., None], axis=1)  # [B, T]
    return tf.where(changed > 0, restored, ids)


def distillation_mask(token_ids, padding_mask, weights, seed, mask_token_id: int,
                      vocab_size: int, max_predictions: int, mlm_prob: float = 0.15,
                      mask_rate: float = 0.8, random_rate: float = 0.1) -> Dict[str, tf.Tensor]:
    """DistilBERT's masking of one batch (see the module docstring), stateless in `seed`.

    Args:
        token_ids: int32 [B, T], the original (unmasked) ids.
        padding_mask: int [B, T], 1 for real tokens.
        weights: float32 [V], sampling weight of each id (token_weights; 0 = never chosen).
        seed: int32 [2], the stateless seed of this batch.
        mask_token_id, vocab_size: [MASK] and the vocabulary size (random replacements are
            uniform over all V ids, as the original's torch.randint).
        max_predictions: P, predictions kept per sequence (a sequence given more by the
            batch-level draw keeps its first P positions; P = T never drops any).

    Returns:
        dict: token_ids (masked input) int32 [B, T]; masked_lm_positions, masked_lm_ids int32
        [B, P]; masked_lm_weights float32 [B, P].
    """
    token_ids = tf.cast(token_ids, tf.int32)
    real = tf.cast(padding_mask, tf.float32)
    shape = tf.shape(token_ids)
    batch, length = shape[0], shape[1]
    p = tf.gather(weights, token_ids) * real  # [B, T]
    # Budget: ceil(0.15 * real tokens in the batch), at most the positions that can be chosen.
    budget = tf.cast(tf.math.ceil(mlm_prob * tf.reduce_sum(real)), tf.int32)
    budget = tf.minimum(budget, tf.reduce_sum(tf.cast(p > 0, tf.int32)))
    # Sampling without replacement with p proportional to the weights = the top-k of
    # log p + Gumbel noise (the Gumbel-top-k trick; torch.multinomial(replacement=False)).
    seeds = tf.random.experimental.stateless_split(seed, 3)
    u = tf.random.stateless_uniform(shape, seeds[0], minval=1e-9, maxval=1.0)
    scores = tf.where(p > 0, tf.math.log(p) - tf.math.log(-tf.math.log(u)),
                      tf.fill(shape, -np.inf))
    flat = tf.reshape(scores, [-1])
    _, chosen = tf.math.top_k(flat, k=tf.size(flat))
    chosen = chosen[:budget]
    selected = tf.scatter_nd(chosen[:, None], tf.ones_like(chosen), tf.shape(flat))
    selected = tf.reshape(selected, shape) > 0  # [B, T]

    # 80% [MASK], 10% kept, 10% random id, per chosen position.
    r = tf.random.stateless_uniform(shape, seeds[1])
    random_ids = tf.random.stateless_uniform(shape, seeds[2], maxval=vocab_size, dtype=tf.int32)
    replacement = tf.where(r < mask_rate, tf.fill(shape, mask_token_id),
                           tf.where(r < mask_rate + random_rate, random_ids, token_ids))
    masked = tf.where(selected, replacement, token_ids)

    # Pack each sequence's chosen positions, in order, into P slots.
    positions = tf.range(length)[None, :] + tf.zeros([batch, 1], tf.int32)
    order = tf.argsort(tf.where(selected, positions, positions + length), axis=1, stable=True)
    order = order[:, :max_predictions]
    slot_used = tf.gather(selected, order, batch_dims=1)
    masked_lm_positions = tf.where(slot_used, order, 0)
    masked_lm_ids = tf.where(slot_used, tf.gather(token_ids, order, batch_dims=1), 0)
    pad = max_predictions - tf.shape(order)[1]  # T < P: pad the slots
    return {
        "token_ids": masked,
        "masked_lm_positions": tf.pad(masked_lm_positions, [[0, 0], [0, pad]]),
        "masked_lm_ids": tf.pad(masked_lm_ids, [[0, 0], [0, pad]]),
        "masked_lm_weights": tf.pad(tf.cast(slot_used, tf.float32), [[0, 0], [0, pad]]),
    }


def teacher_checkpoint(path: str) -> str:
    """The checkpoint prefix of `path`: a garden.train model_dir (its newest checkpoint), a
    checkpoints directory, or a prefix itself."""
    if tf.io.gfile.isdir(path):
        for directory in (os.path.join(path, "checkpoints"), path):
            latest = tf.train.latest_checkpoint(directory)
            if latest:
                return latest
        raise FileNotFoundError(f"no checkpoint in {path} (nor in {path}/checkpoints): give a "
                                "garden.train model_dir or a checkpoint prefix")
    if not tf.io.gfile.exists(path + ".index"):
        raise FileNotFoundError(f"teacher checkpoint {path} not found ({path}.index missing)")
    return path


def load_teacher(path: str, backbone) -> BertPretrainer:
    """A BertPretrainer on `backbone` with every weight restored from `path`: a garden.train
    model_dir or checkpoint prefix (the pretrainer saved under "model"), or a saved
    BertPretrainer .keras file (garden.convert's pretrainer.keras of a Hugging Face or TF1
    BERT). A source that does not hold all of them (another architecture) is a ValueError."""
    teacher = BertPretrainer(backbone)
    if path.endswith(".keras"):  # e.g. garden.convert's pretrainer.keras (HF / TF1 BERT)
        import keras

        saved = keras.models.load_model(path)
        if not isinstance(saved, BertPretrainer):
            raise ValueError(f"teacher {path} holds a {type(saved).__name__}, not a "
                             "BertPretrainer (convert a checkpoint with its pretraining heads)")
        shapes = [tuple(w.shape) for w in saved.weights]
        if shapes != [tuple(w.shape) for w in teacher.weights]:
            raise ValueError(f"teacher {path} does not fit the configured teacher backbone "
                             f"{backbone.get_config()}: its config is "
                             f"{saved.backbone.get_config()}")
        teacher.set_weights(saved.get_weights())
        return teacher
    prefix = teacher_checkpoint(path)
    status = tf.train.Checkpoint(model=teacher).read(prefix)
    status.expect_partial()  # the optimizer and the trainer's seed states are not wanted
    try:
        status.assert_existing_objects_matched()
    except AssertionError as e:
        raise ValueError(f"teacher checkpoint {prefix} does not fit the configured teacher "
                         f"backbone {backbone.get_config()}: {str(e)[:300]}") from None
    # A shallower configured teacher would restore without complaint (its layers all exist in
    # the checkpoint): compare the number of variables saved under "model" with the teacher's.
    saved = pretrained.saved_variable_count(prefix, "model")
    if saved is not None and saved != len(teacher.weights):
        raise ValueError(f"teacher checkpoint {prefix} does not fit the configured teacher "
                         f"backbone {backbone.get_config()}: its model has {saved} variables, "
                         f"this teacher {len(teacher.weights)} (another depth?)")
    return teacher


class Distillation(Task):
    """DistilBERT student distilled from a BERT teacher on BERT-format data.

    Args:
        backbone: callable(default_vocab_size) -> DistilBertBackbone, the student (gin:
            @student/backbone with a DistilBERT preset).
        teacher_backbone: callable(default_vocab_size) -> BertBackbone of the teacher's
            architecture (gin: @teacher/backbone).
        teacher: a garden.train model_dir of a BERT run, a checkpoint prefix, or a saved
            BertPretrainer .keras file (garden.convert's pretrainer.keras).
        vocab: the WordPiece vocabulary of the data (fingerprint-checked).
        data_dir: make_pretrain --objective=bert output; max_seq_length: its length.
        teacher_layers: teacher layer copied into each student layer ([0,2,4,7,9,11] for a
            12-layer teacher and 6-layer student).
        temperature, alpha_ce, alpha_mlm, alpha_cos: the published 2.0, 5.0, 2.0, 1.0.
        mlm_prob: masking budget per real token (0.15); mlm_smoothing: the -0.7 exponent.
        max_predictions_per_seq: prediction slots per sequence (None: max_seq_length).
        count_examples: examples read to count piece frequencies.
        objective: the data's objective name ("bert"; "ernie" data has the same features).
        shuffle_buffer: examples in the tf.data shuffle buffer.
    """

    name = "distillation"

    def __init__(self, backbone: Callable, teacher_backbone: Callable, teacher: str, vocab: str,
                 data_dir: str, max_seq_length: int, teacher_layers: Sequence[int] = TEACHER_LAYERS,
                 temperature: float = 2.0, alpha_ce: float = 5.0, alpha_mlm: float = 2.0,
                 alpha_cos: float = 1.0, mlm_prob: float = 0.15, mlm_smoothing: float = 0.7,
                 max_predictions_per_seq: Optional[int] = None, count_examples: int = 100_000,
                 objective: str = "bert", shuffle_buffer: int = 10_000):
        self.backbone_fn = backbone
        self.teacher_backbone_fn = teacher_backbone
        self.teacher_path = teacher
        self.vocab = vocab
        self.data_dir = data_dir
        self.max_seq_length = int(max_seq_length)
        self.teacher_layers = [int(i) for i in teacher_layers]
        self.loss_args = dict(temperature=float(temperature), alpha_ce=float(alpha_ce),
                              alpha_mlm=float(alpha_mlm), alpha_cos=float(alpha_cos))
        self.mlm_prob = float(mlm_prob)
        self.mlm_smoothing = float(mlm_smoothing)
        self.max_predictions = int(max_predictions_per_seq or max_seq_length)
        self.count_examples = int(count_examples)
        self.objective = objective
        self.shuffle_buffer = shuffle_buffer
        self._dir: Optional[data.DataDir] = None

    # -- checks and statistics before anything is built ----------------------------------
    def prepare(self) -> None:
        loaded = tokenizers.load_tokenizer("wordpiece", self.vocab)
        vocabulary = loaded.vocab  # text.vocab.Vocab
        self.vocab_size = vocabulary.size
        self._dir = data.open_data_dir(
            self.data_dir, objective=self.objective, vocab_fingerprint=loaded.fingerprint,
            vocab_size=self.vocab_size, max_seq_length=self.max_seq_length)
        self.mask_token_id = vocabulary.special("mask", self.name)
        self.special_ids = sorted(vocabulary.special_ids)
        self.token_counts = self._count_tokens()
        self.token_weights = token_weights(self.token_counts, self.special_ids, self.mlm_smoothing)

    def _count_tokens(self) -> np.ndarray:
        counts = np.zeros(self.vocab_size, np.int64)
        ds = data.record_dataset(self._dir, batch_size=256, seed=0, shuffle_buffer=0,
                                 repeat=False).take(math.ceil(self.count_examples / 256))
        for batch in ds:
            ids = unmask_bert_batch(batch).numpy()
            real = batch["input_mask"].numpy() > 0
            counts += np.bincount(ids[real], minlength=self.vocab_size)[:self.vocab_size]
        return counts

    # -- model ---------------------------------------------------------------------------
    def build_model(self):
        student_backbone = self.backbone_fn(default_vocab_size=self.vocab_size)
        teacher_backbone = self.teacher_backbone_fn(default_vocab_size=self.vocab_size)
        for name, b in (("student", student_backbone), ("teacher", teacher_backbone)):
            if b.vocab_size != self.vocab_size:
                raise ValueError(f"the {name} backbone has vocab_size {b.vocab_size}, the "
                                 f"vocabulary {self.vocab} has {self.vocab_size} tokens")
            if self.max_seq_length > b.max_sequence_length:
                raise ValueError(f"data of length {self.max_seq_length} exceeds the {name}'s "
                                 f"max_sequence_length {b.max_sequence_length}")
        teacher = load_teacher(self.teacher_path, teacher_backbone)
        student = DistilBertPretrainer(student_backbone)
        # A resumed run then overwrites this with its own checkpoint (the trainer restores
        # after build_model).
        init_student_from_teacher(student, teacher, self.teacher_layers)
        model = DistilBertDistiller(student, teacher)
        # A subclassed model: build it (one tiny call) so that the trainer can count and
        # collect its variables.
        ones = tf.ones([1, 2], tf.int32)
        model({"token_ids": ones, "padding_mask": ones, "masked_lm_positions": ones[:, :1]})
        # The checkpoint holds the student (what a user keeps); the teacher is reloaded from
        # its own checkpoint at every start.
        return model, {"model": student, "backbone": student_backbone}

    @staticmethod
    def summary_model(backbone):
        """The model `garden.train --summary` prints: the student."""
        return DistilBertPretrainer(backbone)

    # -- data ----------------------------------------------------------------------------
    def _masked(self, ds: tf.data.Dataset, seed: int, input_context, skip_batches: int):
        """Each batch unmasked, then masked afresh from (seed, its index in the stream)."""
        weights = tf.constant(self.token_weights)

        def fn(index, batch):
            ids = unmask_bert_batch(batch)
            batch_seed = tf.stack([tf.constant(seed, tf.int64), index])
            out = distillation_mask(ids, batch["input_mask"], weights,
                                    tf.cast(batch_seed, tf.int32), self.mask_token_id,
                                    self.vocab_size, self.max_predictions, self.mlm_prob)
            out["padding_mask"] = tf.cast(batch["input_mask"], tf.int32)
            return out

        return shared.batch_index(ds, input_context, skip_batches).map(
            fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    def schedule(self, train_steps: int):
        """One stage: the data directory for all train_steps."""
        assert self._dir is not None, "prepare() first"

        def dataset_fn(input_context, batch_size, seed, skip_batches):
            ds = data.record_dataset(self._dir, batch_size=batch_size, seed=seed,
                                     input_context=input_context,
                                     shuffle_buffer=self.shuffle_buffer, skip_batches=skip_batches)
            return self._masked(ds, seed, input_context, skip_batches)

        return [Stage(0, train_steps, dataset_fn,
                      f"{self._dir.path} (max_seq_length {self.max_seq_length}), distilled from "
                      f"{self.teacher_path}", tuple(self._dir.files))]

    # -- objective -----------------------------------------------------------------------
    def compute_metrics(self, model, batch, training: bool,
                        weight_shares: Optional[Dict[str, tf.Tensor]] = None) -> Dict[str, tf.Tensor]:
        inputs = {k: batch[k] for k in ("token_ids", "padding_mask", "masked_lm_positions")}
        out = model(inputs, training=training)
        metrics = distillation_loss(out["student_logits"], out["teacher_logits"],
                                    batch["masked_lm_ids"], batch["masked_lm_weights"],
                                    out["student_hidden"], out["teacher_hidden"],
                                    batch["padding_mask"], **self.loss_args)
        metrics["tokens"] = shared.real_tokens(batch, "padding_mask")
        return metrics

    def finish(self, model, model_dir: str) -> dict:
        return {"teacher": self.teacher_path, "teacher_layers": self.teacher_layers}
