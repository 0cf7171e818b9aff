"""Does each objective learn? `python -m benchmarks.objectives_learn [--steps=300] [--families=...]
[--train_files=1] [--learning_rate=...]`

Each family's tiny config (configs/<family>_tiny.gin) is trained for a short CPU run on data the
real tools build from the sample corpus (data_pipelines.sample_corpus -> make_vocab ->
make_pretrain; or with --corpus=ordered from data_pipelines.ordered_corpus, procedures whose
sentence order the text gives away), then scored on held-out data (another corpus file, same vocabulary) against
what a model that ignores the context can do:

  MLM accuracy      vs the best constant guess: always predicting the most frequent target
                    piece of the held-out targets (an upper bound of the unigram-frequency guess)
  MLM loss (nats)   vs the unigram entropy of the held-out targets (the cross-entropy of the best
                    context-free distribution, fitted on those very targets)
  NSP / SOP acc.    vs the majority label's rate (about 50%)
  ELECTRA disc. AUC vs 0.5 (scikit-learn's roc_auc_score over every real token; "replaced" is
                    the positive class), with the generator's MLM accuracy as above
  DistilBERT        the student's MLM accuracy vs the best constant guess, on held-out batches
                    masked as its training masks them (rare pieces favoured); its BERT tiny
                    teacher, trained here first on the same data for as many steps, is scored
                    on its own data and on those very batches
Every margin is also given in standard errors (binomial for accuracies, Hanley-McNeil for the
AUC). Families: bert, roberta, albert, electra, spanbert, ernie, distilbert, gpt2 (next-token prediction in the token columns) (each when its objective and
tiny config exist). Training data: corpus file 0, or with --train_files=N the first N files
other than the held-out file 1; the vocabulary always comes from file 0. The training goes
through `garden.train.train` in this process, exactly as `python -m garden.train` would run it.
tests/garden/tasks/pretraining/test_family_learning_mlm.py and test_distilbert_learning.py run cheaper variants of `run_family` (ALBERT, DistilBERT).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import os
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

from benchmarks import common

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Family:
    config: str  # the tiny twin
    task: str  # gin name of the task class (garden.<task>)
    objective: str  # make_pretrain --objective
    tokenizer: str  # make_vocab --tokenizer
    static_masks: bool  # make_pretrain takes --max_predictions_per_seq


FAMILIES: Dict[str, Family] = {
    "bert": Family("configs/bert_tiny.gin", "Pretraining", "bert", "wordpiece", True),
    "roberta": Family("configs/roberta_tiny.gin", "Pretraining", "roberta", "bpe", False),
    "albert": Family("configs/albert_tiny.gin", "Pretraining", "albert", "sentencepiece", True),
    "electra": Family("configs/electra_tiny.gin", "Pretraining", "electra", "wordpiece", False),
    "spanbert": Family("configs/spanbert_tiny.gin", "Pretraining", "spanbert", "wordpiece", True),
    # BERT's architecture and task on unit-masked data (whole words, phrases, entities).
    "ernie": Family("configs/ernie_tiny.gin", "Pretraining", "ernie", "wordpiece", True),
    # Distilled from a BERT tiny teacher trained here first, on the same BERT data.
    "distilbert": Family("configs/distilbert_tiny.gin", "Distillation", "bert", "wordpiece", True),
    "gpt2": Family("configs/gpt2_tiny.gin", "Pretraining", "gpt2", "bpe", False),
}


def available(name: str) -> bool:
    """The family's tiny config and data objective both exist in this checkout."""
    family = FAMILIES[name]
    module = os.path.join(REPO_ROOT, "data_pipelines", "objectives", f"{family.objective}.py")
    return os.path.exists(os.path.join(REPO_ROOT, family.config)) and os.path.exists(module)


# ----------------------------------------------------------------------------------------
# Data, built with the real tools.
# ----------------------------------------------------------------------------------------


def _run(module: str, *args: str) -> None:
    """`python -m module args` (the pipelines' command lines), failing loudly."""
    import subprocess

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"python -m {module} {' '.join(args)} exited {proc.returncode}:\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


