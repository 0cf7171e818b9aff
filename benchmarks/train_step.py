"""BERT pretraining step throughput: ours against Model Garden and keras-hub, in one run.

Every contender trains the same architecture on the same synthetic batch (random word pieces,
two segments, no padding, 20 masked positions, random next-sentence labels), dropout 0.1,
AdamW at lr 1e-4 (linear warmup + decay schedule, weight decay 0.01 with the LayerNorm / bias
exclusions) and gradients clipped to global norm 1.0, at each `--precision`: float32, or
mixed_bfloat16 (float32 variables, bfloat16 matmuls) set the way each contender's users set it:
ours through garden.train's own dtype policy (garden.training.setup.dtype_policy, what
`train.precision` binds), Model Garden through its runtime.mixed_precision_dtype='bfloat16'
(official.modeling.performance.set_mixed_precision_policy, tf_keras' policy), keras-hub through
Keras' global policy:

- ours: garden BertPretrainer(BertBackbone) trained by garden.train's own step (make_train_step)
  (MirroredStrategy over the CPU as `--strategy=mirrored` builds it, GradientTape over the
  task's compute_metrics, all-reduce, global-norm clipping, garden.optimization's AdamW:
  Keras' AdamW with TensorFlow's fused Adam kernel), in a tf.function; once with XLA off (the trainer's
  default on a CPU) and once with `jit_compile=True` on the gradient function (as on GPUs).
- Model Garden: BertPretrainerV2 on networks.BertEncoder with a next-sentence
  ClassificationHead, built and stepped by official.nlp.tasks.masked_lm.MaskedLMTask
  (build_model / train_step with its tf_keras metrics) under a tf.function, optimizer from
  official.modeling.optimization.OptimizerFactory ("adamw" = legacy AdamWeightDecay, which
  clips to global norm 1.0 itself), as Model Garden's own trainer does.
- keras-hub: keras_hub.models.BertMaskedLM(BertBackbone): masked LM only (no NSP head, hence a
  little less work than the others), compiled with keras AdamW(global_clipnorm=1.0) and
  trained with `model.fit` (the way keras-hub is meant to be trained; `--keras_hub_mode`
  also offers a train_on_batch loop).

Each contender runs in its own process, one after the other: tf_keras (Model Garden) and
Keras 3 keep separate global state (dtype policies, seed generators, name scopes), a
process starts with TensorFlow's thread pools and allocator cold, and the peak memory of one
does not weigh on the next; with two precisions each contender runs in both before the next
contender starts, so that the two figures of a ratio are minutes apart. The matmul peak of each
precision (benchmarks.common.matmul_peak: TensorFlow and torch, a 2048 square and the
[B*T, H] x [H, F] shape) is measured in its own process before and after them; MFU is against
the best of its precision.

    python -m benchmarks.train_step --output_json=/tmp/train_step.json
    python -m benchmarks.train_step --configs=small,base
    python -m benchmarks.train_step --configs=base --precision=float32,mixed_bfloat16

See benchmarks/README.md for the FLOP count and how to read the output.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import sys
import time
from typing import Dict, List, Optional

import psutil

from benchmarks import common
from benchmarks.common import StepTimer, fit_timed, log, usable_cores, write_report


# The configs: "small" is L4 H512 A8 FFN2048; "base" is BERT-base, both at batch 32 (a
# BERT-base step takes about 10 s on 2 cores, so it times 6 steps; --batch_size=8 is a quicker look).
# "tiny" (BERT-tiny, batch 8) checks the harness in seconds per contender.
CONFIGS = {
    "tiny": dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512,
                 batch_size=8, steps=10, warmup=2),
    "small": dict(num_layers=4, hidden_size=512, num_heads=8, intermediate_size=2048,
                  batch_size=32, steps=20, warmup=3),
    "base": dict(**common.BERT_BASE, batch_size=32, steps=6, warmup=2),
}
COMMON = dict(**common.BERT_TABLES, seq_length=128, predictions=20)
OPTIMIZER = common.adamw_settings(learning_rate=1e-4)
CONTENDERS = ("ours", "ours_xla", "model_garden", "keras_hub")
OPTIONAL_CONTENDERS = ("model_garden_xla", "keras_hub_xla")
SEED = 1234
CORES = usable_cores()


# ---------------------------------------------------------------------------------------------
# FLOPs


def step_flops(cfg: dict, cls_dense_layers: int, nsp: bool, last_block_rows: Optional[int] = None) -> dict:
    """Model FLOPs of one training step (matmuls only), training = 3 x forward.

    Forward, per step (B batch, T tokens, L layers, H hidden, F ffn, P predictions, V vocab):
      encoder dense layers  2 * B*T * L * (4*H*H + 2*H*F)     q, k, v, output; ffn in and out
      attention             2 * B * L * 2*T*T*H               scores q.k and probabilities.v
      MLM head              2 * B*P * (H*H + H*V)             transform dense; tied projection
      [CLS] heads           2 * B * (cls_dense_layers*H*H + 2*H if nsp)
    Embedding lookups, LayerNorm, softmax, GELU, dropout and the optimizer are not counted
    (no matmul). Backward = 2 x forward (gradients for inputs and for weights).

    "train" is the model's count, the same for every contender (MFU in the PaLM sense).
    "executed" is what the contender's program multiplies: with `last_block_rows` = R (ours:
    R = 1 + P, [CLS] and the masked positions) the last block computes keys and values for
    all T rows but queries, attention output, feed-forward and the attention products for R.
    """
    b, t, n = cfg["batch_size"], cfg["seq_length"], cfg["num_layers"]
    h, f, p, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["predictions"], cfg["vocab_size"]
    dense = 2 * b * t * n * (4 * h * h + 2 * h * f)
    attention = 2 * b * n * 2 * t * t * h
    mlm = 2 * b * p * (h * h + h * v)
    cls = 2 * b * (cls_dense_layers * h * h + (2 * h if nsp else 0))
    forward = dense + attention + mlm + cls
    executed = forward
    if last_block_rows is not None:
        r = last_block_rows
        last_full = 2 * b * t * (4 * h * h + 2 * h * f) + 2 * b * 2 * t * t * h
        last_rows = 2 * b * t * 2 * h * h + 2 * b * r * (2 * h * h + 2 * h * f) + 2 * b * 2 * r * t * h
        executed = forward - last_full + last_rows
    return {"dense": dense, "attention": attention, "mlm_head": mlm, "cls_heads": cls,
            "forward": forward, "train": 3 * forward, "executed_train": 3 * executed}


# Trained [CLS] dense layers: ours = pooler (+ NSP dense(2)); Model Garden = the encoder's
# pooler + ClassificationHead(inner_dim=H) (+ dense(2)); keras-hub's pooler output is unused.
FLOP_HEADS = {"ours": (1, True), "model_garden": (2, True), "keras_hub": (0, False)}


def flops_for(contender: str, cfg: dict) -> dict:
    family = contender.replace("_xla", "")
    # Ours' BertPretrainer runs its last block for [CLS] and the masked positions only.
    rows = 1 + cfg["predictions"] if family == "ours" else None
    return step_flops(cfg, *FLOP_HEADS[family], last_block_rows=rows)


# ---------------------------------------------------------------------------------------------
# Worker side (runs in a child process: `--_worker NAME --_result FILE`)


def synthetic_batch(cfg: dict, seed: int = SEED) -> Dict[str, "np.ndarray"]:
    """One batch in the TFRecord feature names of text.features (BERT originals)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    b, t, p = cfg["batch_size"], cfg["seq_length"], cfg["predictions"]
    ids = rng.integers(1000, cfg["vocab_size"], size=(b, t), dtype=np.int32)
    ids[:, 0] = 101  # [CLS]
    segment = np.zeros((b, t), np.int32)
    segment[:, t // 2:] = 1
    positions = np.sort(np.stack([rng.choice(np.arange(1, t), p, replace=False)
                                  for _ in range(b)]), axis=1).astype(np.int32)
    masked_ids = np.take_along_axis(ids, positions, axis=1)
    ids_masked = ids.copy()
    np.put_along_axis(ids_masked, positions, 103, axis=1)  # [MASK]
    return {
        "input_ids": ids_masked,
        "input_mask": np.ones((b, t), np.int32),
        "segment_ids": segment,
        "masked_lm_positions": positions,
        "masked_lm_ids": masked_ids,
        "masked_lm_weights": np.ones((b, p), np.float32),
        "next_sentence_labels": rng.integers(0, 2, size=(b, 1), dtype=np.int32),
    }


def worker_peak(cfg: dict, args) -> dict:
    """The matmul peak of every --precision: a 2048 square and the feed-forward's [B*T, H] x
    [H, F] product, TensorFlow and torch (benchmarks.common.matmul_peak)."""
    shapes = {"square_2048": (2048, 2048, 2048),
              "ffn_shaped": (cfg["batch_size"] * cfg["seq_length"], cfg["hidden_size"],
                             cfg["intermediate_size"])}
    return {p: common.matmul_peak(p, shapes, args.peak_seconds) for p in args.precision}


def _ours_model(cfg: dict):
    from garden.models.bert.backbone import BertBackbone
    from garden.models.bert.pretrainer import BertPretrainer

    backbone = BertBackbone(
        vocab_size=cfg["vocab_size"], num_layers=cfg["num_layers"],
        hidden_size=cfg["hidden_size"], num_heads=cfg["num_heads"],
        intermediate_size=cfg["intermediate_size"],
        max_sequence_length=cfg["max_sequence_length"],
        type_vocab_size=cfg["type_vocab_size"], dropout=cfg["dropout"])
    return BertPretrainer(backbone)


def _ours_task():
    """garden.tasks.pretraining's BERT compute_metrics / loss_weights, without data on disk."""
    from garden.tasks.pretraining import Pretraining

    return Pretraining(backbone=None, vocab="unused", family="bert",
                       phases=[{"start_step": 0, "data_dir": "unused", "max_seq_length": 128}])


def worker_ours(cfg: dict, args, jit_compile: bool) -> dict:
    """garden.train's step (garden.training.step.make_train_step: one replica, no accumulation)
    under garden.train's dtype policy for args.precision."""
    import keras

    from garden import distribute
    from garden.training import setup

    keras.utils.set_random_seed(SEED)
    strategy = distribute.create_strategy(args.ours_strategy)
    task = _ours_task()
    with setup.dtype_policy(args.precision):
        with strategy.scope():
            model = _ours_model(cfg)
            opt = common.garden_adamw(model, OPTIMIZER)
        step, train_step, compiled_gradients, iterator = common.garden_step(
            strategy, task, model, opt, synthetic_batch(cfg), OPTIMIZER["clip_norm"],
            jit_compile)
        result = common.timed_steps(step, args, model)
        result["strategy"] = type(strategy).__name__
        if args.profile and not jit_compile:
            result["profile"] = profile_ours(cfg, args, strategy, task, model,
                                             compiled_gradients, train_step, iterator, step)
    return result


def profile_ours(cfg, args, strategy, task, model, compute_gradients, train_step, iterator,
                 step) -> dict:
    """Where our step's time goes: phase split, then an op-level tf.profiler trace."""
    import tensorflow as tf

    batch = next(iter(tf.data.Dataset.from_tensors(synthetic_batch(cfg))))

    @tf.function
    def forward(batch):
        def fn(batch):
            return task.compute_metrics(model, batch, training=True)["loss"]
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(fn, args=(batch,)), axis=None)

    @tf.function
    def forward_backward(batch):
        def fn(batch):
            grads, metrics = compute_gradients([batch], None)
            return metrics["loss"] + 0 * tf.add_n([tf.reduce_sum(g[:1]) for g in grads])
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(fn, args=(batch,)), axis=None)

    def timed(fn, n):
        out = fn()  # traces on the first call
        if hasattr(out, "numpy"):
            out.numpy()
        t = time.perf_counter()
        for _ in range(n):
            out = fn()
            if hasattr(out, "numpy"):
                out.numpy()
        return (time.perf_counter() - t) / n

    n = args.profile_steps
    phases = {
        "forward_s": timed(lambda: forward(batch), n),
        "forward_backward_s": timed(lambda: forward_backward(batch), n),
        "step_s": timed(step, n),
    }
    phases["backward_s"] = phases["forward_backward_s"] - phases["forward_s"]
    phases["optimizer_and_rest_s"] = phases["step_s"] - phases["forward_backward_s"]

    # Beside the worker's result, in the run's work dir (kept with --work_dir, removed otherwise).
    logdir = os.path.join(os.path.dirname(os.path.abspath(args._result)),
                          f"{args.config}-{args.precision}-profile")
    tf.profiler.experimental.start(logdir)
    for _ in range(n):
        step()
    tf.profiler.experimental.stop()
    ops = op_stats(logdir)
    return {"phases": phases, "trace_steps": n, "logdir": logdir, **ops}


