"""Pretraining, one task for every family (docs/objectives.md sections 1-4, 6-9, 11, 13):
`garden.Pretraining`.

What differs between the families' pretraining is a record of plain data and functions
(`PretrainingRecord`), one module of this package per family (bert.py, albert.py, ...: its
`RECORD`), which the family's FamilySpec names (`pretraining = "garden.tasks.pretraining.
<family>:RECORD"`); the family's FamilySpec also gives the default vocabulary kind
(`tokenizer`, make_pretrain's default for the objective) and its pretrainer or GenerativeLM
class. The task reads the phases of make_pretrain output, checks each directory against the
configured vocabulary (WordPiece, SentencePiece or byte-level BPE, loaded by text.tokenizers:
its fingerprint must be the data's info.json vocab_fingerprint), deals batches to the trainer
and evaluates, the same way for every family. The data's info.json must record the family's
name as its objective (ERNIE: family 'bert' with `objective = 'ernie'`: knowledge-unit masks,
BERT's features; ELMo and ULMFiT: `objective = 'bilm'`). A family's record says:

  required_features  what the data must hold (a function of the options where they decide)
  inputs             the model's named inputs of a batch (TFRecord feature names mapped)
  build / summary    the pretrainer model on the backbone factory's output (default: the
                     FamilySpec's pretrainer class around the backbone); build also names
                     the checkpoint objects ("model", "backbone"; ELECTRA "generator" and
                     "discriminator"), which resume and fine-tuning look up by name
  loss_weights       the weighted means' denominators (all-reduced by the trainer)
  metrics            the loss and metrics of one batch (the losses are the families':
                     garden/models/<family>/pretrainer.py)
  per_batch          training-time randomness added in the input pipeline, keyed by (seed,
                     batch index in the stream) so a resumed run draws what an uninterrupted
                     one would: RoBERTa's dynamic masks, ELECTRA's per-batch seed
  options            the family's own arguments and their defaults (gin binds them as
                     garden.Pretraining.<option>)
  backbone_args      extra arguments for the backbone factory (RoBERTa's <pad> id, T5's
                     vocabulary with its sentinels, XLNet's options)

This module holds the task, the record and what two or more records share (the build and
summary functions, weight_share, mlm_weights, next_token_weights, sentence_pair_record). CoVe's
translation pretraining is a task of its own (cove.py: garden.CovePretraining), not a record.

Gin: `train.task = @garden.Pretraining()`, `garden.Pretraining.family = 'bert'`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import tensorflow as tf

from text import tokenizers
from garden import data, models
from garden.tasks import shared
from garden.tasks.base import Task

MLM_FEATURES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")


def pretrainer_on_backbone(task, backbone):
    """build of a family whose pretrainer (its FamilySpec's) wraps one backbone."""
    model = task.spec.pretrainer_class()(backbone)
    return model, {"model": model, "backbone": backbone}


def pretrainer_summary(spec, backbone):
    return spec.pretrainer_class()(backbone)


def lm_summary(spec, output):
    """The family's GenerativeLM on the backbone factory's output (itself when it is one)."""
    cls = spec.lm_class()
    return output if isinstance(output, cls) else cls(output)


def lm_on_backbone(task, output):
    """build of a generative family: its GenerativeLM, saved as "model" and "backbone"."""
    model = lm_summary(task.spec, output)
    return model, {"model": model, "backbone": model.backbone}


@dataclasses.dataclass(frozen=True)
class PretrainingRecord:
    """How one family pretrains; see the module docstring. Functions take the task first
    (`task.spec` is the family's FamilySpec); the family's FamilySpec names its record."""

    required_features: Union[Tuple[str, ...], Callable[[Mapping[str, Any]], Tuple[str, ...]]]
    inputs: Callable  # (task, batch) -> the model's named inputs
    loss_weights: Callable  # (task, batch) -> {name: global denominator}
    metrics: Callable  # (task, model, batch, training, weight_shares) -> {"loss", ...}
    # (task, backbone_output) -> (model, {checkpoint name: trackable})
    build: Callable = pretrainer_on_backbone
    summary: Callable = pretrainer_summary  # (spec, backbone_output) -> model, for --summary
    per_batch: Optional[Callable] = None  # (task, ds, seed, input_context, skip) -> ds
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    backbone_args: Callable = lambda task: {}  # extra defaults for the backbone factory


def mlm_weights(task, batch) -> Dict[str, tf.Tensor]:
    """loss_weights of a masked-LM family: the batch's count of real masked slots."""
    return {"masked_lm_weights": tf.reduce_sum(tf.cast(batch["masked_lm_weights"], tf.float32))}


def weight_share(weight_shares, key: str, epsilon: float = 1e-5):
    """This batch's share of the global denominator `key` (None outside the trainer's step, for
    a per-batch mean); epsilon keeps a batch with no real targets from dividing by zero."""
    return None if weight_shares is None else weight_shares[key] + epsilon


def next_token_weights(padding_mask) -> tf.Tensor:
    """float [B, T-1]: 1 where position t and its label t + 1 are both real tokens (the causal
    LMs' labels and the biLM's two directions)."""
    mask = tf.cast(padding_mask, tf.float32)
    return mask[:, 1:] * mask[:, :-1]


def sentence_pair_record(loss: Callable) -> PretrainingRecord:
    """The record of a family with MLM and a sentence-pair head (BERT's NSP, ALBERT's SOP);
    `loss` is its pretrain loss (outputs, ids, weights, sentence labels, mlm_denominator)."""
    def metrics(task, model, batch, training, weight_shares):
        outputs = model(task.model_inputs(batch), training=training)
        out = loss(outputs, batch["masked_lm_ids"], batch["masked_lm_weights"],
                   batch["next_sentence_labels"],
                   mlm_denominator=weight_share(weight_shares, "masked_lm_weights"))
        out["tokens"] = shared.real_tokens(batch)
        return out

    return PretrainingRecord(
        required_features=("input_ids", "input_mask", "segment_ids",
                           "next_sentence_labels") + MLM_FEATURES,
        inputs=lambda task, batch: shared.to_model_inputs(batch), loss_weights=mlm_weights,
        metrics=metrics)


def pretraining_families():
    """The families with a garden.Pretraining record (FamilySpec.pretraining)."""
    return [s for s in models.families() if s.pretraining]


def family_record(name: str):
    """(FamilySpec, PretrainingRecord) of family `name`."""
    spec = next((s for s in pretraining_families() if s.name == name), None)
    if spec is None:
        raise ValueError(f"unknown pretraining family {name!r}: bind garden.Pretraining.family "
                         f"to one of {', '.join(s.name for s in pretraining_families())}")
    return spec, spec.pretraining_record()


class Pretraining(Task):
    """Pretraining of one family on make_pretrain output (see the module docstring).

    Args:
        backbone: the gin backbone factory, called with default_vocab_size = the vocabulary's
            size (ELECTRA: a factory of both towers, garden.models.factory.electra_towers).
        vocab: the vocabulary file the data was made with (WordPiece vocab.txt, SentencePiece
            .model, byte-level BPE vocab.json: whatever make_pretrain's --vocab was).
        phases: list of {"start_step", "data_dir", "max_seq_length"}, the first at step 0;
            BERT's recipe: 90% of the steps on 128-token data, then 512.
        family: a family whose FamilySpec names a pretraining record ("bert", "albert",
            "roberta", "spanbert", "electra", "xlnet", "gpt2", "t5", "bart").
        objective: the objective the data's info.json must record (default: the family's;
            "ernie" with family "bert").
        tokenizer: the vocabulary's kind (default: the family's).
        lower_case: passed to the tokenizer loader (does not change the fingerprint).
        shuffle_buffer: examples in the tf.data shuffle buffer.
        eval_data_dir: a held-out make_pretrain output evaluated every `train.eval_every`
            steps (None: no evaluation); eval_max_seq_length (default: the first phase's),
            eval_batches, eval_batch_size: how much of it each evaluation reads.
        init_checkpoint: None, or an earlier pretraining run (its directory or a checkpoint
            prefix) whose "model" the new run starts from, with a fresh optimizer and step
            count: continued pretraining on other data, e.g. ULMFiT's second stage (the LM
            fine-tuned on the target task's text). A run resuming from its own checkpoints
            ignores it.
        **options: the family's own arguments (PretrainingRecord.options), e.g. mask_prob
            for ELECTRA.
    """

    def __init__(self, backbone: Callable, vocab: str, phases: Sequence, family: str = "bert",
                 objective: Optional[str] = None, tokenizer: Optional[str] = None,
                 lower_case: bool = True, shuffle_buffer: int = 10_000,
                 eval_data_dir: Optional[str] = None, eval_max_seq_length: Optional[int] = None,
                 eval_batches: int = 50, eval_batch_size: int = 32,
                 init_checkpoint: Optional[str] = None, **options):
        self.spec, self.record = family_record(family)
        unknown = sorted(set(options) - set(self.record.options))
        if unknown:
            raise ValueError(f"garden.Pretraining (family {family!r}) takes no {unknown}; its "
                             f"options are {sorted(self.record.options) or 'none'}")
        self.options = {**self.record.options, **options}
        self.name = f"{family}_pretraining"
        self.objective = objective or family
        self.init_checkpoint = init_checkpoint
        self.backbone_fn = backbone
        self.vocab = vocab
        self.tokenizer_kind = tokenizer or self.spec.tokenizer
        self.lower_case = lower_case
        self.shuffle_buffer = shuffle_buffer
        self.eval_data_dir = eval_data_dir
        self.eval_max_seq_length = eval_max_seq_length
        self.eval_batches = eval_batches
        self.eval_batch_size = eval_batch_size
        self.phases = shared.phases(phases, "garden.Pretraining")
        self.data_dirs = None  # a DataDir per phase, opened by prepare() (T5 reads their info)
        self._eval_dir = None

    # -- checks before anything is built -------------------------------------------------
    def prepare(self) -> None:
        loaded = tokenizers.load_tokenizer(self.tokenizer_kind, self.vocab,
                                           lower_case=self.lower_case)
        self.vocabulary = loaded.vocab  # text.vocab.Vocab
        self.vocab_size = self.vocabulary.size
        self.fingerprint = loaded.fingerprint
        self.data_dirs = [self._open(p.data_dir, p.max_seq_length) for p in self.phases]
        if self.eval_data_dir:
            self._eval_dir = self._open(self.eval_data_dir,
                                        self.eval_max_seq_length or self.phases[0].max_seq_length)

    def _open(self, path: str, max_seq_length: int) -> data.DataDir:
        ddir = data.open_data_dir(path, objective=self.objective,
                                  vocab_fingerprint=self.fingerprint,
                                  vocab_size=self.vocab_size, max_seq_length=max_seq_length)
        needed = self.record.required_features
        if callable(needed):
            needed = needed(self.options)
        missing = sorted(set(needed) - set(ddir.spec))
        if missing:
            raise data.DataDirError(
                f"{path} lacks the features {missing} that {self.name} reads: make it with "
                f"data_pipelines.make_pretrain --objective={self.objective}")
        return ddir

    # -- model ---------------------------------------------------------------------------
    def build_model(self):
        output = self.backbone_fn(default_vocab_size=self.vocab_size,
                                  **self.record.backbone_args(self))
        self._check_family(output)
        model, objects = self.record.build(self, output)
        for name, backbone in objects.items():
            if name != "model":
                self._check_backbone(name, backbone.get_config())
        if self.init_checkpoint:
            from garden import pretrained

            path = pretrained.resolve_checkpoint(self.init_checkpoint, "model")
            status = tf.train.Checkpoint(model=model).read(path)
            status.expect_partial()
            status.assert_existing_objects_matched()
            print(f"[{self.name}] model initialised from {path}", flush=True)
        return model, objects

    def _check_family(self, output) -> None:
        """The factory's preset picks the backbone's family (garden.models.factory), `family`
        the objective: a backbone of another family is refused before a pretrainer is built on a
        backbone it cannot read."""
        from garden.models.generative import BackboneLM

        expected = self.spec.backbone_class()
        built = output.backbone if isinstance(output, BackboneLM) else output
        wrong = [b for b in (built.values() if isinstance(built, dict) else [built])
                 if not isinstance(b, expected)]
        if wrong:
            presets = sorted(p for f in models.families() if f.backbone == self.spec.backbone
                             for p in f.preset_table())
            raise ValueError(f"garden.Pretraining.family = {self.spec.name!r} needs its "
                             f"{expected.__name__}, but the backbone factory built a "
                             f"{type(wrong[0]).__name__}: bind its preset to one of {presets} "
                             f"(e.g. backbone.preset = {presets[0]!r})")

    def _check_backbone(self, name: str, config: dict) -> None:
        # ELMo's backbone reads characters (no vocab_size); its softmax is sized by the task.
        if "vocab_size" in config and config["vocab_size"] != self.vocab_size:
            raise ValueError(f"the config's {name} has vocab_size {config['vocab_size']}, "
                             f"the vocabulary {self.vocab} has {self.vocab_size} tokens")
        max_len = max(p.max_seq_length for p in self.phases)
        # Families without a position table (T5's relative buckets) have no such limit.
        if "max_sequence_length" in config and max_len > config["max_sequence_length"]:
            raise ValueError(f"data of length {max_len} exceeds the {name}'s "
                             f"max_sequence_length {config['max_sequence_length']}")

    @classmethod
    def summary_model_from(cls, backbone, bindings: Mapping[str, Any],
                           vocab_size: Optional[int] = None):
        spec, record = family_record(bindings.get("family", "bert"))
        return record.summary(spec, backbone)

    # -- data ----------------------------------------------------------------------------
    def _dataset(self, ddir, batch_size: int, seed: int, input_context=None,
                 skip_batches: int = 0, shuffle_buffer: Optional[int] = None,
                 repeat: bool = True) -> tf.data.Dataset:
        ds = data.record_dataset(
            ddir, batch_size=batch_size, seed=seed, input_context=input_context,
            shuffle_buffer=self.shuffle_buffer if shuffle_buffer is None else shuffle_buffer,
            repeat=repeat, skip_batches=skip_batches)
        if self.record.per_batch is None:
            return ds
        return self.record.per_batch(self, ds, seed, input_context, skip_batches)

    def schedule(self, train_steps: int):
        assert self.data_dirs is not None, "prepare() first"

        def dataset_fn(ddir, input_context, batch_size, seed, skip_batches):
            return self._dataset(ddir, batch_size, seed, input_context, skip_batches)

        return shared.phase_schedule(self.phases, self.data_dirs, train_steps, dataset_fn)

    # -- objective -----------------------------------------------------------------------
    def model_inputs(self, batch) -> Dict[str, tf.Tensor]:
        """The model's named inputs of a batch of the data (TFRecord feature names)."""
        return self.record.inputs(self, batch)

    def loss_weights(self, batch) -> Dict[str, tf.Tensor]:
        return self.record.loss_weights(self, batch)

    def compute_metrics(self, model, batch, training: bool,
                        weight_shares: Optional[Dict[str, tf.Tensor]] = None) -> Dict[str, tf.Tensor]:
        return self.record.metrics(self, model, batch, training, weight_shares)

    def evaluate(self, model) -> Dict[str, float]:
        """Mean metrics over the first eval_batches batches of eval_data_dir ({} without one).
        Randomness drawn at training time (masks, samples) uses a fixed seed, so evaluations
        at different steps score the same inputs."""
        if self._eval_dir is None:
            return {}
        ds = self._dataset(self._eval_dir, self.eval_batch_size, seed=0, shuffle_buffer=0,
                           repeat=False).take(self.eval_batches)
        return shared.mean_metrics(self, model, ds)

    def finish(self, model, model_dir: str) -> dict:
        # Evaluations were logged during training (train.eval_every); none is added at the end.
        return {}
