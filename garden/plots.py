"""The plotting backend of the BERTology analyses and the trainer's pruning curve: matplotlib's
Agg (files only, no display), imported when a plot is drawn, so that the modules that plot do
not load it."""

from __future__ import annotations


def pyplot():
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as module
    return module


def save(figure, path: str) -> str:
    """Writes `figure` as a PNG at `path` (120 dpi, tight box), closes it, returns `path`."""
    figure.savefig(path, dpi=120, bbox_inches="tight")
    pyplot().close(figure)
    return path