def op_stats(logdir: str, top: int = 15) -> dict:
    """Self time per op type and per op from the xplane trace (TensorBoard's framework_op_stats)."""
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin

    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        return {"op_stats_error": f"no trace under {logdir}"}
    raw, _ = plugin.xspace_to_tools_data(paths, "framework_op_stats", {})
    tables = json.loads(raw)
    table = tables[0] if isinstance(tables, list) else tables
    cols = [c["id"] for c in table["cols"]]
    by_type: Dict[str, float] = {}
    by_op: Dict[str, float] = {}
    total = 0.0
    for row in table["rows"]:
        r = dict(zip(cols, [c.get("v") if c else None for c in row["c"]]))
        self_us = float(r.get("total_self_time") or 0.0)
        if r.get("type") in ("IDLE",):
            continue
        total += self_us
        by_type[r["type"]] = by_type.get(r["type"], 0.0) + self_us
        by_op[f"{r['type']}: {r['operation']}"] = by_op.get(f"{r['type']}: {r['operation']}", 0.0) + self_us

    def ranked(d):
        return [{"name": k, "self_ms": v / 1e3, "share": v / total if total else 0.0}
                for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:top]]

    return {"op_self_total_ms": total / 1e3, "top_op_types": ranked(by_type),
            "top_ops": ranked(by_op)}


