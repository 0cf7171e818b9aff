"""Pretraining, one task for every family (docs/objectives.md sections 1-4, 6-9, 11):
`garden.Pretraining`.

What differs between the families' pretraining is a record of plain data and functions
(`PretrainingRecord`), which each family's FamilySpec names (`pretraining`: the encoders'
records are below, the generative families' and XLNet's in pretraining_<family>.py); the
family's FamilySpec also gives the default vocabulary kind (`tokenizer`, make_pretrain's
default for the objective) and its pretrainer or GenerativeLM class. The task reads the phases of
make_pretrain output, checks each directory against the configured vocabulary (WordPiece,
SentencePiece or byte-level BPE, loaded by text.tokenizers: its fingerprint must be
the data's info.json vocab_fingerprint), deals batches to the trainer and evaluates, the same
way for every family. The data's info.json must record the family's name as its objective
(ERNIE: family 'bert' with `objective = 'ernie'`: knowledge-unit masks, BERT's features).
A family's record says:

  required_features  what the data must hold (a function of the options where they decide)
  inputs             the model's named inputs of a batch (TFRecord feature names mapped)
  build / summary    the pretrainer model on the backbone factory's output (default: the
                     FamilySpec's pretrainer class around the backbone); build also names
                     the checkpoint objects ("model", "backbone"; ELECTRA "generator" and
                     "discriminator"), which resume and fine-tuning look up by name
  loss_weights       the weighted means' denominators (all-reduced by the trainer)
  metrics            the loss and metrics of one batch (losses: garden/models/<family>/pretrainer.py)
  per_batch          training-time randomness added in the input pipeline, keyed by (seed,
                     batch index in the stream) so a resumed run draws what an uninterrupted
                     one would: RoBERTa's dynamic masks, ELECTRA's per-batch seed
  options            the family's own arguments and their defaults (gin binds them as
                     garden.Pretraining.<option>)

Gin: `train.task = @garden.Pretraining()`, `garden.Pretraining.family = 'bert'`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import tensorflow as tf

from text import tokenizers
from garden import data, models
from garden.models.family import resolve
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


def _mlm_weights(task, batch) -> Dict[str, tf.Tensor]:
    return {"masked_lm_weights": tf.reduce_sum(tf.cast(batch["masked_lm_weights"], tf.float32))}


def _share(weight_shares, key: str, epsilon: float = 1e-5):
    return None if weight_shares is None else weight_shares[key] + epsilon


# -- BERT (and ERNIE: the same features and model) and ALBERT: MLM + a sentence-pair head --
@tf.autograph.experimental.do_not_convert
def _resolved(reference: str):
    """resolve() inside a traced train step, not converted by AutoGraph (it would try, and warn
    on, importlib's own functions)."""
    return resolve(reference)


def _pair_record(loss: str) -> PretrainingRecord:
    """A family with MLM and a sentence-pair head (BERT's NSP, ALBERT's SOP); `loss` is the
    "module:function" of its pretrain loss (outputs, ids, weights, sentence labels)."""
    def metrics(task, model, batch, training, weight_shares):
        outputs = model(task.model_inputs(batch), training=training)
        out = _resolved(loss)(outputs, batch["masked_lm_ids"], batch["masked_lm_weights"],
                            batch["next_sentence_labels"],
                            mlm_denominator=_share(weight_shares, "masked_lm_weights"))
        out["tokens"] = shared.real_tokens(batch)
        return out

    return PretrainingRecord(
        required_features=("input_ids", "input_mask", "segment_ids",
                           "next_sentence_labels") + MLM_FEATURES,
        inputs=lambda task, batch: shared.to_model_inputs(batch), loss_weights=_mlm_weights,
        metrics=metrics)


BERT = _pair_record("garden.models.bert.pretrainer:bert_pretrain_loss")
ALBERT = _pair_record("garden.models.albert.pretrainer:albert_pretrain_loss")


# -- SpanBERT ------------------------------------------------------------------------------
def _spanbert_build(task, backbone):
    model = task.spec.pretrainer_class()(
        backbone, max_targets=int(task.options["max_targets"]),
        position_embedding_size=int(task.options["position_embedding_size"]))
    return model, {"model": model, "backbone": backbone}


def _spanbert_weights(task, batch):
    return {**_mlm_weights(task, batch),
            "sbo_weights": tf.reduce_sum(tf.cast(batch["sbo_weights"], tf.float32))}


def _spanbert_features(options):
    from garden.models.spanbert.pretrainer import SBO_INPUTS

    return ("input_ids", "input_mask", "segment_ids", "sbo_weights", *SBO_INPUTS) + MLM_FEATURES


def _spanbert_inputs(task, batch):
    from garden.models.spanbert.pretrainer import SBO_INPUTS

    inputs = shared.to_model_inputs(batch)
    inputs.update({k: tf.cast(batch[k], tf.int32) for k in SBO_INPUTS})
    return inputs


def _spanbert_metrics(task, model, batch, training, weight_shares):
    from garden.models.spanbert.pretrainer import spanbert_pretrain_loss

    outputs = model(task.model_inputs(batch), training=training)
    metrics = spanbert_pretrain_loss(
        outputs, batch["masked_lm_ids"], batch["masked_lm_weights"], batch["sbo_weights"],
        sbo_loss_weight=float(task.options["sbo_loss_weight"]),
        mlm_denominator=_share(weight_shares, "masked_lm_weights"),
        sbo_denominator=_share(weight_shares, "sbo_weights"))
    metrics["tokens"] = shared.real_tokens(batch)
    return metrics


SPANBERT = PretrainingRecord(
    required_features=_spanbert_features, inputs=_spanbert_inputs, build=_spanbert_build,
    loss_weights=_spanbert_weights, metrics=_spanbert_metrics,
    options={"sbo_loss_weight": 1.0, "max_targets": 15, "position_embedding_size": 200})


# -- RoBERTa -------------------------------------------------------------------------------
def _roberta_build(task, backbone):
    pad_id = task.vocabulary.special("pad", task.name)
    if backbone.get_config()["padding_idx"] != pad_id:
        raise ValueError(f"the backbone's padding_idx {backbone.get_config()['padding_idx']} is "
                         f"not the vocabulary's <pad> id {pad_id} ({task.vocab}): RoBERTa's "
                         f"positions count from it; unbind roberta_backbone.padding_idx")
    return pretrainer_on_backbone(task, backbone)


def _roberta_masks(task, ds, seed, input_context, skip_batches):
    if not task.options["dynamic_masking"]:
        return ds
    from text import dynamic

    v = task.vocabulary
    mask = dynamic.make_batch_masker(
        vocab_size=v.size, mask_id=v.special("mask", task.name), special_ids=v.special_ids,
        mask_prob=task.options["mask_prob"],
        max_predictions_per_seq=task.options["max_predictions_per_seq"])
    return shared.batch_index(ds, input_context, skip_batches).map(
        lambda index, batch: mask(batch, seed, index), num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True)


def _roberta_inputs(task, batch):
    real = tf.cast(batch["input_mask"], tf.int32)
    # The pipeline pads with id 0 (<s> in a BPE vocabulary); RoBERTa finds padding (and
    # offsets its positions) by the <pad> id, so padding gets that id.
    pad_id = task.vocabulary.specials["pad"]
    token_ids = tf.where(real > 0, tf.cast(batch["input_ids"], tf.int32), pad_id)
    return {"token_ids": token_ids, "padding_mask": real,
            "masked_lm_positions": tf.cast(batch["masked_lm_positions"], tf.int32)}


def _roberta_metrics(task, model, batch, training, weight_shares):
    from garden.models.roberta.pretrainer import roberta_pretrain_loss

    outputs = model(task.model_inputs(batch), training=training)
    metrics = roberta_pretrain_loss(outputs, batch["masked_lm_ids"], batch["masked_lm_weights"],
                                    mlm_denominator=_share(weight_shares, "masked_lm_weights"))
    metrics["tokens"] = shared.real_tokens(batch)
    return metrics


ROBERTA = PretrainingRecord(
    # Dynamic masks are drawn per batch; static ones must be in the data.
    required_features=lambda o: ("input_ids", "input_mask") + (
        () if o["dynamic_masking"] else MLM_FEATURES),
    inputs=_roberta_inputs, build=_roberta_build, loss_weights=_mlm_weights,
    metrics=_roberta_metrics, per_batch=_roberta_masks,
    backbone_args=lambda task: {"default_padding_idx": task.vocabulary.special("pad", task.name)},
    options={"dynamic_masking": True, "max_predictions_per_seq": None, "mask_prob": 0.15})


# -- ELECTRA -------------------------------------------------------------------------------
def _electra_build(task, towers):
    o = task.options
    model = task.spec.pretrainer_class()(
        towers["generator"], towers["discriminator"],
        mask_token_id=task.vocabulary.special("mask", task.name),
        # Every control token ([CLS], [SEP], [PAD], ...): padding is excluded by the mask too.
        unmaskable_token_ids=sorted(task.vocabulary.special_ids), mask_prob=o["mask_prob"],
        temperature=o["temperature"], disc_weight=o["disc_weight"])
    return model, {"model": model, "generator": towers["generator"],
                   "discriminator": towers["discriminator"]}


def _electra_summary(spec, towers):
    # The [MASK] id changes no weight: any id prints the same model.
    return spec.pretrainer_class()(towers["generator"], towers["discriminator"], mask_token_id=0)


def _electra_seeds(task, ds, seed, input_context, skip_batches):
    # ElectraPretrainer draws masks and samples in the graph from one [2] seed per batch.
    def add_seed(index, batch):
        batch = dict(batch)
        batch["seed"] = tf.stack([tf.constant(seed % (2 ** 31), tf.int32),
                                  tf.cast(index, tf.int32)])
        return batch

    return shared.batch_index(ds, input_context, skip_batches).map(add_seed)


def _electra_weights(task, batch):
    """The masked slots (their count is the masking formula's, which does not depend on the
    seed) and the real tokens the discriminator scores."""
    from garden.models.electra.pretrainer import electra_mask

    masked = electra_mask(batch["input_ids"], batch["input_mask"], tf.constant([0, 0]),
                          task.vocabulary.specials.get("mask", 0),
                          sorted(task.vocabulary.special_ids), task.options["mask_prob"])
    return {"masked_lm_weights": tf.reduce_sum(masked["masked_lm_weights"]),
            "disc_weights": shared.real_tokens(batch)}


def _electra_inputs(task, batch):
    return {"token_ids": tf.cast(batch["input_ids"], tf.int32),
            "segment_ids": tf.cast(batch["segment_ids"], tf.int32),
            "padding_mask": tf.cast(batch["input_mask"], tf.int32),
            "seed": tf.cast(batch["seed"], tf.int32)}


def _electra_metrics(task, model, batch, training, weight_shares):
    from garden.models.electra.pretrainer import electra_pretrain_loss

    outputs = model(task.model_inputs(batch), training=training)
    metrics = electra_pretrain_loss(
        outputs, task.options["disc_weight"],
        mlm_denominator=_share(weight_shares, "masked_lm_weights", 1e-6),
        disc_denominator=_share(weight_shares, "disc_weights", 1e-6))
    metrics["tokens"] = shared.real_tokens(batch)
    return metrics


ELECTRA = PretrainingRecord(
    required_features=("input_ids", "input_mask", "segment_ids"), inputs=_electra_inputs,
    build=_electra_build, summary=_electra_summary, loss_weights=_electra_weights,
    metrics=_electra_metrics, per_batch=_electra_seeds,
    options={"mask_prob": 0.15, "temperature": 1.0, "disc_weight": 50.0})


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
    """Pretraining of one encoder family on make_pretrain output (see the module docstring).

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
        self._dirs = None
        self._eval_dir = None

    # -- checks before anything is built -------------------------------------------------
    def prepare(self) -> None:
        loaded = tokenizers.load_tokenizer(self.tokenizer_kind, self.vocab,
                                           lower_case=self.lower_case)
        self.vocabulary = loaded.vocab  # text.vocab.Vocab
        self.vocab_size = self.vocabulary.size
        self.fingerprint = loaded.fingerprint
        self._dirs = [self._open(p.data_dir, p.max_seq_length) for p in self.phases]
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
    def summary_model_from(cls, backbone, bindings: Mapping[str, Any]):
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
        assert self._dirs is not None, "prepare() first"

        def dataset_fn(ddir, input_context, batch_size, seed, skip_batches):
            return self._dataset(ddir, batch_size, seed, input_context, skip_batches)

        return shared.phase_schedule(self.phases, self._dirs, train_steps, dataset_fn)

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
