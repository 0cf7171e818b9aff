"""ELMo: the published size, the representations' layout, and AllenNLP's release layout (an
options JSON + HDF5 weights written here at toy size) read into ElmoBackbone, checked against
a NumPy forward pass of bilm-tf's formulas on the file's own arrays."""

import json

import numpy as np
import pytest

from garden import models
from garden.models.elmo import ELMO_FILTERS, ElmoBackbone
from garden.models.elmo.conversion import ElmoWeightsError, load_allennlp

TINY = {"lstm": {"use_skip_connections": True, "projection_dim": 6, "cell_clip": 0.8,
                 "proj_clip": 0.6, "dim": 10, "n_layers": 2},
        "char_cnn": {"activation": "relu", "filters": [[1, 4], [2, 5], [3, 3]], "n_highway": 2,
                     "embedding": {"dim": 4}, "n_characters": 262,
                     "max_characters_per_token": 7}}


def test_the_published_size_and_the_spec():
    cnn = sum(w * 16 * n + n for w, n in ELMO_FILTERS)
    highway = 2 * 2 * (2048 * 2048 + 2048)
    lstm = 2 * 2 * ((512 + 512) * 4 * 4096 + 4 * 4096 + 4096 * 512)
    mix = 3 + 1  # the task's scalar mix over the 3 layers, and gamma
    expected = 262 * 16 + cnn + highway + (2048 * 512 + 512) + lstm + mix
    assert ElmoBackbone.untrained("elmo").count_params() == expected == 93_600_868
    assert models.spec("elmo").backbone_class() is ElmoBackbone


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _write_release(tmp_path, seed=0):
    rng = np.random.default_rng(seed)
    lstm, cnn = TINY["lstm"], TINY["char_cnn"]
    e, p, u = cnn["embedding"]["dim"], lstm["projection_dim"], lstm["dim"]
    arrays = {"char_embed": rng.normal(size=(261, e))}
    total = 0
    for i, (w, n) in enumerate(cnn["filters"]):
        arrays[f"CNN/W_cnn_{i}"] = rng.normal(size=(1, w, e, n)) * 0.5
        arrays[f"CNN/b_cnn_{i}"] = rng.normal(size=n) * 0.1
        total += n
    for k in range(cnn["n_highway"]):
        for part in ("carry", "transform"):
            arrays[f"CNN_high_{k}/W_{part}"] = rng.normal(size=(total, total)) * 0.3
            arrays[f"CNN_high_{k}/b_{part}"] = rng.normal(size=total) * 0.1
    arrays["CNN_proj/W_proj"] = rng.normal(size=(total, p)) * 0.3
    arrays["CNN_proj/b_proj"] = rng.normal(size=p) * 0.1
    for d in range(2):
        for layer in range(lstm["n_layers"]):
            cell = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            arrays[f"{cell}/W_0"] = rng.normal(size=(p + p, 4 * u)) * 0.4
            arrays[f"{cell}/B"] = rng.normal(size=4 * u) * 0.1
            arrays[f"{cell}/W_P_0"] = rng.normal(size=(u, p)) * 0.4
    import h5py

    weights = tmp_path / "weights.hdf5"
    with h5py.File(weights, "w") as f:
        for name, value in arrays.items():
            f.create_dataset(name, data=value.astype(np.float32))
    options = tmp_path / "options.json"
    options.write_text(json.dumps(TINY))
    return str(options), str(weights), {k: v.astype(np.float32).astype(np.float64)
                                        for k, v in arrays.items()}