def worker_model_garden(cfg: dict, args, jit_compile: bool) -> dict:
    common.pkg_resources_shim()
    import tensorflow as tf
    import tf_keras
    from official.nlp.configs import bert, encoders
    from official.nlp.data import pretrain_dataloader
    from official.nlp.tasks import masked_lm
    from official.modeling import performance

    tf_keras.utils.set_random_seed(SEED)
    # What official/nlp/train.py does with runtime.mixed_precision_dtype ('bfloat16' or
    # 'float32'), before the task builds the model.
    performance.set_mixed_precision_policy(tf.as_dtype(common.COMPUTE_DTYPES[args.precision]))
    h = cfg["hidden_size"]
    encoder = encoders.EncoderConfig(type="bert", bert=encoders.BertEncoderConfig(
        vocab_size=cfg["vocab_size"], hidden_size=h, num_layers=cfg["num_layers"],
        num_attention_heads=cfg["num_heads"], intermediate_size=cfg["intermediate_size"],
        dropout_rate=cfg["dropout"], attention_dropout_rate=cfg["dropout"],
        max_position_embeddings=cfg["max_sequence_length"],
        type_vocab_size=cfg["type_vocab_size"]))
    task_config = masked_lm.MaskedLMConfig(
        model=bert.PretrainerConfig(encoder=encoder, cls_heads=[bert.ClsHeadConfig(
            inner_dim=h, num_classes=2, dropout_rate=cfg["dropout"], name="next_sentence")]),
        train_data=pretrain_dataloader.BertPretrainDataConfig(
            seq_length=cfg["seq_length"], max_predictions_per_seq=cfg["predictions"],
            use_next_sentence_label=True))
    task = masked_lm.MaskedLMTask(task_config)
    model = task.build_model()
    metrics = task.build_metrics(training=True)
    opt = common.model_garden_adamw(OPTIMIZER)

    b = synthetic_batch(cfg)
    inputs = {
        "input_word_ids": b["input_ids"], "input_mask": b["input_mask"],
        "input_type_ids": b["segment_ids"], "masked_lm_positions": b["masked_lm_positions"],
        "masked_lm_ids": b["masked_lm_ids"], "masked_lm_weights": b["masked_lm_weights"],
        "next_sentence_labels": b["next_sentence_labels"],
    }
    step = common.model_garden_step(task, model, opt, metrics, inputs, jit_compile)
    return common.timed_steps(step, args, model)


