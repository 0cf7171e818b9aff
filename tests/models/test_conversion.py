"""garden.models.conversion: the shared layer name tables and the strict assembler, on a real
TransformerEncoderBlock (each family's parity tests check the numbers end to end)."""

from __future__ import annotations

import numpy as np
import pytest

from garden.models import conversion
from garden.models.bert.backbone import BertBackbone

H, A, L = 8, 2, 1


def _backbone():
    return BertBackbone(vocab_size=11, num_layers=L, hidden_size=H, num_heads=A,
                        intermediate_size=12, max_sequence_length=6)


def test_layer_tables_cover_every_block_weight_once():
    backbone = _backbone()
    block_paths = {v.path for v in backbone.weights if v.path.startswith("transformer_layer_0/")}
    for layer in (conversion.HF_BERT_LAYER, conversion.TF1_BERT_LAYER,
                  conversion.HF_DISTILBERT_LAYER, conversion.HF_ALBERT_LAYER):
        table = conversion.encoder_layer_names(layer, "x", "transformer_layer_0/", A)
        assert sorted(path for path, _ in table.values()) == sorted(block_paths)


def test_transforms_give_garden_layouts():
    flat = np.arange(H * H, dtype="float32").reshape(H, H)  # torch [out, in]
    q = conversion.qkv_kernel(A)(flat)
    assert q.shape == (H, A, H // A)
    np.testing.assert_array_equal(q[:, 1, 0], flat[H // A, :])  # head 1's first output row
    o = conversion.attention_output_kernel(A)(flat)
    assert o.shape == (A, H // A, H)
    np.testing.assert_array_equal(o.reshape(H, H), flat.T)
    # TF1 kernels are [in, out] already.
    np.testing.assert_array_equal(conversion.qkv_kernel(A, transpose=False)(flat).reshape(H, H),
                                  flat)


def test_assign_weights_loads_and_names_every_problem():
    backbone = _backbone()
    names = conversion.hf_bert_encoder_names(L, A)
    names.update(conversion.HF_BERT_LAYER.dense("pooler.dense", "pooler_dense"))
    rng = np.random.default_rng(0)
    # Build source arrays whose transform lands on each variable's shape: take garden-shaped
    # random values and invert the layout by hand for the flat q/k/v/output kernels.
    garden_values = {v.path: rng.normal(size=tuple(v.shape)).astype("float32")
                     for v in backbone.weights}
    source = {}
    for name, (path, transform) in names.items():
        value = garden_values[path]
        if name.endswith(("query.weight", "key.weight", "value.weight")):
            value = value.reshape(H, H).T
        elif name.endswith("attention.output.dense.weight"):
            value = value.reshape(H, H).T
        elif name.endswith("bias") and value.ndim == 2:
            value = value.reshape(-1)
        elif name.endswith(".weight") and "LayerNorm" not in name and "embeddings" not in name:
            value = value.T
        source[name] = value
    assert conversion.assign_weights(backbone, source, names) == []
    for v in backbone.weights:
        np.testing.assert_array_equal(v.numpy(), garden_values[v.path])

    broken = dict(source, **{"classifier.weight": np.zeros(3, "float32")})
    del broken["encoder.layer.0.output.dense.bias"]
    broken["pooler.dense.weight"] = np.zeros((H, 3), "float32")
    with pytest.raises(ValueError, match="^my checkpoint: checkpoint does not match") as error:
        conversion.assign_weights(backbone, broken, names, source="my checkpoint")
    message = str(error.value)
    assert message.startswith("my checkpoint: checkpoint does not match")
    assert "missing parameters: ['encoder.layer.0.output.dense.bias']" in message
    assert "unexpected parameters: ['classifier.weight']" in message
    assert "shape mismatches: ['pooler.dense.weight (8, 3) -> pooler_dense/kernel" in message
    # Optional names may be absent (left initialised) and are reported back.
    partial = {k: v for k, v in source.items() if not k.startswith("pooler.")}
    assert conversion.assign_weights(_backbone(), partial, names,
                                     optional=("pooler.dense.weight", "pooler.dense.bias")) == \
        ["pooler.dense.bias", "pooler.dense.weight"]


def test_strip_prefix_and_check_tied():
    a = np.ones(2, "float32")
    assert set(conversion.strip_prefix({"bert.x": a, "y": a}, "bert.")) == {"x", "y"}
    with pytest.raises(ValueError, match="both with and without"):
        conversion.strip_prefix({"bert.x": a, "x": a}, "bert.")
    conversion.check_tied({"decoder": a, "table": a}, {"decoder": "table"})
    with pytest.raises(ValueError, match="decoder is not tied to table"):
        conversion.check_tied({"decoder": a, "table": 2 * a}, {"decoder": "table"})
