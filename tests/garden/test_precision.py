"""train.precision (issue 34 item 1): 'float32', 'mixed_bfloat16' or 'mixed_float16' for every
family and task, also as `--precision`. The mixed precisions compute in the half type with the
softmax, LayerNorm, logits and losses in float32; variables, so checkpoints, stay float32 and a
run resumes in another precision; mixed_float16 scales the loss. Refusals name what to bind."""

from __future__ import annotations

import numpy as np
import pytest

from garden import train as train_lib
from testing import TrainingProbe, pretrain_args, read_summary, train_refused


@pytest.fixture(autouse=True)
def _cwd_repo(monkeypatch):
    monkeypatch.chdir(train_lib.REPO_ROOT)  # configs include each other by repo-relative paths


def _gpus() -> bool:
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def _args(bert_data, model_dir, steps: int, *extra) -> list:
    """garden.train of the tiny BERT on one device, logged every step (no matmul timing)."""
    return pretrain_args(bert_data, model_dir, "--strategy=one_device",
                         "--gin_param=train.peak_flops=1e12", *extra, steps=steps)[2:]


def _checkpoint_dtypes(model_dir) -> dict:
    """name -> dtype of every variable of model_dir's newest checkpoint."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir / "checkpoints")))
    return reader.get_variable_to_dtype_map()


# -- garden.train under each precision -----------------------------------------------------
def test_bfloat16_and_float32_runs_resume_each_others_checkpoints(bert_data, tmp_path,
                                                                   monkeypatch, capsys):
    """2 steps in mixed_bfloat16, 2 more in float32, 2 more in mixed_bfloat16, in one model_dir:
    each run computes in its own precision (the blocks' outputs), resumes where the last
    stopped, names its precision, and leaves a checkpoint of float32 variables only."""
    import keras
    import tensorflow as tf

    from garden.tasks.pretraining import Pretraining

    model_dir = tmp_path / "run"
    for steps, flag, compute_dtype in ((2, "--precision=mixed_bfloat16", "bfloat16"),
                                       (4, "--gin_param=train.precision='float32'", "float32"),
                                       (6, "--precision=mixed_bfloat16", "bfloat16")):
        probe = TrainingProbe(monkeypatch, Pretraining)
        assert train_lib.main(_args(bert_data, model_dir, steps, flag)) == 0, steps
        out = capsys.readouterr().out
        precision = "float32" if compute_dtype == "float32" else "mixed_bfloat16"
        assert probe.activation_dtypes == {compute_dtype}, steps
        assert int(probe.calls.numpy()) == 2  # two steps this run
        if steps > 2:
            assert f"at step {steps - 2}" in out
        assert f"(OneDeviceStrategy), {precision}, XLA off" in out
        assert f"[train] step {steps}/{steps} " in out and f"| {precision} | ETA" in out
        summary = read_summary(model_dir)
        assert summary["precision"] == precision and summary["steps"] == steps
        assert 0 < summary["last_logged_metrics"]["loss"] < 20
        assert keras.mixed_precision.global_policy().name == "float32"  # restored after the run
        dtypes = _checkpoint_dtypes(model_dir)
        floats = {n: d for n, d in dtypes.items() if d.is_floating}
        # Weights and both Adam moments of each (the optimizer's variables) are float32.
        assert len([n for n in floats if "/_variables/" in n or "optimizer/" in n]) > 40
        assert set(floats.values()) == {tf.float32}, {d for d in floats.values()}
        assert not [n for n in dtypes if n.startswith("loss_scale/")]


def test_the_precision_flag_is_a_binding_after_the_gin_params(bert_data, tmp_path, capsys):
    """--precision binds train.precision after every --gin_param, so it wins; operative_config.gin
    records it."""
    args = _args(bert_data, tmp_path / "run", 1, "--gin_param=train.precision='float32'",
                 "--precision=mixed_bfloat16")
    assert train_lib.main(args) == 0
    assert "| mixed_bfloat16 | ETA" in capsys.readouterr().out
    assert read_summary(tmp_path / "run")["precision"] == "mixed_bfloat16"
    config = (tmp_path / "run" / "operative_config.gin").read_text()
    assert "train.precision = 'mixed_bfloat16'" in config


@pytest.mark.skipif(not _gpus(), reason="mixed_float16 is refused on CPUs")
def test_float16_scales_the_loss_and_resumes_in_float32(bert_data, tmp_path, monkeypatch,
                                                        capsys):
    """mixed_float16 on a GPU: float16 blocks, the loss scale saved beside the float32
    variables, and a float32 run resumes that checkpoint (leaving the scale unread)."""
    import tensorflow as tf

    from garden.tasks.pretraining import Pretraining

    model_dir = tmp_path / "run"
    probe = TrainingProbe(monkeypatch, Pretraining)
    assert train_lib.main(_args(bert_data, model_dir, 4, "--precision=mixed_float16")) == 0
    assert probe.activation_dtypes == {"float16"}
    dtypes = _checkpoint_dtypes(model_dir)
    assert {d for d in dtypes.values() if d.is_floating} == {tf.float32}
    # The scale starts at 2^15 and halves at each step whose scaled gradient overflows (a
    # skipped step, counted all the same); step_counter counts the finite steps since.
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir / "checkpoints")))
    scale = reader.get_tensor("loss_scale/0/.ATTRIBUTES/VARIABLE_VALUE")
    counter = reader.get_tensor("loss_scale/1/.ATTRIBUTES/VARIABLE_VALUE")
    halvings = 15 - np.log2(scale)
    assert halvings in range(5) and halvings + counter == 4, (scale, counter)
    assert read_summary(model_dir)["steps"] == 4
    capsys.readouterr()
    assert train_lib.main(_args(bert_data, model_dir, 6, "--precision=float32")) == 0
    assert "at step 4" in capsys.readouterr().out
    assert read_summary(model_dir)["precision"] == "float32"


# -- refusals ------------------------------------------------------------------------------
def test_an_unknown_precision_is_refused_with_the_choices(bert_data, tmp_path, capsys):
    message = train_refused(_args(bert_data, tmp_path / "run", 2,
                             "--gin_param=train.precision='bf16'"), capsys)
    assert message == ("error: train.precision must be one of 'float32', 'mixed_bfloat16', "
                       "'mixed_float16'; got 'bf16'")
    assert not (tmp_path / "run").exists()  # refused before model_dir is made
    with pytest.raises(SystemExit) as exit_:
        train_lib.main(_args(bert_data, tmp_path / "run", 2, "--precision=bf16"))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--precision: invalid choice: 'bf16'" in err and "'mixed_float16'" in err


def test_the_old_binding_name_says_what_to_bind(bert_data, tmp_path, capsys):
    message = train_refused(_args(bert_data, tmp_path / "run", 2,
                             "--gin_param=train.mixed_precision='mixed_bfloat16'"), capsys)
    assert "train.mixed_precision is now train.precision = 'float32' | 'mixed_bfloat16'" in message
    assert "--gin_param=train.mixed_precision='mixed_bfloat16'" in message  # the binding at fault
    # The same from a config file (gin quotes the file's line).
    config = tmp_path / "old.gin"
    config.write_text("include 'configs/bert_tiny.gin'\ntrain.mixed_precision = 'mixed_float16'\n")
    args = [a for a in _args(bert_data, tmp_path / "run", 2) if not a.startswith("--config")]
    message = train_refused([f"--config={config}"] + args, capsys)
    assert "train.mixed_precision is now train.precision" in message and str(config) in message


@pytest.mark.skipif(_gpus(), reason="this machine has a GPU: mixed_float16 runs there")
def test_float16_is_refused_on_cpus(bert_data, tmp_path, capsys):
    message = train_refused(_args(bert_data, tmp_path / "run", 2, "--precision=mixed_float16"), capsys)
    assert message == ("error: train.precision = 'mixed_float16' needs GPUs, and this run's "
                       "OneDeviceStrategy has CPU devices only; on CPUs use 'mixed_bfloat16' or "
                       "'float32'")
    assert not (tmp_path / "run").exists()


# -- what computes in float32 under mixed_bfloat16 -----------------------------------------
def test_attention_softmax_is_taken_in_float32():
    """Under XLA (the trainer's default on GPUs and TPUs) the attention probabilities are the
    float32 softmax of the bfloat16 scores, rounded to bfloat16; XLA's bfloat16 softmax takes
    its exponentials in bfloat16 and differs in most of them (77% over these 300 keys).
    (TensorFlow's CPU kernel, without XLA, computes a bfloat16 softmax in float32 already.)"""
    import tensorflow as tf

    from garden.layers.attention import MultiHeadAttention

    layer = MultiHeadAttention(num_heads=2, key_dim=8, dtype="mixed_bfloat16")
    rng = np.random.default_rng(0)
    q, k = (tf.cast(rng.normal(size=(1, 2, 4, 8)), tf.bfloat16),
            tf.cast(rng.normal(size=(1, 2, 300, 8)), tf.bfloat16))
    compiled = tf.function(jit_compile=True, autograph=False)
    probabilities = compiled(lambda: layer._probabilities(q, k, None, None, None))()
    assert probabilities.dtype == tf.bfloat16
    scores = tf.matmul(q, k, transpose_b=True)
    in_float32 = tf.cast(tf.nn.softmax(tf.cast(scores, tf.float32)), tf.bfloat16).numpy()
    assert np.array_equal(probabilities.numpy(), in_float32)
    in_bfloat16 = compiled(lambda: tf.nn.softmax(scores))().numpy()
    assert np.mean(in_bfloat16 != in_float32) > 0.5


@pytest.mark.parametrize("family", ["xlnet", "cove"])
def test_xlnet_and_cove_attention_softmax_is_taken_in_float32(family, monkeypatch):
    """XLNet's relative attention and CoVe's decoder attention, under XLA in mixed_bfloat16:
    their attention weights (read through values that are the identity, so that the layer
    hands them out unchanged) are the float32 softmax of their bfloat16 scores, rounded, where
    XLA's bfloat16 softmax differs in many of them."""
    import tensorflow as tf

    from garden.layers.attention import softmax_in_float32

    rng = np.random.default_rng(0)
    keys, queries = 300, 4
    bf16 = lambda *shape: tf.cast(rng.normal(size=shape), tf.bfloat16)  # noqa: E731
    scores = []

    def recorded(x):
        scores.append(x)
        return softmax_in_float32(x)

    if family == "xlnet":
        from keras.src.backend import AutocastScope

        from garden.models.xlnet import layers as module

        layer = module.XLNetRelativeAttention(num_heads=2, head_size=8, dtype="mixed_bfloat16")
        layer.build((1, queries, 16))
        eye = tf.eye(keys, batch_shape=[1], dtype=tf.bfloat16)[:, :, None, :]  # [1, j, 1, j]

        def weights():  # _core's output [b, i, n, j] is the probabilities with v = identity
            with AutocastScope("bfloat16"):  # as the layer's call reads its variables
                out = layer._core(bf16(1, queries, 2, 8), bf16(1, keys, 2, 8),
                                  tf.tile(eye, [1, 1, 2, 1]), bf16(1, keys + queries, 2, 8),
                                  tf.one_hot(tf.zeros([1, queries, keys], tf.int32), 2,
                                             dtype=tf.bfloat16),
                                  tf.zeros([1, queries, keys], tf.bfloat16), training=False)
            return tf.transpose(out, [0, 2, 1, 3]), scores[-1]
    else:
        from garden.models.cove import translation as module
        from garden.training import setup

        with setup.dtype_policy("mixed_bfloat16"):  # its Dense layers take the run's policy
            layer = module.CoveAttention(units=8, encoder_width=keys)
        layer.combine = lambda x: x  # the output is [context; decoder_states]

        def weights():  # the context is the attention weights with encoder states = identity
            out = layer(bf16(1, queries, 16), tf.eye(keys, batch_shape=[1], dtype=tf.bfloat16),
                        tf.ones([1, keys], tf.int32))
            return out[..., :keys], scores[-1]

    monkeypatch.setattr(module, "softmax_in_float32", recorded)
    compiled = tf.function(jit_compile=True, autograph=False)
    probabilities, logits = compiled(weights)()
    assert probabilities.dtype == tf.bfloat16
    in_float32 = tf.cast(tf.nn.softmax(tf.cast(logits, tf.float32)), tf.bfloat16).numpy()
    assert np.array_equal(probabilities.numpy().reshape(in_float32.shape), in_float32)
    in_bfloat16 = compiled(lambda: tf.nn.softmax(logits))().numpy()
    assert np.mean(in_bfloat16 != in_float32) > 0.3  # XLNet ~70%, CoVe ~40% here


def test_layer_norm_losses_and_gradients_are_float32_under_mixed_bfloat16():
    """Keras' LayerNormalization takes its statistics in float32 (its output: the float32 norm
    of the bfloat16 input, rounded); the tiny BERT pretrainer's losses and the gradients of its
    (float32) variables are float32 (its logits: tests/models/bert/test_bert_pretrainer.py)."""
    import keras
    import tensorflow as tf

    from garden.models.bert.presets import untrained_bert_backbone
    from garden.models.bert.pretrainer import BertPretrainer, bert_pretrain_loss
    from model_testing import pretrain_batch

    rng = np.random.default_rng(0)
    x = tf.cast(100.0 + rng.normal(size=(2, 3, 64)), tf.bfloat16)  # a mean far from 0
    norm = keras.layers.LayerNormalization(dtype="mixed_bfloat16")
    reference = keras.layers.LayerNormalization(dtype="float32")
    assert np.array_equal(norm(x).numpy(), tf.cast(reference(tf.cast(x, tf.float32)),
                                                   tf.bfloat16).numpy())

    model = BertPretrainer(untrained_bert_backbone("bert_tiny", vocab_size=50, num_layers=1,
                                                     dtype="mixed_bfloat16"))
    inputs = pretrain_batch(50, predictions=4)
    with tf.GradientTape() as tape:
        metrics = bert_pretrain_loss(model(inputs, training=True), np.full((2, 4), 7, "int32"),
                                     np.ones((2, 4), "float32"), np.zeros((2,), "int32"))
    assert {v.dtype for v in metrics.values()} == {tf.float32}
    grads = tape.gradient(metrics["loss"], model.trainable_variables)
    assert {v.dtype for v in model.trainable_variables} == {"float32"}
    assert {g.dtype for g in grads} == {tf.float32}


# -- loss scaling in the custom step, and checkpoints across precisions ---------------------
class _SquaredError:
    """A Task of the step's contract: mean squared error of a Dense layer, times `poison`."""

    def __init__(self):
        import tensorflow as tf

        self.poison = tf.Variable(1.0, trainable=False)

    def loss_weights(self, batch):
        return {}

    def compute_metrics(self, model, batch, training, weight_shares=None):
        import tensorflow as tf

        error = tf.cast(model(batch["x"]), tf.float32) - batch["y"]
        return {"loss": tf.reduce_mean(tf.square(error)) * self.poison}


def _float16_setup(loss_scaled: bool):
    """(strategy, model, optimizer, iterator) of a Dense layer under mixed_float16, SGD at 0.1
    (in a LossScaleOptimizer when loss_scaled)."""
    import keras
    import tensorflow as tf

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, dtype="mixed_float16")])
        opt = keras.optimizers.SGD(0.1)
        if loss_scaled:
            opt = keras.optimizers.LossScaleOptimizer(opt)
        opt.build(model.trainable_variables)
    rng = np.random.default_rng(2)
    batch = {"x": rng.normal(size=(8, 4)).astype("float32"),
             "y": rng.normal(size=(8, 3)).astype("float32")}
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    return strategy, model, opt, iter(strategy.distribute_datasets_from_function(lambda _: dataset))


