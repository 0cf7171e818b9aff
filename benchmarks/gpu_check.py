"""GPU readiness (issue 34 item 6): on a machine with one GPU, BERT-base's training step in
float32, mixed_bfloat16 and mixed_bfloat16 + XLA, and a BERT-base classifier's serving latency
at batch 1 and 32 in float32 and mixed_bfloat16, with MFU against the GPU's bfloat16 matmul
peak measured in the same run, all inside a hard time budget.

    benchmarks/gpu_check.sh                 # the same, JSON to $OUT (or .)/gpu_check.json
    python -m benchmarks.gpu_check --output_json=/tmp/gpu_check.json
    python -m benchmarks.gpu_check --tiny   # the CPU dry run: a 1-layer BERT, seconds of work

The driver imports no TensorFlow. It starts one child process that runs the phases in order,
appending one JSON line per finished phase to a file, gives it `--budget_s` seconds (default
420: the child's start-up included, well inside 10 minutes), kills it when they run out, and
reports the phases that finished and names those that did not. The child starts no phase with
less than `--phase_floor_s` left.

Phases, in this order (the XLA compilation, the riskiest, last):
- peak: the device's bfloat16 and float32 matmul rate (benchmarks.common.matmul_peak:
  TensorFlow eager and in a graph, torch when it sees the GPU; 8192^3 on a GPU). TensorFlow
  runs float32 matmuls in TF32 on Ampere and newer GPUs by default, so there the float32
  figures are TF32 ones.
- train_float32, train_mixed_bfloat16: benchmarks.train_step's `ours` (BertPretrainer on
  BertBackbone through garden.train's own step, under garden.train's dtype policy), BERT-base,
  batch 32, 128 tokens, 20 timed steps after 3.
- serve_float32, serve_mixed_bfloat16: benchmarks.serving_latency's classifier (BERT-base,
  2 labels) built under the Keras policy, a tf.function on the ids inputs (serving_ids' shape),
  batch 1 and 32, median of 20 calls after 3.
- train_mixed_bfloat16_xla: train_mixed_bfloat16 with XLA on the gradient function, as
  garden.train runs on a GPU.

MFU: model FLOPs per second (train_step.flops_for: 3 x the forward's matmuls;
serving_latency.forward_flops) over the bfloat16 peak, and over the precision's own peak.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from typing import Dict, List

from benchmarks import common

PHASES = ("peak", "train_float32", "train_mixed_bfloat16", "serve_float32",
          "serve_mixed_bfloat16", "train_mixed_bfloat16_xla")
BATCHES = (1, 32)
# BERT-base as benchmarks.train_step times it on a GPU; the tiny dry run's model is one layer
# of 32 so that it checks every phase, XLA's compilation included, in seconds on a CPU.
FULL = dict(train={**common.BERT_BASE, "batch_size": 32, "seq_length": 128, "predictions": 20},
            steps=20, warmup=3, preset="bert_base", serve_reps=20, peak_seconds=2.0,
            peak_shapes=None)
TINY = dict(train=dict(num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64,
                       batch_size=4, seq_length=32, predictions=5),
            steps=2, warmup=1, preset="bert_tiny", serve_reps=3, peak_seconds=0.05,
            peak_shapes={"square_256": (256, 256, 256)})


# ---------------------------------------------------------------------------------------------
# Child side: the phases, one process


def _device(tiny: bool) -> dict:
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        # torch's peak measurement shares the GPU: TensorFlow must not take all its memory.
        tf.config.experimental.set_memory_growth(gpu, True)
    if tiny or not gpus:
        return {"kind": "cpu", "name": common.machine_info(())["cpu_model"], "gpus": len(gpus)}
    details = tf.config.experimental.get_device_details(gpus[0])
    return {"kind": "gpu", "name": details.get("device_name", gpus[0].name),
            "compute_capability": details.get("compute_capability"), "gpus": len(gpus)}


def _train(sizes: dict, precision: str, jit_compile: bool, peaks: dict) -> dict:
    import keras

    from benchmarks import train_step

    cfg = {**train_step.COMMON, **sizes}
    args = argparse.Namespace(ours_strategy="mirrored", precision=precision, profile=False,
                              warmup=sizes["warmup"], steps=sizes["steps"])
    r = train_step.worker_ours(cfg, args, jit_compile)
    keras.backend.clear_session()
    steps = len(r["step_s"])
    flops = train_step.flops_for("ours", cfg)["train"] * steps / r["wall_s"]
    tokens = cfg["batch_size"] * cfg["seq_length"] * steps / r["wall_s"]
    return {"precision": precision, "jit_compile": jit_compile, "policy": r["policy"],
            "strategy": r["strategy"], "config": cfg, "median_step_s": r["median_step_s"],
            "warmup_s": r["warmup_s"], "tokens_per_s": tokens, "gflops": flops / 1e9,
            **_mfu(flops, precision, peaks), "first_loss": r["first_loss"],
            "last_loss": r["last_loss"]}


def _serve(preset: str, precision: str, reps: int, warmup: int, peaks: dict) -> dict:
    import keras
    import numpy as np
    import tensorflow as tf

    from benchmarks import serving_latency

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(precision)
    try:
        model = serving_latency.classifier(preset)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    forward = tf.function(lambda inputs: model(inputs, training=False)["logits"])
    sizes = model.backbone.get_config()
    rng = np.random.default_rng(0)
    out = {"precision": precision, "policy": model.dtype_policy.name, "preset": preset,
           "batches": {}}
    for b in BATCHES:
        ids = rng.integers(5, serving_latency.VOCAB, (b, serving_latency.SEQ)).astype(np.int32)
        inputs = {"token_ids": tf.constant(ids), "segment_ids": tf.zeros_like(ids),
                  "padding_mask": tf.ones_like(ids)}
        t = common.timed(lambda: forward(inputs).numpy(), warmup, reps)
        flops = serving_latency.forward_flops(b, sizes["num_layers"], sizes["hidden_size"],
                                              sizes["intermediate_size"]) / t["median_s"]
        out["batches"][str(b)] = {"ms": t["median_s"] * 1e3, "first_call_s": t["first_call_s"],
                                  "gflops": flops / 1e9, **_mfu(flops, precision, peaks)}
    keras.backend.clear_session()
    return out


def _mfu(flops_per_s: float, precision: str, peaks: dict) -> dict:
    """MFU against the bfloat16 peak (the GPU's headline) and against the precision's own."""
    return {"mfu_bf16_peak": flops_per_s / 1e9 / peaks["mixed_bfloat16"]["best_gflops"],
            "mfu_own_peak": flops_per_s / 1e9 / peaks[precision]["best_gflops"]}


def child(args) -> int:
    started = time.monotonic()
    plan = TINY if args.tiny else FULL
    sizes = {**plan["train"], "steps": plan["steps"], "warmup": plan["warmup"]}

    def record(phase: str, result: dict) -> None:
        with open(args._results, "a") as f:
            f.write(json.dumps({"phase": phase, "at_s": time.monotonic() - started,
                                **result}) + "\n")

    device = _device(args.tiny)
    record("device", device)
    if device["kind"] != "gpu" and not args.tiny:
        return 3
    where = device["kind"]
    peaks: Dict[str, dict] = {}
    for phase in PHASES:
        left = args._deadline - time.time()
        if left < args.phase_floor_s:
            record("budget", {"stopped_before": phase, "left_s": left})
            return 4
        if phase == "peak":
            for precision in ("mixed_bfloat16", "float32"):
                peaks[precision] = common.matmul_peak(precision, plan["peak_shapes"],
                                                      plan["peak_seconds"], device=where)
            record(phase, {"peaks": peaks})
        elif phase.startswith("train_"):
            precision = phase[len("train_"):].replace("_xla", "")
            record(phase, _train(sizes, precision, phase.endswith("_xla"), peaks))
        else:
            precision = phase[len("serve_"):]
            record(phase, _serve(plan["preset"], precision, plan["serve_reps"],
                                 plan["warmup"], peaks))
    return 0


# ---------------------------------------------------------------------------------------------
# Driver side: the budget and the report


def read_phases(path: str) -> Dict[str, dict]:
    phases = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    record = json.loads(line)
                    phases[record.pop("phase")] = record
    return phases


def summary_lines(report: dict) -> List[str]:
    lines = [report["header"]]
    phases = report["phases"]
    for precision, peak in phases.get("peak", {}).get("peaks", {}).items():
        lines.append(common.peak_line(peak))
    for phase in PHASES:
        r = phases.get(phase)
        if r is None or phase == "peak":
            continue
        if phase.startswith("train_"):
            lines.append(f"{phase:30s} {r['policy']:15s} step {r['median_step_s'] * 1e3:8.1f} ms "
                         f"{r['tokens_per_s']:9.0f} tokens/s {r['gflops']:9.1f} GFLOP/s  MFU "
                         f"{100 * r['mfu_bf16_peak']:5.1f}% of bf16 peak "
                         f"({100 * r['mfu_own_peak']:5.1f}% of own)")
        else:
            for b, t in r["batches"].items():
                lines.append(f"{phase + f' batch {b}':30s} {r['policy']:15s} call "
                             f"{t['ms']:8.1f} ms {'':19s}{t['gflops']:9.1f} GFLOP/s  MFU "
                             f"{100 * t['mfu_bf16_peak']:5.1f}% of bf16 peak "
                             f"({100 * t['mfu_own_peak']:5.1f}% of own)")
    if report["not_reached"]:
        lines.append(f"not reached ({report['stopped']}): {', '.join(report['not_reached'])}")
    lines.append(f"{report['elapsed_s']:.0f} s of a {report['budget_s']:.0f} s budget")
    return lines


def run(args) -> dict:
    machine = common.machine_info(["tensorflow", "keras", "torch"])
    started = time.time()
    with common.work_dir(args.work_dir, "gpu_check-") as work:
        results = os.path.join(work, "phases.jsonl")
        cmd = [sys.executable, "-m", "benchmarks.gpu_check", f"--_results={results}",
               f"--_deadline={started + args.budget_s}", f"--phase_floor_s={args.phase_floor_s}",
               *(["--tiny"] if args.tiny else [])]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        if args.tiny:
            env["CUDA_VISIBLE_DEVICES"] = ""  # the dry run is the CPU's, GPU or not
        log_path = os.path.join(work, "child.log")
        with open(log_path, "wb") as out:
            child_process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                             cwd=common.REPO_ROOT)
            try:
                rc = child_process.wait(timeout=max(0.0, started + args.budget_s - time.time()))
            except subprocess.TimeoutExpired:
                child_process.kill()
                child_process.wait()
                rc = None
        phases = read_phases(results)
        with open(log_path, "rb") as f:
            tail = f.read()[-3000:].decode("utf-8", "replace")
    stopped = {0: "", None: "budget: child killed", 3: "no GPU visible to TensorFlow; --tiny "
               "runs the CPU dry run", 4: "budget"}.get(rc, f"child exited with {rc}")
    device = phases.pop("device", {"kind": "unknown", "name": "unknown"})
    phases.pop("budget", None)
    where = {"gpu": f"GPU {device['name']} (compute capability "
                    f"{device.get('compute_capability')})",
             "cpu": "no GPU: CPU dry run" if args.tiny else "no GPU",
             "unknown": "device unknown (the child stopped before it looked)"}[device["kind"]]
    report = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "tiny": args.tiny,
        "device": device, "machine": machine,
        "header": f"{where} | {common.hardware_line(machine, 'float32,mixed_bfloat16')}",
        "budget_s": args.budget_s, "elapsed_s": time.time() - started, "child_rc": rc,
        "stopped": stopped, "phases": phases,
        "not_reached": [p for p in PHASES if p not in phases]}
    if rc not in (0, None, 4):
        report["child_log_tail"] = tail
    print("\n".join(summary_lines(report)), flush=True)
    if "child_log_tail" in report:
        print(report["child_log_tail"], file=sys.stderr)
    return common.write_report(report, args.output_json)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true",
                   help="the CPU dry run: every phase on a 1-layer BERT, seconds of work")
    p.add_argument("--budget_s", type=float, default=420.0,
                   help="wall-clock seconds for everything; the child is killed after them")
    p.add_argument("--phase_floor_s", type=float, default=20.0,
                   help="no phase starts with less than this left")
    p.add_argument("--work_dir", default="", help="the child's log and phase records, kept "
                                                  "when given")
    p.add_argument("--output_json", default="")
    p.add_argument("--_results", default="", help=argparse.SUPPRESS)
    p.add_argument("--_deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args._results:
        raise SystemExit(child(args))
    return run(args)


if __name__ == "__main__":
    report = main()
    sys.exit(0 if not report["not_reached"] else 1)
