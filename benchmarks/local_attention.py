"""Banded local attention (garden.layers.local_attention) against masked dense attention:
FLOPs counted from the graphs and wall time, at GPT-3 Small's layer width.

    python -m benchmarks.local_attention [--lengths=1024,2048,4096] [--width=256] \
        [--repeats=3] [--output=local_attention.json]

One attention layer, batch 1, H = 768, 12 heads of 64 (GPT-3 Small), forward pass, float32 on
CPU. "dense" is garden.layers.MultiHeadAttention with the same weights and the [T, T] band mask
(what a masked implementation computes: every score, most then discarded); "banded" is
LocalMultiHeadAttention (blocks of w queries over 2w keys). FLOPs come from TensorFlow's graph
profiler (tf.compat.v1.profiler float_operation, which counts 2 m n k per (batch) matmul and
one per element-wise op) on each function's concrete graph, split into the attention core
(BatchMatMulV2, softmax, masks) and the q/k/v/output projections (MatMul), which both share.
Wall time: the median of --repeats calls of the tf.function after one warm-up call. The JSON
report holds the machine record (benchmarks.common) and, per T, the counts and ratios
dense / banded.

Expected: core FLOPs ratio T / (2w) (2.0, 4.0, 8.0 at w = 256), the banded layer's whole
forward (projections included) cheaper by less, and the wall-time ratio growing with T.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Dict

import numpy as np
import tensorflow as tf

from benchmarks.common import hardware_line, log, machine_info
from garden.layers.attention import MultiHeadAttention
from garden.layers.local_attention import LocalMultiHeadAttention, band_mask

HIDDEN, HEADS = 768, 12


def counted_flops(concrete) -> Dict[str, int]:
    """{"total", "projections" (MatMul), "core" (the rest)} float ops of a concrete function."""
    from tensorflow.python.profiler import model_analyzer, option_builder

    options = option_builder.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    report = model_analyzer.profile(concrete.graph, cmd="op", options=options)
    by_type, stack = {}, list(report.children)
    while stack:  # the op-type view nests its rows: walk them all, each row's own count
        node = stack.pop()
        by_type[node.name] = node.float_ops
        stack.extend(node.children)
    total = report.total_float_ops
    projections = by_type.get("MatMul", 0)
    return {"total": int(total), "projections": int(projections),
            "core": int(total - projections)}


def measure(length: int, width: int, repeats: int) -> Dict:
    layer = LocalMultiHeadAttention(HEADS, HIDDEN // HEADS, band_width=width)
    layer.build((1, None, HIDDEN))
    x = tf.constant(np.random.default_rng(0).normal(size=(1, length, HIDDEN)), tf.float32)
    mask = band_mask(length, length, width)
    functions = {
        "banded": tf.function(lambda x: layer(x, x)),
        "dense": tf.function(lambda x: MultiHeadAttention.call(layer, x, x, attention_mask=mask)),
    }
    out: Dict = {"T": length, "w": width}
    results = {}
    for name, fn in functions.items():
        concrete = fn.get_concrete_function(tf.TensorSpec(x.shape, tf.float32))
        flops = counted_flops(concrete)
        results[name] = fn(x).numpy()  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn(x).numpy()
            times.append(time.perf_counter() - start)
        out[name] = {"flops": flops, "seconds": statistics.median(times)}
        log(f"T={length} {name}: {flops['total'] / 1e9:.2f} GFLOP (core "
            f"{flops['core'] / 1e9:.2f}), {out[name]['seconds'] * 1e3:.0f} ms")
    out["max_abs_diff"] = float(np.max(np.abs(results["banded"] - results["dense"])))
    d, b = out["dense"], out["banded"]
    out["ratios_dense_over_banded"] = {
        "core_flops": d["flops"]["core"] / b["flops"]["core"],
        "total_flops": d["flops"]["total"] / b["flops"]["total"],
        "seconds": d["seconds"] / b["seconds"]}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", default="1024,2048,4096")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default="")
    args = parser.parse_args(argv)
    machine = machine_info(("tensorflow", "keras"))
    header = hardware_line(machine, "float32")
    log(header)
    rows = [measure(int(t), args.width, args.repeats) for t in args.lengths.split(",")]
    for row in rows:
        r = row["ratios_dense_over_banded"]
        log(f"T={row['T']} w={row['w']}: dense/banded core FLOPs {r['core_flops']:.2f}x, "
            f"total FLOPs {r['total_flops']:.2f}x, wall {r['seconds']:.2f}x "
            f"(outputs differ by {row['max_abs_diff']:.1e})")
    report = {"machine": machine, "header": header, "hidden": HIDDEN, "heads": HEADS,
              "rows": rows}
    if args.output:
        with open(args.output, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
