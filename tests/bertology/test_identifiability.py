"""garden.bertology.identifiability: effective attention, token identifiability and hidden
token attribution, with answers known by construction."""

import numpy as np
import pytest
import tensorflow as tf

from garden.bertology import identifiability as ident
from garden.bertology.attention import attention_shares
from garden.models.bert.backbone import BertBackbone
from garden.models.bert.presets import untrained_bert_backbone
from garden.models.instrument import instrumented, layer_blocks, run

CLS, SEP = 2, 3


def _softmax_rows(rng, n):
    scores = rng.normal(scale=2.0, size=(n, n))
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def _batch(lengths, length, seed=0, vocab=20):
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), length), "int32")
    for b, n in enumerate(lengths):
        ids[b, :n] = rng.integers(5, vocab, size=n)
        ids[b, 0], ids[b, n - 1] = CLS, SEP
    return {"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": (ids > 0).astype("int32")}


def test_effective_attention_keeps_the_output_and_is_attention_at_full_rank():
    rng = np.random.default_rng(0)
    d, width = 4, 16
    w_o = rng.normal(size=(d, width))
    # n = 12 > d = 4: T has rank 4, a null space of 8 dimensions.
    a, t = _softmax_rows(rng, 12), rng.normal(size=(12, d)) @ w_o
    effective = ident.effective_attention_matrix(a, t)
    np.testing.assert_allclose(effective @ t, a @ t, atol=1e-10)
    assert np.abs(effective - a).max() > 0.05
    assert round(np.trace(ident.column_space_projection(t))) == d
    # n = 3 <= d with T of full rank: nothing to remove.
    a, t = _softmax_rows(rng, 3), rng.normal(size=(3, d)) @ w_o
    np.testing.assert_allclose(ident.effective_attention_matrix(a, t), a, atol=1e-12)
    # Two tokens with the same T row are indistinguishable: their weights are averaged.
    t[2] = t[1]
    effective = ident.effective_attention_matrix(a, t)
    np.testing.assert_allclose(effective[:, 1], (a[:, 1] + a[:, 2]) / 2, atol=1e-12)
    np.testing.assert_allclose(effective[:, 2], effective[:, 1], atol=1e-12)
    np.testing.assert_allclose(effective @ t, a @ t, atol=1e-12)


@pytest.fixture(scope="module")
def narrow_bert():
    """Head width d = 8, so a 12-token sentence has n > d and a 5-token one n <= d."""
    model = BertBackbone(vocab_size=20, num_layers=2, hidden_size=16, num_heads=2,
                         intermediate_size=32, dropout=0.0)
    rng = np.random.default_rng(3)
    model.set_weights([rng.normal(scale=0.5, size=w.shape) for w in model.get_weights()])
    return model


def test_value_transforms_rebuild_the_attention_output(narrow_bert):
    batch = _batch([12, 5], 12)
    model = instrumented(narrow_bert, output_attentions=True, output_hidden_states=True)
    outputs = run(model, batch)
    real = batch["padding_mask"].astype(bool)
    for layer, block in enumerate(layer_blocks(model)):
        x = outputs["hidden_states"][layer]
        transforms = ident.value_transforms(block, x)  # [B, A, T, H]
        rebuilt = np.einsum("bqk,bkh->bqh", outputs["attention_probs"][layer, :, 0],
                            transforms[:, 0])
        rebuilt += np.einsum("bqk,bkh->bqh", outputs["attention_probs"][layer, :, 1],
                             transforms[:, 1])
        rebuilt += block.attention.output_dense.bias.numpy()
        expected = block.attention(x, x, attention_mask=real[:, None, :]).numpy()
        np.testing.assert_allclose(rebuilt[real], expected[real], atol=1e-4)


def test_backbone_effective_attention_and_stats(narrow_bert):
    batch = _batch([12, 5], 12)
    result = ident.effective_attention(narrow_bert, batch)
    raw, effective = result["attention"], result["effective"]
    states = run(instrumented(narrow_bert, output_hidden_states=True), batch)["hidden_states"]
    for layer, block in enumerate(layer_blocks(narrow_bert)):
        t = ident.value_transforms(block, states[layer])
        for b, n in enumerate((12, 5)):
            for head in range(2):
                np.testing.assert_allclose(effective[layer, b, head, :n, :n] @ t[b, head, :n],
                                           raw[layer, b, head, :n, :n] @ t[b, head, :n],
                                           atol=1e-6)
    np.testing.assert_array_equal(result["rank"][:, 0], 8)   # min(n, d): 12 tokens, d = 8
    np.testing.assert_array_equal(result["rank"][:, 1], 5)
    np.testing.assert_allclose(effective[:, 1, :, :5, :5], raw[:, 1, :, :5, :5],
                               atol=1e-8)   # n = 5 <= d: A_eff = A
    assert np.abs(effective[:, 0] - raw[:, 0]).max() > 1e-2
    assert np.all(effective[:, 1, :, 5:] == 0) and np.all(effective[:, 1, :, :, 5:] == 0)
    stats = ident.effective_attention_stats(narrow_bert, batch, CLS, SEP, {7})
    assert stats["raw"] == attention_shares(raw, batch["token_ids"], batch["padding_mask"],
                                            CLS, SEP, {7})
    np.testing.assert_allclose(stats["rank"], np.full((2, 2), 6.5))
    assert stats["mean_length"] == 8.5
    assert np.all(np.asarray(stats["removed"]) > 0)
    assert set(stats["effective"]["shares"]) == set(stats["raw"]["shares"])


