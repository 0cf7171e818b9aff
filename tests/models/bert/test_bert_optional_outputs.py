"""BertBackbone's optional outputs against Hugging Face's BertModel on imported weights:
hidden_states = HF's output_hidden_states, attention_probs = HF's output_attentions, and a head
mask of 0 = HF with that head removed.

transformers 5 dropped BertModel's `head_mask` argument (and `prune_heads`), so the reference
for a masked head is what the mask means (Michel et al., 2019): the head's context is zeroed
before the output projection, which equals zeroing that head's columns of HF's
attention.output.dense weight.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from convert_testing import random_bert_inputs, randomize_torch_, save_hf_dir, torch_forward  # noqa: E402
from garden import convert  # noqa: E402
from garden.models.bert import BertBackbone  # noqa: E402

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=64, type_vocab_size=2,
            hidden_act="gelu")
HEAD_SIZE = TINY["hidden_size"] // TINY["num_attention_heads"]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """(HF BertModel with eager attention, garden backbone with every option, inputs)."""
    torch.manual_seed(0)
    config = transformers.BertConfig(**TINY, attn_implementation="eager")
    model = randomize_torch_(transformers.BertModel(config).eval(), seed=3)
    directory = save_hf_dir(model, str(tmp_path_factory.mktemp("hf_bert")))
    plain = convert.load_huggingface(directory, "bert")["backbone"]
    backbone = BertBackbone.from_config({**plain.get_config(), "output_hidden_states": True,
                                         "output_attentions": True, "use_head_mask": True})
    backbone.set_weights(plain.get_weights())
    inputs, _ = random_bert_inputs(3, 16, TINY["vocab_size"], seed=4)
    return model, backbone, inputs


def _ours(backbone, inputs, head_mask):
    return backbone({**inputs, "head_mask": head_mask}, training=False)


def test_hidden_states_and_attention_probs_equal_hugging_face(imported):
    model, backbone, inputs = imported
    ref = torch_forward(model, inputs, output_attentions=True)
    out = _ours(backbone, inputs, np.ones((3, 4), "float32"))
    np.testing.assert_allclose(out["hidden_states"], np.stack([h.numpy() for h in
                                                               ref.hidden_states]), atol=1e-4)
    expected = np.stack([a.numpy() for a in ref.attentions])  # [L, B, A, T, T]
    assert np.asarray(out["attention_probs"]).shape == expected.shape == (3, 3, 4, 16, 16)
    # Padded keys: HF gives them ~exp(-3.4e38) = 0, garden's mask the same.
    np.testing.assert_allclose(out["attention_probs"], expected, atol=1e-5)
    # Far from uniform (1/16 = 0.0625 over 16 keys), so 1e-5 is a tolerance that can fail.
    assert expected.max() > 0.2


def test_head_mask_zero_equals_the_head_removed(imported):
    model, backbone, inputs = imported
    layer, head = 1, 2
    head_mask = np.ones((3, 4), "float32")
    head_mask[layer, head] = 0.0
    out = _ours(backbone, inputs, head_mask)
    removed = randomize_torch_(transformers.BertModel(model.config).eval(), seed=3)
    with torch.no_grad():
        dense = removed.encoder.layer[layer].attention.output.dense.weight
        dense[:, head * HEAD_SIZE:(head + 1) * HEAD_SIZE] = 0.0
    ref = torch_forward(removed, inputs, output_attentions=True)
    np.testing.assert_allclose(out["sequence_output"], ref.last_hidden_state.numpy(), atol=1e-4)
    np.testing.assert_allclose(out["pooled_output"], ref.pooler_output.numpy(), atol=1e-4)
    # The head mattered: with it kept the outputs differ from the head-removed reference.
    kept = _ours(backbone, inputs, np.ones((3, 4), "float32"))
    assert np.max(np.abs(np.asarray(kept["sequence_output"]) - ref.last_hidden_state.numpy())) > 1e-2
    # Its attention probabilities read as removed; the other heads' are untouched.
    assert np.all(np.asarray(out["attention_probs"])[layer, :, head] == 0.0)
    np.testing.assert_allclose(np.asarray(out["attention_probs"])[0],
                               np.asarray(kept["attention_probs"])[0], atol=1e-6)
