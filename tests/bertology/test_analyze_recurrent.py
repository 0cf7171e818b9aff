"""garden.analyze on the recurrent families whose layers were not read before: CVT's biLSTM
encoder and ULMFiT's AWD-LSTM. Their output_hidden_states switch stacks the word vectors and
every LSTM layer, each zero-padded to the widest; the analyses of hidden states run through
garden.analyze main (ULMFiT's left to right: a word's context is the words before it), and those
of attention stay refused by name."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from analysis_testing import analyze_with, SENTENCES, shaken, word_tag_conll, write_vocab
from garden import analyze
from garden.bertology import neighbours
from garden.models import instrument
from garden.models.cvt.backbone import CvtBackbone
from garden.models.ulmfit.backbone import AwdLstmBackbone
from garden.serving.text import TextPacker
from text import tokenizers

# Widths that differ and whose widest is not the last layer: CVT 12, 2 x 10, 2 x 7 (the
# widest, 20, is layer 1); ULMFiT 12, 20, 20, 12.
BUILD = {
    "cvt": lambda **switch: CvtBackbone(vocab_size=15, embedding_size=12, layer_units=(10, 7),
                                        dropout=0.0, **switch),
    "ulmfit": lambda **switch: AwdLstmBackbone(vocab_size=15, embedding_size=12, hidden_size=20,
                                               num_layers=3, embedding_dropout=0.0,
                                               input_dropout=0.0, hidden_dropout=0.0,
                                               weight_dropout=0.0, **switch),
}
WIDTHS = {"cvt": [12, 20, 14], "ulmfit": [12, 20, 20, 12]}
NAMES = {"cvt": "CVT", "ulmfit": "ULMFiT (AWD-LSTM)"}



@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    vocab = tmp_path_factory.mktemp("recurrent") / "vocab.txt"
    write_vocab(vocab)
    return tokenizers.load_tokenizer("wordpiece", str(vocab), lower_case=True)


@pytest.fixture(scope="module", params=sorted(BUILD))
def model(request, tokenizer):
    """(family, plain backbone (switch off), its TextPacker, tokenizer); init seeded so that
    the layers' mixing does not depend on what ran before in this process."""
    keras.utils.set_random_seed(0)
    backbone = shaken(BUILD[request.param](), scale=0.5)
    return request.param, backbone, TextPacker(tokenizer, 12), tokenizer


def _layers(family, backbone, batch):
    """Each layer's vectors as the model's own layers compute them, unpadded: the word
    vectors, then each (bi)LSTM layer run on the one below."""
    mask = ops.convert_to_tensor(batch["padding_mask"])
    x = backbone.embeddings(ops.convert_to_tensor(batch["token_ids"]))
    found = [x]
    if family == "cvt":
        for i in range(len(backbone.layer_units)):
            x = ops.concatenate([backbone.get_layer(f"lstm_layer_{i}_{d}")(x, padding_mask=mask)
                                 for d in ("forward", "backward")], axis=-1)
            found.append(x)
    else:
        for lstm in backbone.lstm_layers:
            x = lstm(x, padding_mask=mask)
            found.append(x)
    return [np.asarray(ops.convert_to_numpy(v)) for v in found]


