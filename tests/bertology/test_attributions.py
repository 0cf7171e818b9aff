"""Integrated gradients per token (garden.bertology.attributions; issue 36 item 8) and
`python -m garden.analyze attributions`.

By hand: for F linear in the vectors, IG = (x - x') * w exactly, and for F = sum(c * v^2)
IG = c * (x^2 - x'^2) (the trapezoid rule is exact on integrands linear in alpha), at 1 step.
On a tiny classifier fine-tuned through garden.train: the model on word vectors gives the run's
own logits at the table's rows, and at the baseline the logits of the sentence with every word
replaced by [PAD] (positions, segments and padding mask unchanged); [CLS] and [SEP] get 0;
completeness holds within 5% at 64 steps and the gap shrinks from 2 to 64 steps. On tiny
BERT, RoBERTa, ALBERT, ELECTRA and DistilBERT classifiers the model on vectors gives the
classifier's own logits at the table's rows. The command
writes attributions.json, a page per sentence and the index entry; a run without a classifier,
an unknown --target and a refused family (T5) are one line each; GPT-2, GPT and XLNet
in tests/bertology/test_attributions_families.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from garden import analyze
from garden.bertology import attributions

SENTENCES = ["the movie was good , really .", "the film was awful .", "i liked the plot !"]


def test_linear_and_quadratic_functions_by_hand():
    rng = np.random.default_rng(0)
    x, baseline = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    w = rng.normal(size=(5, 4))
    linear = attributions.integrated_gradients(
        lambda v: tf.reduce_sum(v * tf.constant(w, tf.float32), axis=[1, 2]), x, baseline, 1)
    np.testing.assert_allclose(linear["per_element"], (x - baseline) * w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(linear["scores"], ((x - baseline) * w).sum(-1), rtol=1e-5,
                               atol=1e-6)
    assert abs(linear["gap"]) < 1e-5
    c = rng.uniform(0.5, 2.0, size=(5, 4))
    quadratic = attributions.integrated_gradients(
        lambda v: tf.reduce_sum(tf.constant(c, tf.float32) * v * v, axis=[1, 2]), x, baseline, 1)
    np.testing.assert_allclose(quadratic["per_element"], c * (x ** 2 - baseline ** 2),
                               rtol=1e-5, atol=1e-5)
    assert quadratic["f_x"] == pytest.approx(float((c * x ** 2).sum()), rel=1e-5)
    assert quadratic["f_baseline"] == pytest.approx(float((c * baseline ** 2).sum()), rel=1e-5)
    with pytest.raises(ValueError, match="at least 1 step"):
        attributions.integrated_gradients(lambda v: v, x, baseline, 0)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny BERT classifier fine-tuned through garden.train for 3 steps (the sample
    classification files) from a 2-layer BERT whose weights were moved far from their init (a
    freshly initialised one maps every sentence to nearly the same logits: F(x) - F(x') of
    1e-5), written as a garden.convert directory; opened as garden.analyze opens it."""
    import random

    from convert_testing import bert_vocab_tokens, task_files, train_args, write_task_files
    from garden.bertology import prune
    from garden.models.bert.backbone import BertBackbone
    from testing import train_in_process

    root = tmp_path_factory.mktemp("attributions")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(bert_vocab_tokens()) + "\n")
    backbone = BertBackbone(vocab_size=len(bert_vocab_tokens()), num_layers=2, hidden_size=16,
                            num_heads=2, intermediate_size=32, max_sequence_length=64)
    rng = np.random.default_rng(0)
    backbone.set_weights([w + rng.normal(scale=0.3, size=w.shape).astype(w.dtype)
                          for w in backbone.get_weights()])
    start = prune.write_pruned(str(root / "start"), backbone, "bert", str(vocab), True)
    data = write_task_files(root / "data", random.Random(0), ("classification",))
    train_in_process(train_args("configs/finetune/classification_tiny.gin", start,
                                root / "run", None, *task_files(data, "classification"),
                                "--gin_param=garden.Classification.max_seq_length=32"),
                     str(root / "run"), "classification", 3)
    (root / "text.txt").write_text("\n".join(SENTENCES) + "\n")
    return {"root": root, "dir": root / "run", "opened": analyze.open_model(str(root / "run"),
                                                                           32)}