def _generated_corpus(root: str, module: str, *args: str) -> List[str]:
    """The files of `python -m <module> --output=<root>/corpus ...`, made if not there yet."""
    out = os.path.join(root, "corpus")
    if not glob.glob(os.path.join(out, "*.txt")):
        _run(module, f"--output={out}", *args)
    return sorted(glob.glob(os.path.join(out, "*.txt")))


def sample_corpus(root: str) -> List[str]:
    """The sample corpus' files (one sentence per line, blank lines between documents)."""
    return _generated_corpus(root, "data_pipelines.sample_corpus")


def ordered_corpus(root: str, seed: int = 0) -> List[str]:
    """The procedures of data_pipelines.ordered_corpus (four files of ~230 KB, markers on):
    documents whose sentence order can be read from the text, for SOP."""
    return _generated_corpus(root, "data_pipelines.ordered_corpus", f"--seed={seed}")


CORPORA = {"sample": sample_corpus, "ordered": ordered_corpus}


def corpus_root(root: str, corpus: str) -> str:
    """Where one corpus' files, vocabularies and data go: the work dir itself for the sample
    corpus (as before), a subdirectory named after any other."""
    if corpus not in CORPORA:
        raise ValueError(f"unknown corpus {corpus!r}; choose from {', '.join(CORPORA)}")
    return root if corpus == "sample" else os.path.join(root, corpus)


HELD_OUT = 1  # index of the held-out corpus file (the same in every run, so scores compare)


def training_corpus(root: str, files: Sequence[str], train_files: int = 1) -> str:
    """make_pretrain --input for the first `train_files` corpus files other than the held-out
    one: file 0 itself for one file (as before), else a directory of copies, globbed."""
    others = [f for i, f in enumerate(files) if i != HELD_OUT]
    if not 1 <= train_files <= len(others):
        raise ValueError(f"train_files must be 1..{len(others)} (the sample corpus has "
                         f"{len(files)} files, one held out), got {train_files}")
    if train_files == 1:
        return others[0]
    out = os.path.join(root, f"corpus-train{train_files}")
    if not os.path.exists(os.path.join(out, "COMPLETED")):
        import shutil

        os.makedirs(out, exist_ok=True)
        for f in others[:train_files]:
            shutil.copy(f, out)
        open(os.path.join(out, "COMPLETED"), "w").close()
    return os.path.join(out, "*.txt")


def vocabulary(root: str, kind: str, corpus_file: str, vocab_size: int) -> str:
    """make_vocab --tokenizer=kind on one corpus file; returns the path the pipelines take."""
    path = {"wordpiece": os.path.join(root, f"wordpiece-{vocab_size}.txt"),
            "sentencepiece": os.path.join(root, f"sentencepiece-{vocab_size}.model"),
            "bpe": os.path.join(root, f"bpe-{vocab_size}", "vocab.json")}[kind]
    if not os.path.exists(path):
        output = os.path.dirname(path) if kind == "bpe" else path
        _run("data_pipelines.make_vocab", f"--tokenizer={kind}", f"--input={corpus_file}",
             f"--output={output}", f"--vocab_size={vocab_size}", "--lower_case")
    return path


def pretrain_data(root: str, name: str, vocab: str, corpus_file: str, max_seq_length: int,
                  dupe_factor: int, tag: str, seed: int = 12345) -> str:
    """make_pretrain --objective=<family's> output for one corpus file (or glob). Families of
    one objective (bert, distilbert) share it."""
    family = FAMILIES[name]
    out = os.path.join(root, f"{family.objective}-{tag}-{max_seq_length}")
    if not os.path.exists(os.path.join(out, "COMPLETED")):
        args = [f"--objective={family.objective}", f"--input={corpus_file}", f"--output_dir={out}",
                f"--vocab={vocab}", f"--tokenizer={family.tokenizer}",
                f"--max_seq_length={max_seq_length}", f"--dupe_factor={dupe_factor}",
                "--num_shards=1", f"--seed={seed}", "--overwrite"]
        if family.static_masks:
            # 15% of 64 -> 10 predictions, of 128 -> 20 (BERT's max_predictions_per_seq).
            args.append(f"--max_predictions_per_seq={max(1, round(0.15 * max_seq_length + 0.4))}")
        _run("data_pipelines.make_pretrain", *args)
    return out