def worker_keras_hub(cfg: dict, args, jit_compile: bool) -> dict:
    import keras
    import keras_hub
    import tensorflow as tf

    keras.utils.set_random_seed(SEED)
    keras.mixed_precision.set_global_policy(args.precision)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=cfg["vocab_size"], num_layers=cfg["num_layers"],
        num_heads=cfg["num_heads"], hidden_dim=cfg["hidden_size"],
        intermediate_dim=cfg["intermediate_size"], dropout=cfg["dropout"],
        max_sequence_length=cfg["max_sequence_length"], num_segments=cfg["type_vocab_size"])
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    opt = common.keras_adamw(OPTIMIZER)
    # keras-hub's MaskedLM.compile defaults: sparse CE from logits, weighted accuracy.
    model.compile(optimizer=opt, jit_compile=jit_compile)
    b = synthetic_batch(cfg)
    x = {"token_ids": b["input_ids"], "segment_ids": b["segment_ids"],
         "padding_mask": b["input_mask"], "mask_positions": b["masked_lm_positions"]}
    y, sw = b["masked_lm_ids"], b["masked_lm_weights"]

    if args.keras_hub_mode == "train_on_batch":
        x_t = {k: tf.constant(v) for k, v in x.items()}
        y_t, sw_t = tf.constant(y), tf.constant(sw)

        def step():
            return float(model.train_on_batch(x_t, y_t, sample_weight=sw_t, return_dict=True)["loss"])

        result = StepTimer(args.warmup, args.steps).run(step)
    else:
        result = fit_timed(model, tf.data.Dataset.from_tensors((x, y, sw)).repeat(), args)
    result["parameters"] = int(model.count_params())
    result["mode"] = args.keras_hub_mode
    result["policy"] = backbone.dtype_policy.name
    return result


