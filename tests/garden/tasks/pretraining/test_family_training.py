"""RoBERTa, ALBERT and ELECTRA through `garden.train`: tiny configs on data built by the real
tools, the vocabulary check for every tokenizer kind, dynamic masking and ELECTRA seeds in the
input pipeline, and `--summary` for every config. "The objective learns" (beats a context-free
guess) is in test_family_learning_mlm.py, test_family_learning_electra_spanbert.py,
test_distilbert_learning.py and test_albert_sop_learning.py (one file each, or two short ones,
so that `--dist loadfile` spreads them over the workers)."""

from __future__ import annotations

import glob
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from benchmarks import objectives_learn as learn
from text import features
from garden import train as train_lib
from garden.tasks.pretraining import Pretraining
from learn_testing import SEQ, VOCAB_SIZE
from testing import train_in_process

# The family_data session fixture (tests/conftest.py) holds the vocabularies and data.

CONFIGS = sorted(
    os.path.relpath(p, train_lib.REPO_ROOT) for family in ("roberta", "albert", "electra")
    for p in glob.glob(os.path.join(train_lib.REPO_ROOT, "configs", f"{family}_*.gin")))


@pytest.fixture(autouse=True)
def _cwd_repo(monkeypatch):
    # Config files include each other by repo-relative paths, as on the command line.
    monkeypatch.chdir(train_lib.REPO_ROOT)


def _args(family: str, fd, model_dir, steps: int, *extra: str) -> list:
    spec = learn.FAMILIES[family]
    phases = [{"start_step": 0, "data_dir": fd.data[family], "max_seq_length": SEQ}]
    return [f"--config={spec.config}", f"--model_dir={model_dir}",
            f"--gin_param=VOCAB='{fd.vocab[family]}'", f"--gin_param=DATA_DIR='{fd.data[family]}'",
            f"--gin_param=garden.{spec.task}.phases={phases!r}",
            f"--gin_param=train.train_steps={steps}", "--gin_param=train.global_batch_size=16",
            "--gin_param=train.warmup_steps=2", "--gin_param=train.log_every=1",
            "--gin_param=train.peak_flops=1e12", f"--gin_param=garden.{spec.task}.shuffle_buffer=200",
            *extra]


# ----------------------------------------------------------------------------------------
# Every config builds.
# ----------------------------------------------------------------------------------------


def _depth(config: str) -> tuple:
    """(the gin scope of the config's depth, its number of layers): ELECTRA's towers take
    `electra_towers.num_layers`, the others `backbone.num_layers`; unbound, the preset's."""
    import gin

    from garden.models.factory import preset_config

    scope = "electra_towers" if "/electra_" in config else "backbone"
    train_lib.parse_config([config], [])
    try:
        depth = gin.query_parameter(f"{scope}.num_layers")
    except ValueError:
        depth = preset_config(gin.query_parameter(f"{scope}.preset"))["num_layers"]
    gin.clear_config()
    return scope, depth


def test_every_config_builds_its_model_with_summary(capsys):
    """Every config builds through `--summary` at 1 and at 2 layers (its own depth bound over
    the config's: building the 24-layer ones cost ~3/4 of this file's test time). The layers
    of a stack are alike, so the parameters are affine in the depth L: the config's total is
    P(1) + (L - 1) (P(2) - P(1)), with L the config's own (bound, or its preset's); checked
    equal to the totals of the full-depth builds for all 12 (2026-12-07). ALBERT's layers
    share one block: P(2) = P(1)."""
    # roberta {tiny,base,large}, albert {tiny,base,large,xlarge,xxlarge}, electra {tiny,small,base,large}
    assert len(CONFIGS) == 12, CONFIGS
    totals = {}
    for config in CONFIGS:
        scope, depth = _depth(config)
        counts = []
        for layers in (1, 2):
            counts.append(train_lib.build_summary([config], [f"{scope}.num_layers = {layers}"]))
            out = capsys.readouterr().out
            assert "Total parameters" in out, config
            keras.backend.clear_session(free_memory=False)
        per_layer = counts[1] - counts[0]
        assert (per_layer == 0) == ("/albert_" in config), (config, counts)
        totals[config] = counts[0] + (depth - 1) * per_layer
    # Published sizes (with the preset vocabularies, as no VOCAB is given): RoBERTa-base 124.6M
    # backbone + LM head; ALBERT-base 11.7M backbone; ELECTRA-small 13.5M discriminator + generator.
    assert 124e6 < totals["configs/roberta_base.gin"] < 127e6
    assert 355e6 < totals["configs/roberta_large.gin"] < 358e6
    assert 11.6e6 < totals["configs/albert_base.gin"] < 12.0e6
    assert 222e6 < totals["configs/albert_xxlarge.gin"] < 224e6
    assert 13.5e6 < totals["configs/electra_small.gin"] < 14.5e6
    assert totals["configs/roberta_tiny.gin"] < totals["configs/roberta_base.gin"] / 10