# ----------------------------------------------------------------------------------------
# Training and scoring.
# ----------------------------------------------------------------------------------------


def bindings(name: str, vocab: str, train_dir: str, eval_dir: str, max_seq_length: int,
             steps: int, batch_size: int, learning_rate: Optional[float] = None,
             extra: Sequence[str] = (), teacher: Optional[str] = None) -> List[str]:
    """gin bindings that point a tiny config at the built data (DistilBERT: and its teacher,
    a BERT tiny model_dir; its task reads no held-out data, `score` does)."""
    family = FAMILIES[name]
    task = f"garden.{family.task}"
    out = [f"VOCAB = '{vocab}'", f"DATA_DIR = '{train_dir}'", f"train.train_steps = {steps}",
           f"train.global_batch_size = {batch_size}", f"train.warmup_steps = {max(1, steps // 10)}",
           f"train.log_every = {max(1, steps // 10)}", f"train.checkpoint_every = {steps}",
           # Skip the trainer's matmul peak measurement: MFU means nothing here.
           "train.peak_flops = 1e12"]
    if family.task == "Distillation":
        if teacher is None:
            raise ValueError("distilbert needs teacher= (a BERT tiny model_dir)")
        out += [f"TEACHER = '{teacher}'", f"{task}.max_seq_length = {max_seq_length}"]
    else:
        phases = [{"start_step": 0, "data_dir": train_dir, "max_seq_length": max_seq_length}]
        out += [f"{task}.phases = {phases!r}", f"{task}.eval_data_dir = '{eval_dir}'"]
    # The families whose run file's tokenizer differs from make_vocab's WordPiece default.
    if family.task == "Pretraining" and family.tokenizer != "wordpiece":
        out.append(f"{task}.tokenizer = '{family.tokenizer}'")
    if learning_rate is not None:
        out.append(f"train.learning_rate = {learning_rate}")
    return out + list(extra)


def train_family(name: str, model_dir: str, gin_bindings: Sequence[str]) -> dict:
    """garden.train.train on one CPU device with the family's tiny config; its summary."""
    from garden import distribute
    from garden import train as train_lib

    cwd = os.getcwd()
    os.chdir(REPO_ROOT)  # configs include each other by repo-relative paths
    try:
        train_lib.parse_config([FAMILIES[name].config], list(gin_bindings))
        return train_lib.train(model_dir=model_dir, strategy=distribute.create_strategy("one_device"))
    finally:
        os.chdir(cwd)


def _restored_task(name: str, model_dir: str, gin_bindings: Sequence[str]):
    """A fresh task of the same config, prepared, with the model restored from model_dir."""
    import gin
    import tensorflow as tf

    from garden import train as train_lib

    cwd = os.getcwd()
    os.chdir(REPO_ROOT)
    try:
        train_lib.parse_config([FAMILIES[name].config], list(gin_bindings))
        task = gin.query_parameter("train.task").scoped_configurable_fn()
    finally:
        os.chdir(cwd)
    task.prepare()
    model, items = task.build_model()
    latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    tf.train.Checkpoint(**items).restore(latest).expect_partial()
    return task, model


