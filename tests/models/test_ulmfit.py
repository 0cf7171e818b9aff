"""ULMFiT's AWD-LSTM family: parameter count of the published size, concat pooling over the real
steps, the layer depths ULMFiT's discriminative rates read, and the classifier stage fine-tuned
through garden.train and served from raw text."""

import numpy as np

from garden import models
from garden.layers.recurrent import ConcatPooling
from garden.models.ulmfit import AwdLstmBackbone
from garden.optimization import group_depths


def test_the_published_size_and_the_spec():
    backbone = AwdLstmBackbone.untrained("ulmfit", vocab_size=60000)
    # 60000 x 400 + LSTMs 400->1152, 1152->1152, 1152->400 (4 gates, one bias each).
    lstm = sum(4 * u * (d + u) + 4 * u for d, u in ((400, 1152), (1152, 1152), (1152, 400)))
    assert backbone.count_params() == 60000 * 400 + lstm == 44_262_464
    assert models.spec("ulmfit").backbone_class() is AwdLstmBackbone


def test_concat_pooling_reads_only_the_real_steps():
    x = np.arange(2 * 4 * 3, dtype="float32").reshape(2, 4, 3) - 10
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], "int32")
    pooled = ConcatPooling()(x, mask).numpy()
    for b, n in enumerate(mask.sum(1)):
        real = x[b, :n]
        np.testing.assert_allclose(pooled[b], np.concatenate([real[-1], real.max(0),
                                                              real.mean(0)]), rtol=1e-6)


def test_padding_does_not_change_the_encoding():
    backbone = AwdLstmBackbone.untrained("ulmfit_tiny", vocab_size=50)
    ids = np.array([[2, 7, 8, 9, 3]], "int32")
    padded = np.array([[2, 7, 8, 9, 3, 0, 0]], "int32")
    a = backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})
    b = backbone({"token_ids": padded, "padding_mask": (padded > 0).astype("int32")})
    np.testing.assert_allclose(a["pooled_output"], b["pooled_output"], atol=1e-6)
    np.testing.assert_allclose(a["sequence_output"], b["sequence_output"][:, :5], atol=1e-6)


def test_layer_groups_for_discriminative_rates_and_unfreezing():
    import keras

    backbone = AwdLstmBackbone.untrained("ulmfit_tiny", vocab_size=50)
    head = keras.Variable(np.zeros((2, 2)), name="classifier_kernel")
    variables = backbone.trainable_variables + [head]
    groups = backbone.variable_groups()
    depths = dict(zip([v.path for v in variables], group_depths(groups, variables)))
    assert depths["embeddings/embeddings"] == 0
    assert [depths[f"lstm_layer_{i}/recurrent_kernel"] for i in range(3)] == [1, 2, 3]
    assert depths[head.path] == 4  # the head, one group above them all


def test_the_classifier_stage_fine_tunes_and_serves_raw_text(tmp_path):
    from convert_testing import assert_classifier_learns_and_serves, train_scratch_classifier

    # From scratch (no pretrained LM to protect), so every layer trains from the start with
    # light dropout; the config's recipe (unfreezing, discriminative rates, slanted triangular
    # schedule) is otherwise the one that runs. 40 steps (60 until 2026-12-07), logged at 20
    # and 40: measured loss 0.70 -> 0.47, dev accuracy 1.0 against the majority's 0.375.
    assert_classifier_learns_and_serves(train_scratch_classifier(
        tmp_path, "configs/finetune/classification_ulmfit_tiny.gin", 40,
        "--gin_param=train.log_every=20",
        "--gin_param=train.unfreeze_every=None", "--gin_param=train.layer_decay=None",
        "--gin_param=backbone.input_dropout=0.1", "--gin_param=backbone.hidden_dropout=0.1",
        "--gin_param=backbone.weight_dropout=0.1"))


def test_the_three_stages_lm_then_classifier_from_its_backbone(tmp_path, bilm_data):
    """Stage 1: make_pretrain --objective=bilm on a slice of the sample corpus and the LM
    trained by garden.train (configs/ulmfit_tiny.gin) lowers its loss; stage 2: the LM
    fine-tuned from it (configs/ulmfit_tiny_target_lm.gin) starts from its weights; stage 3:
    the classifier starts from stage 2's backbone (every weight)."""
    from convert_testing import scratch_classification_args
    from model_testing import assert_restores_to
    from objective_testing import bilm_lm_args
    from testing import train_in_process

    from garden.models import factory
    from garden.tasks.classification import Classification

    vocab, data = bilm_data()
    lm_dir = tmp_path / "lm"
    summary = train_in_process(bilm_lm_args(
        "configs/ulmfit_tiny.gin", lm_dir, vocab, data, 80,
        "--gin_param=train.warmup_steps=8", "--gin_param=train.log_every=10"),
        str(lm_dir), "ulmfit_pretraining", 80)
    first_loss = summary["first_logged_metrics"]["loss"]
    last_loss = summary["last_logged_metrics"]["loss"]
    # ln(800) = 6.68 at the start; the window noise is a few hundredths.
    assert last_loss < first_loss - 0.5, (first_loss, last_loss)

    # Stage 2: the LM fine-tuned on (here the same) target text from stage 1's weights: its
    # first steps start where stage 1 ended, far below a fresh model's.
    target_dir = tmp_path / "target_lm"
    target = train_in_process(bilm_lm_args(
        "configs/ulmfit_tiny_target_lm.gin", target_dir, vocab, data, 10,
        f"--gin_param=INIT_CHECKPOINT='{lm_dir}'", "--gin_param=train.log_every=5"),
        str(target_dir), "ulmfit_pretraining", 10)
    assert target["first_logged_metrics"]["loss"] < first_loss - 0.5, target

    import gin

    gin.clear_config()
    scratch_classification_args(tmp_path, tmp_path / "clf", 1)  # writes the sample task files
    task = Classification(
        backbone=lambda **kw: factory.backbone(preset="ulmfit_tiny", **kw), vocab=str(vocab),
        train_file=str(tmp_path / "data" / "train.tsv"),
        eval_file=str(tmp_path / "data" / "dev.tsv"),
        init_checkpoint=str(target_dir / "checkpoints"))
    task.prepare()
    _, objects = task.build_model()
    # The LM's backbone restored from its checkpoint independently: every weight equal.
    pretrained = AwdLstmBackbone.untrained("ulmfit_tiny", vocab_size=task.packer.vocab_size)
    assert_restores_to(objects["backbone"], pretrained, target_dir)
