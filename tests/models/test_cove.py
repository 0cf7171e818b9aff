"""CoVe: the published encoder's parameter count, the [GloVe(x); CoVe(x)] features (both
directions over the real tokens only), GloVe rows read from a local file, the translation
pretraining through garden.train lowering its loss on the synthetic pair task with its backbone
restored equal to the checkpoint, and the downstream classifier fine-tuned and served from raw
text in a fresh process (the tagger: tests/garden/tasks/test_recurrent_tasks.py)."""

import numpy as np
import pytest

from garden import models
from garden.models.cove import CoveBackbone, read_glove
from garden.models.cove.sample_pairs import reversed_pair, write_pair_task


def test_the_published_size_and_the_spec():
    backbone = CoveBackbone.untrained("cove", vocab_size=30522)
    # Per LSTM: W [D, 4U] + U [U, 4U] + b [4U]; layer 1 reads 300, layer 2 reads 600; two
    # directions each.
    lstm = 2 * sum(4 * 300 * (d + 300) + 4 * 300 for d in (300, 600))
    assert lstm == 3_604_800
    assert backbone.count_params() == 30522 * 300 + lstm
    assert not backbone.embeddings.trainable  # GloVe fixed, as the paper's MT training
    assert models.spec("cove").backbone_class() is CoveBackbone


def test_features_are_glove_then_both_directions_over_real_tokens():
    backbone = CoveBackbone.untrained("cove_tiny", vocab_size=50, dropout=0.0)
    ids = np.array([[2, 7, 8, 9, 3]], "int32")
    padded = np.array([[2, 7, 8, 9, 3, 0, 0]], "int32")
    a = backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})
    b = backbone({"token_ids": padded, "padding_mask": (padded > 0).astype("int32")})
    assert a["sequence_output"].shape == (1, 5, 16 + 32)
    assert b["hidden_states"].shape == (3, 1, 7, 32)
    np.testing.assert_allclose(a["sequence_output"], b["sequence_output"][:, :5], atol=1e-6)
    np.testing.assert_allclose(a["pooled_output"], b["pooled_output"], atol=1e-6)
    np.testing.assert_allclose(a["sequence_output"][0, :, :16],
                               backbone.embeddings.embeddings.numpy()[ids[0]], atol=1e-6)
    np.testing.assert_allclose(a["sequence_output"][..., 16:], a["cove_output"], atol=1e-6)
    # In the first biLSTM layer the backward half at the first token sees the last token,
    # the forward half does not: changing the last token moves only the backward half.
    c = backbone({"token_ids": np.array([[2, 7, 8, 9, 4]], "int32"),
                  "padding_mask": np.ones_like(ids)})
    first = c["hidden_states"][1, 0, 0] - a["hidden_states"][1, 0, 0]
    assert np.abs(first[:16]).max() == 0 and np.abs(first[16:]).max() > 0


def test_glove_rows_come_from_the_local_file(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\nmovie\n##s\nzzz\n[MASK]\n")
    glove = tmp_path / "glove.txt"
    glove.write_text("movie 1 2 3 4\nunrelated 9 9 9 9\nthe 0.5 0.5 0.5 0.5\n")
    backbone = CoveBackbone(vocab_size=9, embedding_size=4, lstm_units=4, glove=str(glove),
                            vocab=str(vocab))
    table = backbone.embeddings.embeddings.numpy()
    assert backbone.glove_found == 2
    np.testing.assert_array_equal(table[5], [1, 2, 3, 4])
    np.testing.assert_array_equal(table[4], [0.5] * 4)
    assert np.abs(table[7]).max() <= 0.1 and np.abs(table[7]).max() > 0  # random, not found
    with pytest.raises(ValueError, match="line 1: a vector of 4 values"):
        read_glove(str(glove), ["movie"], 3, np.zeros((1, 3), np.float32))


def test_the_sample_pairs_reverse_the_words(tmp_path):
    assert reversed_pair(" the film  was good ") == ("the film was good", "good was film the")
    counts = write_pair_task([f"s{i} w{i} x" for i in range(20)], str(tmp_path), eval_every=5)
    assert counts == (16, 4)
    lines = (tmp_path / "dev.tsv").read_text().splitlines()
    assert lines[:2] == ["source\ttarget", "s4 w4 x\tx w4 s4"]


def pair_task(lm_vocab, root):
    """The synthetic pair task from the first sample corpus file, with its 800-piece vocabulary
    (tests/conftest.py's lm_vocab session fixture)."""
    from garden.models.cove.sample_pairs import sentence_lines

    with open(lm_vocab.corpus_file, encoding="utf-8") as f:
        sentences = sentence_lines(f.read(), 8)[:600]
    write_pair_task(sentences, str(root / "pairs"))
    return lm_vocab.vocab, root / "pairs"


def test_translation_pretraining_lowers_its_loss_and_a_classifier_starts_from_it(tmp_path,
                                                                                 lm_vocab):
    import tensorflow as tf
    from testing import train_in_process

    vocab, pairs = pair_task(lm_vocab, tmp_path)
    run = tmp_path / "mt"
    summary = train_in_process([
        "--config=configs/cove_tiny.gin", f"--model_dir={run}", f"--gin_param=VOCAB='{vocab}'",
        f"--gin_param=TRAIN_FILE='{pairs / 'train.tsv'}'",
        f"--gin_param=EVAL_FILE='{pairs / 'dev.tsv'}'", "--gin_param=train.train_steps=60",
        "--gin_param=train.global_batch_size=16", "--gin_param=train.log_every=10",
        "--gin_param=train.checkpoint_every=60"], str(run), "cove_pretraining", 60)
    first, last = summary["first_logged_metrics"], summary["last_logged_metrics"]
    # ln(800) = 6.7 at the start.
    assert last["loss"] < first["loss"] - 0.8, (first, last)
    assert summary["eval_loss"] < first["loss"], summary

    # Downstream: a classifier's encoder restored from the run (INIT_CHECKPOINT; every backbone
    # object matched), and the same encoder read independently from the checkpoint: every
    # weight equal, none still random.
    import gin

    from convert_testing import scratch_classification_args
    from garden.models import factory
    from garden.tasks.classification import Classification

    gin.clear_config()
    scratch_classification_args(tmp_path, tmp_path / "clf", 1)  # writes the sample task files
    task = Classification(
        backbone=lambda **kw: factory.backbone(preset="cove_tiny", **kw), vocab=str(vocab),
        train_file=str(tmp_path / "data" / "train.tsv"),
        eval_file=str(tmp_path / "data" / "dev.tsv"), init_checkpoint=str(run / "checkpoints"))
    task.prepare()
    restored = task.build_model()[1]["backbone"]
    independent = CoveBackbone.untrained("cove_tiny", vocab_size=restored.vocab_size)
    initial = [w.numpy() for w in independent.weights]
    assert len(initial) == 1 + 4 * 3  # the table, then 2 x 2 LSTMs of kernel, recurrent, bias
    tf.train.Checkpoint(backbone=independent).read(
        tf.train.latest_checkpoint(str(run / "checkpoints"))).expect_partial()
    for ours, theirs, init in zip(restored.weights, independent.weights, initial):
        assert ours.path == theirs.path
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=ours.path)
        assert not np.allclose(theirs.numpy(), init), theirs.path




def test_the_classifier_fine_tunes_and_serves_raw_text(tmp_path):
    from convert_testing import assert_classifier_learns_and_serves, train_scratch_classifier

    assert_classifier_learns_and_serves(train_scratch_classifier(
        tmp_path, "configs/finetune/classification_cove_tiny.gin", 40,
        "--gin_param=train.log_every=10"))