def run_worker(args) -> None:
    cfg = {**COMMON, **CONFIGS[args.config]}
    cfg["batch_size"] = args.batch_size or cfg["batch_size"]
    name = args._worker
    t0 = time.perf_counter()
    if name == "peak":
        result = worker_peak(cfg, args)
    elif name in ("ours", "ours_xla"):
        result = worker_ours(cfg, args, jit_compile=name.endswith("_xla"))
    elif name in ("model_garden", "model_garden_xla"):
        result = worker_model_garden(cfg, args, jit_compile=name.endswith("_xla"))
    elif name in ("keras_hub", "keras_hub_xla"):
        result = worker_keras_hub(cfg, args, jit_compile=name.endswith("_xla"))
    else:
        raise ValueError(f"unknown worker {name!r}")
    result["process_s"] = time.perf_counter() - t0
    result["peak_rss_mib"] = psutil.Process().memory_info().rss / (1 << 20)
    with open(args._result, "w") as f:
        json.dump(result, f)


# ---------------------------------------------------------------------------------------------
# Driver side


def spawn(name: str, config: str, args, batch_size: int, work_dir: str,
          precision: str) -> dict:
    """One worker process; `precision` is a comma-separated list for the peak worker."""
    label = config if name == "peak" else f"{config}-{precision}"
    return common.spawn_logged("benchmarks.train_step", name, label, [
        "--configs", config, "--batch_size", str(batch_size),
        "--warmup", str(args.warmup_of[config]), "--steps", str(args.steps_of[config]),
        "--keras_hub_mode", args.keras_hub_mode, "--ours_strategy", args.ours_strategy,
        "--profile_steps", str(args.profile_steps), "--peak_seconds", str(args.peak_seconds),
        "--profile" if args.profile else "--no-profile", "--precision", precision], work_dir)


