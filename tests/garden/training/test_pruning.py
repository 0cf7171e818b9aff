"""garden.training.pruning: Zhu & Gupta's polynomial schedule against its formula, the
magnitude masks, and a short fine-tuning that ends at the target sparsity."""

import keras
import numpy as np
import pytest

from garden.models.bert.backbone import BertBackbone
from garden.models.instrument import layer_blocks
from garden.training import pruning


def _formula(t, s_i, s_f, t0, n, dt):
    """s_t = s_f + (s_i - s_f) (1 - (t - t0) / (n dt))^3 (Zhu & Gupta 2017, eq. 1)."""
    return s_f + (s_i - s_f) * (1 - (t - t0) / (n * dt)) ** 3


def test_schedule_equals_the_formula():
    # s_i = 0.1 -> s_f = 0.8 from t0 = 10 in n = 5 steps of dt = 4 (end 30).
    schedule = pruning.PolynomialSchedule(final_sparsity=0.8, initial_sparsity=0.1,
                                           begin_step=10, end_step=30, frequency=4)
    updates = [t for t in range(50) if schedule.updates_at(t)]
    assert updates == [10, 14, 18, 22, 26, 30]
    for t in updates:
        assert schedule.sparsity(t) == pytest.approx(_formula(t, 0.1, 0.8, 10, 5, 4), abs=1e-7)
    assert schedule.sparsity(14) == pytest.approx(0.8 - 0.7 * 0.8 ** 3, abs=1e-7)  # 0.4416
    assert schedule.sparsity(0) == pytest.approx(0.1) and schedule.sparsity(45) == \
        pytest.approx(0.8)
    with pytest.raises(ValueError, match="initial <= final"):
        pruning.PolynomialSchedule(final_sparsity=1.0, end_step=10)


def test_magnitude_mask_zeroes_the_smallest_weights():
    weights = np.array([[0.5, -0.1, 0.3], [-0.9, 0.05, -0.2]])
    np.testing.assert_array_equal(pruning.magnitude_mask(weights, 0.5),
                                  [[1, 0, 1], [1, 0, 0]])
    assert pruning.magnitude_mask(weights, 0.0).all()


def test_prunable_kernels_are_the_dense_kernels_of_a_bert_classifier():
    backbone = BertBackbone(vocab_size=30, num_layers=2, hidden_size=16, num_heads=2,
                            intermediate_size=32)
    head = keras.layers.Dense(3)
    model = keras.Model(backbone.input, head(backbone(backbone.input)["pooled_output"]))
    kernels = pruning.prunable_kernels(model)
    attention = layer_blocks(backbone)[0].attention
    # Per layer q, k, v, attention output, intermediate, output; the pooler; the classifier.
    assert len(kernels) == 2 * 6 + 2
    ids = {id(k) for k in kernels}
    assert id(attention.query_dense.kernel) in ids and id(head.kernel) in ids
    assert not any("embedding" in k.path or "norm" in k.path for k in kernels)


def test_fine_tuning_reaches_the_target_sparsity_and_keeps_pruned_weights_at_zero():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 10)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(24, activation="relu"),
                              keras.layers.Dense(2)])
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    batches = [(x[i % 4 * 16:][:16], y[i % 4 * 16:][:16]) for i in range(30)]
    schedule = pruning.PolynomialSchedule(final_sparsity=0.75, end_step=20, frequency=5)
    accuracy = lambda: float(np.mean(model.predict(x, verbose=0).argmax(-1) == y))  # noqa
    result = pruning.magnitude_prune(model, lambda b: model.train_on_batch(*b), batches,
                                      schedule, metric=accuracy)
    assert [p["step"] for p in result["curve"]] == [0, 5, 10, 15, 20]
    for point in result["curve"]:
        target = _formula(point["step"], 0.0, 0.75, 0, 4, 5)
        assert point["target_sparsity"] == pytest.approx(target, abs=1e-7)
        assert point["sparsity"] == pytest.approx(target, abs=1 / 48)  # rounding per kernel
    kernels = [layer.kernel.numpy() for layer in model.layers]
    # round(0.75 * 240) = 180 and round(0.75 * 48) = 36 zeros, 10 steps after the last update.
    assert [int(np.sum(k == 0)) for k in kernels] == [180, 36]
    assert result["sparsity"] == pytest.approx(0.75) and result["target_sparsity"] == 0.75
    assert result["curve"][-1]["metric"] > 0.75  # still learns the task at 75% sparsity
    assert all(v == pytest.approx(0.75) for v in result["variables"].values())


def test_sparsity_curve_plot(tmp_path):
    result = {"curve": [{"sparsity": 0.0, "metric": 0.9}, {"sparsity": 0.5, "metric": 0.8},
                        {"sparsity": 0.7, "metric": None}]}
    pruning.plot_sparsity_curve(result, str(tmp_path / "s.png"))
    assert (tmp_path / "s.png").stat().st_size > 1000


def test_garden_train_prunes_resumes_and_exports_the_sparse_classifier(tmp_path):
    """train.magnitude_pruning in garden.train: a tiny classifier fine-tuned 12 steps in two
    runs of the same model_dir (stop at 6, resume): every dense kernel of the checkpoint ends
    with round(0.6 size) zeros, the pruned positions of step 6 stay 0, summary.json has the
    curve, and the export answers raw text."""
    from convert_testing import export_answers, scratch_classification_args
    from testing import train_in_process

    model_dir = tmp_path / "run"
    settings = "{'final_sparsity': 0.6, 'end_step': 8, 'frequency': 2}"

    def run(steps):
        return train_in_process(scratch_classification_args(
            tmp_path, model_dir, steps, "--gin_param=train.eval_every=4",
            "--gin_param=train.checkpoint_every=6",
            f"--gin_param=train.magnitude_pruning={settings}"),
            str(model_dir), "classification", steps)

    def kernels():  # the dense kernels of the newest checkpoint, restored by garden.runs
        from garden import runs

        model = runs.open(str(model_dir), [runs.MODEL_DIR]).task_model()
        return {v.path: v.numpy() for v in pruning.prunable_kernels(model)}

    first = run(6)
    # Updates at 0, 2, 4: s_4 = 0.6 (1 - (1 - 4/8)^3) = 0.525 for the weights after step 6.
    at_6 = kernels()
    assert at_6, "no dense kernel in the checkpoint"
    for name, k in at_6.items():
        assert int(np.sum(k == 0)) == int(round(0.525 * k.size)), name
    assert first["magnitude_pruning"]["curve"][0]["step"] == 4
    summary = run(12)
    at_12 = kernels()
    for name, k in at_12.items():
        assert int(np.sum(k == 0)) == int(round(0.6 * k.size)), name
        assert np.all(k[at_6[name] == 0] == 0), f"{name}: a pruned weight came back"
    result = summary["magnitude_pruning"]
    assert result["sparsity"] == pytest.approx(0.6, abs=0.01)
    assert [p["step"] for p in result["curve"]] == [8, 12]
    assert result["curve"][-1]["metric_name"] == "eval_accuracy"
    assert 0 <= result["curve"][-1]["metric"] <= 1
    assert (model_dir / "pruning.png").stat().st_size > 1000
    assert set(export_answers(summary["export_dir"])) <= {"pos", "neg"}


def test_a_schedule_without_final_sparsity_is_refused():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="train.magnitude_pruning: .*final_sparsity"):
        pruning.RunPruning(model, {"end_step": 4}, train_steps=10, step=0)
