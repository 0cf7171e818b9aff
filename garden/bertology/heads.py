"""What each head is worth to a task: the task metric with one head, or one layer's heads,
disabled, or with one head alone kept in its layer (Michel et al.'s "one head is enough" of
their table 2: the best single head per layer), in the two ways the literature disables a head.

  * "zero": the head mask is 0, so the head's attention probabilities, and with them its
    output, are zero (Michel et al., 2019, "Are Sixteen Heads Really Better than One?").
    Removing the head's rows of the attention output kernel gives the same model.
  * "uniform": the head attends evenly over the real tokens instead (Kovaleva et al., 2019,
    "Revealing the Dark Secrets of BERT"): MultiHeadAttention's head_mask_mode "uniform" (and
    that of the layers that apply the same head mask: GPT-3's banded attention, XLNet's
    relative attention).

The metric is a callback from the model's outputs to a float, so any task fits: a backbone's
outputs, or a task model built on a backbone that takes the `head_mask` input.

Example:
    model = instrumented(backbone, use_head_mask=True)
    result = head_ablation(model, batch, lambda out: float(out["pooled_output"][:, 0].mean()))
    plot_head_ablation(result, "heads.png")
"""

from __future__ import annotations

import contextlib
from typing import Callable, Dict, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from garden import plots
from garden.models.instrument import attention_layers, instrumented, model_inputs

# How a disabled head is disabled -> MultiHeadAttention's head_mask_mode that does it.
MODES = {"zero": "scale", "uniform": "uniform"}


@contextlib.contextmanager
def head_mask_mode(model: keras.Model, mode: str):
    """Within the block, every attention layer of `model` applies its head mask as `mode`
    ("scale" or "uniform", garden.layers.attention.HEAD_MASK_MODES); restored after."""
    layers = attention_layers(model)
    saved = [layer.head_mask_mode for layer in layers]
    try:
        for layer in layers:
            layer.head_mask_mode = mode
        yield model
    finally:
        for layer, before in zip(layers, saved):
            layer.head_mask_mode = before


def _with_head_mask(model: keras.Model) -> keras.Model:
    """`model` if it takes a head mask; a garden backbone with the input switched on."""
    if isinstance(model.input, dict) and "head_mask" in model.input:
        return model
    if "use_head_mask" in model.get_config():
        return instrumented(model, use_head_mask=True)
    raise ValueError(f"{model.name} takes no `head_mask` input: build its backbone with "
                     "use_head_mask=True (garden.models.instrument.instrumented)")


def head_ablation(model: keras.Model, batch: Mapping[str, np.ndarray],
                  metric: Callable[[Dict[str, np.ndarray]], float],
                  modes: Sequence[str] = tuple(MODES)) -> Dict:
    """`metric` of `model` on `batch` with each head, and each layer's heads, disabled.

    Args:
        model: a Keras model with a `head_mask` [L, A] input (a backbone made with
            use_head_mask=True, or a task model around one); a garden backbone without it is
            rebuilt with it (same weights).
        batch: dict of arrays, the model's inputs (token_ids, segment_ids, padding_mask, ...);
            entries the model does not take are ignored. One batch: concatenate an evaluation
            set into it.
        metric: model outputs (NumPy arrays, the model's output structure) -> float.
        modes: among MODES ("zero", "uniform").

    Returns:
        {"baseline": metric with every head on, "num_layers": L, "num_heads": A,
         "heads": {mode: [L][A] metric with that head disabled},
         "layers": {mode: [L] metric with all heads of that layer disabled},
         "only_head": {mode: [L][A] metric with every other head of that layer disabled},
         "best_single_head": {mode: {"head": [L], "metric": [L]}}: per layer the head that,
         kept alone, gives the highest metric (higher is better, as for accuracy)}.
    """
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise ValueError(f"unknown modes {unknown}; choose from {sorted(MODES)}")
    model = _with_head_mask(model)
    num_layers, num_heads = (int(n) for n in model.input["head_mask"].shape)
    inputs = model_inputs(batch, model)

    def evaluate(forward, head_mask):
        outputs = forward({**inputs, "head_mask": tf.constant(head_mask, tf.float32)})
        return float(metric(keras.tree.map_structure(lambda x: np.asarray(x), outputs)))

    def disabled(layer, heads):
        mask = np.ones((num_layers, num_heads), "float32")
        mask[layer, heads] = 0
        return mask

    def alone(layer, head):
        mask = disabled(layer, slice(None))
        mask[layer, head] = 1
        return mask

    result = {"baseline": None, "num_layers": num_layers, "num_heads": num_heads,
              "heads": {}, "layers": {}, "only_head": {}, "best_single_head": {}}
    for mode in modes:
        with head_mask_mode(model, MODES[mode]):
            # Traced here, under this mode; the head mask is an input, so masks do not retrace.
            forward = tf.function(lambda x: model(x, training=False))
            if result["baseline"] is None:
                result["baseline"] = evaluate(forward, np.ones((num_layers, num_heads)))
            heads, only = np.zeros((2, num_layers, num_heads))
            layers = np.zeros(num_layers)
            for layer in range(num_layers):
                for head in range(num_heads):
                    heads[layer, head] = evaluate(forward, disabled(layer, head))
                    only[layer, head] = evaluate(forward, alone(layer, head))
                layers[layer] = evaluate(forward, disabled(layer, slice(None)))
        result["heads"][mode] = heads.tolist()
        result["layers"][mode] = layers.tolist()
        result["only_head"][mode] = only.tolist()
        result["best_single_head"][mode] = {"head": only.argmax(axis=1).tolist(),
                                            "metric": only.max(axis=1).tolist()}
    return result


def plot_head_ablation(result: Mapping, path: str) -> str:
    """head_ablation's result as heat maps of metric - baseline per head (a panel per mode),
    the whole-layer numbers as a last column; writes a PNG at `path`."""
    pyplot = plots.pyplot()
    modes = list(result["heads"])
    figure, axes = pyplot.subplots(1, len(modes), squeeze=False,
                                   figsize=(2 + 0.5 * (result["num_heads"] + 1) * len(modes),
                                            1.5 + 0.4 * result["num_layers"]))
    for ax, mode in zip(axes[0], modes):
        change = np.column_stack([np.asarray(result["heads"][mode]),
                                  np.asarray(result["layers"][mode])]) - result["baseline"]
        limit = max(float(np.abs(change).max()), 1e-12)
        image = ax.imshow(change, cmap="RdBu", vmin=-limit, vmax=limit)
        ax.set_xticks(range(change.shape[1]),
                      [str(h) for h in range(result["num_heads"])] + ["all"])
        ax.set(title=f"{mode}: metric - baseline", xlabel="head", ylabel="layer")
        figure.colorbar(image, ax=ax)
    figure.tight_layout()
    return plots.save(figure, path)