def summarise(name: str, cfg: dict, r: dict, peak: dict) -> dict:
    """One contender's row; MFU against `peak`, the best matmul_peak of its precision."""
    tokens = cfg["batch_size"] * cfg["seq_length"]
    steps = len(r["step_s"])
    flops = flops_for(name, cfg)
    tps = tokens * steps / r["wall_s"]
    achieved = flops["train"] * steps / r["wall_s"]
    executed = flops["executed_train"] * steps / r["wall_s"]
    return {
        "contender": name, "policy": r.get("policy"), "tokens_per_s": tps,
        "median_step_s": r["median_step_s"], "tokens_per_s_median": tokens / r["median_step_s"],
        # What the rate would be with every core to itself, if CPU time is the work done:
        # less disturbed by other jobs than the wall clock (see README).
        "tokens_per_cpu_s_x_cores": tokens * steps / r["cpu_s"] * CORES,
        "achieved_gflops": achieved / 1e9, "train_flops_per_step": flops["train"],
        "executed_gflops": executed / 1e9, "peak_gflops": peak["best_gflops"],
        "mfu": achieved / 1e9 / peak["best_gflops"],
        "executed_fu": executed / 1e9 / peak["best_gflops"],
        "flops": flops, "parameters": r.get("parameters"),
        "other_load_cores": r["other_load_cores"], "cores_used": r["cores_used"],
        "warmup_s": r["warmup_s"], "first_loss": r["first_loss"], "last_loss": r["last_loss"],
    }


