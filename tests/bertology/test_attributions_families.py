"""Integrated gradients (garden.bertology.attributions) on the decoder and XLNet classifiers:
GPT-2's, GPT's and GPT-3-style's last-token classifiers and XLNet's <cls> classifier, tiny and built here
(weights shaken far from their init, as tests/bertology/test_analyze_families.py does, so that
F(x) - F(x') is not 1e-5), with the packers of their layouts ("gpt2": no start token,
<|endoftext|> the separator and the pad; "xlnet": A <sep> <cls>, right-padded).

For each: at the word table's rows the model on vectors gives exactly the classifier's logits
(and other logits elsewhere); at the baseline, the logits of the sentence with every word
replaced by the pad id; completeness within 5% at 64 steps; and the backbone's plain graph
keeps its inputs, its one call of the word table on token_ids and its outputs. ELMo, T5 and
BART are refused by name with their reason, on one line.
"""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest

from analysis_testing import shaken, TINY as SIZE, write_vocab
from convert_testing import write_bpe_tokenizer
from garden import analyze
from garden.bertology import attributions
from garden.models import instrument
from garden.serving.text import TextPacker
from text import tokenizers

SENTENCES = ["the movie was good .", "the film was bad", "the plot was great dull ."]
LABELS = ["a", "b", "c"]


def _decoder(folder, family):
    """The tiny last-token classifier of GPT-2, GPT or GPT-3-style on a GPT-2 layout BPE."""
    from garden.models.gpt.backbone import GPTBackbone
    from garden.models.gpt.classifier import LastTokenClassifier
    from garden.models.gpt2.backbone import GPT2Backbone
    from garden.models.gpt3.backbone import GPT3Backbone

    backbone_class, extra = {
        "gpt2": (GPT2Backbone, {}), "gpt": (GPTBackbone, dict(max_sequence_length=16)),
        # Layer 0 dense, layer 1 banded over 3 pieces.
        "gpt3": (GPT3Backbone, dict(max_sequence_length=16, band_width=3))}[family]
    size = write_bpe_tokenizer(str(folder), gpt2=True)
    tokenizer = tokenizers.load_tokenizer("bpe", str(folder / "vocab.json"), lower_case=False)
    backbone = backbone_class(vocab_size=size, intermediate_size=32, **extra, **SIZE)
    return LastTokenClassifier(backbone, 3, dropout=0.0), TextPacker(tokenizer, 12, "gpt2"), \
        tokenizer


def _xlnet(folder):
    from garden.models.classification import SequenceClassifier
    from garden.models.xlnet.backbone import XLNetBackbone

    tokenizer = tokenizers.load_tokenizer("wordpiece", write_vocab(folder / "vocab.txt"),
                                          lower_case=True)
    backbone = XLNetBackbone(vocab_size=15, intermediate_size=32, **SIZE)
    return SequenceClassifier(backbone, 3, dropout=0.0), TextPacker(tokenizer, 10, "xlnet"), \
        tokenizer


@pytest.fixture(scope="module", params=["gpt2", "gpt", "gpt3", "xlnet"])
def family(request, tmp_path_factory):
    build = _xlnet if request.param == "xlnet" else functools.partial(
        _decoder, family=request.param)
    # Seeded: the weights (not the test order) decide F(x) - F(x'), which the completeness
    # test divides by.
    keras.utils.set_random_seed(0)
    classifier, packer, tokenizer = build(tmp_path_factory.mktemp(request.param))
    backbone = classifier.backbone
    batch = packer.encode_numpy(SENTENCES)
    shaken(classifier)
    plain = instrument.run(backbone, batch)  # before any vectors model is built
    opened = analyze.Opened(backbone, packer, list(tokenizer.vocab.tokens),
                            f"tiny {request.param}", classifier=classifier.classifier_dense,
                            labels=LABELS, task_model=classifier)
    return {"name": request.param, "opened": opened, "classifier": classifier, "batch": batch,
            "plain": plain}


def _inputs(model, batch):
    return {k: v for k, v in batch.items() if k in model.input}


def test_the_vectors_model_is_the_classifier_at_the_tables_rows_and_the_baseline(family):
    opened, batch = family["opened"], family["batch"]
    packer = opened.packer
    model = attributions.vectors_classifier(opened.backbone, opened.task_model,
                                            opened.classifier)
    table = attributions.word_table(opened.backbone)
    assert table.shape[0] == packer.vocab_size  # token rows only (GPT: no position rows)
    theirs = instrument.run(family["classifier"], batch)["logits"]
    ids = batch["token_ids"]
    ours = np.asarray(model({**_inputs(model, batch), "token_vectors": table[ids]}))
    np.testing.assert_array_equal(ours, theirs)
    assert np.ptp(theirs, axis=0).max() > 1e-3  # the sentences' logits differ
    moved = table[ids] + np.random.default_rng(0).normal(size=table[ids].shape)
    assert np.abs(np.asarray(model({**_inputs(model, batch), "token_vectors": moved}))
                  - theirs).max() > 1e-3
    # The baseline is the sentence with its words replaced by the pad id; "gpt2" has no cls
    # and <|endoftext|> is both sep and pad, "xlnet" keeps <sep> <cls>.
    keep = [i for i in (packer.cls_id, packer.sep_id, packer.pad_id) if i is not None]
    if family["name"] == "xlnet":
        assert ids[0, 5:8].tolist() == [packer.sep_id, packer.cls_id, packer.pad_id]
    else:
        assert packer.cls_id is None and packer.sep_id == packer.pad_id == table.shape[0] - 1
    words = ~np.isin(ids, keep)
    padded = {**batch, "token_ids": np.where(words, packer.pad_id, ids)}
    baseline = np.stack([attributions.baseline_vectors(row, table, keep, packer.pad_id)
                         for row in ids])
    np.testing.assert_allclose(
        np.asarray(model({**_inputs(model, batch), "token_vectors": baseline})),
        instrument.run(family["classifier"], padded)["logits"], atol=1e-5)


