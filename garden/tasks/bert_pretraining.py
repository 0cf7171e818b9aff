"""BERT pretraining (MLM + NSP) as a task of the shared trainer (OBJECTIVES.md section 1).

A task tells garden.train what to build, what to read and what to minimise; the trainer
owns the loop, the strategy, checkpoints and logging. BERT's published recipe trains 90% of
its steps on 128-token data and the rest on 512-token data: `phases` lists each phase's
first step and its data directory, and the second phase simply continues from the first's
weights and optimizer state.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence

import tensorflow as tf

from data_pipelines import tokenizers
from garden import data
from garden.models.bert.pretrainer import BertPretrainer, bert_pretrain_loss


@dataclasses.dataclass
class Phase:
    start_step: int
    data_dir: str
    max_seq_length: int


def _phase(entry) -> Phase:
    if isinstance(entry, Phase):
        return entry
    try:
        return Phase(int(entry["start_step"]), str(entry["data_dir"]), int(entry["max_seq_length"]))
    except (KeyError, TypeError) as e:
        raise ValueError(f"a pretraining phase needs start_step, data_dir and max_seq_length; "
                         f"got {entry!r}") from e


def phase_schedule(phases: Sequence[Phase], dirs: Sequence["data.DataDir"], train_steps: int,
                   dataset_fn: Callable) -> list:
    """The trainer's schedule of a phased pretraining task: one entry per phase that has steps,
    (first_step, end_step, fn(input_context, batch_size, seed, skip_batches), description),
    where fn reads that phase's data directory through ``dataset_fn(ddir, ...)``."""
    out = []
    for i, (phase, ddir) in enumerate(zip(phases, dirs)):
        end = min(phases[i + 1].start_step if i + 1 < len(phases) else train_steps, train_steps)
        if phase.start_step >= end:
            continue

        def fn(input_context, batch_size, seed, skip_batches, _d=ddir):
            return dataset_fn(_d, input_context, batch_size, seed, skip_batches)

        out.append((phase.start_step, end, fn, f"{ddir.path} (max_seq_length {phase.max_seq_length})"))
    return out


def mean_metrics(task, model, dataset) -> Dict[str, float]:
    """Mean of task.compute_metrics over the batches of `dataset` (inference mode), without
    the "tokens" count; {} for an empty dataset."""
    sums, count = {}, 0
    for batch in dataset:
        for k, v in task.compute_metrics(model, batch, training=False).items():
            sums[k] = sums.get(k, 0.0) + float(v)
        count += 1
    return {k: v / count for k, v in sums.items() if k != "tokens"} if count else {}


