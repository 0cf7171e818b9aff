"""Head importance and head pruning (Michel et al., 2019, "Are Sixteen Heads Really Better
than One?", arXiv:1905.10650), and the smaller model whose pruned heads' weights are gone.

  * Importance: I_h = |dL / d xi_h| for head h's mask xi_h, L the task loss, summed over the
    batches at the current head mask and divided by their number: per batch, as the paper's
    code (pmichel31415/are-16-heads) and Hugging Face's bertology example take it (the
    absolute value of each batch's gradient, not of each example's). Removed heads score 0.
  * Normalisation: each layer's importances divided by their L2 norm (the paper's code and
    Hugging Face: exponent 2, + 1e-20 against a layer of zeros); optionally then globally to
    [0, 1] by (I - min) / (max - min) (Hugging Face's normalize_global_importance).
  * Iterative pruning: mask the max(1, int(step * all heads)) least important remaining heads
    (10% of BERT-base's 144 -> 14), re-estimate the importance with them masked, and repeat,
    while the task metric stays at or above `threshold` times the unpruned metric (0.9). A head
    is skipped when taking it would leave its layer fewer than `min_heads_per_layer` (1)
    heads, so no layer loses all its heads; the step then takes the next least important one.
  * Removing the weights: `pruned_backbone` builds the backbone with `num_heads_per_layer`
    (garden.models.backbone.encoder_block_list) and copies the weights, the query/key/value
    kernels and biases without the pruned heads' columns and the attention output kernel
    without their rows: its outputs equal the head-masked model's (tests/bertology/
    test_prune.py: to 1e-5). `write_pruned` saves it as a garden.convert directory, so
    `--gin_param=INIT_CHECKPOINT='PRUNED_DIR'` fine-tunes and exports it.

Example:
    result = prune_heads(model, batches, loss, lambda mask: accuracy(model, dev, mask))
    plot_pruning_curve(result, "pruning.png")
    write_pruned("pruned/", pruned_backbone(backbone, result["head_mask"]), "bert", vocab, True)
"""

from __future__ import annotations

import json
import os
from typing import Callable, Dict, Iterable, Mapping, Optional

import keras
import numpy as np
import tensorflow as tf

from garden import plots
from garden.models.instrument import SWITCHES, layer_blocks, model_inputs
from text import vocab_files


def head_importance(model: keras.Model, batches: Iterable[Mapping[str, np.ndarray]],
                    loss: Callable[[Mapping, Dict], tf.Tensor],
                    head_mask: Optional[np.ndarray] = None) -> np.ndarray:
    """Raw head importance, float [L, A]: the mean over `batches` of |d loss / d head_mask| at
    `head_mask` (default all ones); heads masked to 0 there score 0.

    Args:
        model: a Keras model with a `head_mask` [L, A] input (a backbone made with
            use_head_mask=True, or a task model around one); run without dropout.
        batches: dicts holding the model's inputs and whatever `loss` reads (labels).
        loss: (batch, model outputs) -> scalar tensor, the task loss of the batch.
        head_mask: float [L, A] or None.
    """
    return importance_estimator(model, loss)(batches, head_mask)


def importance_estimator(model: keras.Model, loss: Callable[[Mapping, Dict], tf.Tensor]
                         ) -> Callable[[Iterable[Mapping], Optional[np.ndarray]], np.ndarray]:
    """head_importance(model, ., loss, .) as a function of (batches, head_mask) whose
    gradient is traced once, not at each call (prune_heads estimates at every step)."""
    shape = tuple(int(n) for n in model.input["head_mask"].shape)

    @tf.function(reduce_retracing=True)
    def gradient(inputs, batch):
        with tf.GradientTape() as tape:
            tape.watch(inputs["head_mask"])
            value = loss(batch, model(inputs, training=False))
        return tf.abs(tape.gradient(value, inputs["head_mask"]))

    def estimate(batches, head_mask=None):
        mask = tf.constant(np.ones(shape) if head_mask is None else head_mask, tf.float32)
        total, count = np.zeros(shape), 0
        for batch in batches:
            inputs = {**model_inputs(batch, model), "head_mask": mask}
            total += gradient(inputs, dict(batch)).numpy()
            count += 1
        if not count:
            raise ValueError("head_importance: `batches` gave no batch")
        return total / count * (mask.numpy() != 0)

    return estimate


def normalize_importance(importance: np.ndarray, by_layer: bool = True,
                         globally: bool = False) -> np.ndarray:
    """`importance` [L, A] with each layer's row divided by its L2 norm (by_layer), then
    rescaled to [0, 1] over all heads (globally)."""
    out = np.asarray(importance, np.float64)
    if by_layer:
        out = out / (np.linalg.norm(out, axis=-1, keepdims=True) + 1e-20)
    if globally:
        out = (out - out.min()) / max(out.max() - out.min(), 1e-20)
    return out


