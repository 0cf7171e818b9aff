import math

import numpy as np
import keras
import pytest
import tensorflow as tf

from garden.models.electra.backbone import ElectraBackbone
from garden.models.electra.pretrainer import (ElectraPretrainer, electra_mask,
                                              electra_pretrain_loss, electra_replace)
from model_testing import assert_config_round_trip, assert_keras_file_round_trip

VOCAB = 100
PAD, CLS, SEP, MASK = 0, 2, 3, 4
DISC = dict(vocab_size=VOCAB, num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64,
            embedding_size=16, max_sequence_length=64, dropout=0.0)
GEN = dict(DISC, hidden_size=24, num_heads=2, intermediate_size=48)  # E 16 -> 24: projects too


def _text(batch, length, real_lengths, seed=0, low=5):
    """[CLS] w w ... [SEP] then padding, words drawn from [low, VOCAB)."""
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(low, VOCAB, (batch, length)).astype("int32")
    padding_mask = (np.arange(length)[None] < np.asarray(real_lengths)[:, None]).astype("int32")
    token_ids[:, 0] = CLS
    token_ids[np.arange(batch), np.asarray(real_lengths) - 1] = SEP
    token_ids[padding_mask == 0] = PAD
    segment_ids = np.zeros_like(token_ids)
    for b, n in enumerate(real_lengths):
        segment_ids[b, n // 2:n] = 1
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def _pretrainer(num_layers=2, **kwargs):
    discriminator = ElectraBackbone(**dict(DISC, num_layers=num_layers))
    generator = ElectraBackbone(**dict(GEN, num_layers=num_layers),
                                embeddings=discriminator.embeddings)
    return ElectraPretrainer(generator, discriminator, mask_token_id=MASK,
                             unmaskable_token_ids=(CLS, SEP), **kwargs)


@pytest.fixture(scope="module")
def pretrainer():
    keras.utils.set_random_seed(3)
    return _pretrainer()


def test_masking_counts_positions_and_85_15_split():
    rng = np.random.default_rng(1)
    batch, length = 512, 128
    real_lengths = rng.integers(3, length + 1, batch)
    real_lengths[:4] = (128, 20, 3, 64)
    text = _text(batch, length, real_lengths, seed=2)
    out = {k: v.numpy() for k, v in electra_mask(text["token_ids"], text["padding_mask"],
                                                  [7, 11], MASK, (CLS, SEP), 0.15).items()}
    slots = int((0.15 + 0.005) * length)
    assert slots == 19 and out["masked_lm_positions"].shape == (batch, 19)
    # num_to_predict = max(1, min(N, round(0.15 * real tokens))): 128 -> 19, 20 -> 3, 3 -> 1.
    expected = np.maximum(1, np.minimum(slots, np.round(0.15 * real_lengths))).astype(int)
    counts = out["masked_lm_weights"].sum(1).astype(int)
    np.testing.assert_array_equal(counts, expected)
    assert tuple(counts[:4]) == (19, 3, 1, 10)

    in_use = out["masked_lm_weights"] > 0
    positions = out["masked_lm_positions"]
    tokens = text["token_ids"]
    for b in range(batch):
        used = positions[b, in_use[b]]
        assert len(set(used)) == len(used)  # without replacement
        assert (used < real_lengths[b]).all()  # never padding
    picked = np.take_along_axis(tokens, positions, 1)
    assert not np.isin(picked[in_use], (CLS, SEP, PAD)).any()  # never [CLS] / [SEP]
    np.testing.assert_array_equal(out["masked_lm_ids"], np.where(in_use, picked, 0))
    assert (positions[~in_use] == 0).all()

    # 85% [MASK], 15% unchanged, no random token; nothing else in the sequence changes.
    masked = out["token_ids"]
    at_slots = np.take_along_axis(masked, positions, 1)[in_use]
    is_mask = at_slots == MASK
    assert (is_mask | (at_slots == picked[in_use])).all()
    n = in_use.sum()
    tolerance = 4 * math.sqrt(0.85 * 0.15 / n)  # 4 sigma of a binomial fraction, n ~ 5000
    assert abs(is_mask.mean() - 0.85) < tolerance, (is_mask.mean(), tolerance)
    changed = masked != tokens
    assert changed.sum() == is_mask.sum()

    # Uniform over the candidates: in full rows, each of the 126 word positions is picked
    # with probability 19/126; all are within 5 sigma of it.
    full = real_lengths == length
    hits = np.zeros(length)
    for b in np.flatnonzero(full):
        hits[positions[b, in_use[b]]] += 1
    p, rows = 19 / 126, full.sum()
    assert hits[0] == hits[length - 1] == 0
    assert np.abs(hits[1:-1] - rows * p).max() < 5 * math.sqrt(rows * p * (1 - p)) + 1

    # Deterministic in the seed.
    again = electra_mask(text["token_ids"], text["padding_mask"], [7, 11], MASK, (CLS, SEP))
    other = electra_mask(text["token_ids"], text["padding_mask"], [7, 12], MASK, (CLS, SEP))
    np.testing.assert_array_equal(again["masked_lm_positions"].numpy(), positions)
    assert (other["masked_lm_positions"].numpy() != positions).any()
    # ELECTRA-large's 25%: int(0.255 * 128) = 32 slots.
    large = electra_mask(text["token_ids"], text["padding_mask"], [1, 2], MASK, (CLS, SEP), 0.25)
    assert large["masked_lm_positions"].shape == (batch, 32)


def test_a_sample_equal_to_the_original_counts_as_original():
    text = _text(4, 16, (16, 16, 9, 5), seed=3)
    masked = electra_mask(text["token_ids"], text["padding_mask"], [0, 1], MASK, (CLS, SEP))
    positions, weights = masked["masked_lm_positions"], masked["masked_lm_weights"]
    originals = masked["masked_lm_ids"].numpy()
    in_use = weights.numpy() > 0

    # A generator certain of the original token: every masked slot gets it back -> all 0.
    logits = np.full(positions.shape + (VOCAB,), -1e4, "float32")
    np.put_along_axis(logits, originals[..., None], 1e4, -1)
    fake = electra_replace(logits, text["token_ids"], positions, weights, [5, 6])
    np.testing.assert_array_equal(fake["token_ids"].numpy(), text["token_ids"])
    assert fake["labels"].numpy().sum() == 0

    # A generator certain of another token: exactly the masked positions are replaced.
    logits = np.full(positions.shape + (VOCAB,), -1e4, "float32")
    np.put_along_axis(logits, ((originals + 1) % VOCAB)[..., None], 1e4, -1)
    fake = electra_replace(logits, text["token_ids"], positions, weights, [5, 6])
    expected = np.zeros_like(text["token_ids"])
    for b, n in zip(*np.nonzero(in_use)):
        expected[b, positions.numpy()[b, n]] = 1
    np.testing.assert_array_equal(fake["labels"].numpy(), expected)
    assert expected.sum() == in_use.sum()


def test_gumbel_samples_follow_the_generator_softmax():
    # One slot, 4 tokens with probabilities (0.1, 0.2, 0.3, 0.4), 4000 independent rows.
    rows = 4000
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    logits = np.tile(np.log(probs).astype("float32"), (rows, 1, 1))
    fake = electra_replace(logits, np.full((rows, 3), 9, "int32"), np.ones((rows, 1), "int32"),
                           np.ones((rows, 1), "float32"), [3, 4])
    freq = np.bincount(fake["sampled_ids"].numpy().ravel(), minlength=4) / rows
    assert np.abs(freq - probs).max() < 4 * math.sqrt(0.25 / rows)
    # temperature 1 is the default; a near-zero temperature is the argmax.
    cold = electra_replace(logits, np.full((rows, 3), 9, "int32"), np.ones((rows, 1), "int32"),
                           np.ones((rows, 1), "float32"), [3, 4], temperature=1e-3)
    assert (cold["sampled_ids"].numpy() == 3).all()


def test_pretrainer_end_to_end_label_logic(pretrainer):
    # Every word is 7 and the generator's bias makes 7 certain: the discriminator sees the
    # original text and every label is 0, although ~15% of the tokens were masked.
    text = _text(3, 20, (20, 20, 12), seed=4)
    text["token_ids"][(text["padding_mask"] > 0) & (text["token_ids"] > SEP)] = 7
    bias = pretrainer.generator_model.masked_lm_head.output_bias
    original = bias.numpy()
    try:
        for forced, want_replaced in ((7, False), (8, True)):
            value = np.zeros(VOCAB, "float32")
            value[forced] = 1e4
            bias.assign(value)
            out = pretrainer({**text, "seed": np.array([1, 2], "int32")}, training=False)
            in_use = out["masked_lm_weights"].numpy() > 0
            assert in_use.sum() == 3 + 3 + 2
            assert (out["masked_token_ids"].numpy() == MASK).any()
            labels = out["disc_labels"].numpy()
            if want_replaced:
                assert labels.sum() == in_use.sum()
                assert (out["corrupted_token_ids"].numpy()[labels > 0] == 8).all()
            else:
                assert labels.sum() == 0
                np.testing.assert_array_equal(out["corrupted_token_ids"].numpy(), text["token_ids"])
    finally:
        bias.assign(original)


def test_outputs_shapes_and_determinism(pretrainer):
    text = _text(2, 24, (24, 10))
    seed = np.array([4, 5], "int32")
    out = pretrainer({**text, "seed": seed})
    assert tuple(out["mlm_logits"].shape) == (2, 3, VOCAB)  # int(0.155 * 24) = 3 slots
    for key in ("masked_token_ids", "corrupted_token_ids", "disc_logits", "disc_labels",
                "disc_weights"):
        assert tuple(out[key].shape) == (2, 24), key
    assert out["mlm_logits"].dtype == "float32" and out["disc_logits"].dtype == "float32"
    np.testing.assert_array_equal(out["disc_weights"].numpy(), text["padding_mask"])
    again = pretrainer({**text, "seed": seed})
    for key in out:
        np.testing.assert_array_equal(out[key].numpy(), again[key].numpy(), err_msg=key)


def test_embeddings_are_shared_and_sampling_stops_gradients(pretrainer):
    gen, disc = pretrainer.generator, pretrainer.discriminator
    assert gen.embeddings is disc.embeddings
    for a, b in zip(gen.embeddings.weights, disc.embeddings.weights):
        assert a is b
    table = disc.token_embedding.embeddings
    assert pretrainer.generator_model.masked_lm_head.token_embedding.embeddings is table
    # One word table, one position table, one embedding LayerNorm in the whole model.
    shapes = [tuple(v.shape) for v in pretrainer.trainable_variables]
    assert shapes.count((VOCAB, 16)) == 1 and shapes.count((64, 16)) == 1
    assert gen.embeddings_project is not disc.embeddings_project

    text = _text(2, 24, (24, 16))
    with tf.GradientTape(persistent=True) as tape:
        metrics = electra_pretrain_loss(pretrainer({**text, "seed": np.array([1, 1], "int32")}))
    shared = {id(v) for v in gen.embeddings.weights}
    generator_only = [v for v in pretrainer.generator_model.trainable_variables if id(v) not in shared]
    assert len(generator_only) == 2 + 2 * 16 + 5  # projection, 2 blocks, MLM head
    disc_grads = tape.gradient(metrics["disc_loss"], generator_only + [table])
    # The discriminator loss reaches the shared table but not the generator (stop-gradient).
    assert all(g is None for g in disc_grads[:-1])
    assert np.abs(tf.convert_to_tensor(disc_grads[-1]).numpy()).sum() > 0
    mlm_grad = tape.gradient(metrics["mlm_loss"], table)
    assert np.abs(tf.convert_to_tensor(mlm_grad).numpy()).sum() > 0

    other = ElectraBackbone(**GEN)
    with pytest.raises(ValueError, match="share one embeddings"):
        ElectraPretrainer(other, disc, mask_token_id=MASK)


def test_config_and_save_load_round_trip(pretrainer, tmp_path):
    config = pretrainer.get_config()
    assert (config["mask_prob"], config["temperature"], config["disc_weight"]) == (0.15, 1.0, 50.0)
    assert (config["mask_token_id"], config["unmaskable_token_ids"]) == (MASK, [CLS, SEP])
    _, clone = assert_config_round_trip(pretrainer)
    assert clone.generator.embeddings is clone.discriminator.embeddings

    inputs = {**_text(2, 16, (16, 9)), "seed": np.array([2, 3], "int32")}
    loaded = assert_keras_file_round_trip(pretrainer, tmp_path / "electra_pretrainer.keras", inputs)
    assert loaded.generator.embeddings is loaded.discriminator.embeddings


def test_loss_matches_numpy():
    rng = np.random.default_rng(5)
    outputs = {
        "mlm_logits": rng.normal(size=(2, 3, 7)).astype("float32") * 2,
        "masked_lm_ids": rng.integers(0, 7, (2, 3)),
        "masked_lm_weights": np.array([[1, 1, 0], [1, 0, 0]], "float32"),
        "disc_logits": rng.normal(size=(2, 5)).astype("float32"),
        "disc_labels": rng.integers(0, 2, (2, 5)),
        "disc_weights": np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], "float32"),
    }
    got = electra_pretrain_loss(outputs)
    x = outputs["mlm_logits"]
    log_softmax = x - x.max(-1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_softmax, outputs["masked_lm_ids"][..., None], -1)[..., 0]
    w = outputs["masked_lm_weights"]
    mlm = (w * nll).sum() / (w.sum() + 1e-6)
    z, y, m = outputs["disc_logits"], outputs["disc_labels"], outputs["disc_weights"]
    xent = np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))
    disc = (m * xent).sum() / (m.sum() + 1e-6)
    np.testing.assert_allclose(got["mlm_loss"].numpy(), mlm, rtol=1e-5)
    np.testing.assert_allclose(got["disc_loss"].numpy(), disc, rtol=1e-5)
    np.testing.assert_allclose(got["loss"].numpy(), mlm + 50 * disc, rtol=1e-5)