def _eval_batches(task, batch_size: int, num_batches: int, eval_dir: Optional[str] = None,
                  static_masks: bool = False):
    from garden import data

    if type(task).__name__ == "Distillation":
        # The task reads no held-out data: unmask the held-out BERT data and mask it afresh
        # as training does (rare pieces favoured), with seed 0; or keep BERT's static masks.
        from text import vocab_files

        ddir = data.open_data_dir(eval_dir, objective=task.objective,
                                  vocab_fingerprint=vocab_files.vocab_fingerprint(task.vocab),
                                  vocab_size=task.vocab_size, max_seq_length=task.max_seq_length)
        ds = data.record_dataset(ddir, batch_size=batch_size, seed=0, shuffle_buffer=0,
                                 repeat=False)
        if static_masks:
            names = {"token_ids": "input_ids", "padding_mask": "input_mask",
                     "masked_lm_positions": "masked_lm_positions",
                     "masked_lm_ids": "masked_lm_ids", "masked_lm_weights": "masked_lm_weights"}
            return ds.map(lambda b: {k: b[v] for k, v in names.items()}).take(num_batches)
        return task._masked(ds, seed=0, input_context=None, skip_batches=0).take(num_batches)
    if hasattr(task, "_dataset"):  # RoBERTa / ELECTRA: masks and seeds added per batch
        ds = task._dataset(task._eval_dir, batch_size, seed=0, shuffle_buffer=0, repeat=False)
    else:
        ds = data.record_dataset(task._eval_dir, batch_size=batch_size, seed=0, shuffle_buffer=0,
                                 repeat=False)
    return ds.take(num_batches)


def _constant_guess(targets: np.ndarray) -> Dict[str, float]:
    """Accuracy of always guessing the most frequent target, and the targets' entropy (nats)."""
    if not len(targets):
        return {"accuracy": float("nan"), "entropy": float("nan")}
    _, counts = np.unique(targets, return_counts=True)
    p = counts / counts.sum()
    return {"accuracy": float(p.max()), "entropy": float(-(p * np.log(p)).sum())}


def _mlm_metrics(logits, ids, weights) -> Dict[str, float]:
    """Weighted MLM accuracy and loss (nats) of logits [B, P, V] at ids [B, P]."""
    import tensorflow as tf

    logits = tf.cast(logits, tf.float32)
    ids = tf.cast(ids, tf.int32)
    w = tf.cast(weights, tf.float32)
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids, logits=logits)
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), ids), tf.float32)
    total = float(tf.reduce_sum(w))
    return {"mlm_accuracy": float(tf.reduce_sum(w * correct)) / max(total, 1e-9),
            "mlm_loss": float(tf.reduce_sum(w * nll)) / max(total, 1e-9)}


