"""Effective attention (garden.bertology.identifiability) beyond garden's blocks: XLNet's
content stream, T5's encoder and decoder, BART's decoder (and encoder), on tiny shaken
backbones whose heads are narrower than the text (d = 4 < n = 9), so that T has a left null
space and effective attention differs from the raw one.

For each: Brunner's identity A_eff T = A T over the keys each query sees; a causal row is 0
past its query, as the raw one; and T is what the layer computes: sum_h A_h T_h + b_o equals
the self-attention sublayer's output recorded while the model runs."""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest

from analysis_testing import analyze_with, shaken, write_vocab
from garden import analyze
from garden.bertology import identifiability
from garden.models import instrument, stack_view
from garden.serving.text import TextPacker
from text import tokenizers

# Four heads of width 4: T [n, 16] has rank 4, below the 9 real tokens of row 0.
SIZE = dict(num_layers=2, hidden_size=16, num_heads=4, dropout=0.0)
IDS = np.array([[5, 6, 7, 8, 9, 10, 11, 12, 13, 0],
                [14, 15, 16, 17, 18, 0, 0, 0, 0, 0]], "int32")
SENTENCES = ["the movie was good and the plot was great .", "the film was bad .",
             "the plot was dull .", "the movie was good ."]



def _xlnet():
    from garden.models.xlnet.backbone import XLNetBackbone

    keras.utils.set_random_seed(0)
    return shaken(XLNetBackbone(vocab_size=20, intermediate_size=32, **SIZE))


def _seq2seq(family):
    from garden.models.bart.backbone import BartBackbone
    from garden.models.t5.backbone import T5Backbone

    keras.utils.set_random_seed(0)
    if family == "t5":
        return shaken(T5Backbone(vocab_size=20, intermediate_size=32, head_size=4, **SIZE))
    return shaken(BartBackbone(vocab_size=20, intermediate_size=32, max_sequence_length=12,
                                **SIZE))


# Each case: the backbone as analysed, its batch, its self-attention layers (those its
# graph runs) and how the recorded output of such a layer follows from sum_h A_h T_h + b_o.
@functools.lru_cache(maxsize=None)
def _case(name):
    batch = {"token_ids": IDS, "padding_mask": (IDS > 0).astype("int32")}
    if name == "xlnet":
        backbone = instrument.instrumented(_xlnet(), output_hidden_states=True,
                                           output_attentions=True)
        layers = [layer.rel_attn for layer in backbone.xlnet_layers]

        # Post-LN inside the layer: it returns LayerNorm(out + h), and its probabilities.
        def expected(layer, out, x):
            return np.asarray(layer.layer_norm(out + x))

        return backbone, {**batch, "segment_ids": np.zeros_like(IDS)}, layers, expected
    family, stack = name.split("_")
    backbone = stack_view.view(_seq2seq(family), stack, output_hidden_states=True,
                               output_attentions=True)
    inner = backbone.seq2seq_backbone
    layers = ([block.self_attention for block in getattr(inner, stack).blocks]
              if family == "t5" else
              [instrument.self_attention(block)[0] for block in getattr(inner, f"{stack}_blocks")])
    return backbone, batch, layers, lambda layer, out, x: out


CASES = ("xlnet", "t5_encoder", "t5_decoder", "bart_decoder", "bart_encoder")


@pytest.fixture(scope="module", params=CASES)
def case(request):
    return (request.param,) + _case(request.param)


def _recorded(layers, model, batch):
    """The model's outputs on batch and each layer's first output (before any residual outside
    it) in that run, read by wrapping the layers' call."""
    seen = []
    for layer in layers:
        def call(*args, _call=layer.call, **kwargs):
            out = _call(*args, **kwargs)
            seen.append(np.asarray(out[0] if isinstance(out, tuple) else out))
            return out
        object.__setattr__(layer, "call", call)
    try:
        outputs = instrument.run(model, batch)
    finally:
        for layer in layers:
            object.__delattr__(layer, "call")
    assert len(seen) == len(layers)
    return outputs, seen