def format_table(config: str, cfg: dict, precision: str, rows: List[dict],
                 peak_runs: List[dict]) -> str:
    lines = [f"== {config} {precision}: L{cfg['num_layers']} H{cfg['hidden_size']} "
             f"A{cfg['num_heads']} FFN{cfg['intermediate_size']} V{cfg['vocab_size']} seq "
             f"{cfg['seq_length']} pred {cfg['predictions']} batch {cfg['batch_size']}, "
             f"{rows[0]['train_flops_per_step'] / 1e9:.1f} GFLOP/step ({rows[0]['contender']})"]
    for when, p in zip(("before", "after"), peak_runs):
        lines.append(f"{common.peak_line(p)} [{when}]")
    header = ("contender", "policy", "tokens/s", "median tok/s", f"tok/CPU-s x{CORES}",
              "GFLOP/s", "MFU", "exec. GFLOP/s", "exec. FU", "cores used", "other load",
              "loss first->last")
    table = [header]
    for r in rows:
        table.append((r["contender"], r["policy"] or "?", f"{r['tokens_per_s']:.0f}",
                      f"{r['tokens_per_s_median']:.0f}", f"{r['tokens_per_cpu_s_x_cores']:.0f}",
                      f"{r['achieved_gflops']:.1f}", f"{100 * r['mfu']:.1f}%",
                      f"{r['executed_gflops']:.1f}", f"{100 * r['executed_fu']:.1f}%",
                      f"{r['cores_used']:.2f}", f"{r['other_load_cores']:.2f}",
                      f"{r['first_loss']:.2f}->{r['last_loss']:.2f}"))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        lines.append("  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def ratios(rows: List[dict]) -> dict:
    by = {r["contender"]: r for r in rows}
    peers = [r for r in rows if not r["contender"].startswith("ours")]
    out = {}
    if not peers:
        return out
    faster = max(peers, key=lambda r: r["tokens_per_s"])
    out["faster_peer"] = faster["contender"]
    for name in ("ours", "ours_xla"):
        if name in by:
            out[f"{name}/faster_peer"] = by[name]["tokens_per_s"] / faster["tokens_per_s"]
            for p in peers:
                out[f"{name}/{p['contender']}"] = by[name]["tokens_per_s"] / p["tokens_per_s"]
    return out


def precision_ratios(by_precision: Dict[str, List[dict]]) -> Dict[str, dict]:
    """Each contender's tokens/s at every precision over its own float32 tokens/s (and the
    same for the median step and the CPU-normalised rate, which suffer less from other load)."""
    if "float32" not in by_precision or len(by_precision) < 2:
        return {}
    base = {r["contender"]: r for r in by_precision["float32"]}
    out = {}
    for precision, rows in by_precision.items():
        if precision == "float32":
            continue
        out[precision] = {r["contender"]: {
            key: r[key] / base[r["contender"]][key]
            for key in ("tokens_per_s", "tokens_per_s_median", "tokens_per_cpu_s_x_cores")}
            for r in rows}
    return out


def format_profile(profile: dict) -> str:
    ph = profile["phases"]
    lines = [f"ours, where a step goes ({profile['trace_steps']} steps each; XLA off):",
             f"  forward+loss {ph['forward_s']:.2f} s | backward {ph['backward_s']:.2f} s | "
             f"clip+all-reduce+AdamW+rest {ph['optimizer_and_rest_s']:.2f} s | "
             f"step {ph['step_s']:.2f} s"]
    if profile["trace_steps"] < 3 or min(ph.values()) < 0:
        lines.append("  (phase times are differences of separately timed runs: with few steps or "
                     "other load they are noise; trust the op table)")
    if "top_op_types" in profile:
        lines.append(f"  op self time over the traced steps: {profile['op_self_total_ms']:.0f} ms "
                     "(ops on 2 inter-op threads overlap, so this can exceed the wall time)")
        lines.append("  top op types:")
        for t in profile["top_op_types"][:12]:
            lines.append(f"    {100 * t['share']:5.1f}%  {t['self_ms']:8.0f} ms  {t['name']}")
        lines.append("  top ops:")
        for t in profile["top_ops"][:12]:
            lines.append(f"    {100 * t['share']:5.1f}%  {t['self_ms']:8.0f} ms  {t['name'][:110]}")
    return "\n".join(lines)


def machine_info() -> dict:
    info = common.machine_info(("tensorflow", "keras", "keras-hub", "tf-keras", "tf-models-official",
                                "torch"))
    info["load_average_at_start"] = os.getloadavg()
    return info


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.train_step",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--configs", default="small", help="comma-separated: tiny, small, base")
    p.add_argument("--contenders", default=",".join(CONTENDERS),
                   help="comma-separated, from " + ", ".join(CONTENDERS + OPTIONAL_CONTENDERS))
    p.add_argument("--steps", type=int, help="timed steps (default: 20 small, 6 base)")
    p.add_argument("--warmup", type=int, help="untimed steps first (default: 3 small, 2 base)")
    p.add_argument("--batch_size", type=int, help="override the config's batch (small 32, base 32)")
    p.add_argument("--keras_hub_mode", default="fit", choices=["fit", "train_on_batch"])
    p.add_argument("--ours_strategy", default="mirrored",
                   help="garden.distribute.create_strategy name for ours (the trainer's default)")
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True,
                   help="after ours' timing, split its step into phases and trace it")
    p.add_argument("--profile_steps", type=int, default=3)
    p.add_argument("--peak_seconds", type=float, default=3.0,
                   help="repetition time per matmul shape when measuring the peak")
    p.add_argument("--precision", type=common.precisions, default=["float32"],
                   help="float32 or mixed_bfloat16, or both comma-separated (side by side: "
                        "every contender in each, and the ratios)")
    p.add_argument("--work_dir", help="logs, per-contender results and profiles, kept "
                                      "(default: a temporary directory, removed at the end)")
    p.add_argument("--output_json")
    p.add_argument("--_worker", help=argparse.SUPPRESS)
    p.add_argument("--_result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown or not configs:
        p.error(f"--configs takes {', '.join(CONFIGS)}; got {args.configs!r}")
    args.config_list = configs
    args.config = configs[0]
    contenders = [c for c in args.contenders.split(",") if c]
    bad = [c for c in contenders if c not in CONTENDERS + OPTIONAL_CONTENDERS]
    if bad:
        p.error(f"unknown contender(s) {bad}")
    args.contender_list = contenders
    args.steps_of = {c: args.steps or CONFIGS[c]["steps"] for c in configs}
    args.warmup_of = {c: args.warmup if args.warmup is not None else CONFIGS[c]["warmup"]
                      for c in configs}
    if args._worker:
        args.steps, args.warmup = args.steps_of[args.config], args.warmup_of[args.config]
        if args._worker != "peak":
            (args.precision,) = args.precision  # a contender runs at one precision
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args._worker:
        run_worker(args)
        return {}
    with common.work_dir(args.work_dir, "bench_train_step_") as work_dir:
        machine = machine_info()
        header = common.hardware_line(machine, ",".join(args.precision))
        log(header)
        log(f"load average {', '.join(f'{x:.2f}' for x in machine['load_average_at_start'])}; "
            f"work dir {work_dir}")
        report = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": machine,
                  "header": header, "precisions": args.precision,
                  "argv": sys.argv[1:] if argv is None else list(argv), "optimizer": OPTIMIZER,
                  "configs": {}}
        texts = []
        all_precisions = ",".join(args.precision)
        for config in args.config_list:
            cfg = {**COMMON, **CONFIGS[config]}
            cfg["batch_size"] = args.batch_size or cfg["batch_size"]
            peak_runs = [spawn("peak", config, args, cfg["batch_size"], work_dir, all_precisions)]
            results: Dict[str, dict] = {p: {} for p in args.precision}
            for name in args.contender_list:
                # Every precision of a contender back to back: the ratio's two figures are
                # minutes apart, under the same other load as far as it can be.
                for precision in args.precision:
                    r = spawn(name, config, args, cfg["batch_size"], work_dir, precision)
                    results[precision][name] = r
                    log(f"  {name} {precision}: "
                        f"{cfg['batch_size'] * cfg['seq_length'] * len(r['step_s']) / r['wall_s']:.0f}"
                        f" tokens/s, other load {r['other_load_cores']:.2f} cores")
            peak_runs.append(spawn("peak", config, args, cfg["batch_size"], work_dir,
                                   all_precisions))
            by_precision, record = {}, {"config": cfg, "precisions": {}}
            for precision in args.precision:
                runs = [p[precision] for p in peak_runs]
                peak = common.best_peak(runs)
                rows = [summarise(n, cfg, results[precision][n], peak)
                        for n in args.contender_list]
                by_precision[precision] = rows
                text = format_table(config, cfg, precision, rows, runs)
                rat = ratios(rows)
                if rat:
                    text += "\nratios (tokens/s): " + ", ".join(
                        f"{k} {v:.2f}" for k, v in rat.items() if k != "faster_peer")
                    text += f" (faster peer: {rat['faster_peer']})"
                profile = results[precision].get("ours", {}).get("profile")
                if profile:
                    text += "\n" + format_profile(profile)
                texts.append(text)
                print(text, flush=True)
                record["precisions"][precision] = {
                    "peaks": runs, "peak_gflops": peak["best_gflops"], "rows": rows,
                    "ratios": rat, "raw": results[precision]}
            record["over_float32"] = precision_ratios(by_precision)
            for precision, per in record["over_float32"].items():
                text = (f"{config}: {precision} / float32 tokens/s: " + ", ".join(
                    f"{name} {r['tokens_per_s']:.2f}x (median step {r['tokens_per_s_median']:.2f}x,"
                    f" per CPU-s {r['tokens_per_cpu_s_x_cores']:.2f}x)" for name, r in per.items()))
                texts.append(text)
                print(text, flush=True)
            report["configs"][config] = record
        report["load_average_at_end"] = os.getloadavg()
        print("\n\n".join([header] + texts))
        return write_report(report, args.output_json)


if __name__ == "__main__":
    main()
