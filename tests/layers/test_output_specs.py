"""The blocks' compute_output_spec (shapes and dtypes from the input shapes alone, so that a
functional model is built without tracing each block) against what Keras' default finds by
tracing call(): the same structure, shapes and dtypes for every option that changes them."""

from __future__ import annotations

import keras
import pytest

from garden.layers.transformer_decoder import TransformerDecoderBlock
from garden.layers.transformer_encoder import TransformerEncoderBlock
from garden.models.t5.backbone import T5Stack

POLICIES = ("float32", "mixed_bfloat16")


def _traced(layer, *args, **kwargs):
    """Keras' own answer: Layer.compute_output_spec traces call() when compute_output_shape is
    not overridden (none of these layers overrides it)."""
    return keras.layers.Layer.compute_output_spec(layer, *args, **kwargs)


def _specs(structure):
    return keras.tree.map_structure(lambda t: (tuple(t.shape), str(t.dtype)), structure)


def _same(layer, *args, **kwargs):
    fast = layer.compute_output_spec(*args, **kwargs)
    traced = _traced(layer, *args, **kwargs)
    assert _specs(fast) == _specs(traced), (layer.name, kwargs)
    return fast


def _tensor(shape, dtype="float32"):
    return keras.KerasTensor(shape, dtype=dtype)


def _float(shape, policy):
    """A float input as the layer's __call__ hands it to call(): cast to the compute dtype."""
    return _tensor(shape, keras.DTypePolicy(policy).compute_dtype)


@pytest.mark.parametrize("policy", POLICIES)
def test_encoder_block_specs_match_the_traced_call(policy):
    # head width 4: a pruned block, 2 heads of width 4 in H = 16
    for batch, head_width, scores, rows, extra in (
            (None, None, False, None, {}),
            (None, None, True, 3, {"head_mask": _float((2,), policy)}),
            (3, 4, True, None, {"attention_mask": _tensor((3, 7, 7), "int32")}),
            (3, 4, False, 3, {"attention_mask": _tensor((3, 7, 7), "int32")})):
        x, padding = _float((batch, 7, 16), policy), _tensor((batch, 7), "int32")
        block = TransformerEncoderBlock(num_heads=2, intermediate_size=32, dtype=policy,
                                        head_width=head_width)
        block.build(x.shape)
        positions = None if rows is None else _tensor((batch, rows), "int32")
        out = _same(block, x, padding_mask=padding, output_positions=positions,
                    return_attention_scores=scores, **extra)
        first = out[0] if scores else out
        assert tuple(first.shape) == (batch, rows or 7, 16)


@pytest.mark.parametrize("policy", POLICIES)
def test_decoder_block_specs_match_the_traced_call(policy):
    x, padding = _float((2, 5, 16), policy), _tensor((2, 5), "int32")
    encoded, encoder_padding = _float((2, 9, 16), policy), _tensor((2, 9), "int32")
    for cross in (False, True):
        block = TransformerDecoderBlock(num_heads=4, intermediate_size=32, dtype=policy)
        block.build(x.shape, encoded.shape if cross else None)
        for scores in (False, True):
            kwargs = dict(decoder_padding_mask=padding, return_attention_scores=scores)
            if cross:
                kwargs.update(encoder_sequence=encoded, encoder_padding_mask=encoder_padding)
            out = _same(block, x, **kwargs)
            assert len(out) == 2 + cross if scores else tuple(out.shape) == (2, 5, 16)
        # The call's own refusal still comes at build time, not first at the first real call.
        with pytest.raises(ValueError, match="cross"):
            block.compute_output_spec(x, **({} if cross else {"encoder_sequence": encoded}))


@pytest.mark.parametrize("policy", POLICIES)
def test_t5_stack_specs_match_the_traced_call(policy):
    x, padding = _float((None, 6, 16), policy), _tensor((None, 6), "int32")
    encoded, encoder_padding = _float((None, 4, 16), policy), _tensor((None, 4), "int32")
    for decoder in (False, True):
        stack = T5Stack(2, is_decoder=decoder, num_heads=2, head_size=8, intermediate_size=32,
                        dtype=policy)
        stack.build(x.shape)
        extra = dict(encoder_sequence=encoded, encoder_padding_mask=encoder_padding) if decoder else {}
        for outputs in ((), ("hidden_states",), ("attention_probs", "hidden_states")):
            out = _same(stack, x, padding_mask=padding, outputs=outputs, **extra)
            if outputs:
                assert sorted(out[1]) == sorted(outputs)


# (module, class, extra constructor arguments) of backbones whose functional graphs call the
# blocks above (BERT: encoder blocks, GPT-2: decoder blocks, XLNet: its layers, T5: stacks).
BACKBONES = {
    "bert": ("garden.models.bert.backbone", "BertBackbone", {"max_sequence_length": 16}),
    "gpt2": ("garden.models.gpt2.backbone", "GPT2Backbone", {"max_sequence_length": 16}),
    "xlnet": ("garden.models.xlnet.backbone", "XLNetBackbone", {}),
    "t5": ("garden.models.t5.backbone", "T5Backbone", {}),
}


@pytest.mark.parametrize("family", sorted(BACKBONES))
def test_functional_outputs_declare_what_the_model_computes(family):
    """A functional model built from these specs declares, for each output, the shape and
    dtype that running it gives (a wrong spec would show here, or break the build)."""
    import importlib

    import numpy as np

    module, name, extra = BACKBONES[family]
    model = getattr(importlib.import_module(module), name)(
        vocab_size=50, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32,
        dtype="mixed_bfloat16", output_hidden_states=True, output_attentions=True, **extra)
    names = model.input if isinstance(model.input, dict) else None
    assert names, "these backbones take a dict of inputs"
    length = 8
    real = model({name: np.ones((2, length), "int32") for name in names})
    declared = model.output
    assert sorted(real) == sorted(declared)
    for name, tensor in real.items():
        spec = declared[name]
        assert str(spec.dtype) == keras.backend.standardize_dtype(tensor.dtype), name
        assert len(spec.shape) == len(tensor.shape), name
        for want, got in zip(spec.shape, tensor.shape):
            assert want is None or want == got, (name, spec.shape, tensor.shape)