def heads_to_prune(importance: np.ndarray, head_mask: np.ndarray, count: int,
                   min_heads_per_layer: int = 1) -> np.ndarray:
    """`head_mask` with up to `count` more heads at 0: the least important remaining ones
    (ties in layer, then head order), skipping any whose layer would keep fewer than
    `min_heads_per_layer` heads. Fewer than `count` when no more may go."""
    mask = np.array(head_mask, np.float32)
    kept = (mask != 0).sum(axis=1)
    remaining = np.flatnonzero(mask.reshape(-1) != 0)
    order = remaining[np.argsort(np.asarray(importance).reshape(-1)[remaining], kind="stable")]
    for flat in order:
        if count == 0:
            break
        layer, head = divmod(int(flat), mask.shape[1])
        if kept[layer] > min_heads_per_layer:
            mask[layer, head], kept[layer], count = 0, kept[layer] - 1, count - 1
    return mask


def prune_heads(model: keras.Model, batches: Iterable[Mapping[str, np.ndarray]],
                loss: Callable[[Mapping, Dict], tf.Tensor],
                metric: Callable[[np.ndarray], float], step: float = 0.1,
                threshold: float = 0.9, min_heads_per_layer: int = 1,
                normalize_by_layer: bool = True, normalize_globally: bool = False) -> Dict:
    """Iterative head pruning of Michel et al. (see the module docstring).

    Args:
        model, batches, loss: as head_importance (batches is iterated once per step: give a
            list or a re-iterable dataset).
        metric: head mask [L, A] -> the task metric with that mask (higher is better), e.g.
            the accuracy of the model on a dev set run with the mask.
        step: share of all heads masked per step.
        threshold: pruning stops at the first mask whose metric is below threshold * the
            unpruned metric; that mask is on the curve but not returned.
        min_heads_per_layer: heads no layer goes below.
        normalize_by_layer, normalize_globally: normalize_importance's.

    Returns:
        {"baseline": the metric with every head, "head_mask": [L][A] the last mask that kept
         the metric (all ones when the first step already fell below),
         "curve": [{"heads_pruned", "share_pruned", "metric"}, ...] from 0 heads on,
         "importance": [L][A] normalised importance at each step's start,
         "stopped": "threshold" or "min_heads_per_layer", "threshold", "step",
         "num_layers", "num_heads"}.
    """
    if not isinstance(batches, (list, tuple, tf.data.Dataset)):
        batches = list(batches)  # an iterator: kept, as every step reads the batches again
    mask = np.ones(tuple(int(n) for n in model.input["head_mask"].shape), np.float32)
    total = mask.size
    per_step = max(1, int(step * total))
    baseline = float(metric(mask))
    estimate = importance_estimator(model, loss)
    result = {"baseline": baseline, "threshold": threshold, "step": step,
              "num_layers": mask.shape[0], "num_heads": mask.shape[1],
              "curve": [{"heads_pruned": 0, "share_pruned": 0.0, "metric": baseline}],
              "importance": []}
    while True:
        importance = normalize_importance(estimate(batches, mask), normalize_by_layer,
                                          normalize_globally)
        candidate = heads_to_prune(importance, mask, per_step, min_heads_per_layer)
        pruned = int(total - (candidate != 0).sum())
        if pruned == total - int((mask != 0).sum()):
            result["stopped"] = "min_heads_per_layer"
            break
        result["importance"].append(importance.tolist())
        value = float(metric(candidate))
        result["curve"].append({"heads_pruned": pruned, "share_pruned": pruned / total,
                                "metric": value})
        if value < threshold * baseline:
            result["stopped"] = "threshold"
            break
        mask = candidate
    result["head_mask"] = mask.tolist()
    return result


def plot_pruning_curve(results: Mapping[str, Mapping] | Mapping, path: str) -> str:
    """The metric against the share of heads pruned, one line per prune_heads result (a
    result, or {label: result}), with each threshold dashed; writes a PNG at `path`."""
    if "curve" in results:
        results = {"": results}
    pyplot = plots.pyplot()
    figure, ax = pyplot.subplots(figsize=(5, 3.5))
    for label, result in results.items():
        shares = [100 * p["share_pruned"] for p in result["curve"]]
        line, = ax.plot(shares, [p["metric"] for p in result["curve"]], marker="o",
                        label=label or None)
        ax.axhline(result["threshold"] * result["baseline"], color=line.get_color(), ls="--",
                   lw=0.8)
    ax.set(xlabel="heads pruned (%)", ylabel="metric",
           title="iterative head pruning (Michel et al. 2019)")
    if any(results):
        ax.legend()
    return plots.save(figure, path)


