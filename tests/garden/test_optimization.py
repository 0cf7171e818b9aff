"""Schedules and optimizers of garden.optimization against their closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from garden.optimization import SlantedTriangular, WarmupPolynomialDecay, create_optimizer


def _values(schedule, steps):
    return np.array([float(schedule(s)) for s in steps])


def test_warmup_then_linear_decay():
    schedule = WarmupPolynomialDecay(1e-4, decay_steps=1000, warmup_steps=100)
    got = _values(schedule, [0, 50, 100, 550, 1000, 2000])
    np.testing.assert_allclose(got, [0, 5e-5, 1e-4, 5e-5, 0, 0], atol=1e-12)


def test_polynomial_decay_to_an_end_rate():
    schedule = WarmupPolynomialDecay(1.0, decay_steps=110, warmup_steps=10, end_learning_rate=0.1,
                                     power=2.0)
    # Halfway through the decay: 0.1 + 0.9 * 0.5**2.
    np.testing.assert_allclose(_values(schedule, [60]), [0.1 + 0.9 * 0.25], rtol=1e-6)


def test_slanted_triangular_matches_ulmfit_equation():
    total, cut_frac, ratio, peak = 1000, 0.1, 32.0, 0.01
    schedule = SlantedTriangular(peak, total, cut_frac=cut_frac, ratio=ratio)
    cut = int(total * cut_frac)
    for t in [0, 37, 100, 101, 640, 1000]:
        p = t / cut if t < cut else 1 - (t - cut) / (cut * (1 / cut_frac - 1))
        expected = peak * (1 + p * (ratio - 1)) / ratio
        assert float(schedule(t)) == pytest.approx(expected, rel=1e-5)
    assert float(schedule(cut)) == pytest.approx(peak)
    assert float(schedule(total)) == pytest.approx(peak / ratio)


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_optimizers_minimise_a_quadratic_without_decaying_biases(name):
    import keras

    keras.utils.set_random_seed(0)
    layer = keras.layers.Dense(1)
    layer.build((None, 2))
    # The schedule spans 1000 steps, so the rate is still high at step 200: with a decay to 0
    # at step 200, LAMB (whose step is lr x trust ratio) stalled short of the minimum from some
    # initialisations (loss ratio 0.12-0.39 for 4 of 12 seeds); with this it is below 0.016 for all 12.
    opt = create_optimizer(name, 0.05, train_steps=1000, warmup_steps=0, weight_decay=0.1)
    opt.build(layer.trainable_variables)
    assert opt._use_weight_decay(layer.kernel) and not opt._use_weight_decay(layer.bias)
    x = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]], np.float32)
    y = x @ np.array([[1.5], [-2.0]], np.float32) + 0.7
    import tensorflow as tf

    losses = []
    for _ in range(200):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((layer(x) - y) ** 2)
        grads = tape.gradient(loss, layer.trainable_variables)
        opt.apply_gradients(zip(grads, layer.trainable_variables))
        losses.append(float(loss))
    assert losses[-1] < 0.05 * losses[0]


def test_unknown_names_are_errors():
    with pytest.raises(ValueError, match="unknown optimizer"):
        create_optimizer("sgdd", 0.1, 10, 1)
    with pytest.raises(ValueError, match="unknown learning-rate schedule"):
        create_optimizer("adamw", 0.1, 10, 1, schedule="cosine")


def test_layer_decay_needs_the_layer_groups():
    """ELECTRA's layer-wise decay is refused without the backbone's layer groups (each group's
    rate is shown for every family in test_switches_families)."""
    with pytest.raises(ValueError, match="layer_groups"):
        create_optimizer("adamw", 0.01, 10, 0, layer_decay=0.8)


def test_fused_adamw_follows_keras_adamw():
    """garden's AdamW (TensorFlow's fused ResourceApplyAdam kernel) against keras' AdamW: same
    weights and slots after 5 steps with warmup, decoupled weight decay and its exclusions,
    eagerly on one device and in a tf.function under MirroredStrategy (whose update hands the
    optimizer per-device components)."""
    import keras
    import tensorflow as tf

    from garden.optimization import AdamW

    rng = np.random.default_rng(0)
    shapes = {"kernel": (6, 4), "bias": (4,), "embeddings": (10, 6)}
    init = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    grads = [{k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()} for _ in range(5)]
    results = {}
    for cls in (keras.optimizers.AdamW, AdamW):
        variables = [keras.Variable(init[k], name=k) for k in shapes]
        opt = cls(learning_rate=WarmupPolynomialDecay(0.01, 100, 3), weight_decay=0.1,
                  beta_1=0.9, beta_2=0.98, epsilon=1e-6)
        opt.exclude_from_weight_decay(var_names=["bias"])
        opt.build(variables)
        for g in grads:
            opt.apply_gradients(zip([tf.convert_to_tensor(g[k]) for k in shapes], variables))
        results[cls] = ([v.numpy() for v in variables],
                        [m.numpy() for m in opt._momentums] + [v.numpy() for v in opt._velocities])
    (keras_w, keras_slots), (ours_w, ours_slots) = results.values()
    for a, b in zip(keras_w + keras_slots, ours_w + ours_slots):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    # It did move the weights, and decayed the kernel but not the bias.
    assert not np.allclose(ours_w[0], init["kernel"])
    assert isinstance(create_optimizer("adamw", 0.1, 10, 1), AdamW)


def _tiny_classifier(num_layers: int):
    from garden.models.bert.backbone import BertBackbone
    from garden.models.classification import SequenceClassifier

    backbone = BertBackbone(vocab_size=50, num_layers=num_layers, hidden_size=16, num_heads=2,
                            intermediate_size=32, max_sequence_length=8)
    return SequenceClassifier(backbone, num_classes=3)


def _depths(model):
    """{variable path: depth} of a classifier's variables by its backbone's layer groups."""
    from garden.optimization import group_depths

    variables = model.trainable_variables
    depths = group_depths(model.backbone.variable_groups(), variables)
    return {v.path: d for v, d in zip(variables, depths)}


def test_discriminative_rates_divide_by_2_6_from_each_layer_group_to_the_one_below():
    """ULMFiT's eta_l = eta_(l+1) / 2.6 is train.layer_decay = 1 / 2.6: Adam's first step moves
    each weight by its rate, so the head must move by lr and each group below by the step of
    the group above / 2.6 (head, pooler, top layer, ..., embeddings)."""
    import tensorflow as tf

    num_layers, lr = 3, 0.01
    model = _tiny_classifier(num_layers)
    variables = model.trainable_variables
    opt = create_optimizer("adamw", lr, train_steps=10, warmup_steps=0, weight_decay=0.0,
                           schedule="polynomial", end_learning_rate=lr, layer_decay=1 / 2.6,
                           layer_groups=model.backbone.variable_groups())
    opt.build(variables)
    before = [v.numpy().copy() for v in variables]
    opt.apply_gradients(zip([tf.ones_like(v) for v in variables], variables))
    step, depths = {}, _depths(model)  # depth -> the steps of its variables
    for v, b in zip(variables, before):
        step.setdefault(depths[v.path], []).append(np.abs(v.numpy() - b).max())
    assert sorted(step) == list(range(num_layers + 3))  # embeddings, 3 layers, pooler, head
    top = num_layers + 2
    np.testing.assert_allclose(step[top], lr, rtol=1e-3)
    for depth in range(top):
        np.testing.assert_allclose(step[depth], np.max(step[depth + 1]) / 2.6, rtol=1e-3,
                                   err_msg=f"depth {depth}")


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_gradual_unfreezing_leaves_frozen_groups_bit_identical(name):
    """unfreeze_every=2 with 2 layers: the head trains from step 0, the pooler from 2, layer 1
    from 4, layer 0 from 6, the embeddings from 8. Before its step a group's weights are
    bit-identical (no update, no weight decay: 0.1 here) and its Adam slots stay zero; from its
    step it moves. Steps run in a tf.function, as in the trainer."""
    import tensorflow as tf

    num_layers, every = 2, 2
    model = _tiny_classifier(num_layers)
    variables = model.trainable_variables
    opt = create_optimizer(name, 0.01, train_steps=20, warmup_steps=0, weight_decay=0.1,
                           unfreeze_every=every, layer_groups=model.backbone.variable_groups())
    opt.build(variables)
    starts = {v.path: opt.first_step(v) for v in variables}
    assert sorted(set(starts.values())) == [0, 2, 4, 6, 8]
    rng = np.random.default_rng(0)

    @tf.function
    def apply(grads):
        opt.apply_gradients(zip(grads, variables))

    for step in range(7):
        before = [v.numpy().copy() for v in variables]
        apply([tf.constant(rng.normal(size=v.shape).astype("float32")) for v in variables])
        for i, (v, b) in enumerate(zip(variables, before)):
            if step < starts[v.path]:
                assert np.array_equal(v.numpy(), b), (step, v.path)
                assert not np.any(opt._momentums[i].numpy()), (step, v.path)
            else:
                assert not np.array_equal(v.numpy(), b), (step, v.path)
    # The embeddings (depth 0) never trained in these 7 steps; layer 0 (depth 1) just did.
    depths = {opt.layer_depth(v) for i, v in enumerate(variables)
              if np.any(opt._momentums[i].numpy())}
    assert depths == {1, 2, 3, 4}
    with pytest.raises(ValueError, match="unfreeze_every"):
        create_optimizer(name, 0.01, 10, 0, unfreeze_every=0,
                         layer_groups=model.backbone.variable_groups())
    with pytest.raises(ValueError, match="layer_groups"):
        create_optimizer(name, 0.01, 10, 0, unfreeze_every=2)


def test_frozen_gradients_leave_the_clipping_norm():
    """The trainer's step zeroes the gradients of frozen groups before the global norm."""
    import tensorflow as tf

    from garden.training.step import _zero_frozen

    model = _tiny_classifier(2)
    variables = model.trainable_variables
    opt = create_optimizer("adamw", 0.01, 20, 0, unfreeze_every=3,
                           layer_groups=model.backbone.variable_groups())
    opt.build(variables)
    grads = [tf.ones_like(v) for v in variables]
    head = [v for v in variables if "classifier_dense" in v.path]
    kept = _zero_frozen(opt, grads, variables)
    expected = sum(int(np.prod(v.shape)) for v in head)
    assert 0 < len(head) < len(variables)
    assert float(tf.linalg.global_norm(kept)) ** 2 == pytest.approx(expected)
    # Without gradual unfreezing every gradient counts.
    plain = create_optimizer("adamw", 0.01, 20, 0)
    assert _zero_frozen(plain, grads, variables) is grads


