"""Generation speed: GPT-2 small's architecture, 32-token prompts, 64 new tokens, greedy, batch 1
and 8, tokens per second, against keras-hub and Hugging Face torch in one run (issue 15).

Contenders, all float32 on this machine's CPU cores, random weights (nothing downloaded):
- ours: `garden.models.decoding.Generator` over `garden.models.factory.generative_lm("gpt2_small")`
  (the cached decode loop compiled once: one tf.while_loop over decode_step) with
  garden.models.decoding's default compilation (on a CPU, for a model of this size, the plain graph
  an export also runs), and with `--ours_xla` also compiled with XLA. ours_intra1: the same
  with TensorFlow's intra-op pool at one thread, as `python -m garden.generate` runs by default
  (a decode step's large products then split over the inter-op threads,
  garden/layers/row_products.py); ours_inter1: the inter-op pool at one thread.
- keras-hub: `keras_hub.models.GPT2CausalLM(GPT2Backbone of gpt2_small's shape,
  preprocessor=None).generate` with its greedy sampler (its generate step compiled with XLA on
  the TensorFlow backend, static KV cache), inputs padded to prompt + new tokens.
- Hugging Face torch eager: transformers' GPT2LMHeadModel(GPT2Config()).generate(do_sample=False)
  under torch.inference_mode with `torch.set_num_threads(cores)` and its dynamic KV cache.
Every contender generates exactly 64 new tokens per row: EOS cannot stop a row (ours:
min_new_tokens=64; keras-hub: stop_token_ids=None; torch: min_new_tokens=64), so the work is the
same whatever the random weights predict. Prompts are the same random ids for everyone.

tokens/s = batch * 64 / median wall time of one generate call, after `--warmup` calls (which
include compilation: reported separately as the first call's time). Each contender runs in its
own process, one after the other (TensorFlow's and torch's thread pools in one process slow each
other down). The load average before and after is recorded: on a shared machine the figures are
lower bounds.

    python -m benchmarks.generation --output_json=/tmp/generation.json
    python -m benchmarks.generation --tiny   # a 2-layer model: checks the harness in a minute
    python -m benchmarks.generation --contenders=ours --profile   # where a step's time goes
    python -m benchmarks.generation --kernels   # each matmul shape alone, TF vs torch

`--kernels` times, instead, each matmul shape of a decode step alone, each library in its own
process (see `kernels`).

`--threads=1` runs every contender single-threaded (a fair kernel comparison on a loaded
machine). `--profile` adds, for ours, one decode step broken down by part (attention, feed-forward,
cache write, embeddings + final norm + logits, layer norms) and by op type, in ms, from the
TensorFlow profiler's trace (report key results.ours.step_profile).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from typing import Dict, List

import numpy as np

from benchmarks import common
from benchmarks.common import log, timed, usable_cores, write_report

PROMPT, NEW, VOCAB, EOS = 32, 64, 50257, 50256
SMALL = dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072)
TINY = dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512)


def _shape(args) -> Dict[str, int]:
    return TINY if args.tiny else SMALL


def _prompts(batch: int) -> np.ndarray:
    return np.random.default_rng(batch).integers(0, EOS, (batch, PROMPT)).astype("int32")


def _tf_threads(args) -> None:
    if args.threads:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)


def worker_ours(batches: List[int], args, jit_compile) -> dict:
    _tf_threads(args)
    import keras

    from garden.models.decoding import GenerationConfig, Generator
    from garden.models import factory

    keras.utils.set_random_seed(0)
    shape = _shape(args)
    model = factory.generative_lm(preset="gpt2_small", dropout=0.0, vocab_size=VOCAB, **shape)
    generator = Generator(model, eos_id=EOS, pad_id=EOS, jit_compile=jit_compile)
    config = GenerationConfig(max_new_tokens=NEW, min_new_tokens=NEW)
    out = {"parameters": int(model.count_params())}
    for b in batches:
        ids = _prompts(b)
        prompt = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
        result = timed(lambda: generator.generate(prompt, config), args.warmup, args.reps)
        tokens = generator.generate(prompt, config)["token_ids"]
        assert np.asarray(tokens).shape == (b, NEW)
        out[f"batch{b}"] = result
    out["tracing_count"] = generator.tracing_count()
    out["jit_compile"] = generator.jit_compile
    if args.profile:
        out["step_profile"] = {f"batch{b}": step_profile(model, b, generator.jit_compile)
                               for b in batches}
    return out


def _step_part(name: str, op: str) -> str:
    """The part of a decode step an op belongs to, from its name scope."""
    if op == "TensorScatterUpdate":
        return "cache write"
    scope = name.split("/")
    if scope[0].startswith("transformer_layer_") and len(scope) > 1:
        if scope[1].startswith(("intermediate_dense", "output_dense")):
            return "feed-forward"
        return {"self_attention_1": "attention"}.get(scope[1], "layer norms and residuals")
    return "embeddings, final norm, logits"


def step_profile(model, batch: int, jit_compile: bool, steps: int = 5) -> dict:
    """ms per decode step (slot 40 of 96) by part and by op type, from the TF profiler's
    trace of `steps` calls of decode_step as one tf.function (the loop body's ops; the
    profiler adds a little per op, so the parts sum to a bit more than the step). Under XLA
    the step is one cluster: only its time is given."""
    import collections
    import glob

    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    ids = _prompts(batch)
    prompt = {"token_ids": tf.constant(ids), "padding_mask": tf.ones_like(ids)}
    _, state = tf.function(lambda p: model.start_decoding(p, PROMPT + NEW),
                           autograph=False)(prompt)
    step = tf.function(lambda t, i, s: model.decode_step(t, i, s)[0], autograph=False,
                       jit_compile=jit_compile)
    token, index = tf.zeros([batch], tf.int32), tf.constant(PROMPT + 8)
    for _ in range(3):
        step(token, index, state).numpy()
    t0 = time.perf_counter()
    for _ in range(steps):
        step(token, index, state).numpy()
    wall = (time.perf_counter() - t0) / steps
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        for _ in range(steps):
            step(token, index, state).numpy()
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        with open(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[0], "rb") as f:
            space.ParseFromString(f.read())
    parts, ops = collections.Counter(), collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name  # "scope/op_name:OpType"
                if ":" not in name or "::" in name:  # executor envelopes, not ops
                    continue
                ms = event.duration_ps / 1e9 / steps
                op = name.rsplit(":", 1)[1]
                parts[_step_part(name, op)] += ms
                ops[op] += ms
    return {"step_ms": wall * 1e3, "parts_ms": dict(parts.most_common()),
            "op_types_ms": dict(ops.most_common(12))}


def worker_ours_xla(batches, args):
    return worker_ours(batches, args, True)


def worker_ours_inter1(batches, args):
    """ours with TensorFlow's inter-op pool at one thread (as garden.serve's and TF Serving's
    --tensorflow_inter_op_parallelism=1): a step's small ops run in order, each on every core."""
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(args.threads or 1)
    return worker_ours(batches, args, None)