def test_joint_training_lowers_the_loss():
    keras.utils.set_random_seed(9)
    model = _pretrainer(num_layers=1)
    # A tiny language: the words of a sentence repeat a per-row pattern, learnable quickly.
    rng = np.random.default_rng(6)
    text = _text(16, 24, rng.integers(12, 25, 16), seed=7, low=5)
    pattern = rng.integers(5, 15, (16, 4))
    words = (text["padding_mask"] > 0) & (text["token_ids"] > SEP)
    text["token_ids"] = np.where(words, np.tile(pattern, (1, 6)), text["token_ids"]).astype("int32")
    text = {k: tf.constant(v) for k, v in text.items()}
    optimizer = keras.optimizers.AdamW(learning_rate=2e-3, weight_decay=0.01)
    optimizer.build(model.trainable_variables)  # no variable creation inside the trace

    @tf.function
    def train_step(seed):
        with tf.GradientTape() as tape:
            metrics = electra_pretrain_loss(model({**text, "seed": seed}, training=True),
                                            model.disc_weight)
        grads = tape.gradient(metrics["loss"], model.trainable_variables)
        # One loss, one step: every variable of both towers and both heads gets a gradient.
        assert all(g is not None for g in grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return metrics

    def evaluate():
        losses = [electra_pretrain_loss(model({**text, "seed": tf.constant([99, s])}))["loss"]
                  for s in range(4)]
        return float(np.mean(losses))

    before = evaluate()
    for step in range(40):
        train_step(tf.constant([0, step], tf.int32))
    after = evaluate()
    # ln(100) + 50 ln(2) = 39.3 at the start; the discriminator alone learns "mostly original".
    assert before > 30
    print(f"joint training: loss {before:.2f} -> {after:.2f}")
    assert after < 0.6 * before, (before, after)