def _bilm_tf(arrays, char_ids, length):
    """bilm-tf's forward pass of one sentence (char ids + 1 as AllenNLP feeds them)."""
    lstm, cnn = TINY["lstm"], TINY["char_cnn"]
    u, clip_c, clip_p = lstm["dim"], lstm["cell_clip"], lstm["proj_clip"]
    x = arrays["char_embed"][char_ids[:length] - 1]                     # [T, C, E]
    pooled = []
    for i, (w, n) in enumerate(cnn["filters"]):
        kernel = arrays[f"CNN/W_cnn_{i}"][0]                              # [w, E, n]
        conv = np.stack([np.einsum("tce,cen->tn", x[:, s:s + w], kernel)
                         for s in range(x.shape[1] - w + 1)], axis=1) + arrays[f"CNN/b_cnn_{i}"]
        pooled.append(np.maximum(conv.max(axis=1), 0))
    h = np.concatenate(pooled, axis=-1)
    for k in range(cnn["n_highway"]):
        carry = _sigmoid(h @ arrays[f"CNN_high_{k}/W_carry"] + arrays[f"CNN_high_{k}/b_carry"])
        transform = np.maximum(h @ arrays[f"CNN_high_{k}/W_transform"] +
                               arrays[f"CNN_high_{k}/b_transform"], 0)
        h = carry * transform + (1 - carry) * h
    tokens = h @ arrays["CNN_proj/W_proj"] + arrays["CNN_proj/b_proj"]
    layers = {}
    for d, order in ((0, slice(None)), (1, slice(None, None, -1))):
        inputs, outs = tokens[order], []
        for layer in range(lstm["n_layers"]):
            cell = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            state, c, steps = np.zeros(lstm["projection_dim"]), np.zeros(u), []
            for x_t in inputs:
                z = np.concatenate([x_t, state]) @ arrays[f"{cell}/W_0"] + arrays[f"{cell}/B"]
                i, j, f, o = np.split(z, 4)                                  # TF1 LSTMCell
                c = np.clip(_sigmoid(f + 1.0) * c + _sigmoid(i) * np.tanh(j), -clip_c, clip_c)
                state = np.clip((_sigmoid(o) * np.tanh(c)) @ arrays[f"{cell}/W_P_0"],
                                -clip_p, clip_p)
                steps.append(state)
            out = np.stack(steps) + (inputs if layer > 0 else 0)             # skip connection
            outs.append(out[order])
            inputs = out
        layers[d] = outs
    return [np.concatenate([tokens, tokens], -1)] + [
        np.concatenate([f, b], -1) for f, b in zip(layers[0], layers[1])]


def test_the_allennlp_release_layout_equals_bilm_tf(tmp_path):
    options, weights, arrays = _write_release(tmp_path)
    backbone = load_allennlp(options, weights)
    rng = np.random.default_rng(1)
    char_ids = rng.integers(1, 262, size=(2, 5, 7)).astype("int32")
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], "int32")
    hidden = backbone({"char_ids": char_ids, "padding_mask": mask})["hidden_states"].numpy()
    assert hidden.shape == (3, 2, 5, 12)
    for b, length in enumerate(mask.sum(1)):
        want = _bilm_tf(arrays, char_ids[b], length)
        for layer in range(3):
            np.testing.assert_allclose(hidden[layer, b, :length], want[layer], atol=2e-5,
                                       err_msg=f"layer {layer}, sentence {b}")


def test_a_file_that_is_not_the_layout_is_named(tmp_path):
    options, weights, _ = _write_release(tmp_path)
    import h5py

    with h5py.File(weights, "a") as f:
        del f["CNN_proj/b_proj"]
    with pytest.raises(ElmoWeightsError, match=r"weights.hdf5: no 'CNN_proj/b_proj'"):
        load_allennlp(options, weights)
    (tmp_path / "bad.json").write_text(json.dumps({"lstm": TINY["lstm"]}))
    with pytest.raises(ElmoWeightsError, match=r"bad.json: no 'char_cnn'"):
        load_allennlp(str(tmp_path / "bad.json"), weights)


def test_the_backward_direction_reads_each_sentence_from_its_end():
    backbone = ElmoBackbone.untrained("elmo_tiny", dropout=0.0)
    rng = np.random.default_rng(2)
    ids = rng.integers(1, 262, size=(1, 4, 20)).astype("int32")
    padded = np.concatenate([ids, np.zeros((1, 2, 20), "int32")], axis=1)
    a = backbone({"char_ids": ids, "padding_mask": np.ones((1, 4), "int32")})
    b = backbone({"char_ids": padded, "padding_mask": np.array([[1, 1, 1, 1, 0, 0]], "int32")})
    np.testing.assert_allclose(a["hidden_states"], b["hidden_states"][:, :, :4], atol=1e-5)
    # Changing the last token changes the backward states of every earlier token and no
    # forward state before it.
    changed = ids.copy()
    changed[0, 3] = rng.integers(1, 262, size=20)
    c = backbone({"char_ids": changed, "padding_mask": np.ones((1, 4), "int32")})
    np.testing.assert_allclose(a["forward_output"][:, :3], c["forward_output"][:, :3], atol=1e-6)
    assert np.all(np.abs(a["backward_output"][0, :3] - c["backward_output"][0, :3]).max(-1) > 0)


