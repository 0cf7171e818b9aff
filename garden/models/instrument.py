"""An encoder backbone's optional outputs switched on, the block each layer runs, its attention
layers, and a batch run to NumPy: what garden.runs and the analyses (garden.bertology) take
from a backbone.

The encoder families (BERT, RoBERTa, ALBERT, ELECTRA, SpanBERT, DistilBERT, ERNIE) share
garden.models.backbone: `hidden_states` [L+1, B, T, H], `attention_probs` [L, B, A, T, T] and the
`head_mask` [L, A] input are constructor switches, so `instrumented` rebuilds a backbone with
them on and copies its weights (the switches add outputs, never change the weights). GPT and
GPT-2 take the same switches over their causal blocks, GPT-3-style over its dense and banded
ones, XLNet over its content stream (the head mask in its query stream too); ELMo gives its
hidden states always and has no attention; CVT and ULMFiT take output_hidden_states (their
LSTM layers zero-padded to the widest) and have no attention.

Each Backbone class states what the analyses may read from it as its `readout` (a Readout:
bidirectional or causal attention, or none and why; what hidden_states[0..L] are; the
attribute listing its layers' blocks). Backbone's own is ENCODER. A family whose layers are not
garden's blocks but whose self-attention effective attention can read (XLNet's content stream,
either stack of T5 and BART through a StackView) lists each layer's ValueTransform itself
(`value_transforms()`, read by layer_value_transforms).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Mapping, Optional, Tuple

import keras
import numpy as np

from garden.layers.attention import MultiHeadAttention
from garden.layers.transformer_decoder import TransformerDecoderBlock

# The backbone constructor switches of the optional outputs and the head mask input.
SWITCHES = ("output_hidden_states", "output_attentions", "use_head_mask")
# Which keys a query sees: every real token, or itself and those before it.
ATTENTION_KINDS = ("bidirectional", "causal")


@dataclasses.dataclass(frozen=True)
class Readout:
    """What garden.bertology reads from a family's backbone (its class attribute `readout`).

    attention: ATTENTION_KINDS, or None for a backbone without attention (an LSTM's).
    layers: what hidden_states[0], ..., [L] are, as the reports state it.
    no_attention: why there is no attention, one sentence naming the family (the analyses
        that need attention are refused with it); required when attention is None.
    blocks: the backbone attribute listing its distinct Transformer blocks in order ("" when
        it has none).
    no_blocks: when blocks is "", why its layers cannot be re-run one by one from
        hidden_states[0] (hidden token attribution is refused with it).
    stacks: an encoder-decoder's stacks ("encoder", "decoder"), analysed one at a time through
        garden.models.stack_view.StackView; () for a single stack.
    cross_attends: the layers also read another stack's states of the whole text (a
        decoder's cross-attention), so a state's context is the whole text even when its
        self-attention is causal.
    left_to_right: without attention, the layers read the text left to right only (ULMFiT's
        forward LSTMs), so a state has seen the text up to it, as under causal attention.
    """

    attention: Optional[str]
    layers: str
    no_attention: str = ""
    blocks: str = "encoder_blocks"
    no_blocks: str = ""
    stacks: Tuple[str, ...] = ()
    cross_attends: bool = False
    left_to_right: bool = False

    def __post_init__(self):
        if self.attention not in ATTENTION_KINDS + (None,):
            raise ValueError(f"Readout attention {self.attention!r}: choose one of "
                             f"{ATTENTION_KINDS} or None")
        if self.attention is None and not self.no_attention:
            raise ValueError("a Readout without attention says why (no_attention)")

    @property
    def causal(self) -> bool:
        """Self-attention over a query's own position and those before it."""
        return self.attention == "causal"

    @property
    def causal_states(self) -> bool:
        """A position's state has read only the text up to it (GPT, GPT-2, ULMFiT; not a
        decoder that cross-attends to its encoder's states of the whole text)."""
        return (self.causal and not self.cross_attends) or self.left_to_right


ENCODER = Readout("bidirectional", "0: the embeddings; 1..L: the Transformer layers' outputs")
CAUSAL = Readout("causal", "0: the embeddings; 1..L: the causal Transformer layers' outputs",
                 blocks="decoder_blocks")


class NoAttention(ValueError):
    """An analysis that needs attention asked of a backbone without any (Readout.no_attention)."""


def readout(backbone: keras.Model) -> Readout:
    """The Readout the backbone states (its class's; garden.models.backbone.Backbone: ENCODER;
    a StackView's depends on its stack)."""
    return backbone.readout


def family_name(backbone: keras.Model) -> str:
    """The family as errors name it ("gpt2"; a StackView: "bart decoder")."""
    if hasattr(backbone, "seq2seq_backbone"):
        return f"{backbone.seq2seq_backbone.family()} {backbone.stack}"
    return backbone.family() if hasattr(backbone, "family") else type(backbone).__name__


def require_attention(backbone: keras.Model, what: str) -> Readout:
    """The backbone's Readout; NoAttention "<what>: <why>" when it has no attention."""
    found = readout(backbone)
    if found.attention is None:
        raise NoAttention(f"{what}: {found.no_attention}")
    return found


def instrumented(backbone: keras.Model, **switches: bool) -> keras.Model:
    """`backbone` with the switches named in `switches` (SWITCHES) on: itself when they already
    are, otherwise the same architecture rebuilt from its config with the same weights.

    Example: instrumented(backbone, output_attentions=True)({...})["attention_probs"]
    """
    unknown = sorted(set(switches) - set(SWITCHES))
    if unknown:
        raise ValueError(f"unknown backbone switches {unknown}; choose from {SWITCHES}")
    if switches.get("output_attentions") or switches.get("use_head_mask"):
        require_attention(backbone, "attention probabilities and head masks")
    config = backbone.get_config()
    wanted = {}
    for name, on in switches.items():
        if not on or config.get(name):
            continue
        why = cannot_switch(backbone, name)
        if why:
            raise ValueError(why)
        if name in config:  # (not ELMo's hidden_states: given without a switch)
            wanted[name] = True
    if not wanted:
        return backbone
    clone = type(backbone).from_config({**config, **wanted})
    clone.set_weights(backbone.get_weights())
    return clone


def cannot_switch(backbone: keras.Model, name: str) -> str:
    """Why `backbone` cannot give what switch `name` (SWITCHES) adds, or "" when it can (it
    takes the switch, or, for output_hidden_states, gives hidden_states anyway)."""
    if name in backbone.get_config() or (name == "output_hidden_states"
                                         and "hidden_states" in backbone.output):
        return ""
    what = {"output_hidden_states": "read its hidden states",
            "output_attentions": "read its attention probabilities",
            "use_head_mask": "mask its heads"}[name]
    return (f"the {family_name(backbone)} backbone ({type(backbone).__name__}) takes no "
            f"{name} switch: garden.bertology cannot {what} yet")


def layer_blocks(backbone: keras.Model) -> List[keras.layers.Layer]:
    """The Transformer block each of the backbone's `num_layers` layers runs, in order (its
    Readout's `blocks`: TransformerEncoderBlocks, GPT's and GPT-2's TransformerDecoderBlocks).

    A family with fewer distinct blocks than layers shares them in equal, consecutive groups
    (ALBERT's share="all": 12 layers over 1 block, or over num_groups blocks of 12 / groups).
    """
    attribute = readout(backbone).blocks
    if not attribute:
        raise ValueError(f"the {family_name(backbone)} backbone's layers do not run one by "
                         f"one as garden's Transformer blocks (its Readout names none), which "
                         f"effective attention and attribution need")
    blocks, num_layers = list(getattr(backbone, attribute)), int(backbone.num_layers)
    if num_layers % len(blocks):
        raise ValueError(f"{backbone.name}: {len(blocks)} encoder blocks cannot run "
                         f"{num_layers} layers in equal groups")
    per_block = num_layers // len(blocks)
    return [blocks[i // per_block] for i in range(num_layers)]


def attention_layers(model: keras.Model) -> List[keras.layers.Layer]:
    """Every attention layer inside `model` (a backbone or a task model around one) that
    applies a head mask, each once: garden's MultiHeadAttention (the banded one too) and
    XLNet's relative attention, each with its `head_mask_mode`."""
    return [layer for layer in model._flatten_layers(include_self=False)
            if hasattr(layer, "head_mask_mode")]


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


def self_attention(block: keras.layers.Layer):
    """A Transformer block's self-attention layer and the LayerNorm its input goes through
    first (pre-LN), or None (post-LN): TransformerEncoderBlock's attention, or
    TransformerDecoderBlock's self_attention (GPT, GPT-2)."""
    if isinstance(block, TransformerDecoderBlock):
        attention, norm = block.self_attention, block.self_attention_layer_norm
    else:
        attention, norm = block.attention, block.attention_layer_norm
    return attention, norm if block.normalize_first else None


@dataclasses.dataclass(frozen=True)
class ValueTransform:
    """What one layer's self-attention adds to its output, for effective attention
    (garden.bertology.identifiability): head h adds A_h T_h, T_h = (norm(X) W_v + b_v) W_o of
    the layer input X, and the output bias is added once.

    value_kernel: W_v [H, A, d]; output_kernel: W_o [A, d, H].
    value_bias: b_v [A, d], output_bias: b_o [H]; None where the layer has none (T5, XLNet).
    norm: the norm the attention reads X through first (pre-LN: GPT-2's LayerNorm, T5's
        RMSNorm), None when X goes in as it is (post-LN: BERT, BART, XLNet).
    band_width: a banded layer's query sees only its last band_width keys (GPT-3-style);
        None: every key it may see.
    """

    value_kernel: np.ndarray
    output_kernel: np.ndarray
    value_bias: Optional[np.ndarray] = None
    output_bias: Optional[np.ndarray] = None
    norm: Optional[Callable] = None
    band_width: Optional[int] = None

    @classmethod
    def of(cls, attention: MultiHeadAttention, norm: Optional[Callable] = None):
        """The transform of a garden MultiHeadAttention read through `norm` (pre-LN) or not."""
        biases = ((attention.value_dense.bias.numpy(), attention.output_dense.bias.numpy())
                  if attention.use_bias else (None, None))
        return cls(attention.value_dense.kernel.numpy(), attention.output_dense.kernel.numpy(),
                   *biases, norm=norm, band_width=getattr(attention, "band_width", None))

    def __call__(self, layer_input) -> np.ndarray:
        """T of each head, [B, A, T, H] for the layer input X [B, T, H]."""
        x = layer_input if self.norm is None else self.norm(layer_input)
        x = np.asarray(keras.ops.convert_to_numpy(x), np.float64)
        values = np.einsum("btc,cad->batd", x, self.value_kernel)
        if self.value_bias is not None:
            values = values + self.value_bias[None, :, None, :]
        return np.einsum("batd,adh->bath", values, self.output_kernel)

    def output(self, probabilities: np.ndarray, layer_input) -> np.ndarray:
        """The attention's output before the residual, [B, T, H]: sum_h A_h T_h + b_o for the
        probabilities A [B, A, T, T] over the same keys as X."""
        out = np.einsum("baij,bajh->bih", np.asarray(probabilities, np.float64),
                        self(layer_input))
        return out if self.output_bias is None else out + self.output_bias


def layer_value_transforms(backbone: keras.Model) -> List[ValueTransform]:
    """Each of the backbone's num_layers layers' self-attention ValueTransform: the family's own
    listing where its layers are not garden's blocks (XLNetBackbone's and StackView's
    `value_transforms()`), else that of its layer_blocks."""
    own = getattr(backbone, "value_transforms", None)
    if own is not None:
        return list(own())
    return [ValueTransform.of(*self_attention(block)) for block in layer_blocks(backbone)]


def run_layers(backbone: keras.Model, x, padding_mask, training: bool = False) -> List:
    """hidden_states[1..L] of `backbone` computed from hidden_states[0] `x` [B, T, H] by its
    layer_blocks alone, so that gradients can be taken with respect to x. A causal backbone's
    last entry goes through its `finish` (GPT-2's final LayerNorm, GPT's identity), as its
    hidden_states' last entry does."""
    states = []
    for block in layer_blocks(backbone):
        if isinstance(block, TransformerDecoderBlock):
            x = block(x, decoder_padding_mask=padding_mask, training=training)
        else:
            x = block(x, padding_mask=padding_mask, training=training)
        states.append(x)
    if readout(backbone).causal:
        states[-1] = backbone.finish(states[-1])
    return states
