"""Where a bfloat16 training step loses its speed-up (issue 34 item 4): BERT-base's forward pass
at float32 and mixed_bfloat16, with dropout on (training) and off (inference), and forward plus
backward, side by side in one process.

    python -m benchmarks.bf16_forward [--batch_size=4] [--seq_length=384] [--reps=3]
        [--output_json=FILE]

The model is benchmarks/qa_finetune.py's: BertBackbone (BERT-base sizes, dropout 0.1) under a
SpanExtractor, built once per precision under garden.train's dtype policy
(garden.training.setup.dtype_policy). Each measurement is a tf.function called twice untimed,
then the median of --reps calls. A bf16 / fp32 ratio near the float32 one in training mode but
far from it in inference mode says the gap is in what only training runs (the dropout masks).
"""

from __future__ import annotations

import argparse
import time
from typing import Dict

import numpy as np

from benchmarks import common
from benchmarks.common import log

PRECISIONS = ("float32", "mixed_bfloat16")
MODES = ("forward_inference", "forward_training", "forward_backward")


def measure(precision: str, batch: Dict[str, np.ndarray], reps: int) -> Dict[str, float]:
    import tensorflow as tf

    from garden.models.bert.backbone import BertBackbone
    from garden.models.question_answering import SpanExtractor
    from garden.training import setup

    with setup.dtype_policy(precision):
        model = SpanExtractor(BertBackbone(**common.BERT_BASE, **common.BERT_TABLES))

        def total(training: bool):
            return tf.reduce_sum(tf.cast(model(batch, training=training)["start_logits"],
                                         tf.float32))

        @tf.function
        def backward():
            with tf.GradientTape() as tape:
                loss = total(True)
            grads = tape.gradient(loss, model.trainable_variables)
            return tf.add_n([tf.reduce_sum(tf.cast(g, tf.float32)) for g in grads
                             if g is not None])  # the pooler is not in the span head's path

        calls = {"forward_inference": tf.function(lambda: total(False)),
                 "forward_training": tf.function(lambda: total(True)),
                 "forward_backward": backward}
        result = {}
        for mode in MODES:
            call = calls[mode]
            call(), call()
            seconds = []
            for _ in range(reps):
                start = time.perf_counter()
                call().numpy()
                seconds.append(time.perf_counter() - start)
            result[mode] = float(np.median(seconds))
            log(f"{precision} {mode}: median {result[mode]:.3f} s")
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bf16_forward",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--seq_length", type=int, default=384)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--output_json", default=None)
    args = p.parse_args(argv)
    machine = common.machine_info(["tensorflow", "keras"])
    log(common.hardware_line(machine, ",".join(PRECISIONS)))
    ids = np.random.default_rng(0).integers(
        5, common.BERT_TABLES["vocab_size"], (args.batch_size, args.seq_length)).astype("int32")
    batch = {"token_ids": ids, "segment_ids": np.zeros_like(ids),
             "padding_mask": np.ones_like(ids)}
    seconds = {precision: measure(precision, batch, args.reps) for precision in PRECISIONS}
    ratios = {mode: seconds["float32"][mode] / seconds["mixed_bfloat16"][mode] for mode in MODES}
    print(f"{'mode':<20}{'float32 s':>12}{'bf16 s':>12}{'bf16 speed-up':>15}")
    for mode in MODES:
        print(f"{mode:<20}{seconds['float32'][mode]:>12.3f}{seconds['mixed_bfloat16'][mode]:>12.3f}"
              f"{ratios[mode]:>14.2f}x")
    common.write_report({"machine": machine, "batch_size": args.batch_size,
                         "seq_length": args.seq_length, "reps": args.reps, "seconds": seconds,
                         "bf16_speedup": ratios}, args.output_json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
