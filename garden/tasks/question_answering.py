"""Extractive question answering (SQuAD v1.1 / v2.0) as a task of the shared trainer.

Data (docs/tasks.md, "Extractive question answering"):
- train_file: the training SQuAD JSON (text.finetune.question_answering_sources.read_examples). Its
  windows are made in this process with example_features (small tasks), or read from
  `train_records`, a `python -m data_pipelines.make_finetune --task=question_answering` output
  directory made from that same file (COMPLETED, info.json's window options and vocabulary checked;
  parsed with text.finetune.question_answering.parse_record).
- eval_file: a SQuAD JSON scored with the official metric (garden.metrics.question_answering: EM /
  F1, v2.0 HasAns / NoAns) through garden.models.question_answering.decode (n_best starts x ends,
  max_answer_length, max-context, null threshold).

The v2.0 null threshold ("" when null score - best score > threshold) is tuned with the
official best_f1_thresh on a held-out split of the TRAINING file, never on the set reported:
every `threshold_holdout_every`-th paragraph (by file order; a paragraph's questions stay
together, so no held-out context was trained on) is left out of training and decoded after
training (and at every evaluation) to tune it. The tuned value goes into the export's graph
and metadata. A file without unanswerable questions is v1.1: no threshold (+inf), no holdout.
`null_threshold` fixes it instead.

Model: garden.models.question_answering.SpanExtractor (sequence output -> dense(2)), loss the
mean of the start and end cross-entropies; fine-tuned from a pretraining checkpoint like
Classification (`init_checkpoint`, `init_checkpoint_object`). Served by
garden.serving.question_answering.QuestionAnsweringServing (raw question + context in, answer text
and its character offsets out).
"""

from __future__ import annotations

import json
import math
import posixpath
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from text.finetune import FinetuneDataError
from text.finetune.question_answering import NAME, SquadOptions, examples_features, parse_record
from text.finetune.question_answering_sources import SquadExample, read_examples
from garden import data
from garden.data import DataDirError, open_data_dir
from garden.metrics.question_answering import gold_from_examples, squad_v1, squad_v2
from garden.models.question_answering import (MAX_ANSWER_LENGTH, N_BEST, SpanExtractor,
                                              decode_all, span_loss)
from garden.serving.question_answering import QuestionAnsweringServing
from garden.tasks.base import Stage
from garden.tasks.finetuning import EncoderFinetuning


def paragraph_numbers(examples: Sequence[SquadExample]) -> np.ndarray:
    """The paragraph of each example (consecutive questions on one context share one)."""
    out, number, last = [], -1, None
    for e in examples:
        if e.context != last:
            number, last = number + 1, e.context
        out.append(number)
    return np.asarray(out, np.int64)


def stack(records: Sequence[dict]) -> Dict[str, np.ndarray]:
    """Window records (dicts of ints / int lists) -> {name: int64 array [N, ...]}."""
    if not records:
        raise FinetuneDataError("no window records to stack")
    return {k: np.asarray([r[k] for r in records], np.int64) for k in records[0]}


