"""`python -m garden.curves --model_dir=DIR`: training curves of a run, rendered to PNG.

Reads the TensorBoard scalars garden.train wrote to DIR/train (losses, accuracies, learning
rate, gradient norm, throughput, eval/*) and draws one panel per scalar, training and held-out
curves of the same metric on the same panel.
"""

from __future__ import annotations

import argparse
import collections
import glob
import math
import os
import sys
from typing import Dict, List, Tuple

Series = Dict[str, List[Tuple[int, float]]]


def read_scalars(model_dir: str) -> Series:
    """{tag: [(step, value), ...]} from every event file under model_dir/train."""
    import tensorflow as tf

    files = sorted(glob.glob(os.path.join(model_dir, "train", "events.out.tfevents.*")))
    if not files:
        raise FileNotFoundError(f"no TensorBoard event files in {os.path.join(model_dir, 'train')}; "
                                f"is {model_dir} a garden.train model_dir?")
    series: Series = collections.defaultdict(list)
    for path in files:
        for event in tf.compat.v1.train.summary_iterator(path):
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
    parser.add_argument("--model_dir", required=True, help="a garden.train model_dir")
    parser.add_argument("--output", default=None, help="PNG path (default: MODEL_DIR/curves.png)")
    args = parser.parse_args(argv)
    try:
        series = read_scalars(args.model_dir)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    output = args.output or os.path.join(args.model_dir, "curves.png")
    render(series, output, title=args.model_dir)
    print(f"wrote {output}: {len(series)} scalars, "
          f"{max(len(v) for v in series.values())} points at most")
    return 0


if __name__ == "__main__":
    sys.exit(main())