def score(task, model, batch_size: int = 32, num_batches: int = 20,
          eval_dir: Optional[str] = None, static_masks: bool = False) -> Dict[str, float]:
    """Held-out metrics of a trained model and the context-free baselines they must beat.

    DistilBERT (a Distillation task; `eval_dir` = held-out BERT data): the student's MLM
    metrics, and as teacher_mlm_* the teacher's on the very same masked batches: masked as
    the student's training masks them, or with static_masks, BERT's own masks of that data."""
    targets, sentence_labels = [], []
    sums: Dict[str, float] = {}
    weights_of = {"mlm_accuracy": "mlm", "mlm_loss": "mlm", "nsp_accuracy": "sentence",
                  "sop_accuracy": "sentence", "sbo_accuracy": "sbo", "sbo_loss": "sbo"}
    counts = {"mlm": 0.0, "sentence": 0.0, "sbo": 0.0}
    sbo_targets = []
    disc_scores, disc_labels = [], []
    is_electra = getattr(task, "objective", None) == "electra"
    is_distillation = type(task).__name__ == "Distillation"
    teacher_sums = {"mlm_accuracy": 0.0, "mlm_loss": 0.0}
    # The model runs as one traced function over the batches, not op by op: eagerly, the
    # forward passes of a tiny model were most of this function's time (DistilBERT's 20
    # batches: ~5.5 of 7 s, py-spy, quiet 2-core Xeon, 2026-12-08).
    import tensorflow as tf

    forward = tf.function(lambda inputs: model(inputs, training=False), reduce_retracing=True)
    metrics_of = tf.function(lambda b: task.compute_metrics(model, b, training=False),
                             reduce_retracing=True)
    for batch in _eval_batches(task, batch_size, num_batches, eval_dir, static_masks):
        if is_distillation:
            outputs = forward({k: batch[k] for k in ("token_ids", "padding_mask", "masked_lm_positions")})
            ids, w = batch["masked_lm_ids"].numpy(), batch["masked_lm_weights"].numpy()
            metrics = _mlm_metrics(outputs["student_logits"], ids, w)
            for k, v in _mlm_metrics(outputs["teacher_logits"], ids, w).items():
                teacher_sums[k] += v * float(w.sum())
        elif is_electra:
            from garden.models.electra.pretrainer import electra_pretrain_loss

            outputs = forward(task.model_inputs(batch))
            metrics = electra_pretrain_loss(outputs, task.options["disc_weight"])
            ids, w = outputs["masked_lm_ids"].numpy(), outputs["masked_lm_weights"].numpy()
            real = outputs["disc_weights"].numpy() > 0
            disc_scores.append(outputs["disc_logits"].numpy()[real])
            disc_labels.append(outputs["disc_labels"].numpy()[real])
        elif getattr(task, "objective", None) == "gpt2":
            # Next-token prediction fills the token-prediction columns: targets are the next
            # pieces where both they and their context token are real (the task's lm_* metrics).
            metrics = metrics_of(batch)
            metrics = {"mlm_accuracy": metrics["lm_accuracy"], "mlm_loss": metrics["lm_loss"]}
            mask = batch["input_mask"].numpy()
            ids, w = batch["input_ids"].numpy()[:, 1:], (mask[:, 1:] * mask[:, :-1]).astype(float)
        else:
            metrics = metrics_of(batch)
            ids, w = batch["masked_lm_ids"].numpy(), batch["masked_lm_weights"].numpy()
            if "next_sentence_labels" in batch:
                labels = batch["next_sentence_labels"].numpy().reshape(-1)
                sentence_labels.append(labels)
        n = {"mlm": float(w.sum()), "sentence": float(len(sentence_labels[-1])) if sentence_labels else 0.0,
             "sbo": 0.0}
        if "sbo_weights" in batch:  # SpanBERT: the span-boundary predictions
            sw = batch["sbo_weights"].numpy()
            n["sbo"] = float(sw.sum())
            sbo_targets.append(ids[sw > 0])
        targets.append(ids[w > 0])
        for k, v in metrics.items():
            group = weights_of.get(k)
            if group is not None:
                sums[k] = sums.get(k, 0.0) + float(v) * n[group]
        for g in counts:
            counts[g] += n[g]
    result = {k: v / counts[weights_of[k]] for k, v in sums.items() if counts[weights_of[k]]}
    if is_distillation and counts["mlm"]:
        result.update({f"teacher_{k}": v / counts["mlm"] for k, v in teacher_sums.items()})
    guess = _constant_guess(np.concatenate(targets) if targets else np.zeros(0, np.int64))
    result["mlm_predictions"] = int(counts["mlm"])
    result["mlm_constant_guess_accuracy"] = guess["accuracy"]
    result["mlm_unigram_entropy"] = guess["entropy"]
    if sbo_targets:
        sbo_guess = _constant_guess(np.concatenate(sbo_targets))
        result["sbo_predictions"] = int(counts["sbo"])
        result["sbo_constant_guess_accuracy"] = sbo_guess["accuracy"]
        result["sbo_unigram_entropy"] = sbo_guess["entropy"]
    if sentence_labels:
        labels = np.concatenate(sentence_labels)
        result["sentence_majority_rate"] = float(max(labels.mean(), 1 - labels.mean()))
        result["sentence_examples"] = int(len(labels))
    if disc_scores:
        from sklearn.metrics import roc_auc_score

        scores, labels = np.concatenate(disc_scores), np.concatenate(disc_labels)
        result["disc_auc"] = float(roc_auc_score(labels, scores))
        result["disc_tokens"] = int(len(labels))
        result["replaced_fraction"] = float(labels.mean())
    return result