class QuestionAnswering(EncoderFinetuning):
    """Fine-tunes a pretrained backbone on SQuAD-format data; serves it from raw text.

    Args (backbone, vocab, lower_case, tokenizer, layout, init_checkpoint,
    init_checkpoint_object, export_base, model_name ("qa"):
    garden.tasks.finetuning.EncoderFinetuning; the span head has no dropout of its own), and:
        train_file, eval_file: SQuAD v1.1 / v2.0 JSON files.
        train_records: optional make_finetune --task=question_answering output directory of
            train_file.
        max_seq_length, doc_stride, max_query_length: the windows (384 / 128 / 64; doc_stride
            is the step between window starts).
        n_best, max_answer_length: decoding (20, 30).
        null_threshold: fixed v2.0 threshold; None tunes it on the held-out paragraphs.
        threshold_holdout_every: every k-th training paragraph is held out for the tuning (10).
        eval_batch_size: windows per batch in evaluation.
    """

    name = "question_answering"

    def __init__(self, backbone: Callable, vocab: Optional[str], train_file: str,
                 eval_file: str, train_records: Optional[str] = None, max_seq_length: int = 384,
                 doc_stride: int = 128, max_query_length: int = 64,
                 lower_case: Optional[bool] = None,
                 tokenizer: Optional[str] = None, layout: Optional[str] = None,
                 init_checkpoint: Optional[str] = None, init_checkpoint_object: str = "backbone",
                 n_best: int = N_BEST, max_answer_length: int = MAX_ANSWER_LENGTH,
                 null_threshold: Optional[float] = None, threshold_holdout_every: int = 10,
                 eval_batch_size: int = 64, export_base: Optional[str] = None,
                 model_name: str = "qa"):
        self.train_file, self.eval_file, self.train_records = train_file, eval_file, train_records
        self.doc_stride, self.max_query_length = int(doc_stride), int(max_query_length)
        self.n_best, self.max_answer_length = int(n_best), int(max_answer_length)
        self.fixed_threshold = null_threshold
        if threshold_holdout_every < 2:
            raise ValueError(f"threshold_holdout_every must be >= 2 (every k-th paragraph is "
                             f"held out), got {threshold_holdout_every}")
        self.holdout_every = int(threshold_holdout_every)
        self.eval_batch_size = int(eval_batch_size)
        self.null_threshold: Optional[float] = None
        self.threshold_scores: dict = {}
        super().__init__(backbone, vocab, max_seq_length, lower_case, tokenizer, layout,
                         init_checkpoint, init_checkpoint_object, export_base=export_base,
                         model_name=model_name)

    # -- before anything is built ---------------------------------------------------------
    def prepare(self) -> None:
        packer = self.check_text()
        self.options = SquadOptions(self.max_seq_length, self.doc_stride,
                                    self.max_query_length, packer.layout)
        self.train_examples = read_examples(self.train_file)
        self.eval_examples = read_examples(self.eval_file)
        self.version_2 = any(e.is_impossible for e in self.train_examples)
        paragraphs = paragraph_numbers(self.train_examples)
        if self.version_2 and self.fixed_threshold is None:
            held = paragraphs % self.holdout_every == self.holdout_every - 1
            if not held.any() or held.all():
                raise FinetuneDataError(
                    f"{self.train_file}: {paragraphs.max() + 1} paragraphs leave none to hold "
                    f"out (every {self.holdout_every}th) for tuning the null threshold; lower "
                    f"threshold_holdout_every or bind null_threshold")
        else:
            held = np.zeros(len(self.train_examples), bool)
        self.holdout = held
        self.holdout_examples = [e for e, h in zip(self.train_examples, held) if h]
        if self.train_records:
            self._records = self._open_records(self.train_records, packer)
        self._eval_windows = self._featurize(self.eval_examples, self.eval_file)
        self._holdout_windows = (self._featurize(self.holdout_examples, self.train_file)
                                 if self.holdout_examples else None)
        print(f"[{self.name}] {len(self.train_examples)} train questions ("
              f"{len(self.holdout_examples)} held out for the null threshold), "
              f"{len(self.eval_examples)} eval; SQuAD {'v2.0' if self.version_2 else 'v1.1'}, "
              f"{packer.kind} in the {packer.layout!r} layout", flush=True)

    def _featurize(self, examples, path: str) -> Dict[str, np.ndarray]:
        """The windows of `examples` (example_index = position in `examples`)."""
        skipped = []
        per_example = examples_features(
            examples, self.load_text_tokenizer(), self.options,
            on_error=lambda i, e: skipped.append(f"{e}"))
        if skipped:
            print(f"[{self.name}] {path}: {len(skipped)} questions skipped (no windows), "
                  f"e.g. {skipped[0]}", flush=True)
        return stack([r for rows in per_example for r in rows])

    def _open_records(self, path: str, packer) -> List[str]:
        """The shards of a make_finetune --task=question_answering directory, checked against this
        task: COMPLETED, the vocabulary, the window options and the number of questions read."""
        ddir = open_data_dir(path, objective=NAME, vocab_fingerprint=packer.fingerprint,
                             max_seq_length=self.max_seq_length)
        made = ddir.info.get("options") or {}
        for key in ("doc_stride", "max_query_length", "layout"):
            if key in made and made[key] != getattr(self.options, key):
                raise DataDirError(f"{path} was made with {key}={made[key]!r}, this task uses "
                                   f"{getattr(self.options, key)!r}; re-run make_finetune or "
                                   f"bind garden.QuestionAnswering.{key}")
        read = (ddir.info.get("examples") or {}).get("read")
        if read is not None and read != len(self.train_examples):
            raise DataDirError(f"{path} was made from {read} questions ({ddir.info.get('input_files')}"
                               f"), {self.train_file} has {len(self.train_examples)}: its "
                               f"example_index would not point at this file's questions")
        return ddir.files

    # -- the model -------------------------------------------------------------------------
    def task_model(self, backbone):
        return SpanExtractor(backbone)

    @staticmethod
    def summary_model(backbone):
        return SpanExtractor(backbone)

    # -- the data ---------------------------------------------------------------------------
    def _train_windows(self) -> tf.data.Dataset:
        """Unbatched training windows (the held-out paragraphs left out)."""
        keep = tf.constant(~self.holdout)
        if self.train_records:
            ds = tf.data.TFRecordDataset(self._records, compression_type=(
                "GZIP" if self._records[0].endswith(".gz") else ""))
            ds = ds.map(lambda x: parse_record(x, self.options))
        else:
            windows = self._featurize(self.train_examples, self.train_file)
            ds = tf.data.Dataset.from_tensor_slices(windows)
        return ds.filter(lambda w: tf.gather(keep, w["example_index"]))

    def schedule(self, train_steps: int) -> List[Stage]:
        windows = self._train_windows().cache()

        def dataset_fn(input_context, batch_size, seed, skip_batches):
            ds = windows.repeat().shuffle(20_000, seed=seed, reshuffle_each_iteration=True)
            ds = ds.batch(batch_size, drop_remainder=True)
            return data.shard_batches(ds, input_context, skip_batches).prefetch(tf.data.AUTOTUNE)

        files = tuple(self._records) if self.train_records else ()
        return [Stage(0, train_steps, dataset_fn, self.train_records or self.train_file, files)]

    # -- the objective ----------------------------------------------------------------------
    @staticmethod
    def _span_logits(model, batch, training: bool):
        # The model's own input names (no vocabulary needed: the benchmark steps it bare).
        inputs = {k: tf.cast(batch[k], tf.int32) for k in model.input}
        out = model(inputs, training=training)
        return out["start_logits"], out["end_logits"]

    def compute_metrics(self, model, batch, training: bool, weight_shares=None):
        start_logits, end_logits = self._span_logits(model, batch, training)
        starts, ends = batch["start_position"], batch["end_position"]
        hit = lambda logits, y: tf.reduce_mean(tf.cast(  # noqa: E731
            tf.equal(tf.argmax(logits, -1), tf.cast(y, tf.int64)), tf.float32))
        return {"loss": span_loss(start_logits, end_logits, starts, ends),
                "start_accuracy": hit(start_logits, starts),
                "end_accuracy": hit(end_logits, ends),
                "tokens": tf.reduce_sum(tf.cast(batch["padding_mask"], tf.float32))}

    # -- after training ---------------------------------------------------------------------
    def predict(self, model, windows: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """windows with start_logits / end_logits float32 [N, T] added."""
        starts, ends = [], []
        n = len(windows["example_index"])
        for i in range(0, n, self.eval_batch_size):
            batch = {k: v[i:i + self.eval_batch_size] for k, v in windows.items()}
            s, e = self._span_logits(model, batch, False)
            starts.append(s.numpy())
            ends.append(e.numpy())
        return dict(windows, start_logits=np.concatenate(starts), end_logits=np.concatenate(ends))

    def answers(self, model, examples, windows, null_threshold: float):
        records = self.predict(model, windows)
        rows = [{k: v[i] for k, v in records.items()} for i in range(len(records["example_index"]))]
        return decode_all([e.context for e in examples], rows, null_threshold=null_threshold,
                          n_best=self.n_best, max_answer_length=self.max_answer_length)

    def tune_threshold(self, model) -> float:
        """The official best_f1_thresh on the held-out training paragraphs (+inf for v1.1)."""
        if self.fixed_threshold is not None:
            self.null_threshold = float(self.fixed_threshold)
        elif not self.version_2:
            self.null_threshold = math.inf
        else:
            found = self.answers(model, self.holdout_examples, self._holdout_windows, math.inf)
            predictions = {e.qas_id: a.best_text for e, a in zip(self.holdout_examples, found)}
            na_probs = {e.qas_id: a.null_diff for e, a in zip(self.holdout_examples, found)}
            scores = squad_v2(gold_from_examples(
                self.holdout_examples), predictions, na_probs)
            self.null_threshold = float(scores["best_f1_thresh"])
            self.threshold_scores = {"holdout_best_f1": scores["best_f1"],
                                     "holdout_questions": len(self.holdout_examples)}
        return self.null_threshold

    def evaluate(self, model) -> dict:
        """EM / F1 (x100) on eval_file with the threshold tuned on the held-out training
        paragraphs; v2.0 adds HasAns / NoAns and the always-"" baseline's F1."""
        threshold = self.tune_threshold(model)
        found = self.answers(model, self.eval_examples, self._eval_windows, threshold)
        predictions = {e.qas_id: a.text for e, a in zip(self.eval_examples, found)}
        self.last_answers = {e.qas_id: a for e, a in zip(self.eval_examples, found)}
        gold = gold_from_examples(self.eval_examples)
        result = {"eval_questions": len(self.eval_examples)}
        if self.version_2:
            scores = squad_v2(gold, predictions)
            result.update({f"eval_{k}": float(v) for k, v in scores.items()
                           if not k.endswith("total")})
            result["null_baseline_f1"] = float(squad_v2(
                gold, {q: "" for q in gold})["f1"])
            result["null_threshold"] = threshold
            result.update({k: float(v) for k, v in self.threshold_scores.items()})
        else:
            scores = squad_v1(gold, predictions)
            result.update(eval_exact=float(scores["exact_match"]), eval_f1=float(scores["f1"]))
        return result

    def finish(self, model, model_dir: str) -> dict:
        """evaluate(), and the official scripts' input files in model_dir:
        predictions.json (qid -> answer, "" for none) and null_odds.json (qid -> null score
        - best score, the na_prob file of evaluate-v2.0.py), plus answers.json (the
        character spans and scores)."""
        result = super().finish(model, model_dir)
        files = {
            "predictions.json": {q: a.text for q, a in self.last_answers.items()},
            "null_odds.json": {q: a.null_diff for q, a in self.last_answers.items()},
            # score as the served signature gives it: the null score for "".
            "answers.json": {q: {"text": a.text, "start": a.start, "end": a.end,
                                 "score": a.score if a.text else a.null_score,
                                 "null_score_diff": a.null_diff}
                             for q, a in self.last_answers.items()}}
        for name, content in files.items():
            with tf.io.gfile.GFile(posixpath.join(model_dir, name), "w") as f:
                # allow_nan: a question without any candidate has an infinite null difference.
                f.write(json.dumps(content, indent=1, sort_keys=True) + "\n")
        return result

    def serving_module(self, model) -> QuestionAnsweringServing:
        """Raw question + context in; the tuned null threshold is a constant of the graph."""
        if self.null_threshold is None:
            self.tune_threshold(model)
        warmup = [(e.question, e.context) for e in self.eval_examples[:3]]
        how = ("fixed by the config" if self.fixed_threshold is not None else
               f"official best_f1_thresh on every {self.holdout_every}th training paragraph "
               f"({len(self.holdout_examples)} questions, not trained on)" if self.version_2
               else "none (SQuAD v1.1)")
        return QuestionAnsweringServing(
            model, self.packer, self.vocab, doc_stride=self.doc_stride,
            max_query_length=self.max_query_length, null_threshold=self.null_threshold,
            n_best=self.n_best, max_answer_length=self.max_answer_length, warmup=warmup,
            extra_metadata={"squad_version": "2.0" if self.version_2 else "1.1",
                            "null_threshold_tuning": how})
