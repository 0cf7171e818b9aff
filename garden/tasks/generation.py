"""The generation kind: fine-tuning a generative model on (source, target) text pairs, a task of
the shared trainer in two shapes, TextToText (T5 / BART style, encoder-decoder;
garden/tasks/text_to_text.py) and CausalLMFinetuning (GPT-2 style, decoder-only;
garden/tasks/causal_lm_finetuning.py). This module is what the two share: GenerativeFinetuning
(files, tokenizer, framing, model, loss, evaluation, export), the pair reader and detokenize.

Data: .jsonl (one object per line with string fields "source" and "target") or .tsv / .csv
with a header naming the columns source and target (the readers of
garden.tasks.text_files: errors name the file and line; an empty source or target names its
record). `python -m data_pipelines.sample_tasks --kinds=seq2seq` writes such files.

Tokenization runs in tf.data with the vocabulary's in-graph tokenizer (text.tokenizers:
a SentencePiece .model or a byte-level BPE vocab.json; WordPiece has no way back to text and is
refused). Sequences are truncated to the configured lengths; prepare() tokenizes every file once
and prints how many sources / targets were cut (a counted truncation, never a silent one).

How a shape lays a pair out as model inputs (its _encode) is documented in its module.

Loss: cross-entropy of the labels weighted by label_weights (garden.losses, the global weight
of the batch as denominator so the loss does not depend on how the batch is split); metrics:
"token_accuracy" (teacher-forced argmax == label over the weighted labels).

Evaluation (evaluate / finish, on the eval file, the first `max_eval_examples`):
    teacher-forced  eval_loss, eval_token_accuracy (mean over examples of each example's
                    accuracy), its standard error, the trivial baseline_token_accuracy (the most
                    frequent train label token predicted everywhere) and the standard error of
                    the per-example difference (token_accuracy_gain_se), for margins;
    generated       garden.models.decoding.generate (greedy by default; `generation` overrides the
                    GenerationConfig fields, e.g. {"method": "beam", "num_beams": 4,
                    "length_penalty": 0.6}; max_new_tokens defaults to max_target_length), the
                    new tokens up to EOS decoded to text and scored with ROUGE-1/2/L F against
                    the targets (text.rouge: rouge-score's tokenizer, no stemmer),
                    next to the trivial baselines (lead-N, constant, empty; and the tail rule).
finish() adds them to summary.json and writes the predictions to <model_dir>/predictions.jsonl.

The model comes from the gin factory `model` (garden.models.factory.generative_lm: a generative
preset -> its GenerativeLM), called with default_vocab_size = the vocabulary's size.
`init_checkpoint` restores its backbone (object `init_checkpoint_object` of a pretraining
model_dir) before fine-tuning. `garden.train --summary` prints that GenerativeLM. Lengths the
model has no positions for (the training sequence, prompt slots + max_new_tokens, BART's
encoder table) are refused when the model is built, before any step.

Export (when `export_base` is set; <export_base>/<model_name>/<version>/): serving_module() is
garden.serving.generation.make_generation_serving of the fine-tuned model with the task's
vocabulary and layout, so a prompt string is encoded as training encoded a source:
    TextToText          prefix + source pieces (the FIRST max_source_length - specials) +
                        suffix into the encoder, decoder_start_ids as the decoder prompt;
    CausalLMFinetuning  prefix (<|endoftext|> for BPE) + source pieces + the separator's ids,
                        left-padded to max_prompt_length; a longer prompt keeps its LAST ids
                        (the task's data keeps the first source pieces: the two agree on
                        sources that fit).
The export's default settings are the task's GenerationConfig (`generation`; max_new_tokens =
max_target_length, also the cap of `generate` requests), its beam widths 2..`max_beams`; the
first eval sources are its warmup prompts. serving_default returns the new tokens' text
(garden.serving.generation's detokenizer: specials left out; BPE keeps the completion's
leading space, which the task's own predictions strip).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import posixpath
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from text import bpe, tokenizers, vocab_files
from garden import losses
from text import rouge
from garden.models import framing
from garden.tasks.base import Stage, Task
from garden.tasks.shared import batches, restore_backbone, rows_schedule
from garden.tasks.text_files import TaskDataError, read_records
from garden import pretrained

COLUMNS = ["source", "target"]


def read_pairs(path: str) -> List[dict]:
    """[{"source", "target"}] of a .jsonl / .tsv / .csv file (see the module docstring)."""
    rows = read_records(path, COLUMNS)
    for i, row in enumerate(rows, start=1):
        for column in COLUMNS:
            if not row[column].strip():
                raise TaskDataError(f"{path}: record {i} (of the non-blank records) has an empty "
                                    f"{column}; drop the record or fill it")
    return rows


def detokenize(vocab, ids: Sequence[int], kind: str) -> str:
    """Text of ids, control ids (pad, EOS, ...) left out: SentencePiece joins the pieces and
    turns U+2581 into spaces; byte-level BPE maps the pieces back to bytes (GPT-2's table)
    and decodes UTF-8 (an incomplete character becomes U+FFFD)."""
    pieces = [vocab.tokens[i] for i in ids if 0 <= i < vocab.size and i not in vocab.special_ids]
    if kind == "sentencepiece":
        return "".join(pieces).replace(vocab_files.SP_WORD_START, " ").strip()
    byte_of = {c: b for b, c in bpe.bytes_to_unicode().items()}
    data = bytes(byte_of[c] for piece in pieces for c in piece if c in byte_of)
    return data.decode("utf-8", errors="replace").strip()


def fill(batch_size, ids: Sequence[int]) -> tf.RaggedTensor:
    """The same ids for every row, as a ragged [batch, len(ids)] (for concatenation)."""
    row = tf.constant(list(ids), tf.int64)
    return tf.RaggedTensor.from_tensor(tf.tile(row[None], [batch_size, 1]))


def dense(ragged: tf.RaggedTensor, length: int, pad_id: int):
    """(ids int32 [B, length] right-padded, mask int32 [B, length])."""
    ids = ragged.to_tensor(default_value=pad_id, shape=[None, length])
    mask = tf.sequence_mask(ragged.row_lengths(), length, dtype=tf.int32)
    return tf.cast(ids, tf.int32), mask


class GenerativeFinetuning(Task):
    """The base of the generative fine-tuning tasks (TextToText, CausalLMFinetuning): files,
    tokenizer (`tokenizer_kind`; the gin parameter is `tokenizer`), the prompt framing of the
    vocabulary (garden/models/framing.py), loss, evaluation, export. A subclass sets
    `encoder_decoder`, `prompt_names`, and implements _set_specials (its ids from
    `self.prompt_framing(vocab)`, the source's frame through `_frame_sources`),
    train_decoder_length and _encode (the framed source from `_framed_sources`)."""

    encoder_decoder: bool = False

    def __init__(self, model: Callable, vocab: Optional[str], train_file: str, eval_file: str,
                 max_target_length: int = 64, lower_case: Optional[bool] = None,
                 tokenizer: Optional[str] = None, generation: Optional[Dict] = None,
                 max_eval_examples: Optional[int] = None, eval_batch_size: int = 32,
                 init_checkpoint: Optional[str] = None,
                 init_checkpoint_object: str = "backbone", export_base: Optional[str] = None,
                 model_name: Optional[str] = None, max_beams: int = 4):
        self.model_fn = model
        self.export_base = export_base
        self.model_name = model_name or self.name
        self.max_beams = int(max_beams)
        # A garden.convert directory as init_checkpoint: its LM, tokenizer and casing
        # (garden/pretrained.py); its `model` object (the whole GenerativeLM) is restored.
        (self.converted, vocab, lower_case, tokenizer, _) = pretrained.text_settings(
            f"garden.{type(self).__name__}", init_checkpoint, vocab, lower_case, tokenizer,
            default_lower_case=False)
        self.vocab, self.lower_case = vocab, lower_case
        self.tokenizer_kind = tokenizer or vocab_files.detect_kind(vocab)
        if self.tokenizer_kind not in ("sentencepiece", "bpe"):
            raise ValueError(f"{self.name}: vocabulary {vocab} is {self.tokenizer_kind}; "
                             f"generation needs a SentencePiece .model or a byte-level BPE "
                             f"vocab.json (WordPiece text cannot be decoded back)")
        self.train_file, self.eval_file = train_file, eval_file
        if max_target_length < 2:
            raise ValueError(f"{self.name}.max_target_length must be >= 2 (a token and EOS)")
        self.max_target_length = int(max_target_length)
        self.generation = dict(generation or {})
        self.max_eval_examples = max_eval_examples
        self.eval_batch_size = int(eval_batch_size)
        self.init_checkpoint = init_checkpoint
        self.init_checkpoint_object = ("model" if self.converted is not None
                                       else init_checkpoint_object)

    # -- before anything is built ---------------------------------------------------------
    def prepare(self) -> None:
        from garden.models import decoding

        fields = {f.name for f in dataclasses.fields(decoding.GenerationConfig)}
        unknown = sorted(set(self.generation) - fields)
        if unknown:
            raise ValueError(f"{self.name}.generation: unknown settings {unknown}; "
                             f"GenerationConfig has {sorted(fields)}")
        self.generation_config = decoding.GenerationConfig(
            **{"max_new_tokens": self.max_target_length, **self.generation})
        # Read and checked now; the TF tokenizer of the datasets is built on first use (see
        # `text_tokenizer`), after the trainer seeds.
        eager = tokenizers.load_tokenizer(self.tokenizer_kind, self.vocab,
                                          lower_case=self.lower_case)
        self.eager_tokenizer, self.token_vocab = eager, eager.vocab
        self._set_specials(eager)
        self.train_rows = read_pairs(self.train_file)
        self.eval_rows = read_pairs(self.eval_file)
        if self.max_eval_examples:
            self.eval_rows = self.eval_rows[:int(self.max_eval_examples)]
        self._check_lengths(eager, self.train_file, self.train_rows)
        self._check_lengths(eager, self.eval_file, self.eval_rows)
        if self.init_checkpoint:
            self._init_path = pretrained.resolve_checkpoint(self.init_checkpoint,
                                                      self.init_checkpoint_object)
        # SentencePiece: built again on first use (see `text_tokenizer`); BPE's module (lookup
        # tables, no op-owned resource) survives the seeding and is reused: building it costs
        # a few seconds.
        self._tokenizer = eager.in_graph() if self.tokenizer_kind == "bpe" else None
        print(f"[{self.name}] {len(self.train_rows)} train / {len(self.eval_rows)} eval pairs, "
              f"{self.tokenizer_kind} vocabulary of {eager.vocab.size}", flush=True)

    def _check_lengths(self, eager, path: str, rows: List[dict]) -> None:
        """Counts (and reports) the sources and targets that will be cut; remembers the most
        frequent label token of the train targets (the trivial token-accuracy baseline)."""
        sources = eager.tokenize([r["source"] for r in rows])
        targets = eager.tokenize([self._target_text(r["target"]) for r in rows])
        if any(not t for t in targets):
            i = next(k for k, t in enumerate(targets) if not t)
            raise TaskDataError(f"{path}: record {i + 1}: target {rows[i]['target']!r} has no "
                                f"tokens")
        cut_sources = sum(len(s) > self.source_room for s in sources)
        cut_targets = sum(len(t) > self.max_target_length - 1 for t in targets)
        if cut_sources or cut_targets:
            print(f"[{self.name}] {path}: {cut_sources} of {len(rows)} sources longer than "
                  f"{self.source_room} tokens and {cut_targets} targets longer than "
                  f"{self.max_target_length - 1} tokens are truncated", flush=True)
        if path == self.train_file:
            labels = collections.Counter(i for t in targets for i in t[:self.max_target_length - 1])
            labels[self.eos_id] += len(targets)
            self.most_frequent_label = labels.most_common(1)[0][0]

    @property
    def text_tokenizer(self):
        """The in-graph tokenizer module; SentencePiece's is built again on first use (the
        trainer seeds after prepare(), which drops the SentencePiece op's resource; see
        Classification.packer)."""
        if getattr(self, "_tokenizer", None) is None:
            self._tokenizer = tokenizers.load_tokenizer(
                self.tokenizer_kind, self.vocab, lower_case=self.lower_case).in_graph()
        return self._tokenizer

    def _target_text(self, target: str) -> str:
        return target

    def _frame_sources(self, max_length: int, prefix: Sequence[int], suffix: Sequence[int],
                       length_argument: str, beside: str) -> None:
        """Every source goes in as prefix + its first `source_room` tokens + suffix, within
        `max_length` tokens (the gin argument `length_argument`); ValueError when not even one
        source token fits beside the ids (`beside` says what they are)."""
        self._source_frame = (int(max_length), list(prefix), list(suffix))
        self.source_room = int(max_length) - len(prefix) - len(suffix)
        if self.source_room < 1:
            raise ValueError(f"{self.name}.{length_argument} {max_length} leaves no room for a "
                             f"source token beside {beside}")

    def _framed_sources(self, source: tf.RaggedTensor) -> tf.RaggedTensor:
        """The sources (ragged ids [B, None]) cut to source_room and framed (_frame_sources)."""
        _, prefix, suffix = self._source_frame
        batch = source.nrows()
        return tf.concat([fill(batch, prefix), source[:, :self.source_room], fill(batch, suffix)],
                         axis=1)

    def serving_layout(self) -> dict:
        """make_generation_serving's prompt layout: the source's frame, as _encode lays it out."""
        max_length, prefix, suffix = self._source_frame
        return {"max_prompt_length": max_length, "prompt_prefix_ids": prefix,
                "prompt_suffix_ids": suffix}

    def prompt_framing(self, vocab) -> framing.Framing:
        """The prompt framing of this task's model shape and vocabulary (T5 for SentencePiece
        encoder-decoders, BART for BPE ones, causal for decoder-only models)."""
        return framing.vocabulary_framing(self.encoder_decoder, self.tokenizer_kind,
                                          vocab.specials, f"{self.name}: vocabulary {self.vocab}")

    # -- the model -------------------------------------------------------------------------
    def build_model(self):
        if self.converted is not None:
            model = pretrained.build_lm(self.converted, self.model_fn,
                                        f"garden.{type(self).__name__}")
        else:
            model = self.model_fn(default_vocab_size=self.token_vocab.size)
        if bool(getattr(model, "is_encoder_decoder", None)) != self.encoder_decoder:
            want = "an encoder-decoder" if self.encoder_decoder else "a decoder-only"
            raise ValueError(f"{self.name} needs {want} GenerativeLM; {self.name}.model built a "
                             f"{type(model).__name__} (is_encoder_decoder="
                             f"{getattr(model, 'is_encoder_decoder', None)})")
        self._check_positions(model)
        # One call on a dummy batch builds a subclassed model's weights (the trainer counts
        # parameters and the checkpoint restores before the first step).
        model({k: tf.ones([1, 2], tf.int32) for k in model.input_names}, training=False)
        backbone = getattr(model, "backbone", None)
        if self.init_checkpoint and self.converted is not None:
            pretrained.restore(model, self._init_path, self.init_checkpoint_object, self.name)
        elif self.init_checkpoint:
            restore_backbone(backbone if backbone is not None else model, self._init_path,
                             self.init_checkpoint_object, self.name)
        objects = {"model": model}
        if backbone is not None:
            objects["backbone"] = backbone
        return model, objects

    summary_factory = "model"  # garden.train --summary builds the GenerativeLM itself

    def _check_positions(self, model) -> None:
        """Refuses, before any step, lengths the model has no positions for: the training
        inputs and the generation of evaluate() and the export (prompt slots +
        max_new_tokens) must fit the decoder's max_decoder_length (and BART's encoder table)."""
        limit = getattr(model, "max_decoder_length", None)
        slots = len(self.start_ids) if self.encoder_decoder else self.max_prompt_length
        new = self.generation_config.max_new_tokens
        needs = [(self.train_decoder_length, "the training sequence"),
                 (slots + new, f"generation ({slots} prompt slots + max_new_tokens {new})")]
        name = type(model).__name__
        problems = [f"{what} needs {n} decoder positions, {name} has {limit}"
                    for n, what in needs if limit is not None and n > limit]
        encoder = getattr(getattr(model, "backbone", None), "max_sequence_length", None)
        if self.encoder_decoder and encoder is not None and self.max_source_length > encoder:
            problems.append(f"max_source_length {self.max_source_length} exceeds the "
                            f"{encoder} encoder positions of {name}")
        if problems:
            raise ValueError(f"{self.name}: {'; '.join(problems)} (lower the task's max_*_length "
                             f"or generation's max_new_tokens)")

    @staticmethod
    def summary_model(model):
        """The GenerativeLM of the `model` factory, as `garden.train --summary` prints it."""
        return model

    # -- the data ---------------------------------------------------------------------------
    def _dataset(self, rows, batch_size, shuffle_seed=None, repeat=False, skip=0,
                 input_context=None, for_generation=False):
        columns = {c: [r[c] for r in rows] for c in COLUMNS}
        ds = batches(tf.data.Dataset.from_tensor_slices(columns), len(rows), batch_size,
                     shuffle_seed, repeat, skip, input_context)
        tokenizer = self.text_tokenizer  # built eagerly, outside the map's trace

        def encode(cols):
            source = tokenizer(cols["source"])
            target = tokenizer(tf.strings.join([self._target_prefix, cols["target"]]))
            return self._encode(source, target, for_generation)

        return ds.map(encode, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    _target_prefix = ""

    def schedule(self, train_steps: int) -> List[Stage]:
        return rows_schedule(self._dataset, self.train_rows, train_steps, self.train_file)

    # -- the objective ----------------------------------------------------------------------
    def loss_weights(self, batch):
        return {"label_weights": tf.reduce_sum(tf.cast(batch["label_weights"], tf.float32))}

    def _logits(self, model, batch, training: bool):
        inputs = {k: batch[k] for k in model.input_names}
        return tf.cast(model(inputs, training=training)["logits"], tf.float32)

    def compute_metrics(self, model, batch, training: bool, weight_shares=None):
        logits = self._logits(model, batch, training)
        denominator = None if weight_shares is None else weight_shares["label_weights"] + 1e-5
        loss, accuracy = losses.weighted_sparse_cross_entropy(
            logits, batch["labels"], batch["label_weights"], denominator)
        masks = [k for k in model.input_names if k.endswith("padding_mask")]
        return {"loss": loss, "token_accuracy": accuracy,  # tokens: real inputs, for MFU
                "tokens": tf.add_n([tf.reduce_sum(tf.cast(batch[k], tf.float32)) for k in masks])}

    # -- after training ---------------------------------------------------------------------
    def _teacher_forced(self, model, rows) -> dict:
        """Per-example token accuracy of the model and of the most-frequent-label baseline,
        and the weighted mean loss."""
        model_acc, base_acc, nll_sum, weight_sum = [], [], 0.0, 0.0
        for batch in self._dataset(rows, self.eval_batch_size):
            logits = self._logits(model, batch, False)
            labels = batch["labels"].numpy()
            weights = batch["label_weights"].numpy().astype(np.float64)
            nll = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.cast(labels, tf.int32), logits=logits).numpy()
            nll_sum += float((nll * weights).sum())
            weight_sum += float(weights.sum())
            count = weights.sum(axis=1)
            model_acc.extend(((logits.numpy().argmax(-1) == labels) * weights).sum(1) / count)
            base_acc.extend(((labels == self.most_frequent_label) * weights).sum(1) / count)
        model_acc, base_acc = np.array(model_acc), np.array(base_acc)
        n = len(model_acc)
        se = lambda x: float(x.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0  # noqa: E731
        return {"eval_loss": nll_sum / max(weight_sum, 1.0),
                "eval_token_accuracy": float(model_acc.mean()),
                "eval_token_accuracy_se": se(model_acc),
                "baseline_token_accuracy": float(base_acc.mean()),
                "token_accuracy_gain_se": se(model_acc - base_acc)}

    def predict(self, model, rows) -> List[str]:
        """Generated text for each row's source (the task's GenerationConfig)."""
        from garden.models import decoding

        generator = decoding.Generator(model, eos_id=self.eos_id, pad_id=self.pad_id)
        out = []
        for batch in self._dataset(rows, self.eval_batch_size, for_generation=True):
            prompt = {k: v for k, v in batch.items() if k in self.prompt_names}
            result = generator.generate(prompt, self.generation_config)
            ids, lengths = np.asarray(result["token_ids"]), np.asarray(result["lengths"])
            out.extend(detokenize(self.token_vocab, row[:length], self.tokenizer_kind)
                       for row, length in zip(ids.tolist(), lengths.tolist()))
        return out

    def serving_module(self, model):
        """The generation export (module docstring): prompt strings in, generated text out."""
        from garden.serving.generation import make_generation_serving

        return make_generation_serving(
            model, self.vocab, self.tokenizer_kind, self.eos_id, self.pad_id,
            lower_case=self.lower_case,
            max_new_tokens=self.generation_config.max_new_tokens, max_beams=self.max_beams,
            defaults=self.generation_config,
            warmup_prompts=[r["source"] for r in self.eval_rows[:2]], **self.serving_layout())

    def evaluate(self, model) -> dict:
        result = {"eval_examples": len(self.eval_rows), **self._teacher_forced(model,
                                                                               self.eval_rows)}
        self.last_predictions = self.predict(model, self.eval_rows)
        references = [r["target"] for r in self.eval_rows]
        scores = rouge.corpus_rouge(self.last_predictions, references)
        result.update({f"eval_{k}": v for k, v in scores.items()})
        baselines = rouge.trivial_baselines([r["target"] for r in self.train_rows],
                                            [r["source"] for r in self.eval_rows], references)
        for name in ("lead", "constant", "empty", "tail"):
            result.update({f"baseline_{name}_{k}": v for k, v in baselines[name].items()
                           if not k.endswith("_se")})
        result["generation"] = dataclasses.asdict(self.generation_config)
        return result

    def finish(self, model, model_dir: str) -> dict:
        """evaluate(), and the eval predictions in <model_dir>/predictions.jsonl."""
        result = self.evaluate(model)
        with tf.io.gfile.GFile(posixpath.join(model_dir, "predictions.jsonl"), "w") as f:
            for row, prediction in zip(self.eval_rows, self.last_predictions):
                f.write(json.dumps({**row, "prediction": prediction}, ensure_ascii=False) + "\n")
        print(f"[{self.name}] eval {json.dumps(result, sort_keys=True)}", flush=True)
        return result