def test_gradual_unfreezing_through_garden_train(bert_data, tmp_path, monkeypatch):
    """configs/finetune/classification_tiny.gin with train.unfreeze_every = 2 (2 layers), 3
    steps, a checkpoint after each: between the checkpoints of steps 1 and 3 the head and the
    pooler (unfrozen at step 2) moved, while both Transformer layers and the embeddings (from
    steps 4, 6, 8) are bit-identical, weight decay and a non-zero rate notwithstanding."""
    import gin
    import tensorflow as tf

    from garden import train as train_lib
    from testing import train_in_process

    monkeypatch.chdir(train_lib.REPO_ROOT)  # configs include each other by repo paths
    model_dir = tmp_path / "ft"
    bindings = [f"VOCAB = '{bert_data.vocab}'", f"TRAIN_FILE = '{bert_data.task_dir}/train.tsv'",
                f"EVAL_FILE = '{bert_data.task_dir}/dev.tsv'", "INIT_CHECKPOINT = None",
                "EXPORT_BASE = None", "TRAIN_STEPS = 3", "train.unfreeze_every = 2",
                "train.warmup_steps = 0", "train.checkpoint_every = 1", "train.log_every = 1",
                "train.global_batch_size = 8", "train.peak_flops = 1e12",
                "garden.Classification.max_seq_length = 32"]
    config = "configs/finetune/classification_tiny.gin"
    train_in_process([f"--config={config}", f"--model_dir={model_dir}", "--strategy=one_device",
                      *(f"--gin_param={b}" for b in bindings)], model_dir, steps=3)
    assert "train.unfreeze_every = 2" in (model_dir / "operative_config.gin").read_text()

    train_lib.parse_config([config], bindings)
    task = gin.query_parameter("train.task").scoped_configurable_fn()
    task.prepare()
    model = task.build_model()[0]
    paths = tf.train.get_checkpoint_state(str(model_dir / "checkpoints")).all_model_checkpoint_paths
    weights = {}
    for path in paths:
        tf.train.Checkpoint(model=model).read(path).expect_partial()
        weights[int(path.rsplit("-", 1)[1])] = {v.path: v.numpy() for v in model.trainable_variables}
    assert {1, 3} <= set(weights), paths
    moved, depths = {}, _depths(model)
    for name in weights[1]:
        depth = depths[name]
        moved.setdefault(depth, set()).add(not np.array_equal(weights[1][name], weights[3][name]))
    assert moved == {0: {False}, 1: {False}, 2: {False}, 3: {True}, 4: {True}}, moved