# ----------------------------------------------------------------------------------------
# Training through the CLI entry point, one family each.
# ----------------------------------------------------------------------------------------


def _train_4_steps(family: str, fd, tmp_path):
    """`family`'s pre-training run of 4 steps through the CLI: (its summary, its first logged
    metrics, its model dir)."""
    model_dir = tmp_path / family
    summary = train_in_process(_args(family, fd, model_dir, 4), model_dir, f"{family}_pretraining", 4)
    return summary, summary["first_logged_metrics"], model_dir


def test_roberta_trains_with_dynamic_masking(family_data, tmp_path):
    _, first, model_dir = _train_4_steps("roberta", family_data, tmp_path)
    # Random init scores the BPE vocabulary about uniformly: MLM loss near ln(1000) = 6.9.
    assert abs(first["mlm_loss"] - math.log(VOCAB_SIZE)) < 1.0, first
    assert set(first) >= {"loss", "mlm_loss", "mlm_accuracy"} and "nsp_loss" not in first
    config = (model_dir / "operative_config.gin").read_text()
    assert "dynamic_masking = True" in config and "adam_beta_2 = 0.98" in config


def test_albert_trains_mlm_and_sop(family_data, tmp_path):
    _, first, model_dir = _train_4_steps("albert", family_data, tmp_path)
    assert abs(first["mlm_loss"] - math.log(VOCAB_SIZE)) < 1.0, first
    # SOP starts at chance: cross-entropy near ln 2 = 0.69.
    assert abs(first["sop_loss"] - math.log(2)) < 0.3, first
    assert abs(first["loss"] - first["mlm_loss"] - first["sop_loss"]) < 1e-3
    assert "optimizer = 'lamb'" in (model_dir / "operative_config.gin").read_text()


def test_electra_trains_generator_and_discriminator(family_data, tmp_path):
    summary, first, _ = _train_4_steps("electra", family_data, tmp_path)
    # loss = gen MLM + 50 x disc: check the weighting on the logged (per-step averaged) values.
    assert abs(first["loss"] - first["mlm_loss"] - 50.0 * first["disc_loss"]) < 1e-2 * first["loss"]
    # An untrained generator almost never samples the original token, so about 15% of the real
    # tokens (minus the unmaskable [CLS]/[SEP], and rounding) are "replaced".
    assert 0.10 < first["replaced_fraction"] < 0.16, first
    # Both towers and the shared embeddings are in the checkpoint.
    reader = tf.train.load_checkpoint(summary["checkpoint"])
    names = " ".join(reader.get_variable_to_shape_map())
    assert "generator" in names and "discriminator" in names


# ----------------------------------------------------------------------------------------
# The data checks, for vocabularies of every kind.
# ----------------------------------------------------------------------------------------


def test_refuses_data_made_with_another_vocabulary(family_data, tmp_path, capsys):
    # RoBERTa data (BPE) with the ALBERT SentencePiece model as the config's vocabulary: the
    # fingerprint in info.json does not match.
    args = _args("roberta", family_data, tmp_path / "run", 2,
                 f"--gin_param=VOCAB='{family_data.vocab['albert']}'",
                 "--gin_param=garden.Pretraining.tokenizer='sentencepiece'")
    assert train_lib.main(args) == 2
    err = capsys.readouterr().err
    assert family_data.data["roberta"] in err and "vocabulary" in err, err


def test_refuses_data_of_another_objective(family_data, tmp_path, capsys):
    phases = [{"start_step": 0, "data_dir": family_data.data["albert"], "max_seq_length": SEQ}]
    args = _args("roberta", family_data, tmp_path / "run", 2,
                 f"--gin_param=garden.Pretraining.phases={phases!r}")
    assert train_lib.main(args) == 2
    err = capsys.readouterr().err
    assert "'albert'" in err and "'roberta'" in err, err


# ----------------------------------------------------------------------------------------
# Training-time randomness in the input pipeline.
# ----------------------------------------------------------------------------------------


def _roberta_task(fd) -> Pretraining:
    task = Pretraining(backbone=None, vocab=fd.vocab["roberta"], family="roberta", tokenizer="bpe",
                              phases=[{"start_step": 0, "data_dir": fd.data["roberta"],
                                       "max_seq_length": SEQ}])
    task.prepare()
    return task


