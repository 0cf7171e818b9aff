"""SQuAD fine-tuning step throughput: ours against Model Garden's question_answering task.

Both contenders train the same span labeler (BERT encoder -> dense(2) -> start / end logits,
loss = mean of the two cross-entropies) on the same synthetic SQuAD-shaped batch (384 tokens:
a 64-piece question segment and a context segment, no padding, random start / end positions),
dropout 0.1, AdamW (lr 5e-5 with linear warmup, weight decay 0.01, LayerNorm / bias excluded,
global-norm clip 1.0), at each `--precision` (float32, mixed_bfloat16 or both: ours under
garden.train's dtype policy, Model Garden under its runtime.mixed_precision_dtype's tf_keras
policy):

- ours: garden.models.question_answering.SpanExtractor(BertBackbone) trained by garden.train's
  own step (garden.training.step.make_train_step over QuestionAnswering.compute_metrics, under
  the MirroredStrategy the trainer builds, garden.optimization's AdamW), XLA off as the
  trainer's CPU default;
- Model Garden: official.nlp.tasks.question_answering.QuestionAnsweringTask (BertSpanLabeler on
  networks.BertEncoder) stepped by task.train_step under a tf.function with its metrics,
  optimizer from OptimizerFactory ("adamw" = legacy AdamWeightDecay with its own clip), as
  Model Garden's trainer does.

Each runs in its own process (tf_keras and Keras 3 keep separate global state), one after the
other (with two precisions, a contender in both before the next); the report gives examples
per second, the ratio ours / Model Garden, each contender's mixed_bfloat16 / float32 ratio and
the other load on the machine during each run (the CPU is shared).

    python -m benchmarks.qa_finetune --configs=tiny,base --output_json=/tmp/qa_finetune.json
    python -m benchmarks.qa_finetune --configs=base --precision=float32,mixed_bfloat16

Configs: "tiny" L2 H128 A2 FFN512, batch 32; "base" BERT-base L12 H768 A12 FFN3072, batch 4
(a BERT-base step of 32 x 384 tokens takes over a minute on 2 cores; --batch_size overrides).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import psutil

from benchmarks import common
from benchmarks.common import log, usable_cores, write_report

CONFIGS = {
    "tiny": dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512,
                 batch_size=32, steps=10, warmup=2),
    "base": dict(**common.BERT_BASE, batch_size=4, steps=3, warmup=1),
}
COMMON = dict(**common.BERT_TABLES, seq_length=384, query_length=64)
OPTIMIZER = common.adamw_settings(learning_rate=5e-5)
CONTENDERS = ("ours", "model_garden")
SEED = 1234


def synthetic_batch(cfg: dict):
    """[CLS] question [SEP] context [SEP] ids with segments, full mask, random answers."""
    import numpy as np

    rng = np.random.default_rng(SEED)
    b, t, q = cfg["batch_size"], cfg["seq_length"], cfg["query_length"]
    ids = rng.integers(1000, cfg["vocab_size"], size=(b, t), dtype=np.int32)
    ids[:, 0], ids[:, q + 1], ids[:, -1] = 101, 102, 102
    segments = np.zeros((b, t), np.int32)
    segments[:, q + 2:] = 1
    start = rng.integers(q + 2, t - 31, size=b).astype(np.int32)
    end = (start + rng.integers(0, 30, size=b)).astype(np.int32)
    return {"token_ids": ids, "segment_ids": segments, "padding_mask": np.ones((b, t), np.int32),
            "start_position": start, "end_position": end}


def worker_ours(cfg: dict, args) -> dict:
    import keras

    from garden import distribute
    from garden.models.bert.backbone import BertBackbone
    from garden.models.question_answering import SpanExtractor
    from garden.tasks.question_answering import QuestionAnswering
    from garden.training import setup

    keras.utils.set_random_seed(SEED)
    strategy = distribute.create_strategy("mirrored")
    # compute_metrics needs no file: the task is built bare.
    task = QuestionAnswering(backbone=None, vocab="unused", train_file="unused",
                             eval_file="unused")
    with setup.dtype_policy(args.precision):
        with strategy.scope():
            model = SpanExtractor(BertBackbone(
                vocab_size=cfg["vocab_size"], num_layers=cfg["num_layers"],
                hidden_size=cfg["hidden_size"], num_heads=cfg["num_heads"],
                intermediate_size=cfg["intermediate_size"],
                max_sequence_length=cfg["max_sequence_length"],
                type_vocab_size=cfg["type_vocab_size"], dropout=cfg["dropout"]))
            opt = common.garden_adamw(model, OPTIMIZER)
        step = common.garden_step(strategy, task, model, opt, synthetic_batch(cfg),
                                  OPTIMIZER["clip_norm"], False)[0]
        return common.timed_steps(step, args, model)


def worker_model_garden(cfg: dict, args) -> dict:
    common.pkg_resources_shim()
    import tensorflow as tf
    import tf_keras
    from official.core import config_definitions
    from official.nlp.configs import encoders
    from official.modeling import performance
    from official.nlp.tasks import question_answering

    tf_keras.utils.set_random_seed(SEED)
    # What official/nlp/train.py does with runtime.mixed_precision_dtype.
    performance.set_mixed_precision_policy(tf.as_dtype(common.COMPUTE_DTYPES[args.precision]))
    encoder = encoders.EncoderConfig(type="bert", bert=encoders.BertEncoderConfig(
        vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
        num_layers=cfg["num_layers"], num_attention_heads=cfg["num_heads"],
        intermediate_size=cfg["intermediate_size"], dropout_rate=cfg["dropout"],
        attention_dropout_rate=cfg["dropout"],
        max_position_embeddings=cfg["max_sequence_length"],
        type_vocab_size=cfg["type_vocab_size"]))
    config = question_answering.QuestionAnsweringConfig(
        model=question_answering.ModelConfig(encoder=encoder),
        train_data=config_definitions.DataConfig(), validation_data=None)
    task = question_answering.QuestionAnsweringTask(config)
    model = task.build_model()
    metrics = task.build_metrics(training=True)
    opt = common.model_garden_adamw(OPTIMIZER)
    b = synthetic_batch(cfg)
    features = {"input_word_ids": b["token_ids"], "input_mask": b["padding_mask"],
                "input_type_ids": b["segment_ids"]}
    labels = {"start_positions": b["start_position"], "end_positions": b["end_position"]}
    step = common.model_garden_step(task, model, opt, metrics, (features, labels))
    return common.timed_steps(step, args, model)


def run_worker(args) -> None:
    cfg = {**COMMON, **CONFIGS[args.configs]}
    cfg["batch_size"] = args.batch_size or cfg["batch_size"]
    t0 = time.perf_counter()
    worker = worker_ours if args._worker == "ours" else worker_model_garden
    result = worker(cfg, args)
    result["process_s"] = time.perf_counter() - t0
    result["peak_rss_mib"] = psutil.Process().memory_info().rss / (1 << 20)
    with open(args._result, "w") as f:
        json.dump(result, f)


def spawn(name: str, config: str, batch_size: int, steps: int, warmup: int, work_dir: str,
          precision: str) -> dict:
    return common.spawn_logged("benchmarks.qa_finetune", name, f"{config}-{precision}", [
        "--configs", config, "--batch_size", str(batch_size), "--steps", str(steps),
        "--warmup", str(warmup), "--precision", precision], work_dir)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default="tiny,base", help="comma-separated: tiny, base")
    p.add_argument("--batch_size", type=int, default=0, help="override the config's batch")
    p.add_argument("--steps", type=int, default=0, help="timed steps (default per config)")
    p.add_argument("--warmup", type=int, default=0, help="untimed steps (default per config)")
    p.add_argument("--precision", type=common.precisions, default=["float32"],
                   help="float32 or mixed_bfloat16, or both comma-separated (side by side)")
    p.add_argument("--output_json", default="")
    p.add_argument("--_worker", default="", help=argparse.SUPPRESS)
    p.add_argument("--_result", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._worker:
        cfg = CONFIGS[args.configs]
        args.steps, args.warmup = args.steps or cfg["steps"], args.warmup or cfg["warmup"]
        (args.precision,) = args.precision  # a worker runs at one precision
        run_worker(args)
        return {}
    machine = common.machine_info(["tensorflow", "keras", "tf-models-official"])
    header = common.hardware_line(machine, ",".join(args.precision))
    log(header)
    report = {"machine": machine, "header": header, "precisions": args.precision,
              "cores": usable_cores(), "seq_length": COMMON["seq_length"], "configs": {}}
    with tempfile.TemporaryDirectory() as work_dir:
        for config in args.configs.split(","):
            cfg = CONFIGS[config]
            batch = args.batch_size or cfg["batch_size"]
            steps, warmup = args.steps or cfg["steps"], args.warmup or cfg["warmup"]
            rows = {p: {} for p in args.precision}
            for name in CONTENDERS:
                for precision in args.precision:
                    r = spawn(name, config, batch, steps, warmup, work_dir, precision)
                    r["examples_per_s"] = batch / r["median_step_s"]
                    rows[precision][name] = r
                    log(f"{config}/{name} {r['policy']}: median step {r['median_step_s']:.3f} s, "
                        f"{r['examples_per_s']:.1f} examples/s, other load "
                        f"{r['other_load_cores']:.2f} cores, loss {r['first_loss']:.3f} -> "
                        f"{r['last_loss']:.3f}")
            record = {"batch_size": batch, "precisions": {}}
            for precision, by_name in rows.items():
                ratio = by_name["ours"]["examples_per_s"] / by_name["model_garden"]["examples_per_s"]
                over = {name: r["examples_per_s"] / rows["float32"][name]["examples_per_s"]
                        for name, r in by_name.items()} if "float32" in rows else {}
                record["precisions"][precision] = {"results": by_name,
                                                   "ours_over_model_garden": ratio,
                                                   "over_float32": over}
                log(f"{config} {precision}: ours / Model Garden throughput = {ratio:.2f}x" +
                    ("".join(f"; {name} {v:.2f}x its float32" for name, v in over.items())
                     if precision != "float32" and over else ""))
            report["configs"][config] = record
    return write_report(report, args.output_json)


if __name__ == "__main__":
    main()
