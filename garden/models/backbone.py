"""The Backbone base every encoder family builds on: config from the constructor arguments,
the dtype policy, `untrained`, and the optional outputs of every layer.

A family subclass builds its layers (BERT's and the families composed from it:
`shared_encoder_layers`), then its functional graph with the helpers here (`backbone_inputs`,
`run_encoder`, `encoder_outputs`), then calls `Backbone.__init__`. It writes
no get_config: the arguments its constructor was called with (defaults filled in) are the config.
It names its layers bottom to top in `layer_groups()` (the per-layer fine-tuning switches,
train.layer_decay and train.unfreeze_every, count depth from them), unless the shared encoder's
attributes (embeddings, encoder_blocks, pooler) already say it.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Dict, List, Mapping, Optional, Sequence

import keras
import numpy as np
from keras import ops

from garden.layers.embeddings import TransformerEmbeddings, truncated_normal
from garden.layers.transformer_encoder import TransformerEncoderBlock
from garden.models.instrument import ENCODER

# Keras' own Layer arguments: get_config adds name and trainable itself; a
# `dtype` attribute would shadow Layer.dtype, so the policy is kept as dtype_policy.
_NOT_ATTRIBUTES = ("name", "trainable", "dtype")
# The optional outputs and head mask input of the shared encoder (Backbone's docstring). A
# family whose constructor does not take one accepts it only switched off (what it does anyway),
# or, for output_hidden_states, when its graph gives `hidden_states` anyway (ELMo, CoVe).
OPTIONAL_SWITCHES = ("output_hidden_states", "output_attentions", "use_head_mask")


class UnsupportedArgument(ValueError):
    """A constructor argument the family does not take (Keras' functional Model would ignore
    it): refused with the family and the argument named, instead of building without it."""


class Backbone(keras.Model):
    """Base of the encoder backbones: a Keras functional model with named dict inputs
    (token_ids, [segment_ids], padding_mask, [head_mask]) and outputs (sequence_output,
    [pooled_output], [hidden_states], [attention_probs]).

    What a subclass gets:
      * config: every constructor argument (defaults included) is recorded when the object is
        made; `get_config()` returns them and `from_config` calls the constructor with them, so no
        family writes either. Each argument is also an attribute (`backbone.hidden_size`).
        Arguments named in `non_config_args` (live objects such as ELECTRA's shared embeddings)
        are left out.
      * dtype: `dtype` (None, a string such as "mixed_bfloat16" or a keras.DTypePolicy) is set as
        the model's policy, which a functional Model would otherwise ignore, so heads built on
        top follow it.
      * `untrained(name, **overrides)`: a preset's architecture from the family's presets module
        (`presets_module`) with freshly initialised weights.
      * `token_embedding`: the word table layer (`self.embeddings.token_embedding`), which the
        MLM heads project onto (tied weights).
      * optional outputs, off by default; when off the graph is exactly the plain encoder's:
          output_hidden_states=True adds `hidden_states`, float [L+1, B, T, H]: the embeddings'
            output (after any projection to H) then every layer's output, stacked in one tensor
            so that it serves and slices like the other outputs; hidden_states[-1] is
            sequence_output.
          output_attentions=True adds `attention_probs`, float [L, B, A, T, T] (after softmax;
            with pruned heads, num_heads_per_layer, A is the most heads of any layer and the
            layers with fewer end in all-zero heads).
          use_head_mask=True adds the input `head_mask`, float [L, A]: 1 keeps a head, 0 removes
            its attention probabilities (Michel et al., 2019, "Are Sixteen Heads Really Better
            than One?"); like Hugging Face's `head_mask`, values in between scale the head.
    """

    presets_module: str = ""
    non_config_args: Sequence[str] = ()
    # What garden.bertology reads from it (garden.models.instrument.Readout); families that
    # are not the shared encoder state their own.
    readout = ENCODER

    def __new__(cls, *args, **kwargs):
        instance = super().__new__(cls, *args, **kwargs)
        # Recorded here, before the subclass's __init__ runs, so that the config is exactly what
        # the caller passed plus the signature's defaults: nothing to keep in sync by hand.
        signature = inspect.signature(cls.__init__)
        try:
            bound = signature.bind(None, *args, **kwargs)
        except TypeError:
            # Keras probes `cls.__new__(cls)` with no arguments when it makes the class
            # functional; a real call with bad arguments fails in __init__ with Python's message.
            return instance
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        for name, param in list(signature.parameters.items())[1:]:  # [0] is self
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                arguments.update(arguments.pop(name, {}))
        arguments.pop(next(iter(signature.parameters)))
        # numpy scalars (e.g. read from a checkpoint's config) as Python numbers, so that
        # get_config stays JSON-serializable.
        config = {k: v.item() if isinstance(v, np.generic) else v for k, v in arguments.items()
                  if k not in cls.non_config_args and k not in ("name", "trainable")}
        object.__setattr__(instance, "_backbone_config", config)
        return instance

    def __init__(self, inputs, outputs, dtype=None, **kwargs):
        # Keras' functional Model accepts and drops any keyword: a binding such as
        # `backbone.use_head_mask = True` on a family without head masks, or a misspelt
        # `backbone.dropuot`, would build the plain model without a word.
        keras_args = {k: kwargs.pop(k) for k in ("name", "trainable") if k in kwargs}
        _refuse_unknown(type(self), kwargs, outputs)
        super().__init__(inputs=inputs, outputs=outputs, **keras_args)
        for key, value in self._backbone_config.items():
            if key not in _NOT_ATTRIBUTES:
                setattr(self, key, value)
        if dtype is not None:
            self.dtype_policy = keras.dtype_policies.get(dtype)

    @property
    def token_embedding(self) -> keras.layers.ReversibleEmbedding:
        """The word table layer; the MLM heads project onto its (tied) weights."""
        return self.embeddings.token_embedding

    @classmethod
    def family(cls) -> str:
        """The family folder the class lives in (garden/models/<family>/): "bert" for
        BertBackbone (SpanBERT's and ERNIE's too), "xlnet" for XLNetBackbone."""
        parts = cls.__module__.split(".")
        return parts[2] if parts[:2] == ["garden", "models"] and len(parts) > 2 else cls.__name__

    # -- the layers in order, for the per-layer fine-tuning switches ------------------------
    def layer_groups(self) -> List[List[keras.layers.Layer]]:
        """The backbone's layers bottom to top, as the per-layer fine-tuning switches count
        depth (train.layer_decay: ELECTRA's layer-wise rates; train.unfreeze_every: ULMFiT's
        gradual unfreezing; garden.optimization):

            [embeddings], [layer 0], ..., [layer L-1], [top, when there is one]

        group 0 holds every embedding table and what acts on it before the first layer (norms,
        projections); one group per layer in the order the input runs through them (a
        bidirectional LSTM layer is its two directions; an encoder-decoder stacks the encoder's
        layers, then the decoder's, as a sequence runs through them; ALBERT's shared block is one
        group); a last group holds what sits above the top layer (BERT's pooler, GPT-2's and
        T5's final norm, ELMo's scalar mix). Variables outside the backbone (the task head) are
        one group above them all. The BERT-kind encoders keep the pooler's group even without a
        pooler (ELECTRA, DistilBERT: empty), so that depth is what ELECTRA's fine-tuning code
        counts: embeddings 0, layer i -> i + 1, pooler L + 1, the task head L + 2.

        The default is the shared encoder's (garden.models.backbone helpers): `embeddings`,
        the distinct `encoder_blocks` and the `pooler` slot; other families override it.
        """
        pooler = getattr(self, "pooler", None)
        return [[self.embeddings], *[[block] for block in self.encoder_blocks],
                [pooler] if pooler is not None else []]

    def variable_groups(self) -> List[List[keras.Variable]]:
        """The trainable variables of layer_groups(), group by group (same order). A variable
        that several groups hold (a block shared by several layers, ALBERT) belongs to the
        lowest. ValueError naming them when a trainable variable of the backbone is in no group
        (it would silently take the head's rate)."""
        seen, groups = set(), []
        for layers in self.layer_groups():
            group = []
            for layer in layers:
                for variable in layer.trainable_variables:
                    if id(variable) not in seen:
                        seen.add(id(variable))
                        group.append(variable)
            groups.append(group)
        missing = [v.path for v in self.trainable_variables if id(v) not in seen]
        if missing:
            raise ValueError(f"{type(self).__name__}.layer_groups() leaves out the trainable "
                             f"variables {missing}: name their layers in a group")
        return groups

    def get_config(self) -> Dict:
        config = {"name": self.name, "trainable": self.trainable, **self._backbone_config}
        if isinstance(config.get("dtype"), keras.DTypePolicy):
            config["dtype"] = keras.dtype_policies.serialize(config["dtype"])
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)

    @classmethod
    def presets(cls) -> Dict[str, Dict]:
        """The family's presets: name -> complete constructor config."""
        return importlib.import_module(cls.presets_module).PRESETS

    @classmethod
    def untrained(cls, name: str, **overrides) -> "Backbone":
        """A freshly initialised backbone of preset `name`: the preset's architecture with
        random weights; keyword arguments override it. Trained weights come from garden.convert
        (a released checkpoint) or a garden.train run (garden.runs.open).

        Example: BertBackbone.untrained("bert_tiny", vocab_size=1000, dropout=0.0)
        """
        presets = cls.presets()
        if name not in presets:
            raise ValueError(f"unknown {cls.__name__} preset {name!r}; choose one of "
                             f"{sorted(presets)} (in {cls.presets_module})")
        return cls(**{**presets[name], **overrides})

    @classmethod
    def from_preset(cls, name: str, **overrides):
        """Refused: keras-hub's from_preset returns trained weights and this garden's preset
        tables hold architectures only; the same name with the opposite meaning would hand a
        user random weights they take for trained ones."""
        raise TypeError(
            f"{cls.__name__}.from_preset is not offered: it would build preset {name!r} with "
            f"random weights, where keras-hub's from_preset loads trained ones. For the "
            f"architecture with fresh weights call {cls.__name__}.untrained({name!r}); for "
            f"trained weights convert a released checkpoint (python -m garden.convert) or open "
            f"a garden.train run (garden.runs.open)")


def _refuse_unknown(cls, extra: Mapping, outputs: Mapping) -> None:
    """UnsupportedArgument for the first constructor argument of `cls` that its signature does
    not take, except an OPTIONAL_SWITCHES one that asks for nothing the graph does not do."""
    for key, value in extra.items():
        if key in OPTIONAL_SWITCHES and not value:
            continue  # off: the family's graph is that already
        if key == "output_hidden_states" and "hidden_states" in outputs:
            continue  # the family gives every layer's states anyway (ELMo, CoVe)
        taken = [name for name in inspect.signature(cls.__init__).parameters
                 if name not in ("self", "kwargs")]
        what = {"output_hidden_states": "gives no hidden_states output (feature-based use: "
                                        "garden.Tagging.feature_layers, extract_features)",
                "output_attentions": "gives no attention probabilities",
                "use_head_mask": "takes no head mask (garden.bertology's head masking and "
                                 "pruning)"}.get(key, "takes no such argument")
        raise UnsupportedArgument(
            f"the {cls.family()} backbone ({cls.__name__}) {what}: {key}={value!r} is refused "
            f"rather than ignored; its arguments are {', '.join(taken)}")


def backbone_inputs(names: Sequence[str], use_head_mask: bool = False,
                    num_layers: int = 0, num_heads: int = 0) -> Dict[str, keras.KerasTensor]:
    """The named int32 [B, T] inputs, plus `head_mask` float [L, A] when asked for.

    The head mask has no batch axis (one mask for the whole batch, as Hugging Face's 2-D
    head_mask): keras.Input always adds one, so it is built with an explicit batch_shape.
    """
    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in names}
    if use_head_mask:
        inputs["head_mask"] = keras.Input(batch_shape=(num_layers, num_heads), dtype="float32",
                                          name="head_mask")
    return inputs


def input_names(backbone) -> tuple:
    """The names of a functional backbone's dict inputs that a task model on it feeds
    (classifier, tagger, span and multiple-choice heads), in BERT's order."""
    order = ("token_ids", "segment_ids", "padding_mask")
    names = set(backbone.input) if isinstance(backbone.input, dict) else set()
    if not {"token_ids", "padding_mask"} <= names:
        raise ValueError(f"backbone {backbone.name} has inputs {sorted(names)}; a task model "
                         f"needs dict inputs with token_ids and padding_mask")
    return tuple(n for n in order if n in names)


def run_encoder(x, layer_blocks: List[keras.layers.Layer], padding_mask, head_mask=None,
                output_hidden_states: bool = False, output_attentions: bool = False,
                mask_argument: str = "padding_mask"):
    """Applies `layer_blocks` (one entry per layer, so a shared block may repeat) to `x`;
    each block takes `padding_mask` as its `mask_argument` (TransformerDecoderBlock's:
    "decoder_padding_mask", for GPT's and GPT-2's causal blocks).

    Returns (sequence_output, extra outputs dict). With every option off this is the plain
    loop `x = block(x, padding_mask=padding_mask)`: no other op enters the graph.

    Blocks with fewer heads than others (pruned: encoder_block_list's num_heads_per_layer)
    read the first entries of their row of `head_mask`, and their attention probabilities are
    padded with all-zero heads at the end, up to the most heads of any block.
    """
    hidden_states, attention_probs = [x], []
    most_heads = max(getattr(block, "num_heads", 0) for block in layer_blocks)
    for i, block in enumerate(layer_blocks):
        block_kwargs = {}
        heads = getattr(block, "num_heads", most_heads)
        if head_mask is not None:
            block_kwargs["head_mask"] = (head_mask[i] if head_mask.shape[-1] == heads
                                         else head_mask[i, :heads])
        if output_attentions:
            x, scores = block(x, **{mask_argument: padding_mask},
                              return_attention_scores=True, **block_kwargs)
            if heads < most_heads:
                scores = ops.pad(scores, [[0, 0], [0, most_heads - heads], [0, 0], [0, 0]])
            attention_probs.append(scores)
        else:
            x = block(x, **{mask_argument: padding_mask}, **block_kwargs)
        hidden_states.append(x)
    extras = {}
    if output_hidden_states:
        extras["hidden_states"] = ops.stack(hidden_states, axis=0)
    if output_attentions:
        extras["attention_probs"] = ops.stack(attention_probs, axis=0)
    return x, extras


def ending_after_final_norm(hidden_states, output):
    """A pre-LN causal stack's hidden_states [L+1, B, T, H] with the last entry replaced by
    `output`, the top layer after the stack's final LayerNorm (as Hugging Face's GPT-2 gives
    them: hidden_states[-1] is sequence_output)."""
    earlier = ops.take(hidden_states, list(range(hidden_states.shape[0] - 1)), axis=0)
    return ops.concatenate([earlier, ops.expand_dims(output, 0)], axis=0)


def check_head_mask_support(output_attentions: bool, use_head_mask: bool):
    """Attention probabilities and head masks need garden.layers' block arguments."""
    params = inspect.signature(TransformerEncoderBlock.call).parameters
    for wanted, arg in ((output_attentions, "return_attention_scores"),
                        (use_head_mask, "head_mask")):
        if wanted and arg not in params:
            raise NotImplementedError(
                f"TransformerEncoderBlock.call has no `{arg}` argument in this tree; "
                "garden.layers must provide it before a backbone can output attention "
                "probabilities or take a head mask")


def optional_outputs(output_hidden_states: bool, output_attentions: bool,
                     use_head_mask: bool) -> Dict[str, bool]:
    """The run_encoder keyword arguments of the optional outputs (checked first)."""
    check_head_mask_support(output_attentions, use_head_mask)
    return dict(output_hidden_states=output_hidden_states, output_attentions=output_attentions)


def encoder_outputs(x, layer_blocks: List[keras.layers.Layer], inputs: Dict, pooler=None,
                    pooled: bool = True, output_hidden_states: bool = False,
                    output_attentions: bool = False, use_head_mask: bool = False) -> Dict:
    """The output dict of an encoder backbone's graph: run_encoder over `inputs`' padding_mask
    (and head_mask), then sequence_output, pooled_output and the optional outputs.

    pooled_output is `pooler` applied to the first token, or the first token itself when
    `pooler` is None (ELECTRA has no pooler dense); `pooled=False` leaves it out (DistilBERT).
    """
    x, extras = run_encoder(x, layer_blocks, inputs["padding_mask"], inputs.get("head_mask"),
                            **optional_outputs(output_hidden_states, output_attentions,
                                               use_head_mask))
    outputs = {"sequence_output": x}
    if pooled:
        outputs["pooled_output"] = x[:, 0, :] if pooler is None else pooler(x[:, 0, :])
    return {**outputs, **extras}


def encoder_block_list(num_layers: int, num_heads_per_layer: Optional[Sequence[int]] = None,
                       hidden_size: Optional[int] = None,
                       **block_args) -> List[TransformerEncoderBlock]:
    """`num_layers` independent TransformerEncoderBlocks named transformer_layer_{i} (the
    names the converters and checkpoints know), each made with `block_args`.

    num_heads_per_layer: None, or one head count per layer (a model whose heads were pruned,
    garden.bertology.prune): block i then has num_heads_per_layer[i] heads, each of the
    unpruned width hidden_size / block_args' num_heads (1 <= count <= num_heads)."""
    per_layer = [{}] * num_layers
    if num_heads_per_layer is not None:
        num_heads = block_args["num_heads"]
        counts = [int(n) for n in num_heads_per_layer]
        if len(counts) != num_layers or not all(1 <= n <= num_heads for n in counts):
            raise ValueError(f"num_heads_per_layer={counts}: give {num_layers} counts, each "
                             f"from 1 to num_heads={num_heads}")
        per_layer = [{"num_heads": n, "head_width": hidden_size // num_heads} for n in counts]
    return [TransformerEncoderBlock(name=f"transformer_layer_{i}", **{**block_args, **extra})
            for i, extra in enumerate(per_layer)]


def pooler_dense(hidden_size: int, initializer_range: float, dtype=None) -> keras.layers.Dense:
    """BERT's pooler: tanh dense H -> H, applied to the first token ([CLS] / <s>)."""
    return keras.layers.Dense(hidden_size, activation="tanh",
                              kernel_initializer=truncated_normal(initializer_range),
                              dtype=dtype, name="pooler_dense")


def shared_encoder_layers(vocab_size: int, num_layers: int, hidden_size: int, num_heads: int,
                          intermediate_size: int, *, max_sequence_length: int,
                          type_vocab_size: int, dropout: float, initializer_range: float,
                          layer_norm_epsilon: float, dtype=None, num_heads_per_layer=None,
                          pooled: bool = True, **block_args):
    """The layers of BERT's encoder, which RoBERTa and DistilBERT compose with other inputs:
    the word + position [+ token-type] TransformerEmbeddings "embeddings", num_layers post-LN
    blocks with exact GELU (encoder_block_list: transformer_layer_{i}, num_heads_per_layer for
    pruned heads) and BERT's tanh pooler "pooler_dense".

    type_vocab_size: rows of the token-type table (BERT 2, RoBERTa 1, DistilBERT 0 = none).
    pooled: False for no pooler (DistilBERT); the pooler returned is then None.
    block_args: further TransformerEncoderBlock arguments (DistilBERT's attention_dropout).

    Returns (embeddings, encoder_blocks, pooler); the family keeps them as the attributes of
    those names, where checkpoints and the converters find them.
    """
    embeddings = TransformerEmbeddings(
        vocab_size=vocab_size, hidden_size=hidden_size,
        max_sequence_length=max_sequence_length, type_vocab_size=type_vocab_size,
        dropout=dropout, initializer_range=initializer_range,
        layer_norm_epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings")
    encoder_blocks = encoder_block_list(
        num_layers, num_heads_per_layer, hidden_size, num_heads=num_heads,
        intermediate_size=intermediate_size, dropout=dropout, activation="gelu",
        layer_norm_epsilon=layer_norm_epsilon, initializer_range=initializer_range,
        dtype=dtype, **block_args)
    pooler = pooler_dense(hidden_size, initializer_range, dtype) if pooled else None
    return embeddings, encoder_blocks, pooler
