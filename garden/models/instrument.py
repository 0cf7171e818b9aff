"""An encoder backbone's optional outputs switched on, the block each layer runs, its attention
layers, and a batch run to NumPy: what garden.runs and the analyses (garden.bertology) take
from a backbone.

The encoder families (BERT, RoBERTa, ALBERT, ELECTRA, SpanBERT, DistilBERT, ERNIE) share
garden.models.backbone: `hidden_states` [L+1, B, T, H], `attention_probs` [L, B, A, T, T] and the
`head_mask` [L, A] input are constructor switches, so `instrumented` rebuilds a backbone with
them on and copies its weights (the switches add outputs, never change the weights).
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional

import keras
import numpy as np

from garden.layers.attention import MultiHeadAttention

# The backbone constructor switches of the optional outputs and the head mask input.
SWITCHES = ("output_hidden_states", "output_attentions", "use_head_mask")


def instrumented(backbone: keras.Model, **switches: bool) -> keras.Model:
    """`backbone` with the switches named in `switches` (SWITCHES) on: itself when they already
    are, otherwise the same architecture rebuilt from its config with the same weights.

    Example: instrumented(backbone, output_attentions=True)({...})["attention_probs"]
    """
    unknown = sorted(set(switches) - set(SWITCHES))
    if unknown:
        raise ValueError(f"unknown backbone switches {unknown}; choose from {SWITCHES}")
    config = backbone.get_config()
    missing = [name for name in SWITCHES if name not in config]
    if missing:
        family = backbone.family() if hasattr(backbone, "family") else "?"
        raise ValueError(
            f"the {family} backbone ({type(backbone).__name__}) has no {missing} in its config: "
            "the analyses need an encoder built on garden.models.backbone's shared encoder "
            "(bert, roberta, albert, electra, spanbert, distilbert)")
    wanted = {name: True for name, on in switches.items() if on and not config[name]}
    if not wanted:
        return backbone
    clone = type(backbone).from_config({**config, **wanted})
    clone.set_weights(backbone.get_weights())
    return clone


def layer_blocks(backbone: keras.Model) -> List[keras.layers.Layer]:
    """The TransformerEncoderBlock each of the backbone's `num_layers` layers runs, in order.

    A family with fewer distinct blocks than layers shares them in equal, consecutive groups
    (ALBERT's share="all": 12 layers over 1 block, or over num_groups blocks of 12 / groups).
    """
    blocks, num_layers = list(backbone.encoder_blocks), int(backbone.num_layers)
    if num_layers % len(blocks):
        raise ValueError(f"{backbone.name}: {len(blocks)} encoder blocks cannot run "
                         f"{num_layers} layers in equal groups")
    per_block = num_layers // len(blocks)
    return [blocks[i // per_block] for i in range(num_layers)]


def attention_layers(model: keras.Model) -> List[MultiHeadAttention]:
    """Every garden MultiHeadAttention inside `model` (a backbone or a task model around one),
    each once."""
    return [layer for layer in model._flatten_layers(include_self=False)
            if isinstance(layer, MultiHeadAttention)]


def model_inputs(batch: Mapping[str, np.ndarray], model: keras.Model,
                 head_mask: Optional[np.ndarray] = None) -> Dict[str, np.ndarray]:
    """The entries of `batch` that `model` takes, plus `head_mask` (all ones when the model
    takes one and none is given). Packers may add entries (e.g. labels) a model does not take."""
    names = list(model.input) if isinstance(model.input, dict) else []
    inputs = {name: np.asarray(batch[name]) for name in names if name in batch}
    if "head_mask" in names:
        shape = tuple(model.input["head_mask"].shape)
        inputs["head_mask"] = (np.ones(shape, "float32") if head_mask is None
                               else np.asarray(head_mask, "float32"))
    missing = [name for name in names if name not in inputs]
    if missing:
        raise ValueError(f"the batch has no {missing}, which {model.name} takes; the batch has "
                         f"{sorted(batch)}")
    return inputs


def run(model: keras.Model, batch: Mapping[str, np.ndarray],
        head_mask: Optional[np.ndarray] = None) -> Dict[str, np.ndarray]:
    """The model's outputs on `batch` (inference: no dropout) as NumPy arrays."""
    outputs = model(model_inputs(batch, model, head_mask), training=False)
    return keras.tree.map_structure(lambda x: np.asarray(keras.ops.convert_to_numpy(x)), outputs)
