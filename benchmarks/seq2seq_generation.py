"""Seq2seq decoding speed, this tree against an older commit: T5-small's and BART-base's shapes,
random weights, greedy through garden.models.decoding (the code path garden.generate uses), old and
new code timed interleaved on the same machine at the same time.

What it measures: one `Generator.generate` call (encoder, decoder prompt, `--new_tokens` decode
steps in the compiled tf.while_loop, with garden.models.decoding's default compilation: on a
CPU, for models of this size, the plain graph) per (model, batch), in seconds. Every call generates
exactly `--new_tokens` tokens per row (min_new_tokens = new_tokens: EOS cannot stop a row), from
the same random `--source_length`-token sources; the decoder prompt is the model's start tokens
(T5: [0]; BART: [2, 0]).

How old and new are compared: the baseline commit (`--baseline`, default 9b5f5b7, the last
commit whose T5 and BART decoders kept [B, L, 2, T, A, d] array caches) is extracted with
`git archive` into a temporary directory. Two long-lived worker processes, one per tree, build
the same models from the same seed (so the same weights), trace every (model, batch) once, then
time calls on command, one process at a time: each round runs every (model, batch) on both,
alternating which goes first (old-new, then new-old), so both see the same machine load. The
workers also return their tokens: old and new must generate the same ones (checked; a mismatch
is reported as `tokens_equal: false`).

Reported per (model, batch): the median seconds per call of old and new, their ratio
old / new (> 1: new is faster), the median of the per-round ratios (each round's two calls ran
back to back), the ratio of the median process CPU seconds per call (`CPU o/n`: with one
thread, the figure least disturbed by other jobs on a shared machine, which take the core but
not the process's CPU time), new tokens per second, and the first (tracing) call of each. Load
averages are recorded before and after.

    python -m benchmarks.seq2seq_generation                   # defaults, about 3 minutes
    python -m benchmarks.seq2seq_generation --threads=2 --rounds=3 --output_json=/tmp/s2s.json
    python -m benchmarks.seq2seq_generation --models=t5_small --batches=1 --rounds=2  # quick

Flags:
    --baseline: git commit-ish of the old code (default 9b5f5b7); extracted from this
        repository, so it must be in its history.
    --models: comma list of t5_small (T5 v1.0 small: 6+6 layers, d_model 512, 8 heads, d_kv 64,
        d_ff 2048, vocab 32,128) and bart_base (6+6 layers, 768, 12 heads, d_ff 3072,
        vocab 50,265).
    --batches: comma list of batch sizes (default 1,8).
    --source_length, --new_tokens: encoder tokens and generated tokens per row (32, 32).
    --rounds: timed calls per (model, batch) and tree (default 5).
    --warmup: untimed rounds over every (model, batch) after all are traced (default 1).
    --threads: TensorFlow intra- and inter-op threads of each worker (default 1: the machine
        is shared, and one thread keeps the two trees from competing for cores).
    --output_json: where to write the report (also printed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

BASELINE = "9b5f5b7"
MODELS = ("t5_small", "bart_base")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--source_length", type=int, default=32)
    parser.add_argument("--new_tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--output_json", default="")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)  # a tree to serve
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"--models: unknown {unknown}; choose from {list(MODELS)}")
    args.batches = [int(b) for b in args.batches.split(",") if b]
    return args


# --- the worker: one tree's code, driven over stdin / stdout --------------------------------

def _reply(message):
    sys.stdout.write("@@" + json.dumps(message) + "\n")
    sys.stdout.flush()


def _build(name):
    """(model, eos_id, pad_id, decoder start ids) with seeded random weights."""
    import keras

    keras.utils.set_random_seed(0)
    if name == "t5_small":
        from garden.models.t5 import PRESETS, T5Backbone, T5Seq2SeqLM

        return T5Seq2SeqLM(T5Backbone(**PRESETS["t5_small"])), 1, 0, [0], 32128
    from garden.models.bart import PRESETS, BartBackbone, BartSeq2SeqLM

    return BartSeq2SeqLM(BartBackbone(**PRESETS["bart_base"])), 2, 1, [2, 0], 50265


def worker(args):
    """Builds the models from `args.worker`'s garden, traces each (model, batch), then answers
    {"model", "batch"} commands with one timed generate call until stdin closes."""
    # The tree's garden first; not this script's folder (its tokenizers.py would shadow the
    # package of that name).
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [args.worker] + [p for p in sys.path if os.path.abspath(p or ".") != here]
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    from garden.models import decoding

    config = decoding.GenerationConfig(max_new_tokens=args.new_tokens,
                                         min_new_tokens=args.new_tokens)
    runs, first_call = {}, {}
    for name in args.models:
        model, eos_id, pad_id, start, vocab = _build(name)
        generator = decoding.Generator(model, eos_id=eos_id, pad_id=pad_id)
        for batch in args.batches:
            rng = np.random.default_rng(batch)
            prompt = {
                "encoder_token_ids": rng.integers(3, vocab, (batch, args.source_length)),
                "encoder_padding_mask": np.ones((batch, args.source_length), "int32"),
                "decoder_token_ids": np.array([start] * batch, "int32"),
                "decoder_padding_mask": np.ones((batch, len(start)), "int32")}
            key = f"{name}/{batch}"
            runs[key] = (generator, prompt)
            began = time.perf_counter()
            generator.generate(prompt, config)
            first_call[key] = time.perf_counter() - began
    # Warm-up after every model is built and traced, in the timed order: a model's first calls
    # after another model ran cost more CPU (T5-small batch 1: 1.2 s against 0.45 s), so
    # warming each right after its own tracing left round 1 slow.
    for _ in range(args.warmup):
        for generator, prompt in runs.values():
            generator.generate(prompt, config)
    _reply({"ready": True, "first_call_s": first_call,
            "jit_compile": {k: g.jit_compile for k, (g, _) in runs.items()}})
    for line in sys.stdin:
        key = json.loads(line)["key"]
        generator, prompt = runs[key]
        began, began_cpu = time.perf_counter(), time.process_time()
        out = generator.generate(prompt, config)
        _reply({"seconds": time.perf_counter() - began,
                "cpu_seconds": time.process_time() - began_cpu,
                "tokens": out["token_ids"].tolist()})


# --- the driver ------------------------------------------------------------------------------

def _extract(commit, into):
    archive = subprocess.run(["git", "-C", ROOT, "archive", commit], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)


def _start(tree, args):
    command = [sys.executable, os.path.abspath(__file__), "--worker", tree,
               "--models", ",".join(args.models), "--batches", ",".join(map(str, args.batches)),
               "--source_length", str(args.source_length), "--new_tokens", str(args.new_tokens),
               "--threads", str(args.threads), "--warmup", str(args.warmup)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS=str(args.threads))
    return subprocess.Popen(command, cwd=tree, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def _receive(process):
    for line in process.stdout:
        if line.startswith("@@"):
            return json.loads(line[2:])
    raise RuntimeError(f"worker {process.args[3]} ended (exit {process.wait()})")


def _ask(process, key):
    process.stdin.write(json.dumps({"key": key}) + "\n")
    process.stdin.flush()
    return _receive(process)


def main(argv=None):
    args = _args(argv)
    if args.worker:
        return worker(args)
    import numpy as np

    from benchmarks.common import hardware_line, log, machine_info, write_report

    machine = machine_info(["tensorflow", "keras"])
    header = hardware_line(machine, "float32")
    log(header)
    load_before = os.getloadavg()
    scratch = tempfile.mkdtemp(prefix="seq2seq_baseline_")
    try:
        _extract(args.baseline, scratch)
        trees = {"old": scratch, "new": ROOT}
        log(f"old = {args.baseline} (extracted to {scratch}), new = {ROOT}; building and "
            f"tracing {args.models} x batches {args.batches} in both")
        workers = {name: _start(tree, args) for name, tree in trees.items()}
        ready = {name: _receive(process) for name, process in workers.items()}
        keys = [f"{m}/{b}" for m in args.models for b in args.batches]
        seconds = {k: {"old": [], "new": []} for k in keys}
        cpu = {k: {"old": [], "new": []} for k in keys}
        tokens_equal = {k: True for k in keys}
        for round_ in range(args.rounds):
            order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
            for key in keys:
                tokens = {}
                for name in order:
                    answer = _ask(workers[name], key)
                    seconds[key][name].append(answer["seconds"])
                    cpu[key][name].append(answer["cpu_seconds"])
                    tokens[name] = answer["tokens"]
                tokens_equal[key] &= tokens["old"] == tokens["new"]
            log(f"round {round_ + 1}/{args.rounds}: " + ", ".join(
                f"{k} old {seconds[k]['old'][-1]:.3f} s new {seconds[k]['new'][-1]:.3f} s"
                for k in keys))
        for process in workers.values():
            process.stdin.close()
            process.wait()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results = {}
    for key in keys:
        old, new = np.array(seconds[key]["old"]), np.array(seconds[key]["new"])
        old_cpu, new_cpu = np.array(cpu[key]["old"]), np.array(cpu[key]["new"])
        batch = int(key.split("/")[1])
        results[key] = {
            "old_median_s": float(np.median(old)), "new_median_s": float(np.median(new)),
            "ratio_old_over_new": float(np.median(old) / np.median(new)),
            "median_round_ratio": float(np.median(old / new)),
            "cpu_ratio_old_over_new": float(np.median(old_cpu) / np.median(new_cpu)),
            "new_tokens_per_s": float(batch * args.new_tokens / np.median(new)),
            "old_s": old.tolist(), "new_s": new.tolist(),
            "old_cpu_s": old_cpu.tolist(), "new_cpu_s": new_cpu.tolist(),
            "first_call_s": {n: ready[n]["first_call_s"][key] for n in trees},
            "jit_compile": ready["new"]["jit_compile"][key], "tokens_equal": tokens_equal[key]}
    report = {"benchmark": "seq2seq_generation", "baseline": args.baseline,
              "settings": {k: getattr(args, k) for k in (
                  "models", "batches", "source_length", "new_tokens", "rounds", "threads",
                  "warmup")},
              "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "machine": machine, "header": header, "results": results}
    print(f"{'model/batch':<14} {'old s':>8} {'new s':>8} {'old/new':>8} {'per-round':>10} "
          f"{'CPU o/n':>8} {'new tok/s':>10}  tokens equal")
    for key, r in results.items():
        print(f"{key:<14} {r['old_median_s']:>8.3f} {r['new_median_s']:>8.3f} "
              f"{r['ratio_old_over_new']:>8.2f} {r['median_round_ratio']:>10.2f} "
              f"{r['cpu_ratio_old_over_new']:>8.2f} {r['new_tokens_per_s']:>10.1f}  "
              f"{r['tokens_equal']}")
    print(f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    write_report(report, args.output_json)
    return report


if __name__ == "__main__":
    main()
