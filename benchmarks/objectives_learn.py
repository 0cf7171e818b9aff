"""Does each objective learn? `python -m benchmarks.objectives_learn [--steps=300] [--families=...]`

Each family's tiny config (configs/<family>_tiny.gin) is trained for a short CPU run on data the
real tools build from the sample corpus (data_pipelines.sample_corpus -> make_vocab ->
make_pretrain), then scored on held-out data (another corpus file, same vocabulary) against
what a model that ignores the context can do:

  MLM accuracy      vs the best constant guess: always predicting the most frequent target
                    piece of the held-out targets (an upper bound of the unigram-frequency guess)
  MLM loss (nats)   vs the unigram entropy of the held-out targets (the cross-entropy of the best
                    context-free distribution, fitted on those very targets)
  NSP / SOP acc.    vs the majority label's rate (about 50%)
  ELECTRA disc. AUC vs 0.5 (scikit-learn's roc_auc_score over every real token; "replaced" is
                    the positive class), with the generator's MLM accuracy as above

Families: bert, roberta, albert, electra, spanbert (each when its objective and tiny config
exist). DistilBERT needs a trained teacher and is not scored here yet. The training goes
through `garden.train.train` in this process, exactly as `python -m garden.train` would run it.
tests/garden/test_family_training.py runs a cheaper variant of `run_family` for one family.
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

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Family:
    config: str  # the tiny twin
    task: str  # gin name of the task class (garden.<task>)
    objective: str  # make_pretrain --objective
    tokenizer: str  # make_vocab --tokenizer
    static_masks: bool  # make_pretrain takes --max_predictions_per_seq


FAMILIES: Dict[str, Family] = {
    "bert": Family("configs/bert_tiny.gin", "BertPretraining", "bert", "wordpiece", True),
    "roberta": Family("configs/roberta_tiny.gin", "RobertaPretraining", "roberta", "bpe", False),
    "albert": Family("configs/albert_tiny.gin", "AlbertPretraining", "albert", "sentencepiece", True),
    "electra": Family("configs/electra_tiny.gin", "ElectraPretraining", "electra", "wordpiece", False),
    "spanbert": Family("configs/spanbert_tiny.gin", "SpanBertPretraining", "spanbert", "wordpiece", True),
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


def sample_corpus(root: str) -> List[str]:
    """The sample corpus' files (one sentence per line, blank lines between documents)."""
    out = os.path.join(root, "corpus")
    if not glob.glob(os.path.join(out, "*.txt")):
        _run("data_pipelines.sample_corpus", f"--output={out}")
    return sorted(glob.glob(os.path.join(out, "*.txt")))


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
    """make_pretrain --objective=<family's> output for one corpus file."""
    family = FAMILIES[name]
    out = os.path.join(root, f"{name}-{tag}-{max_seq_length}")
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
             extra: Sequence[str] = ()) -> List[str]:
    """gin bindings that point a tiny config at the built data."""
    family = FAMILIES[name]
    task = f"garden.{family.task}"
    phases = [{"start_step": 0, "data_dir": train_dir, "max_seq_length": max_seq_length}]
    out = [f"VOCAB = '{vocab}'", f"DATA_DIR = '{train_dir}'", f"{task}.phases = {phases!r}",
           f"{task}.eval_data_dir = '{eval_dir}'", f"train.train_steps = {steps}",
           f"train.global_batch_size = {batch_size}", f"train.warmup_steps = {max(1, steps // 10)}",
           f"train.log_every = {max(1, steps // 10)}", f"train.checkpoint_every = {steps}",
           # Skip the trainer's matmul peak measurement: MFU means nothing here.
           "train.peak_flops = 1e12"]
    if family.task not in ("BertPretraining", "SpanBertPretraining"):
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


def _eval_batches(task, batch_size: int, num_batches: int):
    from garden import data

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