@pytest.mark.parametrize("clip_norm", [None, 1e-3])
def test_the_loss_scaled_step_updates_as_the_unscaled_one(clip_norm):
    """The step under a LossScaleOptimizer (loss x 2^15, gradients unscaled before SGD, the
    clipping norm compared in the scaled space) moves the weights as the plain step does, and
    logs the unscaled gradient norm; clipped, the update is lr x clip_norm long."""
    from garden.training.step import make_train_step

    runs = {}
    for loss_scaled in (False, True):
        strategy, model, opt, iterator = _float16_setup(loss_scaled)
        before = [v.numpy() for v in model.trainable_variables]
        step, _ = make_train_step(strategy, _SquaredError(), model, opt, clip_norm=clip_norm)
        metrics = step(iterator)
        runs[loss_scaled] = ([v.numpy() - b for v, b in zip(model.trainable_variables, before)],
                             float(metrics["grad_norm"]))
    (plain, plain_norm), (scaled, scaled_norm) = runs[False], runs[True]
    for a, b in zip(plain, scaled):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-7)
    assert scaled_norm == pytest.approx(plain_norm, rel=1e-3) and plain_norm > 0
    if clip_norm:
        length = np.sqrt(sum(np.sum(d ** 2) for d in scaled))
        assert length == pytest.approx(0.1 * clip_norm, rel=1e-3)