def test_the_vectors_model_is_the_runs_classifier_at_x_and_at_the_baseline(run):
    from garden.models import instrument

    opened = run["opened"]
    model = attributions.vectors_classifier(opened.backbone, opened.task_model,
                                            opened.classifier)
    table = np.asarray(opened.backbone.embeddings.token_embedding.embeddings)
    batch = opened.packer.encode_numpy(SENTENCES)
    theirs = instrument.run(opened.task_model, batch)["logits"]
    ours = np.asarray(model({**batch, "token_vectors": table[batch["token_ids"]]}))
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    assert np.ptp(theirs, axis=0).max() > 1e-3  # the sentences' logits differ
    # The baseline: the pad row at every word, [CLS] / [SEP] / padding kept; the same as the
    # sentence with its words replaced by the pad id.
    packer = opened.packer
    ids = batch["token_ids"]
    words = ~np.isin(ids, [packer.cls_id, packer.sep_id, packer.pad_id])
    padded = {**batch, "token_ids": np.where(words, packer.pad_id, ids)}
    baseline = np.stack([attributions.baseline_vectors(row, table, [packer.cls_id,
                                                                    packer.sep_id,
                                                                    packer.pad_id],
                                                       packer.pad_id) for row in ids])
    np.testing.assert_allclose(np.asarray(model({**batch, "token_vectors": baseline})),
                               instrument.run(opened.task_model, padded)["logits"], atol=1e-5)


def test_completeness_within_5_percent_at_64_steps(run):
    opened = run["opened"]
    coarse = attributions.attribute(opened, SENTENCES, 2)["sentences"]
    fine = attributions.attribute(opened, SENTENCES, 64)["sentences"]
    batch = opened.packer.encode_numpy(SENTENCES)
    from garden.models import instrument

    logits = instrument.run(opened.task_model, batch)["logits"]
    for i, (c, f) in enumerate(zip(coarse, fine)):
        assert f["tokens"][0] == "[CLS]" and f["tokens"][-1] == "[SEP]"
        assert f["scores"][0] == 0 and f["scores"][-1] == 0  # kept in the baseline
        assert f["target"] == f["predicted"] == opened.labels[int(logits[i].argmax())]
        assert f["f_x"] == pytest.approx(float(logits[i].max()), abs=1e-5)
        assert f["f_x"] - f["f_baseline"] == pytest.approx(c["f_x"] - c["f_baseline"],
                                                           abs=1e-5)
        assert abs(f["f_x"] - f["f_baseline"]) > 1e-3
        assert f["sum"] == pytest.approx(sum(f["scores"]), abs=1e-4)
        # The trapezoid's error falls as 1/steps^2: 2 steps left 2% to 38% of F(x) - F(x')
        # here, 64 steps under 1e-4 (2026-12-07); the paper's bar is 5%.
        assert f["relative_gap"] < 0.05, f
        assert abs(f["gap"]) < abs(c["gap"]), (c["gap"], f["gap"])


def test_the_command_writes_the_report(run, tmp_path):
    out = tmp_path / "report"
    label = run["opened"].labels[0]
    assert analyze.main(["attributions", f"--model={run['dir']}",
                         f"--input={run['root'] / 'text.txt'}", "--steps=16",
                         f"--target={label}", "--max_sentences=2", "--max_seq_length=32",
                         f"--output={out}"]) == 0
    result = json.loads((out / "attributions.json").read_text())
    assert result["steps"] == 16 and len(result["sentences"]) == 2
    for i, sentence in enumerate(result["sentences"]):
        assert sentence["sentence"] == SENTENCES[i] and sentence["target"] == label
        assert len(sentence["scores"]) == len(sentence["tokens"])
        page = (out / f"attributions_{i}.html").read_text()
        assert f'id="{attributions.DATA_ID}"' in page and "http" not in page
        data = page.split(f'id="{attributions.DATA_ID}">')[1].split("</script>")[0]
        assert json.loads(data)["scores"] == sentence["scores"]
    index = (out / "index.html").read_text()
    assert "<h2>attributions</h2>" in index and 'href="attributions_1.html"' in index