def score(task, model, batch_size: int = 32, num_batches: int = 20) -> Dict[str, float]:
    """Held-out metrics of a trained model and the context-free baselines they must beat."""
    targets, sentence_labels = [], []
    sums: Dict[str, float] = {}
    weights_of = {"mlm_accuracy": "mlm", "mlm_loss": "mlm", "nsp_accuracy": "sentence",
                  "sop_accuracy": "sentence", "sbo_accuracy": "sbo", "sbo_loss": "sbo"}
    counts = {"mlm": 0.0, "sentence": 0.0, "sbo": 0.0}
    sbo_targets = []
    disc_scores, disc_labels = [], []
    is_electra = type(task).__name__ == "ElectraPretraining"
    for batch in _eval_batches(task, batch_size, num_batches):
        if is_electra:
            from garden.models.electra.pretrainer import electra_pretrain_loss

            outputs = model(task.model_inputs(batch), training=False)
            metrics = electra_pretrain_loss(outputs, task.disc_weight)
            ids, w = outputs["masked_lm_ids"].numpy(), outputs["masked_lm_weights"].numpy()
            real = outputs["disc_weights"].numpy() > 0
            disc_scores.append(outputs["disc_logits"].numpy()[real])
            disc_labels.append(outputs["disc_labels"].numpy()[real])
        else:
            metrics = task.compute_metrics(model, batch, training=False)
            ids, w = batch["masked_lm_ids"].numpy(), batch["masked_lm_weights"].numpy()
            if "next_sentence_labels" in batch:
                labels = batch["next_sentence_labels"].numpy().reshape(-1)
                sentence_labels.append(labels)
        n = {"mlm": float(w.sum()), "sentence": float(len(sentence_labels[-1])) if sentence_labels else 0.0,
             "sbo": 0.0}
        if not is_electra and "sbo_weights" in batch:  # SpanBERT: the span-boundary predictions
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
               eval_batches: int = 20, extra: Sequence[str] = ()) -> dict:
    """Builds the family's data (if not there), trains its tiny config, scores it held out."""
    family = FAMILIES[name]
    files = sample_corpus(root)
    train_file, eval_file = files[0], files[1]
    vocab = vocabulary(root, family.tokenizer, train_file, vocab_size)
    dupes = dupe_factor if family.static_masks else 1  # dynamic objectives mask afresh anyway
    train_dir = pretrain_data(root, name, vocab, train_file, max_seq_length, dupes, "train")
    eval_dir = pretrain_data(root, name, vocab, eval_file, max_seq_length, 1, "eval")
    gin_bindings = bindings(name, vocab, train_dir, eval_dir, max_seq_length, steps, batch_size,
                            learning_rate, extra)
    model_dir = tempfile.mkdtemp(prefix=f"{name}-", dir=root)
    start = time.time()
    summary = train_family(name, model_dir, gin_bindings)
    seconds = time.time() - start
    task, model = _restored_task(name, model_dir, gin_bindings)
    result = score(task, model, batch_size=batch_size, num_batches=eval_batches)
    result.update(family=name, steps=steps, train_seconds=round(seconds, 1),
                  parameters=summary["parameters"], model_dir=model_dir)
    return result


def _fmt(value, digits=3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def table(results: Sequence[dict]) -> str:
    rows = ["| family | steps | MLM acc. | best constant | MLM loss | unigram entropy | NSP/SOP acc. "
            "| majority | disc. AUC | train s |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        sentence = r.get("nsp_accuracy", r.get("sop_accuracy"))
        rows.append(f"| {r['family']} | {r['steps']} | {_fmt(r.get('mlm_accuracy'))} "
                    f"| {_fmt(r.get('mlm_constant_guess_accuracy'))} | {_fmt(r.get('mlm_loss'), 2)} "
                    f"| {_fmt(r.get('mlm_unigram_entropy'), 2)} | {_fmt(sentence)} "
                    f"| {_fmt(r.get('sentence_majority_rate'))} | {_fmt(r.get('disc_auc'))} "
                    f"| {r['train_seconds']} |")
    sbo = [r for r in results if "sbo_accuracy" in r]
    if sbo:
        rows += ["", "| family | SBO acc. | best constant | SBO loss | unigram entropy | SBO predictions |",
                 "|---|---|---|---|---|---|"]
        rows += [f"| {r['family']} | {_fmt(r['sbo_accuracy'])} | {_fmt(r['sbo_constant_guess_accuracy'])} "
                 f"| {_fmt(r.get('sbo_loss'), 2)} | {_fmt(r['sbo_unigram_entropy'], 2)} | {r['sbo_predictions']} |"
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
    parser.add_argument("--eval_batches", type=int, default=20)
    parser.add_argument("--work_dir", default=None, help="where data and runs go (default: a temp dir)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    root = args.work_dir or tempfile.mkdtemp(prefix="objectives_learn-")
    os.makedirs(root, exist_ok=True)
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
                            dupe_factor=args.dupe_factor, eval_batches=args.eval_batches)
        print(f"[objectives_learn] {name}: {json.dumps({k: v for k, v in result.items() if k != 'model_dir'})}",
              flush=True)
        results.append(result)
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