@pytest.fixture(scope="module")
def bilm_run(tmp_path_factory, bilm_data):
    """make_pretrain --objective=bilm --characters, then garden.train configs/elmo_tiny.gin
    for 60 steps: (vocab, data, model_dir, summary), shared by the test of the biLM's training
    and the fine-tuning test that starts from it."""
    from objective_testing import bilm_lm_args
    from testing import train_in_process

    vocab, data = bilm_data("--characters", "--max_characters=20")
    model_dir = tmp_path_factory.mktemp("elmo_lm") / "elmo"
    summary = train_in_process(bilm_lm_args(
        "configs/elmo_tiny.gin", model_dir, vocab, data, 60,
        "--gin_param=train.warmup_steps=6", "--gin_param=train.log_every=10"),
        str(model_dir), "elmo_pretraining", 60)
    return vocab, data, model_dir, summary


def test_the_bilm_trains_both_directions_through_garden_train(tmp_path, bilm_run):
    """make_pretrain --objective=bilm --characters, then garden.train configs/elmo_tiny.gin:
    the forward and the backward LM both lower their loss."""
    from objective_testing import bilm_lm_args
    from testing import train_in_process

    vocab, data, _, summary = bilm_run
    first, last = summary["first_logged_metrics"], summary["last_logged_metrics"]
    for direction in ("forward", "backward"):  # ln(800) = 6.68 at the start
        assert last[f"{direction}_loss"] < first[f"{direction}_loss"] - 0.5, (first, last)
    assert last["loss"] == pytest.approx(last["forward_loss"] + last["backward_loss"], rel=1e-5)
    # The same with a sampled softmax (20 of the ~800 words) in training.
    sampled = train_in_process(bilm_lm_args(
        "configs/elmo_tiny.gin", tmp_path / "sampled", vocab, data, 4,
        "--gin_param=garden.Pretraining.sampled_softmax=20", "--gin_param=train.warmup_steps=1",
        "--gin_param=train.log_every=1"), str(tmp_path / "sampled"), "elmo_pretraining", 4)
    logged = sampled["last_logged_metrics"]
    assert np.isfinite(logged["loss"]) and logged["forward_loss"] < first["forward_loss"]


def test_a_pretrained_bilm_fine_tunes_as_a_classifier_and_serves_raw_text(tmp_path, bilm_run):
    """ELMo through the garden's stages: bilm data with characters, the biLM pretrained by
    garden.train, then configs/finetune/classification_elmo_tiny.gin from that run: the
    classifier's backbone starts from the biLM's weights (token ids looked up as characters),
    learns the sample task, and its export answers raw text in a fresh process."""
    import gin

    from convert_testing import ANSWER_SNIPPET, scratch_classification_args
    from model_testing import assert_restores_to
    from testing import run_code, train_in_process

    from garden.models import factory
    from garden.tasks.classification import Classification

    vocab, _, lm_dir, _ = bilm_run  # the biLM of 60 steps that the test above checks

    args = scratch_classification_args(tmp_path, tmp_path / "clf", 150,
                                       f"--gin_param=INIT_CHECKPOINT='{lm_dir}'",
                                       "--gin_param=train.learning_rate=1e-2",
                                       "--gin_param=train.log_every=50",
                                       "--gin_param=backbone.dropout=0.0")
    args[0] = "--config=configs/finetune/classification_elmo_tiny.gin"
    args = [a.replace(str(tmp_path / "vocab.txt"), str(vocab)) for a in args
            if a != "--gin_param=INIT_CHECKPOINT=None"]
    summary = train_in_process(args, str(tmp_path / "clf"), "classification", 150)
    assert summary["eval_accuracy"] > summary["majority_baseline_accuracy"], summary
    proc = run_code(ANSWER_SNIPPET, summary["export_dir"])
    assert set(json.loads(proc.stdout.strip().splitlines()[-1])) <= {"pos", "neg"}

    gin.clear_config()
    task = Classification(
        backbone=lambda **kw: factory.backbone(preset="elmo_tiny", vocab=str(vocab), **kw),
        vocab=str(vocab), train_file=str(tmp_path / "data" / "train.tsv"),
        eval_file=str(tmp_path / "data" / "dev.tsv"), init_checkpoint=str(lm_dir))
    task.prepare()
    _, objects = task.build_model()
    # The biLM's own backbone (characters in), restored from its checkpoint independently.
    pretrained = ElmoBackbone.untrained("elmo_tiny")
    assert_restores_to(objects["backbone"], pretrained, lm_dir)
    assert not np.allclose(pretrained.char_encoder.char_embedding.embeddings.numpy(),
                           ElmoBackbone.untrained("elmo_tiny").char_encoder
                           .char_embedding.embeddings.numpy())  # it was trained