@pytest.mark.parametrize("case", ["not_a_classifier", "unknown_target", "zero_steps"])
def test_refusals_are_one_line(run, tmp_path, capsys, case):
    from garden.bertology import prune

    args = [f"--input={run['root'] / 'text.txt'}", "--max_seq_length=32",
            f"--output={tmp_path / 'out'}"]
    if case == "not_a_classifier":  # the run's backbone alone, as a garden.convert directory
        opened = run["opened"]
        converted = prune.write_pruned(str(tmp_path / "converted"), opened.backbone, "bert",
                                       opened.packer.vocab_path, opened.packer.lower_case)
        code = analyze.main(["attributions", f"--model={converted}", *args])
        expected = f"attributions needs a fine-tuned sentence-classification run as " \
                   f"--model; {converted} is"
    elif case == "unknown_target":
        code = analyze.main(["attributions", f"--model={run['dir']}", "--target=nope", *args])
        expected = "--target=nope is not one of the run's labels"
    else:
        with pytest.raises(SystemExit) as exit_:
            analyze.main(["attributions", f"--model={run['dir']}", "--steps=0", *args])
        code = exit_.value.code
        expected = "--steps=0 must be at least 1"
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert expected in err[-1] and (len(err) == 1 or case == "zero_steps"), err
    assert not (tmp_path / "out").exists()


def test_a_refused_family_is_refused_by_name():
    from garden.models.t5.backbone import T5Backbone

    backbone = T5Backbone.untrained("t5_tiny", vocab_size=40)
    with pytest.raises(ValueError) as e:
        attributions.vectors_classifier(backbone, None, None)
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("attributions: the t5 backbone is refused: T5 classifies "
                                   "by generating the label's text")


@pytest.mark.parametrize("family", ["bert", "roberta", "albert", "electra", "distilbert"])
def test_the_vectors_model_is_each_families_classifier_at_the_tables_rows(family):
    """Other embeddings (RoBERTa's padding-offset positions and no segments, ALBERT's and
    ELECTRA's E=8 tables projected to 16, DistilBERT's no token types and pre-classifier): at
    the table's rows the model on vectors gives the classifier's logits, and elsewhere others."""
    from garden.models.albert.backbone import AlbertBackbone
    from garden.models.bert.backbone import BertBackbone
    from garden.models.classification import SequenceClassifier
    from garden.models.distilbert.backbone import DistilBertBackbone
    from garden.models.electra.backbone import ElectraBackbone
    from garden.models.instrument import run
    from garden.models.roberta.backbone import RobertaBackbone

    size = dict(vocab_size=30, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32,
                dropout=0.0)
    backbone = {"bert": lambda: BertBackbone(**size),
                "roberta": lambda: RobertaBackbone(**size),
                "albert": lambda: AlbertBackbone(embedding_size=8, **size),
                "electra": lambda: ElectraBackbone(embedding_size=8, **size),
                "distilbert": lambda: DistilBertBackbone(attention_dropout=0.0, **size)}[family]()
    classifier = SequenceClassifier(backbone, num_classes=3, dropout=0.0)
    ids = np.array([[2, 7, 8, 9, 3, 0], [2, 15, 16, 17, 18, 3]], "int32")
    batch = {"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": (ids > 0).astype("int32")}
    model = attributions.vectors_classifier(backbone, classifier, classifier.classifier_dense)
    table = np.asarray(backbone.embeddings.token_embedding.embeddings)
    inputs = {k: v for k, v in batch.items() if k in model.input}
    theirs = run(classifier, batch)["logits"]
    np.testing.assert_allclose(np.asarray(model({**inputs, "token_vectors": table[ids]})),
                               theirs, atol=1e-5)
    moved = table[ids] + np.random.default_rng(0).normal(size=table[ids].shape)
    assert np.abs(np.asarray(model({**inputs, "token_vectors": moved})) - theirs).max() > 1e-4