def run_family(name: str, root: str, *, steps: int, batch_size: int = 32, max_seq_length: int = 128,
               vocab_size: int = 2000, dupe_factor: int = 3, learning_rate: Optional[float] = None,
               eval_batches: int = 20, train_files: int = 1, eval_dupe_factor: int = 1,
               extra: Sequence[str] = (), corpus: str = "sample") -> dict:
    """Builds the family's data (if not there) from `corpus` (sample | ordered), trains its
    tiny config, scores it held out."""
    family = FAMILIES[name]
    root = corpus_root(root, corpus)
    files = CORPORA[corpus](root)
    # The vocabulary always comes from file 0, so every run of a family scores the same pieces.
    vocab = vocabulary(root, family.tokenizer, files[0], vocab_size)
    dupes = dupe_factor if family.static_masks else 1  # dynamic objectives mask afresh anyway
    tag = "train" if train_files == 1 else f"train{train_files}"
    if family.static_masks and dupes != 3:
        tag += f"-dupe{dupes}"
    train_dir = pretrain_data(root, name, vocab, training_corpus(root, files, train_files),
                              max_seq_length, dupes, tag)
    # More passes over the held-out file give more sentence-pair examples (fresh splits and
    # swaps of the same documents): 609 ALBERT pairs in one pass, ~5x that in five.
    eval_dupes = eval_dupe_factor if family.static_masks else 1
    eval_dir = pretrain_data(root, name, vocab, files[HELD_OUT], max_seq_length, eval_dupes,
                             "eval" if eval_dupes == 1 else f"eval-dupe{eval_dupes}")
    teacher, teacher_result = None, None
    if family.task == "Distillation":
        teacher, teacher_result = bert_teacher(
            root, vocab, train_dir, eval_dir, max_seq_length=max_seq_length, steps=steps,
            batch_size=batch_size, learning_rate=learning_rate, eval_batches=eval_batches)
    gin_bindings = bindings(name, vocab, train_dir, eval_dir, max_seq_length, steps, batch_size,
                            learning_rate, extra, teacher=teacher)
    model_dir = tempfile.mkdtemp(prefix=f"{name}-", dir=root)
    start = time.time()
    summary = train_family(name, model_dir, gin_bindings)
    seconds = time.time() - start
    task, model = _restored_task(name, model_dir, gin_bindings)
    result = score(task, model, batch_size=batch_size, num_batches=eval_batches, eval_dir=eval_dir)
    result.update(family=name, steps=steps, train_seconds=round(seconds, 1),
                  parameters=summary["parameters"], model_dir=model_dir, train_files=train_files,
                  corpus=corpus)
    if teacher_result is not None:
        result["teacher"] = teacher_result
        # Both again on BERT's own (uniform) masks of the held-out data: the teacher's task.
        result["on_bert_masks"] = score(task, model, batch_size=batch_size,
                                        num_batches=eval_batches, eval_dir=eval_dir,
                                        static_masks=True)
    return result


def bert_teacher(root: str, vocab: str, train_dir: str, eval_dir: str, *, max_seq_length: int,
                 steps: int, batch_size: int, learning_rate: Optional[float],
                 eval_batches: int):
    """DistilBERT's teacher: BERT tiny trained `steps` steps on the BERT data (reused when the
    work dir already holds that run's last checkpoint); its model_dir and held-out scores."""
    import tensorflow as tf

    lr = "" if learning_rate is None else f"-lr{learning_rate:g}"
    model_dir = os.path.join(root, f"bert-teacher-{os.path.basename(train_dir)}-{steps}{lr}")
    gin_bindings = bindings("bert", vocab, train_dir, eval_dir, max_seq_length, steps, batch_size,
                            learning_rate)
    latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    seconds = 0.0
    if not (latest and latest.endswith(f"-{steps}")):
        start = time.time()
        train_family("bert", model_dir, gin_bindings)
        seconds = time.time() - start
    task, model = _restored_task("bert", model_dir, gin_bindings)
    result = score(task, model, batch_size=batch_size, num_batches=eval_batches)
    result.update(family="bert (teacher)", steps=steps, train_seconds=round(seconds, 1),
                  parameters=model.count_params(), model_dir=model_dir)
    return model_dir, result


