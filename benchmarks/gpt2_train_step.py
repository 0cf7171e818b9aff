"""GPT-2 training-step throughput: garden's GPT2CausalLM through garden.train's own step against
keras-hub's GPT2CausalLM trained with `model.fit`, with MFU against a matmul peak measured in
the same run.

Both train the same architecture (GPT-2 small, or --tiny L2 H128 A2) from random weights on
one synthetic batch of byte-level-BPE-sized ids (vocabulary 50,257, no padding), at
`--precision` float32 or mixed_bfloat16 (ours under garden.train's dtype policy, keras-hub under
Keras' global policy), dropout 0.1, AdamW lr 1e-4 with warmup + linear decay, weight decay
0.01, gradients clipped to global norm 1.0:

- ours: GPT2CausalLM(GPT2Backbone) and the gpt2 Pretraining record's loss (next-token
  cross-entropy over the seq_len - 1 labels of the block), stepped by
  garden.training.step.make_train_step under the `--strategy` tf.distribute strategy
  (one_device by default), garden.optimization's AdamW, every metric fetched each step as
  garden.train does; XLA off (the trainer's CPU default) and, with --xla, also on.
- keras-hub: keras_hub.models.GPT2CausalLM(GPT2Backbone, preprocessor=None), compiled with
  keras AdamW(global_clipnorm=1.0) and its default loss (sparse CE from logits, weighted by
  the padding mask), trained with model.fit on x = the block, y = the block shifted by one.

Everything runs in this process, one contender after the other, between two measurements of
the matmul peak at the precision's compute dtype (benchmarks.common.matmul_peak: TensorFlow and
torch, square 2048 and [B*T, H] x [H, 4H]; the best is the peak). FLOPs per step = 3 x forward, forward per
token = 2 x (12 L H^2 + V H) + 4 L T H (the full T x T score and context products, as
computed: the causal mask saves nothing in a dense kernel).

    python -m benchmarks.gpt2_train_step --seq_len=128 --batch_size=4 --steps=5
    python -m benchmarks.gpt2_train_step --tiny --output_json=/tmp/gpt2_step.json

See benchmarks/README.md ("GPT-2 training step") for a run.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Dict

import numpy as np

from benchmarks import common
from benchmarks.common import log, write_report
from benchmarks.common import fit_timed

SIZES = {"small": dict(num_layers=12, hidden_size=768, num_heads=12),
         "tiny": dict(num_layers=2, hidden_size=128, num_heads=2)}
VOCAB = 50257
OPTIMIZER = common.adamw_settings(learning_rate=1e-4)
SEED = 1234


def step_flops(cfg: Dict) -> float:
    """Training FLOPs of one step (see the module docstring)."""
    size = SIZES[cfg["size"]]
    L, H, T, B = size["num_layers"], size["hidden_size"], cfg["seq_len"], cfg["batch_size"]
    per_token = 2 * (12 * L * H * H + VOCAB * H) + 4 * L * T * H
    return 3.0 * per_token * B * T


def synthetic_block(cfg: Dict) -> np.ndarray:
    rng = np.random.default_rng(SEED)
    return rng.integers(0, VOCAB, (cfg["batch_size"], cfg["seq_len"] + 1)).astype("int32")


def run_ours(cfg: Dict, args, jit_compile: bool) -> Dict:
    import keras

    from garden import distribute
    from garden.models.gpt2 import GPT2Backbone, GPT2CausalLM
    from garden.tasks.pretraining import Pretraining
    from garden.training import setup

    keras.utils.set_random_seed(SEED)
    strategy = distribute.create_strategy(args.strategy)
    task = Pretraining(backbone=None, vocab="unused", family="gpt2",
                       phases=[{"start_step": 0, "data_dir": "unused",
                                "max_seq_length": cfg["seq_len"]}])
    with setup.dtype_policy(args.precision):
        with strategy.scope():
            model = GPT2CausalLM(GPT2Backbone(vocab_size=VOCAB, dropout=0.1,
                                              max_sequence_length=max(1024, cfg["seq_len"]),
                                              **SIZES[cfg["size"]]))
            opt = common.garden_adamw(model, OPTIMIZER)
        ids = synthetic_block(cfg)[:, :cfg["seq_len"]]
        step = common.garden_step(strategy, task, model, opt,
                                  {"input_ids": ids, "input_mask": np.ones_like(ids)},
                                  OPTIMIZER["clip_norm"], jit_compile)[0]
        return common.timed_steps(step, args, model)


def run_keras_hub(cfg: Dict, args) -> Dict:
    import keras
    import keras_hub
    import tensorflow as tf

    keras.utils.set_random_seed(SEED)
    keras.mixed_precision.set_global_policy(args.precision)
    s = SIZES[cfg["size"]]
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=VOCAB, num_layers=s["num_layers"], num_heads=s["num_heads"],
        hidden_dim=s["hidden_size"], intermediate_dim=4 * s["hidden_size"], dropout=0.1,
        max_sequence_length=max(1024, cfg["seq_len"]))
    model = keras_hub.models.GPT2CausalLM(backbone, preprocessor=None)
    model.compile(optimizer=common.keras_adamw(OPTIMIZER), jit_compile=False)
    block = synthetic_block(cfg)
    x = {"token_ids": block[:, :-1], "padding_mask": np.ones_like(block[:, :-1])}
    y = block[:, 1:]
    result = fit_timed(model, tf.data.Dataset.from_tensors((x, y)).repeat(), args)
    keras.mixed_precision.set_global_policy("float32")
    result["parameters"] = int(model.count_params())
    result["policy"] = backbone.dtype_policy.name
    return result


def summarise(name: str, cfg: Dict, r: Dict, peak_gflops: float) -> Dict:
    tokens = cfg["batch_size"] * cfg["seq_len"]
    steps = len(r["step_s"])
    achieved = step_flops(cfg) * steps / r["wall_s"]
    return {"contender": name, "policy": r["policy"], "tokens_per_s": tokens * steps / r["wall_s"],
            "median_step_s": r["median_step_s"], "achieved_gflops": achieved / 1e9,
            "mfu": achieved / 1e9 / peak_gflops, "parameters": r["parameters"],
            "first_loss": r["first_loss"], "last_loss": r["last_loss"],
            "cores_used": r["cores_used"], "other_load_cores": r["other_load_cores"]}


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpt2_train_step",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="L2 H128 A2 instead of GPT-2 small")
    p.add_argument("--seq_len", type=int, default=1024)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--xla", action="store_true", help="also time ours with jit_compile=True")
    p.add_argument("--strategy", default="one_device", help="garden.distribute strategy name")
    p.add_argument("--precision", default="float32", choices=common.PRECISIONS)
    p.add_argument("--peak_seconds", type=float, default=1.0)
    p.add_argument("--output_json", default=None)
    return p.parse_args(argv)


def main(argv=None) -> Dict:
    args = parse_args(argv)
    cfg = dict(size="tiny" if args.tiny else "small", seq_len=args.seq_len,
               batch_size=args.batch_size)
    machine = common.machine_info(["tensorflow", "keras", "keras-hub", "torch"])
    header = common.hardware_line(machine, args.precision)
    log(header)
    hidden = SIZES[cfg["size"]]["hidden_size"]
    shapes = {"square_2048": (2048, 2048, 2048),
              "ffn_shaped": (cfg["batch_size"] * cfg["seq_len"], hidden, 4 * hidden)}
    peaks = [common.matmul_peak(args.precision, shapes, args.peak_seconds)]
    runs = {"ours": lambda: run_ours(cfg, args, False)}
    if args.xla:
        runs["ours_xla"] = lambda: run_ours(cfg, args, True)
    runs["keras_hub"] = lambda: run_keras_hub(cfg, args)
    raw = {}
    for name, run in runs.items():
        log(f"{name}: {args.warmup} warm-up + {args.steps} timed steps")
        raw[name] = run()
    peaks.append(common.matmul_peak(args.precision, shapes, args.peak_seconds))
    peak = common.best_peak(peaks)
    rows = [summarise(name, cfg, r, peak["best_gflops"]) for name, r in raw.items()]
    base = next(r for r in rows if r["contender"] == "keras_hub")
    print(header)
    print(f"GPT-2 {cfg['size']} seq {cfg['seq_len']} batch {cfg['batch_size']}: "
          f"{step_flops(cfg) / 1e9:.1f} GFLOP/step; {common.peak_line(peak)}")
    print("| contender | policy | tokens/s | median step s | GFLOP/s | MFU | vs keras-hub | "
          "loss first -> last |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['contender']} | {r['policy']} | {r['tokens_per_s']:.0f} | "
              f"{r['median_step_s']:.3f} | "
              f"{r['achieved_gflops']:.1f} | {r['mfu']:.1%} | "
              f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x | "
              f"{r['first_loss']:.3f} -> {r['last_loss']:.3f} |")
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "config": cfg,
              "args": vars(args), "header": header, "precision": args.precision,
              "peak_gflops": peak["best_gflops"], "peaks": peaks, "rows": rows, "raw": raw,
              "machine": machine}
    return write_report(report, args.output_json)


if __name__ == "__main__":
    main()
    sys.exit(0)