def to_model_inputs(batch: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """Maps the TFRecord feature names (data_pipelines.features) to the model's input names."""
    return {
        "token_ids": tf.cast(batch["input_ids"], tf.int32),
        "segment_ids": tf.cast(batch["segment_ids"], tf.int32),
        "padding_mask": tf.cast(batch["input_mask"], tf.int32),
        "masked_lm_positions": tf.cast(batch["masked_lm_positions"], tf.int32),
    }


class BertPretraining:
    """Masked LM + next sentence prediction on make_pretrain --objective=bert output.

    Args:
        backbone: callable(default_vocab_size) -> BertBackbone (a gin-configured factory).
        vocab: path of the WordPiece vocabulary the data was made with; its fingerprint must
            match the data's info.json, and its size sets the model's vocabulary when the
            backbone factory leaves vocab_size unset.
        phases: list of {"start_step", "data_dir", "max_seq_length"}, first one at step 0.
        shuffle_buffer: examples in the tf.data shuffle buffer.
        eval_data_dir: a held-out make_pretrain output (e.g. another --seed or held-out
            documents) evaluated every `train.eval_every` steps; None: no evaluation.
        eval_max_seq_length: its sequence length (default: the first phase's).
        eval_batches, eval_batch_size: how much of it each evaluation reads.
        objective: the objective name the data's info.json must record (default "bert").
            "ernie" data (make_pretrain --objective=ernie: knowledge-unit masking) has exactly
            BERT's features, so ERNIE 1.0 trains through this task with objective="ernie".
    """

    name = "bert_pretraining"
    objective = "bert"

    def __init__(self, backbone: Callable, vocab: str, phases: Sequence, shuffle_buffer: int = 10_000,
                 eval_data_dir: Optional[str] = None, eval_max_seq_length: Optional[int] = None,
                 eval_batches: int = 50, eval_batch_size: int = 32,
                 objective: Optional[str] = None):
        if objective is not None:
            self.objective = str(objective)
        self.backbone_fn = backbone
        self.vocab = vocab
        self.eval_data_dir = eval_data_dir
        self.eval_max_seq_length = eval_max_seq_length
        self.eval_batches = eval_batches
        self.eval_batch_size = eval_batch_size
        self.phases: List[Phase] = sorted((_phase(p) for p in phases), key=lambda p: p.start_step)
        if not self.phases or self.phases[0].start_step != 0:
            raise ValueError("BertPretraining.phases must start with a phase at start_step 0")
        self.shuffle_buffer = shuffle_buffer
        self._dirs: Optional[List[data.DataDir]] = None

    # -- checks before anything is built -------------------------------------------------
    def prepare(self) -> None:
        vocab_tokens = tokenizers.load_vocab(self.vocab)
        self.vocab_size = len(vocab_tokens)
        fingerprint = tokenizers.vocab_fingerprint(self.vocab)
        self._dirs = [
            data.open_data_dir(p.data_dir, objective=self.objective, vocab_fingerprint=fingerprint,
                               vocab_size=self.vocab_size, max_seq_length=p.max_seq_length)
            for p in self.phases
        ]
        self._eval_dir = None
        if self.eval_data_dir:
            self._eval_dir = data.open_data_dir(
                self.eval_data_dir, objective=self.objective, vocab_fingerprint=fingerprint,
                vocab_size=self.vocab_size,
                max_seq_length=self.eval_max_seq_length or self.phases[0].max_seq_length)

    # -- model ---------------------------------------------------------------------------
    def build_model(self):
        backbone = self._checked_backbone()
        model = BertPretrainer(backbone)
        return model, {"model": model, "backbone": backbone}

    def _checked_backbone(self):
        """The configured backbone, checked against the vocabulary and the data's lengths."""
        backbone = self.backbone_fn(default_vocab_size=self.vocab_size)
        config = backbone.get_config()
        if config["vocab_size"] != self.vocab_size:
            raise ValueError(f"the config's backbone has vocab_size {config['vocab_size']}, "
                             f"the vocabulary {self.vocab} has {self.vocab_size} tokens")
        max_len = max(p.max_seq_length for p in self.phases)
        if max_len > config["max_sequence_length"]:
            raise ValueError(f"data of length {max_len} exceeds the backbone's "
                             f"max_sequence_length {config['max_sequence_length']}")
        return backbone

    @staticmethod
    def summary_model(backbone):
        """The model `garden.train --summary` prints for this task."""
        return BertPretrainer(backbone)

    # -- data ----------------------------------------------------------------------------
    def schedule(self, train_steps: int):
        """[(first_step, end_step, dataset_fn(input_context, batch, seed, skip), description)]."""
        assert self._dirs is not None, "prepare() first"

        def dataset_fn(ddir, input_context, batch_size, seed, skip_batches):
            return data.record_dataset(ddir, batch_size=batch_size, seed=seed,
                                       input_context=input_context,
                                       shuffle_buffer=self.shuffle_buffer,
                                       skip_batches=skip_batches)

        return phase_schedule(self.phases, self._dirs, train_steps, dataset_fn)

    # -- objective -----------------------------------------------------------------------
    @staticmethod
    def loss_weights(batch) -> Dict[str, tf.Tensor]:
        """What the weighted MLM mean divides by; the trainer sums it over the global batch."""
        return {"masked_lm_weights": tf.reduce_sum(tf.cast(batch["masked_lm_weights"], tf.float32))}

    def compute_metrics(self, model, batch, training: bool,
                        weight_shares: Optional[Dict[str, tf.Tensor]] = None) -> Dict[str, tf.Tensor]:
        outputs = model(to_model_inputs(batch), training=training)
        denominator = None if weight_shares is None else weight_shares["masked_lm_weights"] + 1e-5
        metrics = bert_pretrain_loss(outputs, batch["masked_lm_ids"], batch["masked_lm_weights"],
                                     batch["next_sentence_labels"], mlm_denominator=denominator)
        metrics["tokens"] = tf.reduce_sum(tf.cast(batch["input_mask"], tf.float32))
        return metrics

    def evaluate(self, model) -> Dict[str, float]:
        """Mean metrics over the first eval_batches batches of eval_data_dir ({} without one)."""
        if self._eval_dir is None:
            return {}
        ds = data.record_dataset(self._eval_dir, batch_size=self.eval_batch_size, seed=0,
                                 shuffle_buffer=0, repeat=False).take(self.eval_batches)
        return mean_metrics(self, model, ds)

    def finish(self, model, model_dir: str) -> dict:
        return {}