def worker_ours_intra1(batches, args):
    """ours with TensorFlow's intra-op pool at one thread, as `python -m garden.generate` runs by
    default: each op on one thread, a decode step's large products split over the inter-op
    threads (garden/layers/row_products.py)."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    if args.threads:
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    return worker_ours(batches, args, None)


def worker_keras_hub(batches: List[int], args) -> dict:
    _tf_threads(args)
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    shape = _shape(args)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=VOCAB, num_layers=shape["num_layers"], num_heads=shape["num_heads"],
        hidden_dim=shape["hidden_size"], intermediate_dim=shape["intermediate_size"],
        dropout=0.0, max_sequence_length=1024)
    lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    lm.compile(sampler="greedy")
    out = {"parameters": int(backbone.count_params())}
    for b in batches:
        ids = np.concatenate([_prompts(b), np.zeros((b, NEW), "int32")], axis=1)
        mask = np.concatenate([np.ones((b, PROMPT), bool), np.zeros((b, NEW), bool)], axis=1)
        inputs = {"token_ids": ids, "padding_mask": mask}
        result = timed(lambda: lm.generate(inputs, stop_token_ids=None), args.warmup, args.reps)
        generated = lm.generate(inputs, stop_token_ids=None)
        assert np.asarray(generated["padding_mask"]).sum(axis=1).tolist() == [PROMPT + NEW] * b
        out[f"batch{b}"] = result
    return out


def worker_torch(batches: List[int], args) -> dict:
    import torch
    import transformers

    torch.manual_seed(0)
    torch.set_num_threads(args.threads or usable_cores())
    shape = _shape(args)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_layer=shape["num_layers"], n_embd=shape["hidden_size"],
        n_head=shape["num_heads"], n_inner=shape["intermediate_size"], resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config).eval()
    out = {"parameters": int(sum(p.numel() for p in model.parameters()))}
    for b in batches:
        ids = torch.from_numpy(_prompts(b).astype("int64"))
        mask = torch.ones_like(ids)

        def call():
            with torch.inference_mode():
                return model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                      max_new_tokens=NEW, min_new_tokens=NEW,
                                      pad_token_id=EOS, eos_token_id=EOS)

        result = timed(call, args.warmup, args.reps)
        assert tuple(call().shape) == (b, PROMPT + NEW)
        out[f"batch{b}"] = result
    return out


# The matmuls of one GPT-2 small decode step: (name, rows of the kernel, columns, layout), the
# tied table [V, H] read transposed as the model stores it.
KERNELS = (("q, k, v, attention output", 768, 768, "kn"), ("fused q/k/v", 768, 2304, "kn"),
           ("feed-forward in", 768, 3072, "kn"), ("feed-forward out", 3072, 768, "kn"),
           ("tied logits", 768, VOCAB, "nk"))


def kernels(batches: List[int], args, lib: str, copies: int = 12, rounds: int = 15) -> dict:
    """ms per matmul of a decode step's shapes, each alone, for one library (`lib` "tf" or
    "torch"; `--kernels` runs each in its own process and puts the two side by side):
    TensorFlow MatMul and Einsum inside a tf.function (as the decode loop runs them, after
    Grappler's oneDNN rewrite), interleaved; torch.mm on [K, N] weights and F.linear on the
    [N, K] table, as Hugging Face's GPT-2 runs them. `copies` distinct weights per shape (12,
    like the layers), so each call reads its weights from memory as a decode step does, not
    from cache; min over `rounds` calls, the figure least disturbed by other jobs on a shared
    machine. The weights and inputs are the same seeded draws in both processes.

    One process per library because torch's OpenMP workers spin-wait after each call and
    take cores from TensorFlow's next one: timed in one process, TensorFlow's 2-thread figures
    came out 1.5x-2x too slow (benchmarks/README.md `generation`)."""
    threads = args.threads or usable_cores()
    if lib == "tf":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    else:
        import torch

        torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    out = {}
    for name, k, n, layout in KERNELS:
        count = 1 if n == VOCAB else copies
        shape = (k, n) if layout == "kn" else (n, k)
        weights = [rng.standard_normal(shape).astype("float32") for _ in range(count)]
        if lib == "tf":
            tf_weights = [tf.Variable(w) for w in weights]

            def tf_sum(product):
                return tf.function(lambda: tf.add_n([tf.reduce_sum(product(w))
                                                     for w in tf_weights]), autograph=False)
        else:
            torch_weights = [torch.from_numpy(w) for w in weights]
        for b in batches:
            x = rng.standard_normal((b, k)).astype("float32")
            if lib == "tf":
                tx = tf.constant(x)
                equation = "bk,kn->bn" if layout == "kn" else "bk,nk->bn"
                calls = {"tf_matmul": tf_sum(lambda w: tf.matmul(tx, w,
                                                                 transpose_b=layout == "nk")),
                         "tf_einsum": tf_sum(lambda w: tf.einsum(equation, tx, w))}
            else:
                px = torch.from_numpy(x)

                def torch_sum():
                    with torch.inference_mode():
                        return sum(float((torch.mm(px, w) if layout == "kn" else
                                          torch.nn.functional.linear(px, w)).sum())
                                   for w in torch_weights)
                calls = {"torch": torch_sum}
            times = {c: [] for c in calls}
            for _ in range(rounds + 1):  # the first round traces
                for c, call in calls.items():
                    t0 = time.perf_counter()
                    float(call())
                    times[c].append(time.perf_counter() - t0)
            out[f"{name} [{k}x{n}] batch{b}"] = {c: min(t[1:]) / count * 1e3
                                                 for c, t in times.items()}
    return out


def run_kernels(batches: List[int], args, passed: List[str]) -> dict:
    """`--kernels`: both libraries' figures, each from its own worker process, merged."""
    merged: Dict[str, Dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as work:
        for name in ("kernels_tf", "kernels_torch"):
            for key, ms in spawn(name, work, passed).items():
                merged.setdefault(key, {}).update(ms)
    for key, ms in merged.items():
        log(f"{key}: " + ", ".join(f"{c} {v:.3f} ms" for c, v in ms.items())
            + f"; torch / tf_matmul {ms['torch'] / ms['tf_matmul']:.2f}, "
              f"torch / tf_einsum {ms['torch'] / ms['tf_einsum']:.2f}")
    return merged


WORKERS = {"ours": lambda b, a: worker_ours(b, a, None), "ours_xla": worker_ours_xla,
           "ours_intra1": worker_ours_intra1,
           "ours_inter1": worker_ours_inter1,
           "keras_hub": worker_keras_hub, "torch": worker_torch,
           "kernels_tf": lambda b, a: kernels(b, a, "tf"),
           "kernels_torch": lambda b, a: kernels(b, a, "torch")}
CONTENDERS = ("ours", "ours_intra1", "ours_xla", "ours_inter1", "keras_hub", "torch")


spawn = functools.partial(common.spawn_worker, "benchmarks.generation")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls (the first compiles)")
    p.add_argument("--reps", type=int, default=3, help="timed calls (median reported)")
    p.add_argument("--contenders", default="ours,ours_intra1,keras_hub,torch",
                   help="comma-separated subset of " + ",".join(CONTENDERS))
    p.add_argument("--ours_xla", action="store_true", help="also time ours with XLA")
    p.add_argument("--tiny", action="store_true", help="a 2-layer H128 model (harness check)")
    p.add_argument("--threads", type=int, default=0,
                   help="threads for every contender (TF intra/inter-op, torch); 0 = TF's "
                        "default and torch on all usable cores. 1 compares kernels on a loaded "
                        "machine, where torch's spinning OpenMP threads collapse")
    p.add_argument("--profile", action="store_true",
                   help="also break one decode step of ours down by part and op type (ms)")
    p.add_argument("--kernels", action="store_true",
                   help="time each matmul shape of a decode step alone (TF MatMul, TF Einsum, "
                        "torch; each library in its own process) instead of whole generate "
                        "calls")
    common.add_worker_flags(p, work_dir=False)
    args = p.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    if args._worker:
        return common.worker_done(args, WORKERS[args._worker](batches, args))

    passed = common.passed_on(argv if argv is not None else sys.argv[1:],
                              "--contenders", "--ours_xla", "--kernels")
    machine = common.machine_info(["tensorflow", "keras", "keras-hub", "torch", "transformers"])
    header = common.hardware_line(machine, "float32")
    log(header)
    if args.kernels:
        load_before = os.getloadavg()
        report = {"benchmark": "generation_kernels", "machine": machine, "header": header,
                  "threads": args.threads or usable_cores(),
                  "ms_per_matmul": run_kernels(batches, args, passed),
                  "load_average_before": load_before, "load_average_after": os.getloadavg()}
        if args.output_json:
            write_report(report, args.output_json)
        return report

    contenders = args.contenders.split(",") + (["ours_xla"] if args.ours_xla else [])
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown:
        p.error(f"unknown contenders {unknown}; choose from {sorted(CONTENDERS)}")
    load_before = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for name in contenders:
            results[name] = spawn(name, work, passed)
            for b in batches:
                r = results[name][f"batch{b}"]
                log(f"{name} batch {b}: {b * NEW / r['median_s']:.1f} tokens/s "
                    f"(median {r['median_s']:.3f} s, first call {r['first_call_s']:.1f} s)")
                profile = results[name].get("step_profile", {}).get(f"batch{b}")
                if profile:
                    parts = ", ".join(f"{k} {v:.1f}" for k, v in profile["parts_ms"].items())
                    types = ", ".join(f"{k} {v:.1f}"
                                      for k, v in list(profile["op_types_ms"].items())[:6])
                    log(f"{name} batch {b}: one decode step {profile['step_ms']:.1f} ms"
                        + (f"; {parts} ms; by op: {types} ms" if parts else ""))
    rows = {}
    for b in batches:
        rate = {n: b * NEW / results[n][f"batch{b}"]["median_s"] for n in contenders}
        row = {"tokens_per_s": rate}
        for ours in ("ours", "ours_intra1", "ours_xla", "ours_inter1"):
            for peer in ("keras_hub", "torch"):
                if ours in rate and peer in rate:
                    row[f"{ours}/{peer}"] = rate[ours] / rate[peer]
        rows[f"batch{b}"] = row
        log(f"batch {b}: " + ", ".join(f"{k} {v:.2f}x" for k, v in row.items() if "/" in k))
    report = {"benchmark": "generation", "shape": "tiny" if args.tiny else "gpt2_small",
              "threads": args.threads or "default",
              "prompt_tokens": PROMPT, "new_tokens": NEW, "method": "greedy",
              "results": results, "ratios": rows, "load_average_before": load_before,
              "load_average_after": os.getloadavg(),
              "machine": machine, "header": header}
    if args.output_json:
        write_report(report, args.output_json)
    return report


if __name__ == "__main__":
    main()
