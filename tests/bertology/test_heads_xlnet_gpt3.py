"""Head masks and attention probabilities of the two families that attend outside garden's
MultiHeadAttention blocks: XLNet (its relative attention, both streams) and the GPT-3-style
decoder (its banded layers, garden.layers.local_attention), and the analyses they open:
garden.analyze attention on GPT-3 (causal), heads and prune on an XLNet classifier."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from convert_testing import write_bpe_tokenizer
from analysis_testing import analyze_with, labelled_dev, SENTENCES, shaken, TINY as SIZE, write_vocab
from garden import analyze
from garden.bertology import heads
from garden.layers.attention import MultiHeadAttention
from garden.layers.local_attention import LocalMultiHeadAttention, band_mask
from garden.models import instrument
from garden.serving.text import TextPacker
from text import tokenizers




def _without_head(backbone, kernel_of, layer, head, axis):
    """A copy of `backbone` whose head `head` of layer `layer` writes nothing: its slice
    (along `axis`) of the attention output kernel at 0, what a head mask of 0 must equal."""
    copy = type(backbone).from_config(backbone.get_config())
    copy.set_weights(backbone.get_weights())
    kernel = kernel_of(copy, layer)
    value = kernel.numpy()
    np.moveaxis(value, axis, 0)[head] = 0
    kernel.assign(value)
    return copy


# --- XLNet -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def xlnet(tmp_path_factory):
    from garden.models.xlnet.backbone import XLNetBackbone

    vocab = tmp_path_factory.mktemp("xlnet") / "vocab.txt"
    write_vocab(vocab)
    tokenizer = tokenizers.load_tokenizer("wordpiece", str(vocab), lower_case=True)
    keras.utils.set_random_seed(0)
    backbone = shaken(XLNetBackbone(vocab_size=15, intermediate_size=32, **SIZE))
    return backbone, TextPacker(tokenizer, 10, layout="xlnet"), tokenizer


def test_xlnet_head_mask_silences_exactly_one_head(xlnet):
    backbone, packer, _ = xlnet
    assert "head_mask" not in backbone.input  # off by default: the plain graph
    batch = packer.encode_numpy(["the movie was good", "the plot"])
    masked = instrument.instrumented(backbone, use_head_mask=True, output_attentions=True)
    plain = instrument.run(backbone, batch)
    ones = instrument.run(masked, batch)
    np.testing.assert_array_equal(ones["sequence_output"], plain["sequence_output"])
    mask = np.ones((2, 2), "float32")
    mask[1, 0] = 0
    off = instrument.run(masked, batch, mask)
    probs, before = off["attention_probs"], ones["attention_probs"]
    assert probs[1, :, 0].max() == 0 and before[1, :, 0].min() >= 0 and before[1, :, 0].max() > 0
    np.testing.assert_allclose(probs[1, :, 1], before[1, :, 1], atol=1e-6)  # the other head
    np.testing.assert_allclose(probs[0], before[0], atol=1e-6)  # the layer below
    assert np.abs(off["sequence_output"] - ones["sequence_output"]).max() > 1e-3
    # A head whose probabilities are 0 writes nothing: the same as its rows of o at 0.
    silent = _without_head(backbone, lambda m, i: m.xlnet_layers[i].rel_attn.o, 1, 0, axis=1)
    np.testing.assert_allclose(off["sequence_output"],
                               instrument.run(silent, batch)["sequence_output"], atol=1e-5)
    # The query stream (pretraining) takes the same mask.
    length = batch["token_ids"].shape[1]
    perm = np.triu(np.ones((2, length, length), "float32"), 1)  # left to right
    targets = np.eye(length, dtype="float32")[None, 1:3].repeat(2, axis=0)
    inputs = {k: batch[k] for k in ("token_ids", "segment_ids", "padding_mask")}

    def streams(model, head_mask=None):
        given = inputs if head_mask is None else {**inputs, "head_mask": head_mask}
        out = model.streams(given, perm_mask=perm, target_mapping=targets, training=False)
        return np.asarray(out["content"]), np.asarray(out["query"])

    for got, want in zip(streams(masked, np.ones((2, 2), "float32")), streams(backbone)):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(streams(masked, mask), streams(silent)):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_xlnet_uniform_mode_attends_evenly_over_the_real_tokens(xlnet):
    backbone, packer, _ = xlnet
    batch = packer.encode_numpy(["the movie was good", "the plot"])
    masked = instrument.instrumented(backbone, use_head_mask=True, output_attentions=True)
    mask = np.ones((2, 2), "float32")
    mask[0, 1] = 0
    with heads.head_mask_mode(masked, "uniform"):
        probs = instrument.run(masked, batch, mask)["attention_probs"]
    assert len(instrument.attention_layers(masked)) == 2
    assert [layer.head_mask_mode for layer in instrument.attention_layers(masked)] == \
        ["scale", "scale"]  # restored
    n = int(batch["padding_mask"][1].sum())  # "the plot <sep> <cls>": 4 real of 10
    np.testing.assert_allclose(probs[0, 1, 1, :n, :n], 1 / n, atol=1e-6)
    assert probs[0, 1, 1, :n, n:].max() == 0
    assert np.abs(probs[0, 1, 0, :n, :n] - 1 / n).max() > 1e-3  # the kept head is its own


def _xlnet_opened(xlnet, tmp_path):
    from garden.models.classification import SequenceClassifier

    backbone, packer, tokenizer = xlnet
    keras.utils.set_random_seed(1)
    classifier = SequenceClassifier(backbone, num_classes=2, dropout=0.0)
    data = labelled_dev(tmp_path / "dev.tsv", SENTENCES * 2)
    opened = analyze.Opened(backbone, packer, list(tokenizer.vocab.tokens), "tiny xlnet",
                            classifier=classifier.classifier_dense, labels=["neg", "pos"],
                            task_model=classifier, family="xlnet", path="tiny xlnet")
    return opened, classifier, data


def test_xlnet_classifier_heads_and_prune_through_garden_analyze(xlnet, tmp_path, monkeypatch,
                                                                 capsys):
    from garden.bertology.scoring import scored_classifier

    opened, classifier, data = _xlnet_opened(xlnet, tmp_path)
    scored = scored_classifier(opened, str(data), "heads")
    logits = instrument.run(scored.model, scored.batch)
    # All heads on: the run's own logits (the last real token, <cls>, as it pooled).
    np.testing.assert_allclose(logits, instrument.run(classifier, scored.batch)["logits"],
                               atol=1e-5)
    mask = np.ones((2, 2), "float32")
    mask[1, 1] = 0
    assert np.abs(instrument.run(scored.model, scored.batch, mask) - logits).max() > 1e-4
    monkeypatch.setattr(analyze, "open_model", lambda path, length, stack="": opened)
    out = tmp_path / "report"
    common = ["--model=tiny xlnet", f"--task_data={data}", f"--output={out}"]
    assert analyze.main(["heads", *common]) == 0
    report = json.loads((out / "heads.json").read_text())
    assert report["num_layers"] == 2 and report["num_heads"] == 2
    assert report["baseline"] == pytest.approx(scored.accuracy(logits))
    assert np.asarray(report["heads"]["zero"]).shape == (2, 2)
    assert set(report["heads"]) == {"zero", "uniform"}
    assert analyze.main(["prune", *common, "--prune_step=0.25"]) == 0
    pruned = json.loads((out / "prune.json").read_text())
    assert pruned["baseline"] == pytest.approx(scored.accuracy(logits))
    assert len(pruned["curve"]) >= 2
    capsys.readouterr()
    # Removing the heads' weights needs num_heads_per_layer: refused before any scoring.
    code = analyze.main(["prune", *common, f"--pruned_output={tmp_path / 'smaller'}"])
    err = capsys.readouterr().err
    assert code == 2 and "the xlnet backbone (XLNetBackbone) takes no num_heads_per_layer" in err
    assert not (tmp_path / "smaller").exists()


def test_xlnet_head_importance_reaches_every_head(xlnet, tmp_path):
    from garden.bertology import prune
    from garden.bertology.scoring import scored_classifier

    opened, _, data = _xlnet_opened(xlnet, tmp_path)
    scored = scored_classifier(opened, str(data), "prune")

    def loss(batch, logits):
        return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(
            batch["label"], logits, from_logits=True))

    importance = prune.head_importance(scored.model, [scored.batch], loss)
    assert importance.shape == (2, 2) and importance.min() > 0


# --- GPT-3-style -----------------------------------------------------------------------------

def _attention_pair(width, hidden=16, heads_=2):
    """A banded layer and a dense MultiHeadAttention with the same weights."""
    keras.utils.set_random_seed(3)
    local = LocalMultiHeadAttention(heads_, hidden // heads_, band_width=width)
    local.build((None, None, hidden))
    dense = MultiHeadAttention(heads_, hidden // heads_)
    dense.build((None, None, hidden))
    dense.set_weights(local.get_weights())
    return local, dense


@pytest.mark.parametrize("length,width", [(11, 3), (8, 4), (6, 6), (5, 9)])
@pytest.mark.parametrize("mode", ["scale", "uniform"])
def test_banded_probabilities_and_head_mask_equal_the_dense_layer_under_the_band(length, width,
                                                                                 mode):
    local, dense = _attention_pair(width)
    local.head_mask_mode = dense.head_mask_mode = mode
    rng = np.random.default_rng(length + width)
    x = rng.normal(size=(2, length, 16)).astype("float32")
    key_mask = np.ones((2, length), bool)
    key_mask[1, :2] = False  # left padding
    band = np.logical_and(np.asarray(band_mask(length, length, width)), key_mask[:, None, :])
    real = slice(2, None)  # row 1's real queries (its padded rows differ: no key)
    for head_mask in (None, np.array([1.0, 0.0], "float32"), np.array([0.5, 1.0], "float32")):
        out, probs = local(x, x, attention_mask=key_mask[:, None, :], head_mask=head_mask,
                           return_attention_scores=True)
        want, want_probs = dense(x, x, attention_mask=band, head_mask=head_mask,
                                 return_attention_scores=True)
        out, probs, want, want_probs = map(np.asarray, (out, probs, want, want_probs))
        assert probs.shape == (2, 2, length, length)
        np.testing.assert_allclose(probs[0], want_probs[0], atol=1e-6)
        np.testing.assert_allclose(probs[1, :, real], want_probs[1, :, real], atol=1e-6)
        np.testing.assert_allclose(out[0], want[0], atol=1e-5)
        np.testing.assert_allclose(out[1, real], want[1, real], atol=1e-5)
        assert np.all(probs[0][:, ~band[0]] == 0)  # nothing outside the band
        if head_mask is None:
            np.testing.assert_allclose(probs[0].sum(-1), 1, atol=1e-6)
            np.testing.assert_array_equal(out, np.asarray(local(
                x, x, attention_mask=key_mask[:, None, :])))  # the plain call
            ones = np.asarray(local(x, x, attention_mask=key_mask[:, None, :],
                                    head_mask=np.ones(2, "float32")))
            np.testing.assert_array_equal(ones, out)
        elif mode == "scale" and head_mask[1] == 0:
            assert probs[:, 1].max() == 0
        elif mode == "uniform" and head_mask[1] == 0:
            seen = band[0].sum(-1)  # keys in each query's band
            np.testing.assert_allclose(probs[0, 1], band[0] / seen[:, None], atol=1e-6)
    if width >= length:  # a band over the whole sequence: dense causal attention
        causal = np.tril(np.ones((length, length), bool))[None] & key_mask[:, None, :]
        _, dense_probs = dense(x, x, attention_mask=causal, return_attention_scores=True)
        _, probs = local(x, x, attention_mask=key_mask[:, None, :], return_attention_scores=True)
        np.testing.assert_allclose(np.asarray(probs)[0], np.asarray(dense_probs)[0], atol=1e-6)


def test_banded_scores_are_refused_with_a_cache():
    local, _ = _attention_pair(3)
    x = np.ones((1, 1, 16), "float32")
    cache = (np.zeros((1, 2, 4, 8), "float32"), np.zeros((1, 2, 4, 8), "float32"))
    with pytest.raises(ValueError, match="without a cache only"):
        local(x, x, cache=cache, cache_update_index=0, return_attention_scores=True)
    with pytest.raises(ValueError, match="attention_bias"):
        local(x, x, attention_bias=np.zeros((1, 2, 1, 1), "float32"))


@pytest.fixture(scope="module")
def gpt3(tmp_path_factory):
    from garden.models.gpt3.backbone import GPT3Backbone

    folder = tmp_path_factory.mktemp("gpt3")
    size = write_bpe_tokenizer(str(folder), gpt2=True)
    tokenizer = tokenizers.load_tokenizer("bpe", str(folder / "vocab.json"), lower_case=False)
    keras.utils.set_random_seed(0)
    # Layer 0 dense, layer 1 banded over 3 tokens (sentences are 5-12 pieces).
    backbone = shaken(GPT3Backbone(vocab_size=size, intermediate_size=32,
                                    max_sequence_length=16, band_width=3, **SIZE))
    return backbone, TextPacker(tokenizer, 12, layout="gpt2"), tokenizer


def test_gpt3_attention_probs_and_head_mask(gpt3):
    backbone, packer, _ = gpt3
    assert "head_mask" not in backbone.input and "attention_probs" not in backbone.output
    batch = packer.encode_numpy(["the movie was good and great", "the plot"])
    full = instrument.instrumented(backbone, output_attentions=True, use_head_mask=True,
                                   output_hidden_states=True)
    plain = instrument.run(backbone, batch)
    ones = instrument.run(full, batch)
    np.testing.assert_array_equal(ones["sequence_output"], plain["sequence_output"])
    probs = ones["attention_probs"]  # [L, B, A, T, T]
    n = int(batch["padding_mask"][0].sum())
    assert n > 3
    rows = probs[:, 0, :, :n, :n]
    np.testing.assert_allclose(rows.sum(-1), 1, atol=1e-5)
    dense_band = np.tril(np.ones((n, n), bool))
    narrow_band = np.asarray(band_mask(n, n, 3))[0]
    assert np.all(rows[0][:, ~dense_band] == 0) and rows[0][:, n - 1, 0].min() > 0
    assert np.all(rows[1][:, ~narrow_band] == 0) and rows[1][:, n - 1, n - 3].min() > 0
    assert probs[:, 0, :, :n, n:].max() == 0  # padding keys
    mask = np.ones((2, 2), "float32")
    mask[1, 0] = 0  # a head of the banded layer
    off = instrument.run(full, batch, mask)
    assert off["attention_probs"][1, :, 0].max() == 0
    np.testing.assert_allclose(off["attention_probs"][1, :, 1], probs[1, :, 1], atol=1e-6)
    silent = _without_head(backbone,
                           lambda m, i: m.decoder_blocks[i].self_attention.output_dense.kernel,
                           1, 0, axis=0)  # [A, d, H]
    np.testing.assert_allclose(off["sequence_output"],
                               instrument.run(silent, batch)["sequence_output"], atol=1e-5)
    assert np.abs(off["sequence_output"] - ones["sequence_output"]).max() > 1e-3


def test_gpt3_effective_attention_stays_inside_each_layers_band(gpt3):
    """Effective attention of a banded layer projects each row on the value transforms of the
    keys the layer sees (its band), so it is zero wherever the raw attention is, and
    A_eff T = A T over those keys (Brunner et al.'s identity)."""
    from garden.bertology import identifiability

    backbone, packer, _ = gpt3
    batch = packer.encode_numpy(["the movie was good and great and the plot was dull"])
    result = identifiability.effective_attention(backbone, batch)
    n = int(batch["padding_mask"][0].sum())
    assert n > 6
    raw, effective = result["attention"][:, 0, :, :n, :n], result["effective"][:, 0, :, :n, :n]
    outside = ~np.asarray(band_mask(n, n, 3))[0]  # layer 1 is banded over 3 keys
    assert np.all(raw[1][:, outside] == 0)
    assert np.abs(effective[1][:, outside]).max() == 0
    assert np.abs(effective[0][:, ~np.tril(np.ones((n, n), bool))]).max() == 0
    model = instrument.instrumented(backbone, output_hidden_states=True)
    states = instrument.run(model, batch)["hidden_states"]
    block = instrument.layer_blocks(model)[1]
    transforms = identifiability.value_transforms(block, states[1])[0, :, :n]  # [A, n, H]
    np.testing.assert_allclose(np.einsum("aij,ajh->aih", effective[1], transforms),
                               np.einsum("aij,ajh->aih", raw[1], transforms), atol=1e-4)


def test_garden_analyze_attention_on_gpt3_is_causal(gpt3, monkeypatch, tmp_path):
    backbone, packer, tokenizer = gpt3
    opened = analyze.Opened(backbone, packer, list(tokenizer.vocab.tokens), "tiny gpt3",
                            path="tiny gpt3")
    code, report = analyze_with(monkeypatch, tmp_path, opened, "attention")
    assert code == 0
    shares = report["shares"]
    assert shares["attention"] == "causal" and shares["keys"].startswith("causal")
    assert "next" not in shares["shares"] and len(shares["shares"]["self"]) == 2
    assert (tmp_path / "report" / "attention_maps.png").exists()


def test_gpt3_heads_are_scored_through_its_last_token_classifier(gpt3, tmp_path):
    from garden.bertology.scoring import scored_classifier
    from garden.models.gpt.classifier import LastTokenClassifier

    backbone, packer, tokenizer = gpt3
    keras.utils.set_random_seed(1)
    classifier = LastTokenClassifier(backbone, num_classes=2, dropout=0.0)
    data = labelled_dev(tmp_path / "dev.tsv")
    opened = analyze.Opened(backbone, packer, list(tokenizer.vocab.tokens), "tiny gpt3",
                            classifier=classifier.classifier_dense, labels=["neg", "pos"],
                            task_model=classifier)
    scored = scored_classifier(opened, str(data), "heads")
    logits = instrument.run(scored.model, scored.batch)
    np.testing.assert_allclose(logits, instrument.run(classifier, scored.batch)["logits"],
                               atol=1e-5)
    result = heads.head_ablation(scored.model, scored.batch,
                                 lambda out: float(np.asarray(out)[:, 1].mean()))
    assert result["baseline"] == pytest.approx(float(logits[:, 1].mean()), abs=1e-5)
    # Each head of the banded layer 1 moves the logit; uniform differs from zeroed.
    changes = np.abs(np.asarray(result["heads"]["zero"])[1] - result["baseline"])
    assert changes.min() > 1e-5
    assert np.abs(np.asarray(result["heads"]["zero"]) -
                  np.asarray(result["heads"]["uniform"])).max() > 1e-5