def test_dynamic_masks_are_fresh_per_batch_and_resume_exactly(family_data):
    task = _roberta_task(family_data)
    ddir = task.data_dirs[0]
    stream = list(task._dataset(ddir, 8, seed=3, skip_batches=0).take(5))
    # Batch 3 of a run resumed at batch 3 is batch 3 of the uninterrupted run, masks included.
    resumed = next(iter(task._dataset(ddir, 8, seed=3, skip_batches=3)))
    for k in ("input_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights"):
        np.testing.assert_array_equal(resumed[k].numpy(), stream[3][k].numpy())

    # The same sequences seen at two stream positions get two different masks.
    parsing = features.tf_parsing_spec(ddir.spec)
    raw = next(iter(tf.data.TFRecordDataset(ddir.files).batch(8).map(
        lambda x: tf.io.parse_example(x, parsing))))
    twice = list(task.record.per_batch(task, tf.data.Dataset.from_tensors(raw).repeat(2), 3, None, 0))
    assert not np.array_equal(twice[0]["masked_lm_positions"].numpy(),
                              twice[1]["masked_lm_positions"].numpy())

    # Masks only real, non-special tokens; ~15% of them (int(0.15 n + U[0,1)) per sequence).
    real = raw["input_mask"].numpy().astype(bool)
    specials = np.array(task.vocabulary.special_ids)
    for batch in twice:
        w = batch["masked_lm_weights"].numpy() > 0
        pos = batch["masked_lm_positions"].numpy()
        rows = np.nonzero(w)[0]
        assert real[rows, pos[w]].all()
        assert not np.isin(raw["input_ids"].numpy()[rows, pos[w]], specials).any()
        # Labels are the original tokens.
        np.testing.assert_array_equal(batch["masked_lm_ids"].numpy()[w],
                                      raw["input_ids"].numpy()[rows, pos[w]])
        expected = 0.15 * real.sum(axis=1)
        assert np.all(np.abs(w.sum(axis=1) - expected) <= 1.0 + 1e-9)


def test_electra_batches_carry_a_seed_per_stream_position_and_weights_match(family_data):
    task = Pretraining(backbone=None, vocab=family_data.vocab["electra"], family="electra",
                       tokenizer="wordpiece",
                              phases=[{"start_step": 0, "data_dir": family_data.data["electra"],
                                       "max_seq_length": SEQ}])
    task.prepare()
    batches = list(task._dataset(task.data_dirs[0], 4, seed=11, skip_batches=5).take(2))
    np.testing.assert_array_equal(batches[0]["seed"].numpy(), [11, 5])
    np.testing.assert_array_equal(batches[1]["seed"].numpy(), [11, 6])

    # The trainer's global denominators equal what the model's in-graph masking uses.
    from garden.models.factory import electra_towers
    from garden.models.electra.pretrainer import ElectraPretrainer

    towers = electra_towers(default_vocab_size=task.vocab_size, num_layers=1, hidden_size=32,
                            num_heads=1, intermediate_size=64, embedding_size=16,
                            generator_hidden_size=16, generator_num_heads=1,
                            generator_intermediate_size=32)
    model = ElectraPretrainer(towers["generator"], towers["discriminator"],
                              mask_token_id=task.vocabulary.specials["mask"],
                              unmaskable_token_ids=sorted(task.vocabulary.special_ids))
    outputs = model(task.model_inputs(batches[0]))
    weights = task.loss_weights(batches[0])
    assert float(weights["masked_lm_weights"]) == float(tf.reduce_sum(outputs["masked_lm_weights"]))
    assert float(weights["disc_weights"]) == float(tf.reduce_sum(outputs["disc_weights"]))
    # No [CLS]/[SEP]/padding is ever masked.
    positions = outputs["masked_lm_positions"].numpy()[outputs["masked_lm_weights"].numpy() > 0]
    assert len(positions) and positions.min() > 0


def test_a_backbone_of_another_family_is_refused_before_the_pretrainer_is_built():
    """The factory's preset picks the backbone's family and `family` the objective: ALBERT's
    objective on a BERT-tiny backbone (a run file whose experiment forgot its preset) is a
    ValueError naming ALBERT's presets, raised before AlbertPretrainer sees the backbone."""
    from garden.models.factory import backbone

    task = Pretraining(backbone=lambda **kw: backbone(preset="bert_tiny", **kw), vocab="unused",
                       phases=[{"start_step": 0, "data_dir": "unused", "max_seq_length": 64}],
                       family="albert")
    task.vocab_size = 50  # what prepare() reads from the vocabulary
    with pytest.raises(ValueError, match=r"family = 'albert' needs its AlbertBackbone, but the "
                                         r"backbone factory built a BertBackbone.*'albert_base'"):
        task.build_model()
