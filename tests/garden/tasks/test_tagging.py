"""Token tagging end to end: the seqeval metric per sentence; Tagging learns the CoNLL
sample task through garden.train beyond the all-O baseline; its export, loaded in a fresh
process, gives the Keras model's entities (long sentences cut into pieces in the graph as in
training); the frozen feature-based tagger trains only its head; extract_features writes the
backbone's hidden states."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from text.finetune import tagging
from data_pipelines.sample_tasks import conll as sample_conll
from garden.metrics.tagging import entity_scores
from testing import REPO_ROOT, run_code, train_in_process

LABELS = list(sample_conll.LABELS)


# -- the metric ---------------------------------------------------------------------------

def test_entities_never_run_across_sentences():
    # Sentence 1 ends inside a PER entity, sentence 2 starts with one: two entities each.
    gold = [["O", "I-PER"], ["I-PER", "O"]]
    pred = [["O", "I-PER"], ["I-PER", "O"]]
    assert entity_scores(gold, pred)["f1"] == 1.0
    assert entity_scores(gold, pred)["entities"] == 2
    # A prediction that merges them is wrong per sentence; flattened into one sequence it
    # would look like the gold (both would be one entity "I-PER I-PER").
    flat_gold, flat_pred = [sum(gold, [])], [sum(pred, [])]
    assert entity_scores(flat_gold, flat_pred)["entities"] == 1
    pred_other = [["O", "I-PER"], ["O", "O"]]
    per_sentence = entity_scores(gold, pred_other)
    assert per_sentence["precision"] == 1.0 and per_sentence["recall"] == 0.5
    assert per_sentence["mode"] == "lenient (conlleval)" and "iob1" in per_sentence["scheme"]


def test_lenient_and_strict_modes_differ_on_ill_formed_spans():
    gold = [["B-LOC", "I-LOC", "O"]]
    pred = [["I-LOC", "I-LOC", "O"]]  # IOB2-invalid start: conlleval accepts it
    assert entity_scores(gold, pred, "iob2")["f1"] == 1.0
    # Strict IOB2 converted from IOB1 tags: the same (I- after O starts an entity in IOB1).
    assert entity_scores(gold, pred, "iob1", mode="strict")["f1"] == 1.0
    pred = [["B-LOC", "I-PER", "O"]]
    lenient = entity_scores(gold, pred, "iob2")
    strict = entity_scores(gold, pred, "iob2", mode="strict")
    assert lenient["mode"] == "lenient (conlleval)" and strict["mode"] == "strict IOB2"
    assert lenient["f1"] == 0.0 and strict["f1"] == 0.0
    with pytest.raises(ValueError, match="sentence 0: 3 gold tags but 2 predicted"):
        entity_scores(gold, [["O", "O"]])


def test_loss_counts_only_labelled_first_sub_tokens(tmp_path):
    from garden.tasks.tagging import Tagging

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##b"]) + "\n")
    data = tmp_path / "d.txt"
    data.write_text("ab X X I-KW\na X X O\n\n")
    task = Tagging(backbone=None, vocab=str(vocab), train_data=str(data),
                   eval_data=str(data), max_seq_length=6, label_names=["O", "I-KW"])
    task.prepare()
    arrays = task.train_arrays
    # [CLS] a ##b a [SEP] [PAD]: labels on the two first sub-tokens only.
    np.testing.assert_array_equal(arrays["label_ids"], [[-1, 1, -1, 0, -1, -1]])

    class Fixed:  # logits favouring O everywhere, by log(3) nats
        def __call__(self, inputs, training=False):
            shape = tf.shape(inputs["token_ids"])
            return {"logits": tf.tile(tf.constant([[[math.log(3.0), 0.0]]]),
                                      [shape[0], shape[1], 1])}

    batch = {k: tf.constant(v) for k, v in arrays.items()}
    metrics = task.compute_metrics(Fixed(), batch, training=True)
    # Two labelled positions: -log(1/4) for I-KW, -log(3/4) for O, averaged.
    expected = (-math.log(0.25) - math.log(0.75)) / 2
    assert float(metrics["loss"]) == pytest.approx(expected, rel=1e-5)
    shares = task.loss_weights(batch)
    assert float(shares["labelled"]) == 2.0
    halved = task.compute_metrics(Fixed(), batch, True, {"labelled": tf.constant(4.0)})
    assert float(halved["loss"]) == pytest.approx(expected / 2, rel=1e-4)


# -- the sample task, trained --------------------------------------------------------------

def _documents(corpus_file: str):
    with open(corpus_file, encoding="utf-8") as f:
        blocks = [b.split("\n") for b in f.read().split("\n\n") if b.strip()]
    return [(f"doc{k}", [s for s in block if s.strip()]) for k, block in enumerate(blocks)]


@pytest.fixture(scope="module")
def sample_task(bert_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("conll_task")
    result = sample_conll.write(_documents(bert_data.corpus_glob), str(out))
    return str(out), result


def _args(bert_data, task_dir, model_dir, *extra, steps=200):
    return ["--config=configs/finetune/tagging_tiny.gin", f"--model_dir={model_dir}",
            f"--gin_param=VOCAB='{bert_data.vocab}'",
            f"--gin_param=TRAIN_DATA='{task_dir}/train.txt'",
            f"--gin_param=EVAL_DATA='{task_dir}/dev.txt'",
            "--gin_param=INIT_CHECKPOINT=None", f"--gin_param=TRAIN_STEPS={steps}",
            "--gin_param=garden.Tagging.max_seq_length=32",
            f"--gin_param=garden.Tagging.label_names={LABELS!r}",
            "--gin_param=train.log_every=50", "--gin_param=train.global_batch_size=16",
            # From scratch, a tiny tagger first predicts O everywhere; at 5e-4 it leaves that
            # plateau after about 120 steps (F1 0.44 at 150, 0.45 at 200 in one run).
            "--gin_param=train.learning_rate=5e-4", "--gin_param=train.warmup_steps=10", *extra]


@pytest.fixture(scope="module")
def trained(bert_data, sample_task, tmp_path_factory):
    task_dir, _ = sample_task
    root = tmp_path_factory.mktemp("tagger")
    model_dir, export_base = str(root / "run"), str(root / "export")
    summary = train_in_process(_args(bert_data, task_dir, model_dir,
                                     f"--gin_param=EXPORT_BASE='{export_base}'",
                                     "--gin_param=backbone.dropout=0.0"),
                               model_dir, task="tagging", steps=200)
    return model_dir, summary


def test_tagger_learns_the_sample_task_beyond_the_all_o_baseline(trained, sample_task):
    _, result = sample_task
    _, summary = trained
    scores = summary["final"] if "final" in summary else summary
    n = scores["eval_entities"]
    assert n == sum(result["counts"]["dev"]["entities"].values())
    assert scores["eval_words"] == result["counts"]["dev"]["words"]  # every word scored
    # All-O scores 0; a binomial proportion of n entities has a standard error of at most
    # 0.5 / sqrt(n): ask for three of them above it.
    margin = 3 * 0.5 / math.sqrt(n)
    assert scores["eval_f1"] > result["baseline"]["all_O_f1"] + margin, scores
    assert scores["metric_mode"] == "lenient (conlleval)"


SERVE_SCRIPT = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # the text ops a model server links

args = json.loads(sys.argv[1])
loaded = tf.saved_model.load(args["dir"])
out = loaded.signatures["serving_default"](sentences=tf.constant(args["sentences"]))
ids = loaded.signatures["serving_ids"](**{k: tf.constant(v, tf.int32)
                                          for k, v in args["ids"].items()})
def listed(v):
    v = v.numpy()
    return [[x.decode() if isinstance(x, bytes) else x for x in row] for row in v.tolist()] \
        if v.ndim == 2 else v.tolist()
print("RESULT" + json.dumps({"text": {k: listed(v) for k, v in out.items()},
                             "logits": ids["logits"].numpy().tolist()}))
"""