def test_completeness_within_5_percent_at_64_steps(family):
    opened = family["opened"]
    logits = instrument.run(family["classifier"], family["batch"])["logits"]
    result = attributions.attribute(opened, SENTENCES, 64)
    for i, sentence in enumerate(result["sentences"]):
        n = int(family["batch"]["padding_mask"][i].sum())
        assert len(sentence["scores"]) == len(sentence["tokens"]) == n
        assert sentence["f_x"] == pytest.approx(float(logits[i].max()), abs=1e-5)
        assert abs(sentence["f_x"] - sentence["f_baseline"]) > 1e-3
        assert sentence["relative_gap"] < 0.05, sentence
        if family["name"] == "xlnet":  # <sep> <cls> kept in the baseline: nothing moved
            assert sentence["tokens"][-2:] == ["[SEP]", "[CLS]"]
            assert sentence["scores"][-2:] == [0, 0]


def test_the_plain_backbone_graph_is_unchanged(family):
    opened = family["opened"]
    backbone = opened.backbone
    attributions.vectors_classifier(backbone, opened.task_model, opened.classifier)
    assert "token_vectors" not in backbone.input
    assert sorted(backbone.input) == sorted(opened.packer.input_names)
    node = attributions.embeddings_node(backbone)  # still its one call on token_ids
    assert node.arguments.args[0] is backbone.input["token_ids"]
    assert "token_vectors" not in node.arguments.kwargs
    again = instrument.run(backbone, family["batch"])
    np.testing.assert_array_equal(again["sequence_output"],
                                  family["plain"]["sequence_output"])


def test_elmo_t5_and_bart_are_refused_with_their_reason(tmp_path):
    from garden.models.bart.backbone import BartBackbone
    from garden.models.elmo.backbone import ElmoBackbone
    from garden.models.t5.backbone import T5Backbone

    vocab = tmp_path / "vocab.txt"
    write_vocab(vocab)
    backbones = {"elmo": ElmoBackbone.untrained("elmo_tiny", vocab=str(vocab), dropout=0.0),
                 "t5": T5Backbone.untrained("t5_tiny", vocab_size=40),
                 "bart": BartBackbone.untrained("bart_tiny", vocab_size=40)}
    for name, backbone in backbones.items():
        with pytest.raises(ValueError) as e:
            attributions.vectors_classifier(backbone, None, None)
        assert "\n" not in str(e.value)
        assert str(e.value) == (f"attributions: the {name} backbone is refused: "
                                f"{attributions.REFUSED[name]}")


@pytest.mark.parametrize("name", ["cove", "cvt", "ulmfit"])
def test_the_recurrent_families_word_tables_are_attributed(name, tmp_path):
    """CoVe, CVT and ULMFiT take their word vectors from a plain embedding table: the vectors
    model cuts there, gives the classifier's logits at the table's rows and meets completeness
    (their classification runs put garden.models.classification's SequenceClassifier on the
    pooled output)."""
    from garden.models.classification import SequenceClassifier
    from garden.models.cove.backbone import CoveBackbone
    from garden.models.cvt.backbone import CvtBackbone
    from garden.models.ulmfit.backbone import AwdLstmBackbone

    keras.utils.set_random_seed(0)
    build = {
        "cove": lambda: CoveBackbone.untrained("cove_tiny", vocab_size=15),
        "cvt": lambda: CvtBackbone(vocab_size=15, embedding_size=12, layer_units=(10, 7),
                                   dropout=0.0),
        "ulmfit": lambda: AwdLstmBackbone(vocab_size=15, embedding_size=12, hidden_size=20,
                                          num_layers=3, embedding_dropout=0.0,
                                          input_dropout=0.0, hidden_dropout=0.0,
                                          weight_dropout=0.0)}[name]
    backbone = build()
    classifier = shaken(SequenceClassifier(backbone, 3, dropout=0.0))
    tokenizer = tokenizers.load_tokenizer("wordpiece", write_vocab(tmp_path / "vocab.txt"),
                                          lower_case=True)
    packer = TextPacker(tokenizer, 10)
    opened = analyze.Opened(backbone, packer, list(tokenizer.vocab.tokens), f"tiny {name}",
                            classifier=classifier.classifier_dense, labels=LABELS,
                            task_model=classifier)
    batch = packer.encode_numpy(SENTENCES)
    logits = instrument.run(classifier, batch)["logits"]
    model = attributions.vectors_classifier(backbone, classifier, classifier.classifier_dense)
    table = attributions.word_table(backbone)
    ours = np.asarray(model({**_inputs(model, batch), "token_vectors": table[batch["token_ids"]]}))
    np.testing.assert_allclose(ours, logits, atol=1e-5)
    moved = np.asarray(model({**_inputs(model, batch),
                              "token_vectors": table[batch["token_ids"]] + 0.5}))
    assert np.abs(moved - logits).max() > 1e-3  # the vectors, not the ids, are read
    for i, sentence in enumerate(attributions.attribute(opened, SENTENCES, 64)["sentences"]):
        assert sentence["f_x"] == pytest.approx(float(logits[i].max()), abs=1e-5)
        assert abs(sentence["f_x"] - sentence["f_baseline"]) > 1e-3
        assert sentence["relative_gap"] < 0.05, sentence