def test_hidden_states_are_every_layer_zero_padded_to_the_widest(model):
    family, backbone, packer, _ = model
    batch = packer.encode_numpy(["the movie was good .", "the plot"])  # row 1 padded
    plain = instrument.run(backbone, batch)
    assert "hidden_states" not in plain and "hidden_states" not in backbone.output
    full_model = instrument.instrumented(backbone, output_hidden_states=True)
    assert full_model is not backbone and full_model.get_config()["output_hidden_states"]
    full = instrument.run(full_model, batch)
    # The switch adds an output and changes no other.
    assert set(full) == set(plain) | {"hidden_states"}
    for key, value in plain.items():
        np.testing.assert_array_equal(full[key], value)
    states = full["hidden_states"]
    widths = WIDTHS[family]
    assert states.shape == (len(widths), 2, 12, max(widths))
    for layer, (width, want) in enumerate(zip(widths, _layers(family, backbone, batch))):
        assert want.shape[-1] == width
        np.testing.assert_allclose(states[layer, ..., :width], want, atol=1e-5)
        assert not states[layer, ..., width:].any()  # the padding: zeros exactly
    # The top layer is sequence_output (CVT: [f_L; b_L]; ULMFiT: the last LSTM's output).
    np.testing.assert_allclose(states[-1, ..., :widths[-1]], plain["sequence_output"],
                               atol=1e-6)
    # The bottom is the word table's rows: context-free.
    np.testing.assert_array_equal(
        states[0, ..., :widths[0]],
        backbone.token_embedding.embeddings.numpy()[batch["token_ids"]])
    # ULMFiT's LSTMs read left to right: a later word changes no state before it (its
    # Readout says so, and contextuality follows); CVT's backward LSTMs carry it back.
    changed = {k: v.copy() for k, v in batch.items()}
    changed["token_ids"][0, 4] = batch["token_ids"][0, 2]  # "good" -> "movie"
    moved = instrument.run(full_model, changed)["hidden_states"]
    before = np.abs(moved[1:, 0, :4] - states[1:, 0, :4]).max()
    assert (before == 0) if family == "ulmfit" else (before > 1e-3)
    assert np.abs(moved[1:, 0, 4] - states[1:, 0, 4]).max() > 1e-3
    assert instrument.readout(backbone).causal_states is (family == "ulmfit")


def _analyze(monkeypatch, tmp_path, model, *args):
    """garden.analyze main on `model` (open_model answers it): exit code, its JSON or None."""
    family, backbone, packer, tokenizer = model
    opened = analyze.Opened(backbone, packer, list(tokenizer.vocab.tokens), f"tiny {family}",
                            path=f"tiny {family}")
    return analyze_with(monkeypatch, tmp_path, opened, *args, sentences=SENTENCES * 2)


def test_contextuality_probe_and_identifiability_read_every_layer(model, monkeypatch,
                                                                 tmp_path):
    family, backbone, packer, tokenizer = model
    layers = len(WIDTHS[family])
    code, report = _analyze(monkeypatch, tmp_path / "ctx", model, "contextuality",
                            "--min_contexts=3")
    assert code == 0
    result = report["models"][f"tiny {family}"]
    assert "zero-padded" in result["layers"] and len(result["self_similarity"]) == layers
    # Layer 0 is the word table: a word's vector whatever its context; the LSTMs mix it in.
    assert result["self_similarity"][0] == pytest.approx(1.0, abs=1e-5)
    assert result["self_similarity"][-1] < 0.999
    if family == "ulmfit":  # a word's context is the words before it
        assert result["context"].startswith("causal")
        assert len(result["whole_sentence_intra_sentence_similarity"]) == layers
    else:
        assert result["context"].startswith("the whole sentence")

    # A probe of a tag that is a function of the word reads layer 0 perfectly.
    conll = word_tag_conll(tmp_path / "train.txt")
    code, report = _analyze(monkeypatch, tmp_path / "probe", model, "probe",
                            f"--probe_train={conll}", "--seed=2")
    assert code == 0
    assert len(report["accuracy"]) == layers and report["accuracy"][0] == pytest.approx(1.0)

    # Token identifiability runs; what needs attention or Transformer blocks says why not.
    code, report = _analyze(monkeypatch, tmp_path / "ident", model, "identifiability")
    assert code == 0
    assert len(report["token_identifiability"]["accuracy"]["linear"]) == layers
    skipped = report["not_applicable"]
    assert skipped["effective_attention"].startswith(f"{NAMES[family]} has no attention")
    assert "do not run one by one" in skipped["hidden_token_attribution"]
    assert report["hidden_token_attribution"] == []

    # neighbours embeds by the top layer's mean, the switch off.
    lines = neighbours.embed(backbone, packer, SENTENCES)
    assert lines.shape == (len(SENTENCES), WIDTHS[family][-1])


@pytest.mark.parametrize("analysis", ["attention", "heads", "prune"])
def test_attention_analyses_are_refused_by_name(model, analysis, monkeypatch, tmp_path,
                                                capsys):
    family = model[0]
    flags = ["--task_data=x.tsv"] if analysis in ("heads", "prune") else []
    code, written = _analyze(monkeypatch, tmp_path, model, analysis, *flags)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and written is None
    assert err == [f"error: {analysis}: {NAMES[family]} has no attention: its layers are "
                   f"LSTMs, which read the sequence in order"]