def test_export_in_a_fresh_process_gives_the_keras_entities(trained, sample_task, bert_data):
    from garden.serving.tagging import entities_of
    from garden.tasks.tagging import Tagging
    from garden.models import factory

    model_dir, summary = trained
    task_dir, _ = sample_task
    export_dir = summary["export_dir"]
    with open(os.path.join(export_dir, "assets.extra", "garden_export.json")) as f:
        meta = json.load(f)
    assert meta["label_names"] == LABELS and meta["scheme"] == "iob1"
    assert meta["signatures"] == {"serving_default": "tensorflow/serving/predict",
                                  "serving_ids": "tensorflow/serving/predict"}
    from garden.serving.export import read_warmup_requests

    warmup = read_warmup_requests(os.path.join(export_dir, "assets.extra",
                                               "tf_serving_warmup_requests"))
    assert {w["signature_name"] for w in warmup} == {"serving_default", "serving_ids"}
    assert sorted(warmup[-1]["inputs"]) == ["padding_mask", "segment_ids", "token_ids"]
    dev = tagging.read_examples(f"{task_dir}/dev.txt")
    long = max(dev, key=lambda s: len(s.words))
    sentences = [" ".join(s.words) for s in dev[:6]] + [
        " ".join(long.words), "Use  asyncio.run\u00a0or None with ValueError é", ""]

    # The Keras model, restored from the run's checkpoint, through the same module in-process.
    task = Tagging(backbone=lambda **kw: factory.backbone(preset="bert_tiny", dropout=0.0,
                                                          **kw),
                   vocab=bert_data.vocab, train_data=f"{task_dir}/train.txt",
                   eval_data=f"{task_dir}/dev.txt", max_seq_length=32, label_names=LABELS)
    task.prepare()
    model, _ = task.build_model()
    ckpt = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    tf.train.Checkpoint(model=model).read(ckpt).expect_partial().assert_existing_objects_matched()
    module = task.serving_module(model)
    keras_out = {k: v.numpy() for k, v in module.tag_text(tf.constant(sentences)).items()}
    # The long sentence needs several rows of 30 pieces: the in-graph rows equal training's.
    words = tf.ragged.constant([list(long.words)])
    inputs, _, _ = module.encode_words(words)
    records = tagging.example_features(long, task.text_tokenizer, task.options)
    assert len(records) > 1
    np.testing.assert_array_equal(inputs["token_ids"].numpy(),
                                  [r["token_ids"] for r in records])

    ids = {k: v.numpy().tolist() for k, v in inputs.items()}
    proc = run_code(SERVE_SCRIPT, json.dumps({"dir": export_dir, "sentences": sentences,
                                              "ids": ids}))
    served = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert entities_of(served["text"]) == entities_of(keras_out)
    assert served["text"]["word_tags"] == [[t.decode() for t in row]
                                           for row in keras_out["word_tags"].tolist()]
    keras_logits = model({k: v for k, v in inputs.items()}, training=False)["logits"].numpy()
    np.testing.assert_allclose(served["logits"], keras_logits, atol=1e-5)
    # Entities point at their text in the sentence (character offsets).
    found = entities_of(keras_out)
    assert sum(map(len, found)) > 0
    for sentence, entities in zip(sentences, found):
        for _, text, start, end in entities:
            assert sentence[start:end] == text
    assert found[-1] == [] and keras_out["num_words"][-1] == 0


