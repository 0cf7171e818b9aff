"""XLNet pretraining: permutation language modelling on the query stream (docs/objectives.md
section 7) and its loss.

The model runs both streams under the data's perm_mask and scores the query stream at the
targets (target_mapping) against the tied word table plus a bias, as the original's lm_loss
and Hugging Face's XLNetLMHeadModel (Model Garden's XLNet head adds a dense + LayerNorm
transform the original lacks; this one does not).
"""

from __future__ import annotations

from typing import Dict

import keras
import numpy as np
import tensorflow as tf

from garden.losses import masked_lm_metrics, with_total_loss
from garden.models.pretrainer import PretrainerConfig
from garden.models.xlnet.backbone import XLNetLMHead


@keras.saving.register_keras_serializable(package="garden")
class XLNetPretrainer(PretrainerConfig, keras.Model):
    """An XLNet backbone with the permutation-LM head.

    Inputs (dict): token_ids, segment_ids, padding_mask int32 [B, T] (1 = real); perm_mask
    float [B, T, T] (1 = i cannot attend to j); target_mapping float [B, P, T].
    Outputs (dict, float32): lm_logits [B, P, V] (the query stream at each target).

    Args:
        backbone: XLNetBackbone.
        **kwargs: name, trainable.

    Example:
        pretrainer = XLNetPretrainer(XLNetBackbone.untrained("xlnet_tiny", vocab_size=1000))
        logits = pretrainer({**inputs, "perm_mask": perm, "target_mapping": mapping})["lm_logits"]
        metrics = xlnet_pretrain_loss(outputs, target, target_mask)
    """

    def __init__(self, backbone, **kwargs):
        # keras.Model.__init__, not a functional base: see garden.models.pretrainer's
        # PretrainerConfig for why a subclassed pretrainer must not share Pretrainer's bases.
        super().__init__(**kwargs)
        self.backbone = backbone
        self.lm_head = XLNetLMHead(backbone.token_embedding, dtype=backbone.dtype_policy,
                                   name="lm_head")
        # Built outside call(), so its weight path is "lm_head/bias"; with the query stream's
        # shape, so that `summary()` can state the head's output shape.
        self.lm_head.build((None, None, backbone.token_embedding.output_dim))
        # A subclassed model (a Keras functional graph cannot carry the second output of a
        # layer whose call takes the query stream as a keyword), built here on a tiny input.
        # (batch 2: bi_data needs an even batch)
        ones = np.ones((2, 2), "int32")
        self({"token_ids": ones, "segment_ids": ones, "padding_mask": ones,
              "perm_mask": np.zeros((2, 2, 2), "float32"),
              "target_mapping": np.ones((2, 1, 2), "float32")})

    def call(self, inputs, training=None):
        query = self.backbone.streams(inputs, perm_mask=inputs["perm_mask"],
                                      target_mapping=inputs["target_mapping"],
                                      training=training)["query"]
        return {"lm_logits": self.lm_head(query)}


def xlnet_pretrain_loss(outputs: Dict[str, tf.Tensor], target, target_mask,
                        lm_denominator=None) -> Dict[str, tf.Tensor]:
    """Permutation-LM loss and accuracy of one (per-replica) batch, in plain TF ops:
    sum(target_mask * nll) / (sum(target_mask) + 1e-5) over the [B, P] targets (the
    original's weighted mean; padded target slots count nothing).

    Returns:
        dict of float32 scalars: loss (= lm_loss), lm_loss, lm_accuracy.
    """
    return with_total_loss(masked_lm_metrics(outputs["lm_logits"], target, target_mask,
                                             lm_denominator, prefix="lm"), lm=1.0)