def margin_in_standard_errors(value: float, baseline: float, n: int) -> float:
    """(value - baseline) in binomial standard errors of the baseline rate over n trials:
    sqrt(p (1 - p) / n), p = baseline (e.g. 0.039 over 10.5k predictions -> 0.0019)."""
    if not n or not 0 < baseline < 1:
        return float("nan")
    return (value - baseline) / math.sqrt(baseline * (1 - baseline) / n)


def auc_margin_in_standard_errors(auc: float, positives: int, negatives: int) -> float:
    """(auc - 0.5) in standard errors of an AUC of 0.5 (Hanley & McNeil 1982, whose formula
    at A = 1/2 is sqrt((n1 + n0 + 1) / (12 n1 n0))). Tokens of one sequence are not
    independent, so this overstates the margin somewhat."""
    if not positives or not negatives:
        return float("nan")
    return (auc - 0.5) / math.sqrt((positives + negatives + 1) / (12.0 * positives * negatives))


def margins(result: dict) -> dict:
    """The result's margins over its baselines, in standard errors (see the functions above)."""
    out = {}
    if "mlm_accuracy" in result:
        out["mlm_margin_se"] = margin_in_standard_errors(
            result["mlm_accuracy"], result["mlm_constant_guess_accuracy"], result["mlm_predictions"])
    if "sbo_accuracy" in result:
        out["sbo_margin_se"] = margin_in_standard_errors(
            result["sbo_accuracy"], result["sbo_constant_guess_accuracy"], result["sbo_predictions"])
    sentence = result.get("nsp_accuracy", result.get("sop_accuracy"))
    if sentence is not None and "sentence_majority_rate" in result:
        out["sentence_margin_se"] = margin_in_standard_errors(
            sentence, result["sentence_majority_rate"], result["sentence_examples"])
    if "disc_auc" in result:
        positives = round(result["replaced_fraction"] * result["disc_tokens"])
        out["disc_auc_margin_se"] = auc_margin_in_standard_errors(
            result["disc_auc"], positives, result["disc_tokens"] - positives)
    return out


