"""The last block computed only where the pretraining heads read: same outputs and gradients."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden.layers.transformer_encoder import TransformerEncoderBlock
from garden.models.bert.presets import untrained_bert_backbone
from garden.models.bert.pretrainer import BertPretrainer, bert_pretrain_loss

VOCAB = 100


@pytest.mark.parametrize("normalize_first", [False, True])
@pytest.mark.parametrize("with_attention_mask", [False, True])
def test_block_rows_equal_the_rows_of_the_full_output(normalize_first, with_attention_mask):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    block = TransformerEncoderBlock(num_heads=2, intermediate_size=32,
                                    normalize_first=normalize_first)
    x = rng.normal(size=(3, 10, 16)).astype("float32")
    padding = np.ones((3, 10), "int32")
    padding[1, 7:] = 0
    attention = np.tril(np.ones((3, 10, 10), "int32")) if with_attention_mask else None
    positions = np.array([[0, 3, 3, 9], [0, 6, 0, 0], [0, 1, 2, 5]], "int32")  # repeats, pads
    full = block(x, padding_mask=padding, attention_mask=attention).numpy()
    rows = block(x, padding_mask=padding, attention_mask=attention,
                 output_positions=positions).numpy()
    assert rows.shape == (3, 4, 16)
    np.testing.assert_allclose(rows, np.take_along_axis(full, positions[..., None], axis=1),
                               atol=1e-5)


def _batch(seed=1, batch=3, length=16, predictions=5):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, (batch, length)).astype("int32")
    padding = np.ones((batch, length), "int32")
    padding[2, 11:] = 0
    positions = np.sort(rng.integers(1, 11, (batch, predictions)), axis=1).astype("int32")
    positions[0, -1] = 0  # a padding prediction slot
    weights = np.ones((batch, predictions), "float32")
    weights[0, -1] = 0.0
    return ({"token_ids": ids, "segment_ids": (np.arange(length) >= length // 2).astype("int32")
             * np.ones_like(ids), "padding_mask": padding, "masked_lm_positions": positions},
            rng.integers(5, VOCAB, (batch, predictions)).astype("int32"), weights,
            rng.integers(0, 2, (batch,)).astype("int32"))


def test_pretrainer_loss_and_gradients_equal_the_full_computation():
    keras.utils.set_random_seed(3)
    backbone = untrained_bert_backbone("bert_tiny", vocab_size=VOCAB)
    pretrainer = BertPretrainer(backbone)
    inputs, ids, weights, labels = _batch()

    def full_outputs():
        # The reference: every row of the last block, then the head gathers.
        out = backbone({k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")},
                       training=False)
        return {"mlm_logits": pretrainer.masked_lm_head(out["sequence_output"],
                                                        inputs["masked_lm_positions"]),
                "nsp_logits": pretrainer.next_sentence_head(out["pooled_output"])}

    results = []
    for forward in (lambda: pretrainer(inputs, training=False), full_outputs):
        with tf.GradientTape() as tape:
            loss = bert_pretrain_loss(forward(), ids, weights, labels)["loss"]
        grads = tape.gradient(loss, pretrainer.trainable_variables)
        results.append((float(loss), [tf.convert_to_tensor(g).numpy() for g in grads]))
    (loss_rows, grads_rows), (loss_full, grads_full) = results
    assert abs(loss_rows - loss_full) < 1e-5
    assert len(grads_rows) == len(grads_full) == len(pretrainer.trainable_variables)
    for v, a, b in zip(pretrainer.trainable_variables, grads_rows, grads_full):
        np.testing.assert_allclose(a, b, atol=1e-6, err_msg=v.path)