# -- feature-based: a frozen backbone --------------------------------------------------------

def test_frozen_four_layer_tagger_trains_only_its_head(bert_data, sample_task, tmp_path):
    from garden.tasks.tagging import Tagging
    from garden.models import factory

    task_dir, _ = sample_task
    model_dir = str(tmp_path / "frozen")
    train_in_process(_args(bert_data, task_dir, model_dir, "--gin_param=EXPORT_BASE=None",
                           "--gin_param=backbone.num_layers=4",
                           "--gin_param=garden.Tagging.feature_layers=4",
                           "--gin_param=garden.Tagging.lstm_units=8",
                           "--gin_param=train.checkpoint_every=1", steps=3),
                     model_dir, task="tagging", steps=3)

    def weights(step):
        task = Tagging(backbone=lambda **kw: factory.backbone(preset="bert_tiny",
                                                              num_layers=4, **kw),
                       vocab=bert_data.vocab, train_data=f"{task_dir}/dev.txt",
                       eval_data=f"{task_dir}/dev.txt", max_seq_length=32,
                       feature_layers=4, lstm_units=8, label_names=LABELS)
        task.prepare()
        model, objects = task.build_model()
        path = os.path.join(model_dir, "checkpoints", f"ckpt-{step}")
        tf.train.Checkpoint(model=model).read(path).expect_partial()
        backbone = [w.numpy() for w in objects["backbone"].weights]
        head = [w.numpy() for w in model.weights if not any(
            w is b for b in objects["backbone"].weights)]
        return backbone, head, model, objects["backbone"]

    backbone_1, head_1, _, _ = weights(1)
    backbone_3, head_3, model, backbone = weights(3)
    assert len(backbone_1) > 20 and len(head_1) >= 5  # BiLSTM kernels + dense
    for a, b in zip(backbone_1, backbone_3):
        np.testing.assert_array_equal(a, b)  # bit-identical
    assert any(not np.array_equal(a, b) for a, b in zip(head_1, head_3))
    assert model.trainable_weights and not backbone.trainable_weights


