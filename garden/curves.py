"""`python -m garden.curves --model_dir=DIR [--model_dir=DIR2 ...]`: training curves of a run,
rendered to PNG (DIR/curves.png).

Reads the TensorBoard scalars garden.train wrote to DIR/train (losses, accuracies, learning
rate, gradient norm, throughput) and DIR/eval (eval/<name>: the periodic, the final and
--mode=eval's scores; a fine-tuning run's final scores are those of its summary.json) and draws
one panel per scalar, training and held-out curves of the same metric on the same panel.

The events are read with tf.data.TFRecordDataset and parsed as tf.compat.v1.Event (what
TensorFlow's deprecation notice of tf.compat.v1.train.summary_iterator asks for), so the tool
logs no deprecation warning.
"""

from __future__ import annotations

import argparse
import collections
import glob
import math
import os
import sys
from typing import Dict, Iterable, List, Tuple

Series = Dict[str, List[Tuple[int, float]]]

# The TensorBoard runs garden.train writes (garden/training/run.py, report.eval_writer).
RUNS = ("train", "eval")


def events(path: str):
    """The tf.compat.v1.Event records of one event file."""
    import tensorflow as tf

    for record in tf.data.TFRecordDataset(path):
        yield tf.compat.v1.Event.FromString(record.numpy())


def read_scalars(model_dir: str, runs: Iterable[str] = RUNS) -> Series:
    """{tag: [(step, value), ...]} from every event file under model_dir/<run> for each of
    `runs` (train: the training scalars; eval: eval/<name>)."""
    import tensorflow as tf

    files = [path for run in runs
             for path in sorted(glob.glob(os.path.join(model_dir, run, "events.out.tfevents.*")))]
    if not files:
        raise FileNotFoundError(f"no TensorBoard event files in "
                                f"{' or '.join(os.path.join(model_dir, r) for r in runs)}; "
                                f"is {model_dir} a garden.train model_dir?")
    series: Series = collections.defaultdict(list)
    for path in files:
        for event in events(path):
            for value in event.summary.value:
                if value.HasField("tensor"):
                    number = float(tf.make_ndarray(value.tensor))
                else:
                    number = float(value.simple_value)
                series[value.tag].append((int(event.step), number))
    # A resumed run repeats steps: keep the latest value of each step.
    return {tag: sorted(dict(points).items()) for tag, points in series.items()}


def render(series: Series, output: str, title: str = "") -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = sorted({tag.split("/", 1)[-1] for tag in series})
    cols = min(3, len(metrics))
    rows = math.ceil(len(metrics) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for tag, label in ((metric, "train"), (f"eval/{metric}", "eval")):
            if tag in series:
                steps, values = zip(*series[tag])
                ax.plot(steps, values, marker="o" if len(steps) < 20 else None, label=label)
        ax.set_title(metric)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if f"eval/{metric}" in series:
            ax.legend()
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    plt.close(fig)
    return output


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m garden.curves", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True, action="append",
                        help="a garden.train model_dir (pretraining or fine-tuning); repeat it "
                             "to draw several runs in one process, each to its own curves.png")
    parser.add_argument("--output", default=None,
                        help="PNG path (default: MODEL_DIR/curves.png; one --model_dir only)")
    args = parser.parse_args(argv)
    if args.output and len(args.model_dir) > 1:
        parser.error("--output names one PNG: give one --model_dir with it (several runs each "
                     "get MODEL_DIR/curves.png)")
    for model_dir in args.model_dir:
        try:
            series = read_scalars(model_dir)
        except FileNotFoundError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        output = args.output or os.path.join(model_dir, "curves.png")
        render(series, output, title=model_dir)
        evals = sorted(tag for tag in series if tag.startswith("eval/"))
        print(f"wrote {output}: {len(series)} scalars ({len(evals)} eval/), "
              f"{max(len(v) for v in series.values())} points at most")
    return 0


if __name__ == "__main__":
    sys.exit(main())
