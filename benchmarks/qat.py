"""Quantization-aware fine-tuning (issue 36 item 7) on a fine-tuned classifier: float, post-training
int8 and Q8BERT QAT int8 dev accuracy side by side, the LiteRT models' sizes and their latency.

    python -m benchmarks.qat --model_dir=RUN [--work_dir=DIR] [--output_json=FILE]
        [--train_steps=300] [--batch_size=16] [--learning_rate=2e-5] [--warmup_steps=0]
        [--calibration_examples=128] [--decay=0.99] [--seed=42]
        [--latency_batches=1,32] [--reps=20] [--threads=2]

RUN: a garden.train classification run, e.g. benchmarks/task_distillation.py's teacher (the real
all-MiniLM-L6-v2 fine-tuned on the sample classification task: WORK/teacher of that benchmark).
The QAT flags are `python -m garden.bertology.qat`'s (garden.bertology.qat_settings.QatSettings),
and so is what runs: garden.bertology.quantization_aware.run_qat into WORK/qat (its qat.json, the
three .tflite files). Then every LiteRT model (the float32 one of the run's model, made here
by garden.bertology.quantization.tflite_model without quantization, and the three int8 ones)
is timed by tf.lite.Interpreter with --threads threads on the first dev texts packed to the
run's max_seq_length, at each of --latency_batches: the median of --reps calls after 3 warmup
calls, the models taking turns call by call so that the machine's load falls on all alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Dict, List

import numpy as np

from benchmarks import common
from benchmarks.common import log
from garden.bertology.qat_settings import QatSettings
from text.flags import add_option_flags, options_from_args


def latencies(flatbuffers: Dict[str, bytes], ids: Dict[str, np.ndarray], batches: List[int],
              threads: int, reps: int) -> Dict[str, Dict[str, dict]]:
    """{batch: {model: median ms}} of each LiteRT model on the first `batch` rows of ids."""
    from garden.bertology.quantization import tflite_runner

    runners = {name: tflite_runner(fb, num_threads=threads) for name, fb in flatbuffers.items()}
    out = {}
    for batch in batches:
        feed = {k: v[:batch] for k, v in ids.items()}
        for run in runners.values():
            for _ in range(3):
                run(feed)
        times = {name: [] for name in runners}
        for _ in range(reps):
            for name, run in runners.items():
                started = time.perf_counter()
                run(feed)
                times[name].append(1000 * (time.perf_counter() - started))
        out[str(batch)] = {name: {"median_ms": statistics.median(t), "min_ms": min(t)}
                           for name, t in times.items()}
    return out


def run(args, settings: QatSettings, work: str) -> dict:
    import tensorflow as tf

    from garden import runs
    from garden.bertology import quantization, quantization_aware

    qat_dir = os.path.join(work, "qat")
    started = time.perf_counter()
    report = quantization_aware.run_qat(args.model_dir, qat_dir, settings)
    log(f"run_qat: {time.perf_counter() - started:.0f} s")
    run_ = runs.open(args.model_dir, [runs.MODEL_DIR], who="benchmarks.qat")
    model, task = run_.task_model(), run_.task
    packer = task.packer
    flatbuffers = {"float32": quantization.tflite_model(model, packer.input_names,
                                                       packer.max_seq_length, quantize=False)}
    for name in ("ptq_dynamic", "ptq_int8", "qat_int8"):
        with tf.io.gfile.GFile(report["rows"][name]["tflite"], "rb") as f:
            flatbuffers[name] = f.read()
    ids = quantization_aware.packed(task, task.eval_rows[:max(args.latency_batches)])
    timed = latencies(flatbuffers, ids, args.latency_batches, args.threads, args.reps)
    sizes = {name: len(fb) for name, fb in flatbuffers.items()}
    report.update(table=quantization_aware.table(report), litert_bytes=sizes,
                  latency_ms=timed, latency_settings={
                      "threads": args.threads, "reps": args.reps, "warmup": 3,
                      "max_seq_length": packer.max_seq_length,
                      "what": "tf.lite.Interpreter signature runner, first dev texts, median"})
    return report


def latency_table(report: dict) -> str:
    lines = []
    for batch, models in report["latency_ms"].items():
        cells = ", ".join(f"{name} {row['median_ms']:.1f} ms" for name, row in models.items())
        lines.append(f"batch {batch}: {cells}")
    sizes = ", ".join(f"{name} {size / 1e6:.1f} MB"
                      for name, size in report["litert_bytes"].items())
    return "\n".join(lines + [f"LiteRT sizes: {sizes}"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", required=True, help="a garden.train classification run")
    p.add_argument("--work_dir", default=None, help="kept; WORK/qat is the QAT run")
    p.add_argument("--output_json", default=None)
    p.add_argument("--latency_batches", default="1,32", type=common.batch_sizes)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--threads", type=int, default=2, help="LiteRT interpreter threads")
    add_option_flags(p, QatSettings)
    args = p.parse_args(argv)
    try:
        settings = options_from_args(QatSettings, args)
    except ValueError as e:
        p.error(str(e))
    machine = common.machine_info(["tensorflow", "keras"])
    header = common.hardware_line(machine, "float32, LiteRT int8 fully connected layers")
    print(header, flush=True)
    started = time.time()
    with common.work_dir(args.work_dir, "qat_") as work:
        report = run(args, settings, work)
    report.update(seconds=round(time.time() - started), header=header,
                  machine=dict(machine, load_average=os.getloadavg()))
    print(report["table"])
    print(latency_table(report))
    common.write_report(report, args.output_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