def test_a_probe_recovers_the_tokens_at_the_embedding_layer():
    backbone = untrained_bert_backbone("bert_tiny", vocab_size=50, dropout=0.0)
    lengths = np.random.default_rng(1).integers(8, 16, size=30)
    batch = _batch(lengths, 16, seed=2, vocab=50)
    result = ident.token_identifiability(backbone, batch, probes=("linear", "mlp"))
    accuracy = result["accuracy"]
    assert result["train_tokens"] + result["test_tokens"] == lengths.sum()
    assert result["train_tokens"] > 129  # more tokens than the linear probe's H + 1 unknowns
    assert len(accuracy["linear"]) == 3  # embeddings + 2 layers
    assert accuracy["identity"][0] == 1.0
    assert accuracy["linear"][0] >= 0.99
    assert accuracy["mlp"][0] >= 0.9
    assert all(0 <= a <= 1 for values in accuracy.values() for a in values)
    with pytest.raises(ValueError, match="at least two sentences"):
        ident.token_identifiability(backbone, _batch([6], 6))


def test_hidden_token_attribution_is_own_token_only_without_attention_mixing(narrow_bert):
    batch = _batch([7, 4], 7)
    mixed = ident.hidden_token_attribution(narrow_bert, batch, sequence=1)
    contributions = np.asarray(mixed["contributions"])
    assert contributions.shape == (2, 4, 4) and mixed["tokens"] == 4
    np.testing.assert_allclose(contributions.sum(-1), 1, atol=1e-12)
    assert np.all(contributions > 0) and np.all(np.asarray(mixed["own"]) < 1)
    # The last layer's rows against a Jacobian taken one coordinate at a time.
    hidden = run(instrumented(narrow_bert, output_hidden_states=True), batch)["hidden_states"]
    x = tf.constant(hidden[0][1:, :4])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        h = x
        for block in layer_blocks(narrow_bert):
            h = block(h, padding_mask=tf.ones((1, 4), tf.int32))
        coordinates = [h[0, j, k] for j in range(4) for k in range(16)]
    jacobian = np.stack([tape.gradient(c, x)[0].numpy() for c in coordinates])
    norms = np.sqrt((jacobian.reshape(4, 16, 4, 16) ** 2).sum(axis=(1, 3)))  # [j, i]
    np.testing.assert_allclose(contributions[-1], norms / norms.sum(-1, keepdims=True),
                               atol=1e-5)
    assert not np.allclose(contributions[-1], contributions[-1].T, atol=1e-3)  # j, i not i, j
    # With every attention output kernel zeroed a hidden token depends on its own input alone.
    isolated = type(narrow_bert).from_config(narrow_bert.get_config())
    isolated.set_weights(narrow_bert.get_weights())
    for block in layer_blocks(isolated):
        kernel = block.attention.output_dense.kernel
        kernel.assign(np.zeros(kernel.shape))
    alone = ident.hidden_token_attribution(isolated, batch, sequence=0)
    np.testing.assert_allclose(np.asarray(alone["contributions"]),
                               np.broadcast_to(np.eye(7), (2, 7, 7)), atol=1e-7)
    assert alone["own"] == pytest.approx([1, 1]) and alone["own_largest"] == [1, 1]
    assert np.asarray(alone["by_distance"])[:, 0] == pytest.approx([1, 1])  # all at distance 0
    by_distance = np.asarray(mixed["by_distance"])
    assert by_distance.shape == (2, 4)
    np.testing.assert_allclose(by_distance.sum(-1), 1, atol=1e-12)


def test_contribution_by_distance_sums_each_diagonal_band():
    contributions = np.array([[[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.4, 0.4, 0.2]]])
    # distance 0: the diagonal (0.5 + 0.6 + 0.2) / 3; 1: (0.3 + 0.1 + 0.3 + 0.4) / 3; 2: 0.6 / 3
    np.testing.assert_allclose(ident.contribution_by_distance(contributions),
                               [[1.3 / 3, 1.1 / 3, 0.6 / 3]], atol=1e-12)
