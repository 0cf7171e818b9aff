"""garden.models.backbone.Backbone: the config recorded from the constructor, untrained (from_preset refused), the
dtype policy, and the optional outputs (hidden states, attention probabilities, head mask) of
every family, checked against each backbone's own sequence_output and against Hugging Face."""

from __future__ import annotations

import numpy as np
import keras
import pytest

from garden.models.albert.backbone import AlbertBackbone
from garden.models.bert.backbone import BertBackbone
from garden.models.distilbert.backbone import DistilBertBackbone
from garden.models.electra.backbone import ElectraBackbone
from garden.models.roberta.backbone import RobertaBackbone

SMALL = dict(vocab_size=50, num_layers=3, hidden_size=16, num_heads=2, intermediate_size=24)
FAMILIES = {
    "bert": (BertBackbone, SMALL),
    "roberta": (RobertaBackbone, SMALL),
    "albert": (AlbertBackbone, dict(SMALL, embedding_size=8)),
    "electra": (ElectraBackbone, dict(SMALL, embedding_size=8)),
    "distilbert": (DistilBertBackbone, SMALL),
}


def _inputs(model, batch=2, length=7, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(2, 50, size=(batch, length)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 5:] = 0
    ids[1, 5:] = 1  # RoBERTa's <pad> id: its positions are computed from the ids
    given = {"token_ids": ids, "segment_ids": (np.arange(length) > 3).astype("int32")[None]
             .repeat(batch, 0), "padding_mask": mask}
    return {name: given[name] for name in model.input if name in given}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_hidden_states_are_every_layer_and_end_at_sequence_output(family):
    cls, config = FAMILIES[family]
    model = cls(**config, output_hidden_states=True, dropout=0.0)
    out = model(_inputs(model), training=False)
    states = np.asarray(out["hidden_states"])
    assert states.shape == (config["num_layers"] + 1, 2, 7, config["hidden_size"])
    np.testing.assert_array_equal(states[-1], np.asarray(out["sequence_output"]))
    # Each entry is the previous one through that layer's block (shared blocks included).
    blocks = ([model.block_for_layer(i) for i in range(model.num_layers)]
              if family == "albert" else model.encoder_blocks)
    mask = _inputs(model)["padding_mask"]
    for i, block in enumerate(blocks):
        np.testing.assert_allclose(block(states[i], padding_mask=mask, training=False),
                                   states[i + 1], atol=1e-5)
    # The same weights without the option give the same sequence_output.
    plain = cls(**config, dropout=0.0)
    plain.set_weights(model.get_weights())
    np.testing.assert_allclose(plain(_inputs(plain), training=False)["sequence_output"],
                               out["sequence_output"], atol=1e-6)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_optional_outputs_off_leave_the_plain_graph(family):
    cls, config = FAMILIES[family]
    plain = cls(**config)
    full = cls(**config, output_hidden_states=True, output_attentions=True, use_head_mask=True)
    assert "head_mask" not in plain.input and "head_mask" in full.input
    assert not {"hidden_states", "attention_probs"} & set(plain.output)
    assert {"hidden_states", "attention_probs"} <= set(full.output)
    # Off costs nothing: no op beyond the layers and the few slicing ops of the plain graph.
    assert len(full.operations) > len(plain.operations)
    assert not [op for op in plain.operations if "stack" in op.name]
    assert [w.path for w in plain.weights] == [w.path for w in full.weights]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_config_is_the_constructor_arguments(family):
    cls, config = FAMILIES[family]
    model = cls(**config, output_hidden_states=True, dtype="float32", name="mine")
    got = model.get_config()
    assert got["name"] == "mine" and got["output_hidden_states"] is True
    assert {k: got[k] for k in config} == config
    clone = cls.from_config(got)
    assert clone.get_config() == got
    assert clone.hidden_size == config["hidden_size"]  # every argument is an attribute
    assert "hidden_states" in clone.output


def test_dtype_policy_is_applied_and_serialized():
    policy = keras.DTypePolicy("mixed_bfloat16")
    model = BertBackbone(**SMALL, dtype=policy)
    assert model.dtype_policy.name == "mixed_bfloat16"
    assert model.embeddings.dtype_policy.name == "mixed_bfloat16"
    config = model.get_config()
    assert isinstance(config["dtype"], dict)  # a serialized policy, json-able
    assert BertBackbone.from_config(config).dtype_policy.name == "mixed_bfloat16"


@pytest.mark.parametrize("cls,preset", [(BertBackbone, "bert_tiny"), (RobertaBackbone,
                                        "roberta_base"), (DistilBertBackbone, "distilbert_base")])
def test_untrained_with_overrides(cls, preset):
    model = cls.untrained(preset, vocab_size=60, num_layers=1)
    expected = {**cls.presets()[preset], "vocab_size": 60, "num_layers": 1}
    assert {k: model.get_config()[k] for k in expected} == expected
    with pytest.raises(ValueError, match=preset):
        cls.untrained("no_such_preset")


def test_from_preset_is_refused_naming_untrained_and_where_trained_weights_come_from():
    """keras-hub's from_preset loads trained weights; a garden from_preset that built random
    ones would be the same name with the opposite meaning (issue 35 item 2)."""
    with pytest.raises(TypeError) as refused:
        BertBackbone.from_preset("bert_tiny")
    message = str(refused.value)
    assert "BertBackbone.untrained('bert_tiny')" in message
    assert "random weights" in message and "garden.convert" in message


def test_attention_probs_and_head_mask_shapes():
    model = AlbertBackbone(**dict(SMALL, embedding_size=8), output_attentions=True,
                           use_head_mask=True)
    inputs = _inputs(model)
    head_mask = np.ones((SMALL["num_layers"], SMALL["num_heads"]), "float32")
    out = model({**inputs, "head_mask": head_mask}, training=False)
    probs = np.asarray(out["attention_probs"])
    assert probs.shape == (3, 2, 2, 7, 7)  # [L, B, A, T, T]
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    assert np.all(probs[:, 1, :, :, 5:] < 1e-6)  # padded keys get no attention
    head_mask[1, 0] = 0.0
    masked = np.asarray(model({**inputs, "head_mask": head_mask}, training=False)
                        ["attention_probs"])
    assert np.all(masked[1, :, 0] == 0.0)
    np.testing.assert_allclose(masked[0], probs[0], atol=1e-6)


def test_numpy_config_values_are_stored_as_python_numbers():
    import json

    model = BertBackbone(**dict(SMALL, num_layers=np.int64(2)), dropout=np.float32(0.0),
                         layer_norm_epsilon=np.float64(1e-12))
    config = model.get_config()
    assert type(config["num_layers"]) is int and type(config["dropout"]) is float
    assert model.num_layers == 2
    json.dumps(config)  # what keras.saving writes