def test_an_overflowing_loss_scaled_step_is_skipped_and_counted():
    """A step whose scaled float16 gradient overflows changes no weight and halves the scale,
    but counts as a step: the iteration count stays the trainer's step (resume, data position,
    checkpoint numbers)."""
    from garden.training.step import make_train_step

    strategy, model, opt, iterator = _float16_setup(loss_scaled=True)
    task = _SquaredError()
    step, _ = make_train_step(strategy, task, model, opt)
    step(iterator)
    before = [v.numpy() for v in model.trainable_variables]
    task.poison.assign(1e30)  # x 2^15 overflows float16 on the way back
    step(iterator)
    assert all(np.array_equal(v.numpy(), b) for v, b in zip(model.trainable_variables, before))
    assert float(opt.dynamic_scale.numpy()) == 2.0 ** 14
    assert int(opt.iterations.numpy()) == 2


def test_checkpoints_move_between_float16_and_the_other_precisions(tmp_path):
    """A mixed_float16 checkpoint holds the inner optimizer where the others hold theirs and
    the loss scale beside it: a float32 run restores it (the scale unread), and a float16 run
    restores a float32 checkpoint with the scale at its start."""
    import keras

    from garden.training import checkpoints

    def parts(loss_scaled):
        keras.utils.set_random_seed(3)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        opt = keras.optimizers.Adam(0.1)
        if loss_scaled:
            opt = keras.optimizers.LossScaleOptimizer(opt)
        opt.build(model.trainable_variables)
        return model, opt

    model, opt = parts(loss_scaled=True)
    opt.apply_gradients([(np.ones(v.shape, "float32"), v) for v in model.trainable_variables])
    opt.dynamic_scale.assign(2.0 ** 10)
    checkpoints.Checkpoints(str(tmp_path / "a"), model, opt, {"model": model}).save(1)

    plain_model, plain_opt = parts(loss_scaled=False)
    assert checkpoints.Checkpoints(str(tmp_path / "a"), plain_model, plain_opt,
                                   {"model": plain_model}).restore().endswith("ckpt-1")
    assert int(plain_opt.iterations.numpy()) == 1
    for a, b in zip(plain_model.weights, model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    plain_opt.apply_gradients([(np.ones(v.shape, "float32"), v)
                               for v in plain_model.trainable_variables])
    checkpoints.Checkpoints(str(tmp_path / "b"), plain_model, plain_opt,
                            {"model": plain_model}).save(2)

    scaled_model, scaled_opt = parts(loss_scaled=True)
    checkpoints.Checkpoints(str(tmp_path / "b"), scaled_model, scaled_opt,
                            {"model": scaled_model}).restore()
    assert int(scaled_opt.iterations.numpy()) == 2
    assert float(scaled_opt.dynamic_scale.numpy()) == 2.0 ** 15  # not in a float32 checkpoint
    for a, b in zip(scaled_model.weights, plain_model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    again = parts(loss_scaled=True)
    checkpoints.Checkpoints(str(tmp_path / "a"), again[0], again[1], {"model": again[0]}).restore()
    assert float(again[1].dynamic_scale.numpy()) == 2.0 ** 10  # restored from a float16 one
