"""RoBERTa, ALBERT and ELECTRA pretraining as tasks of the shared trainer (OBJECTIVES.md 2, 3, 6).

The three tasks share everything but the model and the loss: one `EncoderPretraining` base
reads the phases of make_pretrain output (as BertPretraining does: a list of
{start_step, data_dir, max_seq_length}), checks each directory against the configured
vocabulary (any tokenizer kind: WordPiece, SentencePiece or byte-level BPE; the data's
info.json vocab_fingerprint must equal the vocabulary file's), and deals batches to the
trainer. A family supplies `build_model`, `compute_metrics`, `loss_weights` and, where the
objective draws randomness at training time, `_per_batch`:

  RobertaPretraining  MLM only (no NSP) on --objective=roberta blocks; the masks are drawn in the
                      input pipeline afresh for every batch (data_pipelines.dynamic, Liu et al.
                      2019 section 4.1), keyed by (seed, position of the batch in the stream),
                      so a resumed run draws the masks an uninterrupted one would.
  AlbertPretraining   MLM + sentence order prediction on --objective=albert data (Lan et al.
                      2020); the masks are static, written by the pipeline.
  ElectraPretraining  generator + discriminator trained jointly (Clark et al. 2020) on
                      --objective=electra unmasked sequences; masking and sampling happen in the
                      graph, from a per-batch seed [seed, batch index] the input pipeline adds.

Each loss lives in its family's pretrainer module (garden/models/<family>/pretrainer.py).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence

import tensorflow as tf

from data_pipelines import tokenizers
from garden import data
from garden.tasks.bert_pretraining import Phase, _phase, mean_metrics, phase_schedule

# ----------------------------------------------------------------------------------------
# Vocabularies of every tokenizer kind.
# ----------------------------------------------------------------------------------------

# Role -> piece of a WordPiece vocabulary (BERT's reserved tokens), for the fallback below.
_WORDPIECE_ROLES = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                    "mask": "[MASK]"}


@dataclasses.dataclass(frozen=True)
class VocabularyInfo:
    """What a task needs of the vocabulary the data was made with."""

    path: str
    kind: str
    size: int
    fingerprint: str
    specials: Dict[str, int]  # role (pad, unk, cls, sep, mask, bos, eos, eod) -> id
    special_ids: tuple  # every control id (never masked, never a random replacement)

    def special(self, role: str, task: str) -> int:
        if role not in self.specials:
            raise ValueError(f"{task} needs a {role!r} token, but the {self.kind} vocabulary "
                             f"{self.path} has none (it has {sorted(self.specials)})")
        return self.specials[role]


def load_vocabulary(path: str, kind: str, lower_case: bool = True) -> VocabularyInfo:
    """Size, fingerprint and special ids of a vocabulary of `kind` (wordpiece | sentencepiece |
    bpe), read with the pipelines' own loader (data_pipelines.tokenizers.load_tokenizer), so the
    fingerprint is the one make_pretrain wrote to info.json."""
    load_tokenizer = getattr(tokenizers, "load_tokenizer", None)
    if load_tokenizer is not None:
        tok = load_tokenizer(kind, path, lower_case=lower_case)
        vocab = tok.vocab
        return VocabularyInfo(path=path, kind=kind, size=int(vocab.size),
                              fingerprint=tok.fingerprint, specials=dict(vocab.specials),
                              special_ids=tuple(sorted(int(i) for i in vocab.special_ids)))
    if kind != "wordpiece":
        raise ValueError(f"reading a {kind} vocabulary ({path}) needs "
                         f"data_pipelines.tokenizers.load_tokenizer")
    tokens = tokenizers.load_vocab(path)
    index = {t: i for i, t in enumerate(tokens)}
    specials = {role: index[piece] for role, piece in _WORDPIECE_ROLES.items() if piece in index}
    return VocabularyInfo(path=path, kind=kind, size=len(tokens),
                          fingerprint=tokenizers.vocab_fingerprint(path), specials=specials,
                          special_ids=tuple(sorted(specials.values())))


def _batch_index(ds: tf.data.Dataset, input_context, skip_batches: int) -> tf.data.Dataset:
    """(index, batch) pairs; index = the batch's position in the whole (unsharded) stream.

    garden.data.shard_batches skips `skip_batches` batches and deals the rest round-robin, so
    pipeline i of P reads batches skip + i, skip + i + P, ... The index keys per-batch
    randomness: it does not depend on the number of replicas or on where a run resumed.
    """
    pipelines = input_context.num_input_pipelines if input_context is not None else 1
    first = skip_batches + (input_context.input_pipeline_id if input_context is not None else 0)
    return ds.enumerate().map(lambda k, batch: (first + k * pipelines, batch))


# ----------------------------------------------------------------------------------------
# The shared task.
# ----------------------------------------------------------------------------------------


class EncoderPretraining:
    """What RoBERTa, ALBERT and ELECTRA pretraining share (see the module docstring).

    Args:
        backbone: the gin backbone factory (garden/backbones.py), called with
            default_vocab_size = the vocabulary's size (ELECTRA: a factory of both towers).
        vocab: the vocabulary file the data was made with (WordPiece vocab.txt, SentencePiece
            .model, byte-level BPE vocab.json; whatever make_pretrain's --vocab was).
        phases: list of {"start_step", "data_dir", "max_seq_length"}, the first at step 0.
        tokenizer: the vocabulary's kind: "wordpiece" | "sentencepiece" | "bpe" (default: the
            family's, i.e. make_pretrain's default for its objective).
        lower_case: passed to the tokenizer loader (does not change the fingerprint).
        shuffle_buffer: examples in the tf.data shuffle buffer.
        eval_data_dir, eval_max_seq_length, eval_batches, eval_batch_size: a held-out
            make_pretrain output evaluated every `train.eval_every` steps (as BertPretraining).
    """

    name = "encoder_pretraining"
    objective = ""
    default_tokenizer = "wordpiece"

    def __init__(self, backbone: Callable, vocab: str, phases: Sequence,
                 tokenizer: Optional[str] = None, lower_case: bool = True,
                 shuffle_buffer: int = 10_000, eval_data_dir: Optional[str] = None,
                 eval_max_seq_length: Optional[int] = None, eval_batches: int = 50,
                 eval_batch_size: int = 32):
        self.backbone_fn = backbone
        self.vocab = vocab
        self.tokenizer = tokenizer or self.default_tokenizer
        self.lower_case = lower_case
        self.shuffle_buffer = shuffle_buffer
        self.eval_data_dir = eval_data_dir
        self.eval_max_seq_length = eval_max_seq_length
        self.eval_batches = eval_batches
        self.eval_batch_size = eval_batch_size
        self.phases: List[Phase] = sorted((_phase(p) for p in phases), key=lambda p: p.start_step)
        if not self.phases or self.phases[0].start_step != 0:
            raise ValueError(f"{type(self).__name__}.phases must start with a phase at start_step 0")
        self._dirs: Optional[List[data.DataDir]] = None
        self._eval_dir: Optional[data.DataDir] = None

    # -- checks before anything is built -------------------------------------------------
    def prepare(self) -> None:
        self.vocabulary = load_vocabulary(self.vocab, self.tokenizer, self.lower_case)
        self.vocab_size = self.vocabulary.size

        def open_dir(path, max_seq_length):
            ddir = data.open_data_dir(path, objective=self.objective,
                                      vocab_fingerprint=self.vocabulary.fingerprint,
                                      vocab_size=self.vocab_size, max_seq_length=max_seq_length)
            missing = sorted(set(self.required_features) - set(ddir.spec))
            if missing:
                raise data.DataDirError(f"{path} lacks the features {missing} that "
                                        f"{type(self).__name__} reads")
            return ddir

        self._dirs = [open_dir(p.data_dir, p.max_seq_length) for p in self.phases]
        if self.eval_data_dir:
            self._eval_dir = open_dir(self.eval_data_dir,
                                      self.eval_max_seq_length or self.phases[0].max_seq_length)

    required_features: Sequence[str] = ("input_ids", "input_mask")

    def _check_backbone(self, config: dict) -> None:
        if config["vocab_size"] != self.vocab_size:
            raise ValueError(f"the config's backbone has vocab_size {config['vocab_size']}, "
                             f"the vocabulary {self.vocab} has {self.vocab_size} tokens")
        max_len = max(p.max_seq_length for p in self.phases)
        if max_len > config["max_sequence_length"]:
            raise ValueError(f"data of length {max_len} exceeds the backbone's "
                             f"max_sequence_length {config['max_sequence_length']}")

    # -- data ----------------------------------------------------------------------------
    def _per_batch(self, ds: tf.data.Dataset, seed: int, input_context,
                   skip_batches: int) -> tf.data.Dataset:
        """Training-time randomness added to each parsed batch (none for static objectives)."""
        return ds

    def _dataset(self, ddir: data.DataDir, batch_size: int, seed: int, input_context=None,
                 skip_batches: int = 0, shuffle_buffer: Optional[int] = None,
                 repeat: bool = True) -> tf.data.Dataset:
        ds = data.record_dataset(
            ddir, batch_size=batch_size, seed=seed, input_context=input_context,
            shuffle_buffer=self.shuffle_buffer if shuffle_buffer is None else shuffle_buffer,
            repeat=repeat, skip_batches=skip_batches)
        return self._per_batch(ds, seed, input_context, skip_batches)

    def schedule(self, train_steps: int):
        """[(first_step, end_step, dataset_fn(input_context, batch, seed, skip), description)]."""
        assert self._dirs is not None, "prepare() first"

        def dataset_fn(ddir, input_context, batch_size, seed, skip_batches):
            return self._dataset(ddir, batch_size, seed, input_context, skip_batches)

        return phase_schedule(self.phases, self._dirs, train_steps, dataset_fn)

    def evaluate(self, model) -> Dict[str, float]:
        """Mean metrics over the first eval_batches batches of eval_data_dir ({} without one).
        Randomness drawn at training time (masks, samples) uses a fixed seed, so evaluations
        at different steps score the same inputs."""
        if self._eval_dir is None:
            return {}
        ds = self._dataset(self._eval_dir, self.eval_batch_size, seed=0, shuffle_buffer=0,
                           repeat=False).take(self.eval_batches)
        return mean_metrics(self, model, ds)

    def finish(self, model, model_dir: str) -> dict:
        return {}

    @staticmethod
    def _tokens(batch) -> tf.Tensor:
        return tf.reduce_sum(tf.cast(batch["input_mask"], tf.float32))


# ----------------------------------------------------------------------------------------
# RoBERTa.
# ----------------------------------------------------------------------------------------


class RobertaPretraining(EncoderPretraining):
    """RoBERTa masked LM (no NSP) on make_pretrain --objective=roberta blocks (OBJECTIVES.md 3).

    Args (besides EncoderPretraining's; the vocabulary defaults to byte-level BPE):
        dynamic_masking: True (the paper's recipe): the input pipeline masks each batch afresh
            with data_pipelines.dynamic, keyed by (seed, batch index in the stream). False: the
            data must already hold masked_lm_positions/ids/weights (static masks).
        max_predictions_per_seq: prediction slots per sequence of the dynamic masking (None:
            data_pipelines.dynamic's default for the sequence length).
        mask_prob: fraction of the tokens masked (0.15).
    """

    name = "roberta_pretraining"
    objective = "roberta"
    default_tokenizer = "bpe"

    def __init__(self, backbone: Callable, vocab: str, phases: Sequence,
                 dynamic_masking: bool = True, max_predictions_per_seq: Optional[int] = None,
                 mask_prob: float = 0.15, **kwargs):
        super().__init__(backbone, vocab, phases, **kwargs)
        self.dynamic_masking = dynamic_masking
        self.max_predictions_per_seq = max_predictions_per_seq
        self.mask_prob = mask_prob

    @property
    def required_features(self):
        static = () if self.dynamic_masking else (
            "masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
        return ("input_ids", "input_mask") + static

    def build_model(self):
        from garden.models.roberta.pretrainer import RobertaPretrainer

        pad_id = self.vocabulary.special("pad", self.name)
        backbone = self.backbone_fn(default_vocab_size=self.vocab_size, default_padding_idx=pad_id)
        config = backbone.get_config()
        self._check_backbone(config)
        if config["padding_idx"] != pad_id:
            raise ValueError(f"the backbone's padding_idx {config['padding_idx']} is not the "
                             f"vocabulary's <pad> id {pad_id} ({self.vocab}): RoBERTa's "
                             f"positions count from it; unbind roberta_backbone.padding_idx")
        model = RobertaPretrainer(backbone)
        return model, {"model": model, "backbone": backbone}

    @staticmethod
    def summary_model(backbone):
        from garden.models.roberta.pretrainer import RobertaPretrainer

        return RobertaPretrainer(backbone)

    def _per_batch(self, ds, seed, input_context, skip_batches):
        if not self.dynamic_masking:
            return ds
        from data_pipelines import dynamic

        v = self.vocabulary
        mask = dynamic.make_batch_masker(
            vocab_size=v.size, mask_id=v.special("mask", self.name), special_ids=v.special_ids,
            mask_prob=self.mask_prob, max_predictions_per_seq=self.max_predictions_per_seq)
        return _batch_index(ds, input_context, skip_batches).map(
            lambda index, batch: mask(batch, seed, index), num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True)

    @staticmethod
    def loss_weights(batch) -> Dict[str, tf.Tensor]:
        return {"masked_lm_weights": tf.reduce_sum(tf.cast(batch["masked_lm_weights"], tf.float32))}

    def compute_metrics(self, model, batch, training: bool,
                        weight_shares: Optional[Dict[str, tf.Tensor]] = None) -> Dict[str, tf.Tensor]:
        from garden.models.roberta.pretrainer import roberta_pretrain_loss

        real = tf.cast(batch["input_mask"], tf.int32)
        # The pipeline pads with id 0 (<s> in a BPE vocabulary); RoBERTa finds padding (and
        # offsets its positions) by the <pad> id, so padding gets that id.
        pad_id = self.vocabulary.specials["pad"]
        token_ids = tf.where(real > 0, tf.cast(batch["input_ids"], tf.int32), pad_id)
        outputs = model({"token_ids": token_ids, "padding_mask": real,
                         "masked_lm_positions": tf.cast(batch["masked_lm_positions"], tf.int32)},
                        training=training)
        denominator = None if weight_shares is None else weight_shares["masked_lm_weights"] + 1e-5
        metrics = roberta_pretrain_loss(outputs, batch["masked_lm_ids"], batch["masked_lm_weights"],
                                        mlm_denominator=denominator)
        metrics["tokens"] = self._tokens(batch)
        return metrics


# ----------------------------------------------------------------------------------------
# ALBERT.
# ----------------------------------------------------------------------------------------


class AlbertPretraining(EncoderPretraining):
    """ALBERT masked LM (n-gram masks) + sentence order prediction on make_pretrain
    --objective=albert data (OBJECTIVES.md 2); the vocabulary defaults to SentencePiece
    (bind tokenizer='wordpiece' for data made with --tokenizer=wordpiece)."""

    name = "albert_pretraining"
    objective = "albert"
    default_tokenizer = "sentencepiece"
    required_features = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                         "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")

    def build_model(self):
        from garden.models.albert.pretrainer import AlbertPretrainer

        backbone = self.backbone_fn(default_vocab_size=self.vocab_size)
        self._check_backbone(backbone.get_config())
        model = AlbertPretrainer(backbone)
        return model, {"model": model, "backbone": backbone}

    @staticmethod
    def summary_model(backbone):
        from garden.models.albert.pretrainer import AlbertPretrainer

        return AlbertPretrainer(backbone)

    @staticmethod
    def loss_weights(batch) -> Dict[str, tf.Tensor]:
        return {"masked_lm_weights": tf.reduce_sum(tf.cast(batch["masked_lm_weights"], tf.float32))}

    def compute_metrics(self, model, batch, training: bool,
                        weight_shares: Optional[Dict[str, tf.Tensor]] = None) -> Dict[str, tf.Tensor]:
        from garden.models.albert.pretrainer import albert_pretrain_loss

        inputs = {
            "token_ids": tf.cast(batch["input_ids"], tf.int32),
            "segment_ids": tf.cast(batch["segment_ids"], tf.int32),
            "padding_mask": tf.cast(batch["input_mask"], tf.int32),
            "masked_lm_positions": tf.cast(batch["masked_lm_positions"], tf.int32),
        }
        outputs = model(inputs, training=training)
        denominator = None if weight_shares is None else weight_shares["masked_lm_weights"] + 1e-5
        metrics = albert_pretrain_loss(outputs, batch["masked_lm_ids"], batch["masked_lm_weights"],
                                       batch["next_sentence_labels"], mlm_denominator=denominator)
        metrics["tokens"] = self._tokens(batch)
        return metrics


# ----------------------------------------------------------------------------------------
# ELECTRA.
# ----------------------------------------------------------------------------------------


class ElectraPretraining(EncoderPretraining):
    """ELECTRA replaced token detection (generator + 50 x discriminator, trained jointly) on
    make_pretrain --objective=electra unmasked sequences (OBJECTIVES.md 6).

    Args (besides EncoderPretraining's; the vocabulary defaults to WordPiece):
        backbone: a factory of {"generator", "discriminator"} towers sharing their embeddings
            (garden.backbones.electra_towers).
        mask_prob: fraction of the real tokens the generator predicts (0.15; large: 0.25).
        temperature: generator sampling temperature (1.0).
        disc_weight: lambda, the discriminator loss weight (50).
    """

    name = "electra_pretraining"
    objective = "electra"
    default_tokenizer = "wordpiece"
    required_features = ("input_ids", "input_mask", "segment_ids")

    def __init__(self, backbone: Callable, vocab: str, phases: Sequence, mask_prob: float = 0.15,
                 temperature: float = 1.0, disc_weight: float = 50.0, **kwargs):
        super().__init__(backbone, vocab, phases, **kwargs)
        self.mask_prob = mask_prob
        self.temperature = temperature
        self.disc_weight = disc_weight

    def _unmaskable_ids(self) -> List[int]:
        # Every control token ([CLS], [SEP], [PAD], ...): padding is excluded by the mask too.
        return list(self.vocabulary.special_ids)

    def build_model(self):
        from garden.models.electra.pretrainer import ElectraPretrainer

        towers = self.backbone_fn(default_vocab_size=self.vocab_size)
        for tower in ("generator", "discriminator"):
            self._check_backbone(towers[tower].get_config())
        model = ElectraPretrainer(
            towers["generator"], towers["discriminator"],
            mask_token_id=self.vocabulary.special("mask", self.name),
            unmaskable_token_ids=self._unmaskable_ids(), mask_prob=self.mask_prob,
            temperature=self.temperature, disc_weight=self.disc_weight)
        return model, {"model": model, "generator": towers["generator"],
                       "discriminator": towers["discriminator"]}

    @staticmethod
    def summary_model(towers):
        from garden.models.electra.pretrainer import ElectraPretrainer

        # The [MASK] id changes no weight: any id prints the same model.
        return ElectraPretrainer(towers["generator"], towers["discriminator"], mask_token_id=0)

    def _per_batch(self, ds, seed, input_context, skip_batches):
        # ElectraPretrainer draws masks and samples in the graph from one [2] seed per batch.
        def add_seed(index, batch):
            batch = dict(batch)
            batch["seed"] = tf.stack([tf.constant(seed % (2 ** 31), tf.int32),
                                      tf.cast(index, tf.int32)])
            return batch

        return _batch_index(ds, input_context, skip_batches).map(add_seed)

    def loss_weights(self, batch) -> Dict[str, tf.Tensor]:
        """Global denominators: the masked slots (their count is the masking formula's, which
        does not depend on the seed) and the real tokens the discriminator scores."""
        from garden.models.electra.pretrainer import electra_mask

        masked = electra_mask(batch["input_ids"], batch["input_mask"], tf.constant([0, 0]),
                              self.vocabulary.specials.get("mask", 0), self._unmaskable_ids(),
                              self.mask_prob)
        return {"masked_lm_weights": tf.reduce_sum(masked["masked_lm_weights"]),
                "disc_weights": self._tokens(batch)}

    def compute_metrics(self, model, batch, training: bool,
                        weight_shares: Optional[Dict[str, tf.Tensor]] = None) -> Dict[str, tf.Tensor]:
        from garden.models.electra.pretrainer import electra_pretrain_loss

        outputs = model(self.model_inputs(batch), training=training)
        mlm_den = disc_den = None
        if weight_shares is not None:
            mlm_den = weight_shares["masked_lm_weights"] + 1e-6
            disc_den = weight_shares["disc_weights"] + 1e-6
        metrics = electra_pretrain_loss(outputs, self.disc_weight, mlm_denominator=mlm_den,
                                        disc_denominator=disc_den)
        metrics["tokens"] = self._tokens(batch)
        return metrics

    @staticmethod
    def model_inputs(batch) -> Dict[str, tf.Tensor]:
        return {
            "token_ids": tf.cast(batch["input_ids"], tf.int32),
            "segment_ids": tf.cast(batch["segment_ids"], tf.int32),
            "padding_mask": tf.cast(batch["input_mask"], tf.int32),
            "seed": tf.cast(batch["seed"], tf.int32),
        }
