"""garden.models.instrument: switches on, same weights; the block each layer runs."""

import numpy as np
import pytest

from garden.models import instrument
from garden.models.albert.presets import untrained_albert_backbone
from garden.models.bert.presets import untrained_bert_backbone

IDS = np.array([[2, 7, 8, 3, 0], [2, 9, 3, 0, 0]], "int32")
BATCH = {"token_ids": IDS, "segment_ids": 0 * IDS, "padding_mask": (IDS > 0).astype("int32"),
         "labels": np.array([0, 1])}  # a packer's extra entry, which no backbone takes


def test_instrumented_backbone_adds_outputs_with_the_same_weights():
    plain = untrained_bert_backbone("bert_tiny", vocab_size=20, dropout=0.0)
    assert instrument.instrumented(plain) is plain
    full = instrument.instrumented(plain, output_attentions=True, output_hidden_states=True,
                                   use_head_mask=True)
    assert full is not plain
    assert instrument.instrumented(full, output_attentions=True) is full
    before, after = instrument.run(plain, BATCH), instrument.run(full, BATCH)
    assert after["attention_probs"].shape == (2, 2, 2, 5, 5)  # [L, B, A, T, T]
    np.testing.assert_array_equal(after["sequence_output"], before["sequence_output"])
    np.testing.assert_array_equal(after["hidden_states"][-1], before["sequence_output"])
    # A head mask of zeros for layer 0 head 1 reaches the probabilities (and so layer 1's).
    mask = np.ones((2, 2), "float32")
    mask[0, 1] = 0
    masked = instrument.run(full, BATCH, head_mask=mask)["attention_probs"]
    assert np.all(masked[0, :, 1] == 0)
    np.testing.assert_array_equal(masked[0, :, 0], after["attention_probs"][0, :, 0])
    assert not np.allclose(masked[1], after["attention_probs"][1], atol=1e-6)
    with pytest.raises(ValueError, match="unknown backbone switches"):
        instrument.instrumented(plain, output_everything=True)
    with pytest.raises(ValueError, match="the batch has no \\['segment_ids'\\]"):
        instrument.run(plain, {"token_ids": IDS, "padding_mask": IDS > 0})


def test_layer_blocks_follow_albert_sharing():
    bert = untrained_bert_backbone("bert_tiny", vocab_size=20)
    assert instrument.layer_blocks(bert) == list(bert.encoder_blocks)
    albert = untrained_albert_backbone("albert_base", vocab_size=20, num_layers=4,
                                         hidden_size=32, num_heads=2, intermediate_size=64,
                                         embedding_size=16, num_groups=2)
    blocks = instrument.layer_blocks(albert)
    assert blocks == [albert.block_for_layer(i) for i in range(4)]
    assert blocks[0] is blocks[1] and blocks[1] is not blocks[2]
    assert len(instrument.attention_layers(albert)) == 2