# --- the smaller model -----------------------------------------------------------------------

def check_removable(backbone: keras.Model) -> None:
    """ValueError naming the family when its heads' weights cannot be removed: it takes no
    num_heads_per_layer (a head mask still silences its heads: prune_heads runs)."""
    if "num_heads_per_layer" in backbone.get_config():
        return
    family = backbone.family() if hasattr(backbone, "family") else "?"
    raise ValueError(f"the {family} backbone ({type(backbone).__name__}) takes no "
                     "num_heads_per_layer: its heads cannot be removed (bert, roberta, "
                     "electra, spanbert and distilbert's can); run prune without "
                     "--pruned_output to score and mask them")


def pruned_backbone(backbone: keras.Model, head_mask: np.ndarray) -> keras.Model:
    """A backbone without the heads `head_mask` [L, A] sets to 0 (1 keeps a head; a backbone
    already pruned reads the first num_heads_per_layer[i] entries of row i): the same config
    with num_heads_per_layer, every weight copied, the attention's query/key/value kernels
    [H, A, d] and biases [A, d] and output kernel [A, d, H] cut to the kept heads."""
    config = backbone.get_config()
    check_removable(backbone)
    blocks = layer_blocks(backbone)
    if len({id(block) for block in blocks}) != len(blocks):
        raise ValueError(f"{backbone.name} shares blocks between layers: a head cannot be "
                         "removed from one layer alone")
    mask = np.asarray(head_mask, np.float32)
    if mask.shape[0] != len(blocks) or not np.isin(mask, (0, 1)).all():
        raise ValueError(f"head_mask of shape {mask.shape}: give {len(blocks)} rows of 0 "
                         "(pruned) and 1 (kept)")
    kept = [np.flatnonzero(mask[i, :block.num_heads]) for i, block in enumerate(blocks)]
    if any(len(k) == 0 for k in kept):
        raise ValueError("head_mask removes every head of a layer; keep at least one "
                         "(prune_heads' min_heads_per_layer)")
    smaller = type(backbone).from_config({**config,
                                          "num_heads_per_layer": [len(k) for k in kept]})
    cut = {}
    for block, keep in zip(blocks, kept):
        attention = block.attention
        for dense in (attention.query_dense, attention.key_dense, attention.value_dense):
            cut[id(dense.kernel)] = dense.kernel.numpy()[:, keep]
            if attention.use_bias:
                cut[id(dense.bias)] = dense.bias.numpy()[keep]
        cut[id(attention.output_dense.kernel)] = attention.output_dense.kernel.numpy()[keep]
    for old, new in zip(backbone.weights, smaller.weights, strict=True):
        value = cut.get(id(old), None)
        value = old.numpy() if value is None else value
        if value.shape != tuple(new.shape):
            raise AssertionError(f"{old.path} {value.shape} -> {new.path} {tuple(new.shape)}")
        new.assign(value)
    return smaller


def write_pruned(output: str, backbone: keras.Model, family: str, vocab: str,
                 lower_case: bool, pruned_from: Optional[str] = None,
                 info: Optional[Dict] = None) -> str:
    """Writes the (pruned) `backbone` as a garden.convert output directory, which every
    fine-tuning config takes as INIT_CHECKPOINT (garden/pretrained.py): checkpoints/ckpt-0,
    the tokenizer of `vocab` (vocab.txt, *.model or vocab.json beside merges.txt) copied, and
    convert_info.json with the architecture (its num_heads_per_layer included), source
    "pruned", input `pruned_from` (the model's directory) and `info` (e.g. prune_heads'
    result) under "pruning". Returns `output`.

    The analysis switches (output_attentions, ...) are written off: fine-tuning sets its own.
    """
    from garden import pretrained

    if tf.io.gfile.exists(os.path.join(output, pretrained.INFO_FILE)):
        raise FileExistsError(f"{output} already holds a {pretrained.INFO_FILE}: give a new "
                              "directory")
    os.makedirs(output, exist_ok=True)
    config = backbone.get_config()
    plain = {name: False for name in SWITCHES if config.get(name)}
    if plain:
        clone = type(backbone).from_config({**config, **plain})
        clone.set_weights(backbone.get_weights())
        backbone = clone
    kind, files = vocab_files.tokenizer_files(vocab)
    record = {"source": "pruned", "family": family, "input": pruned_from,
              "architecture": pretrained.architecture_of(family, backbone),
              "checkpoint": pretrained.write_checkpoint(output, family, backbone),
              "tokenizer": pretrained.copy_tokenizer(output, family, kind, files, lower_case),
              "parameters": int(backbone.count_params()), "pruning": info or {}}
    with open(os.path.join(output, pretrained.INFO_FILE), "w") as f:
        json.dump(record, f, indent=2, sort_keys=True)
    return output