# -- extract_features -------------------------------------------------------------------------

def test_extract_features_writes_the_backbone_hidden_states(bert_data, tmp_path, capsys,
                                                            monkeypatch):
    from garden import extract_features
    from garden.models.bert.presets import untrained_bert_backbone
    from garden.serving.text import load_packer

    monkeypatch.chdir(REPO_ROOT)  # --config is repo-relative, as on the command line

    packer = load_packer(bert_data.vocab, 16)
    backbone = untrained_bert_backbone("bert_tiny", vocab_size=packer.vocab_size,
                                         output_hidden_states=True)
    prefix = tf.train.Checkpoint(backbone=backbone).write(str(tmp_path / "ckpt" / "ckpt"))
    lines = ["The event loop runs callbacks.", "", "A much longer line of text that is cut at "
             "sixteen pieces by the packer because it does not fit."]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out, npz = tmp_path / "out.jsonl", tmp_path / "out.npz"
    assert extract_features.main(
        [f"--init_checkpoint={prefix}", "--config=configs/models/bert_tiny.gin",
         f"--vocab={bert_data.vocab}", f"--input={tmp_path / 'in.txt'}", f"--output={out}",
         f"--numpy={npz}", "--layers=-1,-2,0", "--max_seq_length=16", "--batch_size=1"]) == 0
    assert "2/2 examples" in capsys.readouterr().err
    assert extract_features.main(
        [f"--init_checkpoint={prefix}", "--config=configs/models/bert_tiny.gin",
         f"--vocab={bert_data.vocab}", f"--input={tmp_path / 'in.txt'}", f"--output={out}",
         "--layers=-3"]) == 2
    assert "--layers [-3] outside the backbone's layers (-2..2" in capsys.readouterr().err
    inputs = packer.encode_numpy([lines[0], lines[2]])
    states = backbone(inputs, training=False)["hidden_states"].numpy()  # [L+1, B, T, H]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["linex_index"] for r in rows] == [0, 1]
    vocab = open(bert_data.vocab, encoding="utf-8").read().splitlines()
    for b, row in enumerate(rows):
        n = int(inputs["padding_mask"][b].sum())
        assert [f["token"] for f in row["features"]] == [vocab[i] for i in
                                                         inputs["token_ids"][b][:n]]
        for j, feature in enumerate(row["features"]):
            assert [layer["index"] for layer in feature["layers"]] == [-1, -2, 0]
            for layer in feature["layers"]:
                np.testing.assert_allclose(layer["values"], states[layer["index"], b, j],
                                           atol=1e-6)
    arrays = np.load(npz)
    np.testing.assert_allclose(arrays["layer_-1"], states[-1], atol=1e-6)
    np.testing.assert_allclose(arrays["layer_0"], states[0], atol=1e-6)
    np.testing.assert_array_equal(arrays["token_ids"], inputs["token_ids"])
    np.testing.assert_array_equal(arrays["line_numbers"], [1, 3])