def _fmt(value, digits=3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _rows(results: Sequence[dict]) -> List[dict]:
    """Each result, DistilBERT's preceded by its teacher's and followed by the teacher's scores
    on the student's batches."""
    rows = []

    def student_and_teacher(r, student, masks):
        same = {k: r[k] for k in ("mlm_predictions", "mlm_constant_guess_accuracy",
                                  "mlm_unigram_entropy")}
        return [dict(same, family=f"{student} ({masks})", steps=student_steps,
                     train_seconds=seconds, mlm_accuracy=r["mlm_accuracy"], mlm_loss=r["mlm_loss"]),
                dict(same, family=f"its teacher ({masks})", steps=student_steps,
                     train_seconds="-", mlm_accuracy=r["teacher_mlm_accuracy"],
                     mlm_loss=r["teacher_mlm_loss"])]

    for r in results:
        if "teacher_mlm_accuracy" not in r:
            rows.append(r)
            continue
        student_steps, seconds = r["steps"], r["train_seconds"]
        if "teacher" in r:
            rows.append(r["teacher"])
        rows += student_and_teacher(r, r["family"], "distillation masks")
        if "on_bert_masks" in r:
            rows += student_and_teacher(r["on_bert_masks"], r["family"], "BERT's masks")
    return rows


def table(results: Sequence[dict]) -> str:
    # Token prediction: masked pieces for the encoders, the next piece for GPT-2.
    rows = ["| family | steps | train files | token acc. | best constant | margin (SE) | token loss "
            "| unigram entropy | NSP/SOP acc. | majority | margin (SE) | disc. AUC | margin (SE) "
            "| train s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in _rows(results):
        sentence = r.get("nsp_accuracy", r.get("sop_accuracy"))
        m = margins(r)
        rows.append(f"| {r['family']} | {r['steps']} | {r.get('train_files', 1)} "
                    f"| {_fmt(r.get('mlm_accuracy'))} | {_fmt(r.get('mlm_constant_guess_accuracy'))} "
                    f"| {_fmt(m.get('mlm_margin_se'), 0)} | {_fmt(r.get('mlm_loss'), 2)} "
                    f"| {_fmt(r.get('mlm_unigram_entropy'), 2)} | {_fmt(sentence)} "
                    f"| {_fmt(r.get('sentence_majority_rate'))} | {_fmt(m.get('sentence_margin_se'), 1)} "
                    f"| {_fmt(r.get('disc_auc'))} | {_fmt(m.get('disc_auc_margin_se'), 0)} "
                    f"| {r['train_seconds']} |")
    sbo = [r for r in results if "sbo_accuracy" in r]
    if sbo:
        rows += ["", "| family | SBO acc. | best constant | margin (SE) | SBO loss | unigram entropy "
                 "| SBO predictions |", "|---|---|---|---|---|---|---|"]
        rows += [f"| {r['family']} | {_fmt(r['sbo_accuracy'])} | {_fmt(r['sbo_constant_guess_accuracy'])} "
                 f"| {_fmt(margins(r)['sbo_margin_se'], 0)} | {_fmt(r.get('sbo_loss'), 2)} "
                 f"| {_fmt(r['sbo_unigram_entropy'], 2)} | {r['sbo_predictions']} |"
                 for r in sbo]
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.objectives_learn",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default=",".join(FAMILIES),
                        help="comma-separated subset of " + ", ".join(FAMILIES))
    parser.add_argument("--steps", type=int, default=300, help="training steps per family")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--vocab_size", type=int, default=2000)
    parser.add_argument("--dupe_factor", type=int, default=3,
                        help="dupe_factor of the statically masked objectives' training data")
    parser.add_argument("--eval_batches", type=int, default=20,
                        help="held-out batches scored (one pass over the held-out file: ~650 sequences)")
    parser.add_argument("--train_files", type=int, default=1,
                        help="corpus files to train on (1..3; file 1 is always held out)")
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="sample",
                        help="sample: Python's documentation (data_pipelines.sample_corpus); "
                        "ordered: synthetic procedures whose sentence order the text gives away "
                        "(data_pipelines.ordered_corpus), to see whether SOP/NSP can learn at all")
    parser.add_argument("--eval_dupe_factor", type=int, default=1,
                        help="dupe_factor of the statically masked objectives' held-out data")
    parser.add_argument("--learning_rate", type=float, default=None,
                        help="override every trained config's train.learning_rate")
    parser.add_argument("--work_dir", default=None, help="where data and runs go, kept "
                                                         "(default: a temporary directory, removed at the end)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    with common.work_dir(args.work_dir, "objectives_learn-") as root:
        results = []
        for name in [n.strip() for n in args.families.split(",") if n.strip()]:
            if name not in FAMILIES:
                parser.error(f"unknown family {name!r}; choose from {', '.join(FAMILIES)}")
            if not available(name):
                print(f"[objectives_learn] {name}: no tiny config or data objective in this checkout; skipped",
                      flush=True)
                continue
            print(f"[objectives_learn] {name}: building data and training {args.steps} steps", flush=True)
            result = run_family(name, root, steps=args.steps, batch_size=args.batch_size,
                                max_seq_length=args.max_seq_length, vocab_size=args.vocab_size,
                                dupe_factor=args.dupe_factor, eval_batches=args.eval_batches,
                                train_files=args.train_files, learning_rate=args.learning_rate,
                                eval_dupe_factor=args.eval_dupe_factor, corpus=args.corpus)
            result.update(margins(result))
            shown = {k: v for k, v in result.items() if k not in ("model_dir", "teacher", "on_bert_masks")}
            print(f"[objectives_learn] {name}: {json.dumps(shown)}", flush=True)
            results.append(result)
        print(table(results))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
        return 0


if __name__ == "__main__":
    sys.exit(main())
