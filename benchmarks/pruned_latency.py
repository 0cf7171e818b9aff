"""Head pruning against no pruning: a BERT classifier at 128 tokens, batch 1 and 32, with 40% of
its attention heads removed, beside the same model unpruned and the same model with those heads
only masked, in one run.

Contenders (one process, on the same weights; timings are medians of `--reps` calls after
`--warmup`, each contender in turn at each batch size, as benchmarks.common.timed measures):
- unpruned: a BertBackbone (garden.models.bert.backbone) with a dense head on its pooled output.
- masked: the same weights in a BertBackbone built with use_head_mask=True, fed the head mask
  with the chosen heads at 0. The masked heads are still computed and then multiplied by 0:
  the FLOPs of the unpruned model.
- pruned: garden.bertology.prune.pruned_backbone(unpruned, head_mask): the backbone rebuilt
  with num_heads_per_layer and the pruned heads' query/key/value columns and attention-output
  rows removed, the same dense head on top.
Each is called through a tf.function with the same fixed input signature (the three int32
[None, 128] tensors token_ids, segment_ids, padding_mask; the masked contender's head mask is a
constant inside it), so the three run the same kind of graph and differ only in the model.

Which heads go: round(`--prune_share` * L * A) heads (40% of BERT-base's 144: 58), chosen by
garden.bertology.prune.heads_to_prune with a seeded uniform random importance
(np.random.default_rng(`--seed`).random((L, A))): the lowest-scoring heads go, skipping any
that would leave its layer without a head (min_heads_per_layer=1). So the heads are a seeded
random draw, uneven across layers; the report lists the heads kept per layer.

Sanity check: the pruned model's logits against the masked model's on the same 128-token input
(`pruned_vs_masked_max_abs_diff`, asserted below `--tolerance`), and the masked model's against
the unpruned model's (the mask must change them). Parameter counts of each model (the masked
one has the unpruned one's).

Model: BERT-base's shape (12 x 768, 12 heads, FFN 3072, 30522 words) with random seeded
weights (the initializers' own: latency does not depend on their values); `--tiny`: 2 x 32 with
4 heads, FFN 64, 1000 words, for a run in seconds. Input: random word ids, no padding (128 real
tokens), 32 different rows; batch 1 is the first.

    python -m benchmarks.pruned_latency --output_json=/tmp/pruned_latency.json
    python -m benchmarks.pruned_latency --tiny
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Dict

import numpy as np

from benchmarks import common
from benchmarks.common import log, timed, write_report

SEQ, LABELS = 128, 2
# (hidden, layers, heads, ffn, vocab)
SHAPES = {"full": (768, 12, 12, 3072, 30522), "tiny": (32, 2, 4, 64, 1000)}
INPUTS = ("token_ids", "segment_ids", "padding_mask")


def choose_heads(layers: int, heads: int, share: float, seed: int) -> np.ndarray:
    """Head mask [L, A] (1 kept, 0 removed) with round(share * L * A) heads at 0: the lowest of
    a seeded uniform random score, at least one head kept in every layer."""
    from garden.bertology.prune import heads_to_prune

    count = int(round(share * layers * heads))
    score = np.random.default_rng(seed).random((layers, heads))
    mask = heads_to_prune(score, np.ones((layers, heads), np.float32), count,
                          min_heads_per_layer=1)
    if int((mask == 0).sum()) != count:
        raise ValueError(f"cannot remove {count} heads of {layers} x {heads} keeping one a layer")
    return mask


def build(shape, seed: int):
    """(unpruned backbone, masked backbone with the same weights, dense head)."""
    import keras

    from garden.models.bert.backbone import BertBackbone

    hidden, layers, heads, ffn, vocab = shape
    keras.utils.set_random_seed(seed)
    config = dict(vocab_size=vocab, num_layers=layers, hidden_size=hidden, num_heads=heads,
                  intermediate_size=ffn, max_sequence_length=512, dropout=0.0)
    unpruned = BertBackbone(**config)
    masked = BertBackbone(**config, use_head_mask=True)
    masked.set_weights(unpruned.get_weights())
    dense = keras.layers.Dense(LABELS, name="classifier")
    dense.build((None, hidden))
    return unpruned, masked, dense


def serving_fn(backbone, dense, head_mask=None):
    """tf.function(token_ids, segment_ids, padding_mask: int32 [None, SEQ]) -> logits: the
    backbone's pooled output through `dense`, `head_mask` a constant input when given."""
    import tensorflow as tf

    spec = [tf.TensorSpec([None, SEQ], tf.int32, name=n) for n in INPUTS]
    mask = None if head_mask is None else tf.constant(head_mask, tf.float32)

    @tf.function(input_signature=spec)
    def logits(token_ids, segment_ids, padding_mask):
        inputs = {"token_ids": token_ids, "segment_ids": segment_ids,
                  "padding_mask": padding_mask}
        if mask is not None:
            inputs["head_mask"] = mask
        return dense(backbone(inputs, training=False)["pooled_output"])

    return logits


