"""Small random model inputs shared by the family tests (tests/models/**).

One generator per input shape, so that every family's backbone and pretrainer tests feed the
same kind of batch (two segments, right padding with id 0) and a fix reaches all of them.
The random streams are those the tests were written against: same seed, same draws.
"""

from __future__ import annotations

import numpy as np


def padded_batch(vocab_size: int, batch: int = 2, length: int = 12, seed: int = 0,
                 real_lengths=(12, 7), low: int = 1) -> dict:
    """token_ids / segment_ids / padding_mask; row b has real_lengths[b] tokens, the second half
    of them in segment 1, the rest padding (id 0)."""
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(low, vocab_size, (batch, length)).astype("int32")
    segment_ids = np.zeros((batch, length), "int32")
    padding_mask = np.zeros((batch, length), "int32")
    for b, n in enumerate(real_lengths):
        padding_mask[b, :n] = 1
        segment_ids[b, n // 2:n] = 1
        token_ids[b, n:] = 0
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def padded_ids(vocab_size: int, batch: int, length: int, padded_row: int, pad_from: int,
               seed: int = 0, rng=None):
    """(token_ids, padding_mask) [batch, length]: random ids in [1, vocab_size), row
    `padded_row` padded (id 0, mask 0) from position `pad_from` on. `rng` continues a caller's
    stream (then `seed` is unused)."""
    rng = np.random.default_rng(seed) if rng is None else rng
    token_ids = rng.integers(1, vocab_size, (batch, length)).astype("int32")
    padding_mask = np.ones((batch, length), "int32")
    padding_mask[padded_row, pad_from:] = 0
    token_ids[padding_mask == 0] = 0
    return token_ids, padding_mask


def pretrain_batch(vocab_size: int, batch: int = 2, length: int = 12, predictions: int = 4,
                   seed: int = 0) -> dict:
    """A masked-LM batch: two segments, 4 padding positions in row 1, sorted masked positions
    drawn from the real tokens after the first."""
    rng = np.random.default_rng(seed)
    token_ids, padding_mask = padded_ids(vocab_size, batch, length, 1, length - 4, rng=rng)
    segment_ids = np.zeros((batch, length), "int32")
    segment_ids[:, length // 2:] = 1
    positions = np.sort(rng.choice(np.arange(1, length - 4), (batch, predictions)), axis=1)
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask,
            "masked_lm_positions": positions.astype("int32")}


def assert_config_round_trip(model, expected: dict | None = None, inputs: dict | None = None,
                             key: str = "sequence_output"):
    """from_config(get_config()) rebuilds a model with the same config; returns (config, clone).

    expected: config entries the model must report (a subset of its config).
    inputs: when given, the clone takes the model's weights and must then compute the same
        `key` output bit for bit (the config alone rebuilds the whole architecture).
    """
    config = model.get_config()
    if expected is not None:
        assert {k: config[k] for k in expected} == expected
    clone = type(model).from_config(config)
    assert clone.get_config() == config
    if inputs is not None:
        clone.set_weights(model.get_weights())
        np.testing.assert_array_equal(clone(inputs)[key].numpy(), model(inputs)[key].numpy())
    return config, clone


def assert_keras_file_round_trip(model, path, inputs: dict, keys=None):
    """Saves `model` as a .keras file at `path`, loads it in this process and asserts the same class
    and bit-identical outputs (for `keys`, or every output); returns the loaded model so a test
    can check what else must survive (tied tables, shared blocks)."""
    import keras

    model.save(str(path))
    loaded = keras.models.load_model(str(path))
    assert isinstance(loaded, type(model)), type(loaded)
    want, got = model(inputs), loaded(inputs)
    for key in keys or want:
        np.testing.assert_array_equal(got[key].numpy(), want[key].numpy(), err_msg=key)
    return loaded


def keras_attention_pair(hidden: int, heads: int, length: int, dropout: float = 0.0):
    """garden's MultiHeadAttention and keras.layers.MultiHeadAttention, both named "attention"
    and built for [2, length, hidden], with the same random weights (normal, scale 0.3)."""
    import keras

    from garden.layers.attention import MultiHeadAttention

    ours = MultiHeadAttention(num_heads=heads, key_dim=hidden // heads, dropout=dropout,
                              name="attention")
    theirs = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=hidden // heads,
                                             dropout=dropout, name="attention")
    shape = (2, length, hidden)
    ours.build(shape, shape)
    theirs.build(shape, shape)
    rng = np.random.default_rng(0)
    for w in theirs.weights:
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32"))
    ours.set_weights(theirs.get_weights())
    return ours, theirs


def assert_restores_to(backbone, fresh, model_dir) -> None:
    """Every weight of `backbone` equals `fresh` (same architecture) restored independently
    from the newest checkpoint of the garden.train run `model_dir` (its `backbone` object)."""
    import tensorflow as tf

    tf.train.Checkpoint(backbone=fresh).read(
        tf.train.latest_checkpoint(f"{model_dir}/checkpoints")).expect_partial()
    for ours, theirs in zip(backbone.weights, fresh.weights):
        assert ours.path == theirs.path
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=ours.path)


def assert_encoder_output_shapes(out, batch: int, length: int, hidden: int, pooled: bool = True):
    """A BERT-style backbone's outputs: exactly sequence_output [batch, length, hidden] and
    pooled_output, the latter [batch, hidden] (checked unless pooled=False)."""
    assert set(out) == {"sequence_output", "pooled_output"}
    assert tuple(out["sequence_output"].shape) == (batch, length, hidden)
    if pooled:
        assert tuple(out["pooled_output"].shape) == (batch, hidden)


def assert_pretrainer_logits(out, sentence_head: str, batch: int, predictions: int, vocab: int):
    """A masked-LM + two-way sentence-level pretrainer's outputs: exactly mlm_logits
    [batch, predictions, vocab] and `sentence_head` [batch, 2] ("nsp_logits", "sop_logits"),
    both float32."""
    assert set(out) == {"mlm_logits", sentence_head}
    assert tuple(out["mlm_logits"].shape) == (batch, predictions, vocab)
    assert tuple(out[sentence_head].shape) == (batch, 2)
    assert out["mlm_logits"].dtype == "float32" and out[sentence_head].dtype == "float32"


def pretrain_step(model, loss_fn, inputs: dict, targets: tuple, optimizer):
    """One training step as a function: loss_fn(model(inputs, training=True), *targets) and an
    optimizer update of model's trainable variables; returns loss_fn's metrics. Wrap it in
    tf.function to run it traced."""
    import tensorflow as tf

    def step():
        with tf.GradientTape() as tape:
            metrics = loss_fn(model(inputs, training=True), *targets)
        grads = tape.gradient(metrics["loss"], model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return metrics

    return step