def test_t_is_what_the_self_attention_adds(case):
    name, backbone, batch, layers, expected = case
    outputs, seen = _recorded(layers, backbone, batch)
    states, probs = outputs["hidden_states"], outputs["attention_probs"]
    transforms = instrument.layer_value_transforms(backbone)
    assert len(transforms) == len(layers) == 2
    n = batch["padding_mask"].sum(1)
    for layer, (transform, attention) in enumerate(zip(transforms, layers)):
        out = transform.output(probs[layer], states[layer])
        want = expected(attention, out.astype("float32"), states[layer])
        for b in range(len(n)):
            np.testing.assert_allclose(want[b, :n[b]], seen[layer][b, :n[b]], atol=2e-4,
                                       err_msg=f"{name} layer {layer}")
        assert np.abs(seen[layer]).max() > 0.1  # not trivially 0


def test_effective_attention_keeps_what_the_heads_add(case):
    name, backbone, batch, _, _ = case
    result = identifiability.effective_attention(backbone, batch)
    raw, effective = result["attention"], result["effective"]
    assert raw.shape == (2, 2, 4, 10, 10)
    causal = name.endswith("decoder")
    states = instrument.run(backbone, batch)["hidden_states"]
    n = batch["padding_mask"].sum(1)
    for layer, transform in enumerate(instrument.layer_value_transforms(backbone)):
        t = transform(states[layer])  # [B, A, T, H]
        for b in range(2):
            for head in range(4):
                for i in range(n[b]):
                    keys = slice(0, i + 1 if causal else n[b])
                    # Brunner's identity over the keys query i sees.
                    want = raw[layer, b, head, i, keys] @ t[b, head, keys]
                    got = effective[layer, b, head, i, keys] @ t[b, head, keys]
                    np.testing.assert_allclose(got, want, atol=1e-4 * np.abs(t).max(),
                                               err_msg=f"{name} {layer} {b} {head} {i}")
                    # Where the raw attention is 0 (past the query, padding) so is this.
                    zero = np.ones(10, bool)
                    zero[keys] = False
                    assert not raw[layer, b, head, i, zero].any()
                    assert not effective[layer, b, head, i, zero].any()
        assert (result["rank"][layer] == 4).all()  # d = 4 < n: a null space to remove
    assert np.abs(effective - raw).max() > 1e-2


def test_breaking_the_value_transform_is_seen(case):
    """The check above can fail: T5's norm dropped, XLNet's kernel transposed the other way,
    BART's value bias dropped, and the recorded outputs no longer match."""
    import dataclasses

    name, backbone, batch, layers, expected = case
    outputs, seen = _recorded(layers, backbone, batch)
    transform = instrument.layer_value_transforms(backbone)[0]
    if transform.norm is not None:
        broken = dataclasses.replace(transform, norm=None)
    elif transform.value_bias is not None:
        broken = dataclasses.replace(transform, value_bias=None)
    else:
        broken = dataclasses.replace(
            transform, output_kernel=np.swapaxes(transform.output_kernel, 0, 1))
    out = broken.output(outputs["attention_probs"][0], outputs["hidden_states"][0])
    want = expected(layers[0], out.astype("float32"), outputs["hidden_states"][0])
    assert np.abs(want[0, :9] - seen[0][0, :9]).max() > 1e-2


def test_t5_decoder_effective_attention_stats():
    backbone, batch, _, _ = _case("t5_decoder")
    stats = identifiability.effective_attention_stats(backbone, batch, None, None)
    assert np.asarray(stats["rank"]).shape == (2, 4) and stats["mean_length"] == 7.0
    assert len(stats["removed"]) == 2 and max(max(r) for r in stats["removed"]) > 1e-3


def test_analyze_identifiability_runs_effective_attention_on_xlnet(monkeypatch, tmp_path):
    vocab = tmp_path / "vocab.txt"
    write_vocab(vocab)
    tokenizer = tokenizers.load_tokenizer("wordpiece", str(vocab), lower_case=True)
    packer = TextPacker(tokenizer, 14, layout="xlnet")
    opened = analyze.Opened(_xlnet(), packer, list(tokenizer.vocab.tokens), "tiny xlnet",
                            path="tiny xlnet")
    code, report = analyze_with(monkeypatch, tmp_path, opened, "identifiability",
                                sentences=SENTENCES)
    assert code == 0
    assert set(report["not_applicable"]) == {"hidden_token_attribution"}
    assert report["not_applicable"]["hidden_token_attribution"].startswith(
        "XLNet's layers are its own relative-attention layers")
    effective = report["effective_attention"]
    assert np.asarray(effective["rank"]).shape == (2, 4)
    assert max(max(r) for r in effective["removed"]) > 1e-3  # 13 tokens, rank 4
