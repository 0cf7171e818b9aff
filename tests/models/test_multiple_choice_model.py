"""MultipleChoiceModel: logits[b, i] is the shared head's score of choice i of example b alone
(folding [B, N, T] into rows keeps each choice with its example), and the config round-trips."""

from __future__ import annotations

import keras
import numpy as np

from garden.models.bert.presets import untrained_bert_backbone
from garden.models.multiple_choice import MultipleChoiceModel


def test_each_logit_scores_its_own_choice():
    keras.utils.set_random_seed(5)
    model = MultipleChoiceModel(untrained_bert_backbone("bert_tiny", vocab_size=60),
                                num_choices=3, dropout=0.0)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 60, (2, 3, 9)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 2, 6:] = 0  # a padded choice
    inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": mask}
    logits = np.asarray(model(inputs)["logits"])
    assert logits.shape == (2, 3)
    head = model.get_layer("choice_dense")
    for b in range(2):
        for i in range(3):
            one = {k: v[b:b + 1, i] for k, v in inputs.items()}
            pooled = model.backbone(one)["pooled_output"]
            np.testing.assert_allclose(logits[b, i], np.asarray(head(pooled))[0, 0], atol=1e-5)
    clone = MultipleChoiceModel.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(np.asarray(clone(inputs)["logits"]), logits, atol=1e-6)
