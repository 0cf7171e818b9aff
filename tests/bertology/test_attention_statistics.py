"""garden.bertology.attention: shares, entropy and head distances with known answers."""

import numpy as np
import pytest
from scipy.spatial import distance

from garden.bertology import attention as stats
from garden.models.bert.presets import untrained_bert_backbone

CLS, SEP, COMMA, STOP = 2, 3, 4, 5
# Two sequences, 5 and 7 real tokens: 12 real queries; 10 with a real previous / next token.
TOKEN_IDS = np.array([[CLS, 10, COMMA, 11, SEP, 0, 0],
                      [CLS, 12, 13, STOP, 14, 15, SEP]], "int32")
PADDING = (TOKEN_IDS > 0).astype("int32")


def _hand_built():
    """[L=2, B=2, A=4, T=7, T=7]: head 0 all on [CLS], head 1 on the previous token (position 0
    on itself), head 2 uniform over the real tokens, head 3 all on [SEP]; layer 1 = layer 0.
    Padding query rows hold noise, which the statistics must ignore."""
    rng = np.random.default_rng(0)
    probs = rng.uniform(size=(2, 2, 4, 7, 7))
    for b, n in enumerate(PADDING.sum(1)):
        sep = int(np.nonzero(TOKEN_IDS[b] == SEP)[0][0])
        for q in range(n):
            probs[:, b, :, q, :] = 0
            probs[:, b, 0, q, 0] = 1
            probs[:, b, 1, q, max(q - 1, 0)] = 1
            probs[:, b, 2, q, :n] = 1 / n
            probs[:, b, 3, q, sep] = 1
    return probs


def test_hand_built_heads_give_the_expected_shares_and_entropy():
    result = stats.attention_shares(_hand_built(), TOKEN_IDS, PADDING, CLS, SEP, {COMMA, STOP})
    shares = {name: np.asarray(values) for name, values in result["shares"].items()}
    assert result["queries"] == 12
    expected = {  # [head] for each target; the same in both layers
        "cls": [1, 4 / 12, 2 / 12, 0],          # head 1: positions 0 and 1 look at [CLS]
        "sep": [0, 0, 2 / 12, 1],
        "punctuation": [0, 2 / 12, 2 / 12, 0],  # head 1: the tokens after "," and "."
        "self": [2 / 12, 2 / 12, (5 * 1 / 5 + 7 * 1 / 7) / 12, 2 / 12],
        "previous": [2 / 10, 1, (4 / 5 + 6 / 7) / 10, 0],  # q=1 looks at [CLS]: head 0 too
        "next": [0, 0, (4 / 5 + 6 / 7) / 10, 2 / 10],      # the token before [SEP]
    }
    for name, values in expected.items():
        np.testing.assert_allclose(shares[name], [values, values], atol=1e-12, err_msg=name)
    uniform_entropy = (5 * np.log(5) + 7 * np.log(7)) / 12
    np.testing.assert_allclose(result["entropy"], [[0, 0, uniform_entropy, 0]] * 2, atol=1e-12)
    np.testing.assert_allclose(result["layer_means"]["sep"], [(2 / 12 + 1) / 4] * 2)


def test_js_divergence_is_zero_for_identical_and_ln2_for_disjoint_heads():
    probs = _hand_built()
    result = stats.head_distances(probs, PADDING)
    js = np.asarray(result["js_divergence"])
    assert result["heads"][:5] == ["L0-H0", "L0-H1", "L0-H2", "L0-H3", "L1-H0"]
    assert js.shape == (8, 8) and result["unit"] == "nats"
    np.testing.assert_allclose(js, js.T)
    np.testing.assert_allclose(np.diag(js), 0, atol=1e-12)
    np.testing.assert_allclose(js[0, 4], 0, atol=1e-12)        # L0-H0 and its copy L1-H0
    np.testing.assert_allclose(js[0, 3], np.log(2), atol=1e-12)  # [CLS] only vs [SEP] only
    # Any pair against scipy's Jensen-Shannon distance (its square is the divergence, base e).
    rows = stats.query_rows(probs, PADDING)
    expected = np.mean([distance.jensenshannon(p, q) ** 2
                        for p, q in zip(rows.probs[0, 1], rows.probs[1, 2])])
    np.testing.assert_allclose(js[1, 6], expected, atol=1e-12)
    assert sorted(result["order"]) == list(range(8))
    # Copies are neighbours in the cluster order.
    order = result["order"]
    assert abs(order.index(0) - order.index(4)) == 1


def test_padding_keys_and_shapes_are_checked():
    with pytest.raises(ValueError, match="not \\[L, B, A, T, T\\]"):
        stats.attention_shares(np.zeros((2, 2, 4, 6, 6)), TOKEN_IDS, PADDING, CLS, SEP)


def test_backbone_analysis_and_plots(tmp_path):
    backbone = untrained_bert_backbone("bert_tiny", vocab_size=20, dropout=0.0)
    batch = {"token_ids": TOKEN_IDS, "segment_ids": 0 * TOKEN_IDS, "padding_mask": PADDING}
    result = stats.analyze_attention(backbone, batch, CLS, SEP, {COMMA, STOP})
    shares = result["shares"]
    assert np.asarray(shares["shares"]["cls"]).shape == (2, 2)
    # A random tiny model attends nearly evenly: entropy close to the uniform head's.
    uniform_entropy = (5 * np.log(5) + 7 * np.log(7)) / 12
    np.testing.assert_allclose(shares["entropy"], np.full((2, 2), uniform_entropy), atol=0.05)
    paths = [stats.plot_layer_shares(shares, str(tmp_path / "shares.png")),
             stats.plot_head_distances(result["distances"], str(tmp_path / "distances.png")),
             stats.plot_attention_maps(_hand_built()[:, 1], ["[CLS]", "a", "b", ".", "c", "d",
                                                             "[SEP]"], str(tmp_path / "maps.png"))]
    for path in paths:
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