def sample_ids(vocab: int, batch: int, seed: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(5, vocab, size=(batch, SEQ)).astype(np.int32)
    token_ids[:, 0] = 2  # [CLS]
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
            "padding_mask": np.ones_like(token_ids)}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_latency_flags(p, tiny="2 x 32 model: a run in seconds")
    p.add_argument("--prune_share", type=float, default=0.4,
                   help="share of all heads removed (rounded to whole heads)")
    p.add_argument("--seed", type=int, default=0, help="weights, heads removed and input")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest |pruned - masked| logit difference accepted")
    p.add_argument("--output_json", default="")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    return run(args)


def run(args) -> dict:
    import tensorflow as tf

    from garden.bertology.prune import pruned_backbone

    shape = SHAPES["tiny" if args.tiny else "full"]
    hidden, layers, heads, ffn, vocab = shape
    machine = common.machine_info(["tensorflow", "keras"])
    header = common.hardware_line(machine, "float32")
    report = {"machine": machine, "header": header,
              "load_average_before": os.getloadavg(), "tiny": args.tiny,
              "shape": {"seq_length": SEQ, "batches": args.batches,
                        **dict(zip(("hidden", "layers", "heads", "ffn", "vocab"), shape))},
              "settings": common.latency_settings(args, prune_share=args.prune_share,
                                                  seed=args.seed)}
    log(f"{header}; load {report['load_average_before'][0]:.2f}")

    head_mask = choose_heads(layers, heads, args.prune_share, args.seed)
    unpruned, masked, dense = build(shape, args.seed)
    pruned = pruned_backbone(unpruned, head_mask)
    removed = int((head_mask == 0).sum())
    report["heads"] = {"total": layers * heads, "removed": removed,
                       "kept_per_layer": pruned.get_config()["num_heads_per_layer"],
                       "head_mask": head_mask.astype(int).tolist()}
    log(f"removing {removed} of {layers * heads} heads; kept per layer "
        f"{report['heads']['kept_per_layer']}")
    calls = {"unpruned": serving_fn(unpruned, dense),
             "masked": serving_fn(masked, dense, head_mask),
             "pruned": serving_fn(pruned, dense)}
    dense_params = int(dense.count_params())
    report["parameters"] = {"unpruned": int(unpruned.count_params()) + dense_params,
                            "masked": int(masked.count_params()) + dense_params,
                            "pruned": int(pruned.count_params()) + dense_params}

    ids = sample_ids(vocab, max(args.batches), args.seed)
    one = {k: tf.constant(v[:1]) for k, v in ids.items()}
    logits = {name: fn(**one).numpy() for name, fn in calls.items()}
    diff = float(np.max(np.abs(logits["pruned"] - logits["masked"])))
    report["pruned_vs_masked_max_abs_diff"] = diff
    report["masked_vs_unpruned_max_abs_diff"] = float(
        np.max(np.abs(logits["masked"] - logits["unpruned"])))
    log(f"logits: |pruned - masked| max {diff:.2e} (tolerance {args.tolerance:g}); "
        f"|masked - unpruned| max {report['masked_vs_unpruned_max_abs_diff']:.2e}")
    assert diff <= args.tolerance, f"pruned logits differ from masked ones by {diff}"

    results = {name: {} for name in calls}
    for b in args.batches:
        batch = {k: tf.constant(v[:b]) for k, v in ids.items()}
        for name, fn in calls.items():
            results[name][b] = timed(lambda: fn(**batch).numpy(), args.warmup,
                                     common.latency_reps(args, b))
            log(f"{name} b{b}: {results[name][b]['median_s'] * 1e3:.1f} ms")
    ratios = {}
    for name, r in results.items():
        for b, t in r.items():
            ratios[f"{name}_b{b}"] = {
                "ms": t["median_s"] * 1e3,
                "x_unpruned": t["median_s"] / results["unpruned"][b]["median_s"]}
    report.update({"results": results, "ratios": ratios,
                   "load_average_after": os.getloadavg()})
    print(f"{'contender':14s} {'ms':>9s} {'x unpruned':>11s}")
    for key, r in ratios.items():
        print(f"{key:14s} {r['ms']:9.1f} {r['x_unpruned']:11.2f}")
    params = report["parameters"]
    report["parameters_pruned_over_unpruned"] = params["pruned"] / params["unpruned"]
    print("parameters: " + ", ".join(f"{k} {v:,}" for k, v in params.items()) +
          f" (pruned/unpruned {report['parameters_pruned_over_unpruned']:.3f})")
    print(f"load average before {report['load_average_before'][0]:.2f}, "
          f"after {report['load_average_after'][0]:.2f}")
    return write_report(report, args.output_json)


if __name__ == "__main__":
    main()