def test_steps_on_the_sampled_softmax_lower_the_full_softmax_loss():
    """garden.Pretraining's sampled_softmax trains the same shared softmax: Adam steps on
    sampled_losses (8 of 200 words sampled) lower both directions' full cross-entropy."""
    import keras
    import tensorflow as tf

    from garden.models.elmo.bilm import ElmoBiLM
    from garden.tasks.pretraining.elmo import bilm_metrics, sampled_losses

    keras.utils.set_random_seed(0)
    lm = ElmoBiLM(ElmoBackbone.untrained("elmo_tiny", dropout=0.0), vocab_size=200,
                  dropout=0.0)
    rng = np.random.default_rng(0)
    inputs = {"char_ids": rng.integers(1, 262, size=(8, 6, 20)).astype("int32"),
              "padding_mask": np.ones((8, 6), "int32")}
    ids = rng.integers(0, 200, size=(8, 6))
    before = bilm_metrics(lm(inputs), ids, inputs["padding_mask"])
    opt = keras.optimizers.Adam(1e-2)
    for _ in range(30):
        with tf.GradientTape() as tape:
            losses = sampled_losses(lm, lm(inputs, training=True), ids,
                                    inputs["padding_mask"], 8, 8 * 5.0)
            loss = losses["forward_loss"] + losses["backward_loss"]
        grads = tape.gradient(loss, lm.trainable_variables)
        opt.apply_gradients([(g, v) for g, v in zip(grads, lm.trainable_variables)
                             if g is not None])
    after = bilm_metrics(lm(inputs), ids, inputs["padding_mask"])
    for direction in ("forward", "backward"):
        assert float(after[f"{direction}_loss"]) < float(before[f"{direction}_loss"]) - 0.5


def test_garden_convert_reads_the_allennlp_release(tmp_path):
    """python -m garden.convert --source=allennlp --model=elmo: the converted directory's
    checkpoint holds the release's backbone (the same features as load_allennlp's)."""
    import tensorflow as tf

    from garden import convert, pretrained

    options, weights, _ = _write_release(tmp_path)
    out = tmp_path / "converted"
    assert convert.main(["--source=allennlp", "--model=elmo", f"--input={weights}",
                         f"--config={options}", f"--output={out}"]) == 0
    converted = pretrained.open_converted(str(out))
    restored = converted.backbone_class().from_config(converted.config)
    tf.train.Checkpoint(backbone=restored).read(converted.checkpoint).expect_partial()
    reference = load_allennlp(options, weights)
    inputs = {"char_ids": np.random.default_rng(3).integers(1, 262, size=(1, 4, 7)).astype(
        "int32"), "padding_mask": np.ones((1, 4), "int32")}
    np.testing.assert_allclose(restored(inputs)["hidden_states"],
                               reference(inputs)["hidden_states"], atol=1e-6)
    assert convert.main(["--source=allennlp", "--model=elmo", f"--input={weights}",
                         f"--output={tmp_path / 'x'}"]) == 2  # no --config: one clear line
