"""SpanBERT, ERNIE and DistilBERT through `python -m garden.train` (docs/objectives.md section 4, 5, 10).

Data come from the real tools: the session `bert_data` fixture (corpus slice, WordPiece vocab,
BERT data of length 64) and, built once here, make_pretrain --objective=spanbert / ernie output
of the same corpus and vocabulary. The DistilBERT teacher is a tiny 4-layer BERT that
garden.train trains for 2 steps.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf

from garden import data as data_lib
from garden import train as train_lib
from garden.models.bert.backbone import BertBackbone
from garden.models.distilbert.backbone import DistilBertBackbone
from garden.tasks.distillation import (Distillation, distillation_mask, load_teacher,
                                       token_weights, unmask_bert_batch)
from objective_testing import within
from testing import checkpoint_floats, pretrain_args, run_fixture_tool, train_in_process


@pytest.fixture(autouse=True)
def _cwd_repo(monkeypatch):
    # Config files include each other by repo-relative paths, as on the command line.
    monkeypatch.chdir(train_lib.REPO_ROOT)


@dataclasses.dataclass
class Data:
    vocab: str
    bert: str      # make_pretrain --objective=bert, length 64
    spanbert: str  # --objective=spanbert, length 64, 12 predictions
    ernie: str     # --objective=ernie, length 64, 10 predictions
    teacher: str   # model_dir of a 4-layer BERT-tiny run of 2 steps


TEACHER_LAYERS = 4


@pytest.fixture(scope="module")
def data(bert_data, tmp_path_factory) -> Data:
    root = tmp_path_factory.mktemp("span_distill")
    common = [f"--input={bert_data.corpus_glob}", f"--vocab={bert_data.vocab}",
              "--max_seq_length=64", "--dupe_factor=1", "--num_shards=2"]
    spanbert, ernie = root / "spanbert", root / "ernie"
    run_fixture_tool("data_pipelines.make_pretrain", "--objective=spanbert",
                     f"--output_dir={spanbert}", "--max_predictions_per_seq=12", *common)
    run_fixture_tool("data_pipelines.make_pretrain", "--objective=ernie", f"--output_dir={ernie}",
                     "--max_predictions_per_seq=10", *common)
    teacher = root / "teacher"
    args = pretrain_args(bert_data, teacher, f"--gin_param=backbone.num_layers={TEACHER_LAYERS}",
                         steps=2)
    assert train_lib.main(args[2:]) == 0  # drop "-m garden.train"
    return Data(vocab=bert_data.vocab, bert=bert_data.data_dir, spanbert=str(spanbert),
                ernie=str(ernie), teacher=str(teacher))


def _vocab_size(vocab):
    with open(vocab, encoding="utf-8") as f:
        return sum(1 for _ in f)


# --- SpanBERT ----------------------------------------------------------------------------------

def _tiny_args(config, task, data, data_dir, model_dir, steps, *extra):
    """garden.train arguments of a tiny run: 16 examples a step, a log line every step."""
    return [f"--config={config}", f"--model_dir={model_dir}",
            f"--gin_param=VOCAB='{data.vocab}'", f"--gin_param=DATA_DIR='{data_dir}'",
            f"--gin_param=train.train_steps={steps}", "--gin_param=train.global_batch_size=16",
            "--gin_param=train.warmup_steps=2", "--gin_param=train.log_every=1",
            f"--gin_param=garden.{task}.shuffle_buffer=200", *extra]


def _spanbert_args(data, model_dir, steps, *extra, data_dir=None):
    phases = [{"start_step": 0, "data_dir": data_dir or data.spanbert, "max_seq_length": 64}]
    return _tiny_args("configs/spanbert_tiny.gin", "Pretraining", data, data.spanbert, model_dir,
                      steps, f"--gin_param=garden.Pretraining.phases={phases!r}",
                      "--gin_param=backbone.dropout=0.0", *extra)


def test_spanbert_tiny_trains_on_spanbert_data(data, tmp_path):
    model_dir = tmp_path / "run"
    summary = train_in_process(_spanbert_args(data, model_dir, 25), model_dir,
                               "spanbert_pretraining", 25)
    first, last = summary["first_logged_metrics"], summary["last_logged_metrics"]
    # Both heads start near uniform over the vocabulary: ln(V) each, loss = MLM + 1.0 * SBO.
    log_v = math.log(_vocab_size(data.vocab))
    assert abs(first["mlm_loss"] - log_v) < 0.5 and abs(first["sbo_loss"] - log_v) < 0.5, first
    assert first["loss"] == pytest.approx(first["mlm_loss"] + first["sbo_loss"], rel=1e-4)
    assert "nsp_loss" not in first  # SpanBERT has no NSP
    assert last["mlm_loss"] < first["mlm_loss"] - 0.3 and last["sbo_loss"] < first["sbo_loss"] - 0.3, \
        (first, last)
    # The SBO head's variables are trained and checkpointed.
    reader = tf.train.load_checkpoint(summary["checkpoint"])
    shapes = reader.get_variable_to_shape_map()
    assert any(s == [15, 200] for s in shapes.values())


def test_spanbert_refuses_bert_data(data, tmp_path, capsys):
    rc = train_lib.main(_spanbert_args(data, tmp_path / "run", 2, data_dir=data.bert))
    assert rc == 2
    err = capsys.readouterr().err
    assert "'bert'" in err and "'spanbert'" in err


# --- ERNIE -------------------------------------------------------------------------------------

def _ernie_args(data, model_dir, config="configs/ernie_tiny.gin", *extra):
    phases = [{"start_step": 0, "data_dir": data.ernie, "max_seq_length": 64}]
    return [f"--config={config}", f"--model_dir={model_dir}",
            f"--gin_param=VOCAB='{data.vocab}'", f"--gin_param=DATA_DIR='{data.ernie}'",
            f"--gin_param=garden.Pretraining.phases={phases!r}",
            "--gin_param=train.train_steps=3", "--gin_param=train.global_batch_size=16",
            "--gin_param=train.log_every=1", "--gin_param=garden.Pretraining.shuffle_buffer=200",
            *extra]


def test_ernie_tiny_trains_on_ernie_data(data, tmp_path):
    model_dir = tmp_path / "run"
    summary = train_in_process(_ernie_args(data, model_dir), model_dir)
    # The data check accepted 'ernie' data (the BERT config refuses it: next test).
    assert summary["steps"] == 3 and math.isfinite(summary["last_logged_metrics"]["loss"])


def test_bert_config_still_accepts_only_bert_data(data, tmp_path, capsys):
    # Backward compatible: without the binding, BertPretraining trains 'bert' data only.
    rc = train_lib.main(_ernie_args(data, tmp_path / "run", "configs/bert_tiny.gin"))
    assert rc == 2
    err = capsys.readouterr().err
    assert "'ernie'" in err and "'bert'" in err


# --- DistilBERT --------------------------------------------------------------------------------

def _distill_args(data, model_dir, steps, *extra):
    return _tiny_args("configs/distilbert_tiny.gin", "Distillation", data, data.bert, model_dir,
                      steps, f"--gin_param=TEACHER='{data.teacher}'",
                      "--gin_param=garden.Distillation.max_seq_length=64",
                      f"--gin_param=teacher/backbone.num_layers={TEACHER_LAYERS}",
                      "--gin_param=garden.Distillation.teacher_layers=[1, 3]", *extra)


def test_distillation_tiny_run(data, tmp_path):
    model_dir = tmp_path / "run"
    summary = train_in_process(_distill_args(data, model_dir, 6), model_dir, "distillation", 6)
    first, last = summary["first_logged_metrics"], summary["last_logged_metrics"]
    assert summary["teacher_layers"] == [1, 3]
    for m in (first, last):
        assert m["loss"] == pytest.approx(5 * m["ce_loss"] + 2 * m["mlm_loss"] + m["cos_loss"],
                                          rel=1e-4)
    # The student starts as a copy of teacher layers: its last states are close to, but not
    # equal to, the teacher's (cosine loss in (0, 1)), and the MLM head starts near ln V.
    assert 0.0 < first["cos_loss"] < 1.0
    assert abs(first["mlm_loss"] - math.log(_vocab_size(data.vocab))) < 1.0
    # A resumed run goes on from the student's checkpoint, not from a fresh copy of the teacher.
    assert train_in_process(_distill_args(data, model_dir, 8), model_dir)["steps_this_run"] == 2


def _tiny_task(data, layers=(1, 3), teacher_layers=TEACHER_LAYERS):
    size = dict(hidden_size=128, num_heads=2, intermediate_size=512)
    return Distillation(
        backbone=lambda default_vocab_size: DistilBertBackbone(
            vocab_size=default_vocab_size, num_layers=len(layers), **size),
        teacher_backbone=lambda default_vocab_size: BertBackbone(
            vocab_size=default_vocab_size, num_layers=teacher_layers, **size),
        teacher=data.teacher, vocab=data.vocab, data_dir=data.bert, max_seq_length=64,
        teacher_layers=layers, count_examples=2000)


def test_student_is_initialised_from_the_chosen_teacher_layers(data):
    task = _tiny_task(data)
    task.prepare()
    model, items = task.build_model()
    teacher, student = model.teacher, model.student
    # The teacher holds the trained checkpoint's values (not a fresh init): each of its
    # weights is one of the checkpoint's arrays.
    saved = {np.asarray(v).tobytes() for v in checkpoint_floats(data.teacher).values()}
    assert all(w.numpy().tobytes() in saved for w in teacher.weights)
    for i, t in enumerate((1, 3)):
        s_block, t_block = student.backbone.encoder_blocks[i], teacher.backbone.encoder_blocks[t]
        assert len(s_block.weights) == len(t_block.weights) == 16
        for a, b in zip(s_block.weights, t_block.weights):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    # ... and not from the other layers.
    assert not np.array_equal(student.backbone.encoder_blocks[0].weights[0].numpy(),
                              teacher.backbone.encoder_blocks[0].weights[0].numpy())
    np.testing.assert_array_equal(student.backbone.token_embedding.embeddings.numpy(),
                                  teacher.backbone.token_embedding.embeddings.numpy())
    assert items["model"] is student
    # Only the student trains.
    assert {id(v) for v in model.trainable_variables} == {id(v) for v in student.trainable_variables}


def test_teacher_from_a_saved_keras_pretrainer(data, tmp_path):
    # garden.convert writes pretrainer.keras (Hugging Face / TF1 BERT): a teacher too.
    size = dict(vocab_size=_vocab_size(data.vocab), hidden_size=128, num_heads=2,
                intermediate_size=512)
    teacher = load_teacher(data.teacher, BertBackbone(num_layers=TEACHER_LAYERS, **size))
    path = str(tmp_path / "pretrainer.keras")
    teacher.save(path)
    again = load_teacher(path, BertBackbone(num_layers=TEACHER_LAYERS, **size))
    for a, b in zip(teacher.weights, again.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(ValueError, match="does not fit"):
        load_teacher(path, BertBackbone(num_layers=2, **size))


@pytest.mark.parametrize("teacher_layers", [2, 6])  # the checkpoint's teacher has 4
def test_teacher_of_another_depth_is_refused(data, teacher_layers):
    task = _tiny_task(data, layers=(0, 1), teacher_layers=teacher_layers)
    task.prepare()
    with pytest.raises(ValueError, match="does not fit"):
        task.build_model()


def test_counts_and_unmasking_restore_the_original_text(data):
    task = _tiny_task(data)
    task.prepare()
    batch = next(iter(data_lib.record_dataset(task._dir, batch_size=32, seed=0, shuffle_buffer=0,
                                              repeat=False)))
    restored = unmask_bert_batch(batch).numpy()
    ids, pos = batch["input_ids"].numpy(), batch["masked_lm_positions"].numpy()
    originals, w = batch["masked_lm_ids"].numpy(), batch["masked_lm_weights"].numpy()
    rows, cols = np.nonzero(w > 0)
    np.testing.assert_array_equal(restored[rows, pos[rows, cols]], originals[rows, cols])
    untouched = np.ones_like(ids, bool)
    untouched[rows, pos[rows, cols]] = False
    np.testing.assert_array_equal(restored[untouched], ids[untouched])
    mask_id = task.mask_token_id
    assert (restored == mask_id).sum() == 0 < (ids == mask_id).sum()
    assert task.token_counts[mask_id] == 0 and task.token_counts.sum() > 0
    assert task.token_weights[mask_id] == 0 and task.token_weights[task.special_ids].sum() == 0


# --- DistilBERT masking (generated data) -------------------------------------------------------

def test_masking_budget_specials_and_seeds():
    rng = np.random.default_rng(0)
    vocab_size, mask_id, specials = 1000, 4, [0, 1, 2, 3, 4]
    batch, length = 64, 128
    ids = rng.integers(5, vocab_size, (batch, length)).astype(np.int32)
    lengths = rng.integers(20, length + 1, batch)
    real = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int32)
    ids[:, 0], ids[np.arange(batch), lengths - 1] = 2, 3  # [CLS] ... [SEP]
    ids[real == 0] = 0
    weights = token_weights(np.ones(vocab_size), specials)
    out = {k: v.numpy() for k, v in distillation_mask(
        ids, real, tf.constant(weights), tf.constant([1, 2]), mask_id, vocab_size,
        max_predictions=length).items()}
    w = out["masked_lm_weights"]
    # Budget over the batch: ceil(0.15 * real tokens), e.g. 0.15 * ~4900 -> ~735 predictions.
    assert w.sum() == math.ceil(0.15 * real.sum())
    rows, cols = np.nonzero(w > 0)
    pos = out["masked_lm_positions"][rows, cols]
    assert (real[rows, pos] == 1).all()
    assert not np.isin(ids[rows, pos], specials).any()  # never [CLS]/[SEP]/padding
    np.testing.assert_array_equal(out["masked_lm_ids"][rows, cols], ids[rows, pos])
    changed = out["token_ids"] != ids
    chosen = np.zeros_like(changed)
    chosen[rows, pos] = True
    assert not changed[~chosen].any()  # only chosen positions change
    # Same seed, same masks; another seed, other masks.
    again = distillation_mask(ids, real, tf.constant(weights), tf.constant([1, 2]), mask_id,
                              vocab_size, max_predictions=length)
    np.testing.assert_array_equal(again["token_ids"].numpy(), out["token_ids"])
    other = distillation_mask(ids, real, tf.constant(weights), tf.constant([1, 3]), mask_id,
                              vocab_size, max_predictions=length)
    assert not np.array_equal(other["masked_lm_positions"].numpy(), out["masked_lm_positions"])


def test_masking_shares_are_80_10_10_within_a_hundredth():
    """Over n = 39,322 chosen positions (15% of 512 x 512 real tokens) 5 binomial standard
    errors are 0.010 for the [MASK] share and 0.008 for the random and kept shares, so 85/10/5
    (or 80/5/15) fails. A random id can be [MASK] or the original piece, 1/V each."""
    rng = np.random.default_rng(4)
    vocab_size, mask_id, specials = 1000, 4, [0, 1, 2, 3, 4]
    ids = rng.integers(5, vocab_size, (512, 512)).astype(np.int32)
    real = np.ones_like(ids)
    out = distillation_mask(ids, real, tf.constant(token_weights(np.ones(vocab_size), specials)),
                            tf.constant([5, 6]), mask_id, vocab_size, max_predictions=512)
    rows, cols = np.nonzero(out["masked_lm_weights"].numpy() > 0)
    pos = out["masked_lm_positions"].numpy()[rows, cols]
    new, old = out["token_ids"].numpy()[rows, pos], ids[rows, pos]
    n = len(pos)
    assert n == math.ceil(0.15 * ids.size) == 39_322
    mask, keep = new == mask_id, new == old
    v = vocab_size
    for name, count, share in (("mask", mask.sum(), 0.8 + 0.1 / v),
                               ("random", (~mask & ~keep).sum(), 0.1 * (1 - 2 / v)),
                               ("keep", keep.sum(), 0.1 + 0.1 / v)):
        assert within(int(count), n, share), (name, count / n, share)


def test_masking_favours_rare_tokens_as_count_to_the_minus_0_7():
    vocab_size, frequent, rare = 10, 5, 6
    counts = np.ones(vocab_size)
    counts[frequent], counts[rare] = 1000.0, 10.0
    weights = token_weights(counts, [0, 1, 2, 3, 4])
    # Half the tokens frequent, half rare: a chosen token is rare with probability
    # r / (1 + r), r = (10 / 1000)^-0.7 = 25.1 -> 0.962. A low rate (1% -> 328 of 32768)
    # keeps sampling without replacement close to proportional.
    ids = np.where(np.random.default_rng(1).random((64, 512)) < 0.5, frequent, rare).astype(np.int32)
    real = np.ones_like(ids)
    out = distillation_mask(ids, real, tf.constant(weights), tf.constant([7, 7]), 4, vocab_size,
                            max_predictions=512, mlm_prob=0.01)
    w = out["masked_lm_weights"].numpy() > 0
    picked = out["masked_lm_ids"].numpy()[w]
    n, r = len(picked), 100.0 ** 0.7
    expected = r / (1 + r)
    assert n == math.ceil(0.01 * ids.size)
    assert abs(np.mean(picked == rare) - expected) < 5 * math.sqrt(expected * (1 - expected) / n)


def test_masking_keeps_the_first_predictions_when_slots_are_fewer():
    ids = np.full((1, 40), 7, np.int32)
    out = distillation_mask(ids, np.ones_like(ids), tf.constant(np.ones(10, np.float32)),
                            tf.constant([0, 0]), 4, 10, max_predictions=3)
    pos = out["masked_lm_positions"].numpy()[0]
    assert out["masked_lm_weights"].numpy().sum() == 3 and list(pos) == sorted(pos)


# --- --summary of every config -----------------------------------------------------------------

def _total(capsys):
    out = capsys.readouterr().out
    line = [l for l in out.splitlines() if l.startswith("Total parameters:")][0]
    return int(line.split(":")[1].split("(")[0].replace(",", ""))


# BERT-base backbone with the cased 28,996-piece vocabulary: 108,310,272; + MLM head
# (768*768 + 768 + 2*768 + 28,996) + SBO head (15*200 + (2*768+200)*768 + 768 + 2*768 +
# 768*768 + 768 + 2*768 + 28,996).
@pytest.mark.parametrize("config,low,high", [
    ("configs/spanbert_base.gin", 110_891_072, 110_891_072),
    ("configs/spanbert_large.gin", 337_000_000, 339_000_000),
    ("configs/ernie_base.gin", 100_000_000, 101_000_000),    # BERT-base with 18,000 pieces
    ("configs/distilbert.gin", 66_900_000, 67_100_000),      # 66.4M backbone + MLM head
])
def test_summary_of_the_full_size_configs(config, low, high, capsys):
    assert train_lib.main([f"--config={config}", "--summary"]) == 0
    total = _total(capsys)
    assert low <= total <= high, (config, total)


# The tiny twins' parts (BERT-tiny: L2 H128 F512, 512 positions; V pieces of VOCAB): a
# shared core of word and position tables, embedding LayerNorm and 2 blocks (q, k, v, output,
# two dense, two LayerNorms), and the tied MLM head (transform, LayerNorm, output bias).
_H, _F = 128, 512
_BLOCK = 4 * (_H * _H + _H) + (_H * _F + _F) + (_F * _H + _H) + 4 * _H


def _core(v):
    return v * _H + 512 * _H + 2 * _H + 2 * _BLOCK


def _bert(v):  # + token types, pooler and the MLM head
    return _core(v) + 2 * _H + (_H * _H + _H) + (_H * _H + _H + 2 * _H + v)


@pytest.mark.parametrize("config,expected", [
    # SpanBERT: no NSP; SBO: 15 x 200 positions, (2H + 200) -> H, LN, H -> H, LN, output bias.
    ("configs/spanbert_tiny.gin",
     lambda v: _bert(v) + 15 * 200 + (2 * _H + 200) * _H + 3 * _H + _H * _H + 3 * _H + v),
    ("configs/ernie_tiny.gin", lambda v: _bert(v) + 2 * _H + 2),  # BERT's NSP head
    ("configs/distilbert_tiny.gin",  # no token types, pooler or NSP
     lambda v: _core(v) + _H * _H + _H + 2 * _H + v),
], ids=["spanbert", "ernie", "distilbert"])
def test_summary_of_the_tiny_twins(config, expected, bert_data, capsys):
    assert train_lib.main([f"--config={config}", "--summary",
                           f"--gin_param=VOCAB='{bert_data.vocab}'"]) == 0
    vocab_size = _vocab_size(bert_data.vocab)
    assert _total(capsys) == expected(vocab_size), (config, vocab_size)
