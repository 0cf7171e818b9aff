"""ALBERT pretraining heads (masked LM projected to E + sentence order prediction) and loss.

docs/objectives.md section 2: the MLM head gathers the masked positions, maps them H -> E
(dense with the backbone's activation -> LayerNorm) and scores them against the tied E-wide
word table plus an output bias; the SOP head is dense(2) on the pooled [CLS] output; total loss =
MLM + SOP. Both heads are garden's shared layers, composed as in BertPretrainer.
"""

from __future__ import annotations

from typing import Dict

import keras
import tensorflow as tf

from garden.models.albert.backbone import get_activation
from garden.models.pretrainer import (SentencePairPretrainer, sentence_pair_loss,
                                      tied_masked_lm_head)


@keras.saving.register_keras_serializable(package="garden")
class AlbertPretrainer(SentencePairPretrainer):
    """An ALBERT backbone with the masked LM and sentence order heads of Lan et al. (2020,
    "ALBERT: A Lite BERT for Self-supervised Learning of Language Representations", section 3.1).

    Inputs (dict, int32): token_ids, segment_ids, padding_mask [B, T]; masked_lm_positions
    [B, P]. Outputs (dict, float32): mlm_logits [B, P, V], sop_logits [B, 2] (class 1 = "the two
    segments are swapped", as the next_sentence_labels feature of ALBERT data). The MLM
    transform ends at width E and its output projection is the backbone's E-wide word table
    itself (tied), as in the original and Hugging Face's AlbertMLMHead.

    Args:
        backbone: AlbertBackbone.
        **kwargs: name, trainable.

    Example:
        pretrainer = AlbertPretrainer(untrained_albert_backbone("albert_base", vocab_size=1000))
        outputs = pretrainer({**backbone_inputs, "masked_lm_positions": positions})
        metrics = albert_pretrain_loss(outputs, masked_lm_ids, masked_lm_weights, labels)
    """

    sentence = "sop"
    sentence_head_name = "sentence_order_head"

    @staticmethod
    def masked_lm_head_for(backbone):
        # ALBERT's transform uses the backbone's activation (v2: tanh-approximate GELU).
        return tied_masked_lm_head(backbone, get_activation(backbone.activation))


def albert_pretrain_loss(outputs: Dict[str, tf.Tensor], masked_lm_ids, masked_lm_weights,
                         sentence_order_labels, mlm_denominator=None) -> Dict[str, tf.Tensor]:
    """MLM + SOP loss and accuracies of one (per-replica) batch, in plain TF ops.

    The formulas are BERT's (`bert_pretrain_loss`; both call `sentence_pair_loss`): mlm_loss =
    sum(w * nll) / (sum(w) + 1e-5), sop_loss = mean cross-entropy over the batch; SOP takes
    NSP's place. Runs inside `strategy.run` (no Keras metric objects).

    Args:
        outputs: dict with "mlm_logits" float [B, P, V] and "sop_logits" float [B, 2].
        masked_lm_ids: int [B, P], the original ids at the masked positions.
        masked_lm_weights: float [B, P], 1.0 for real predictions, 0.0 for padding.
        sentence_order_labels: int [B, 1] or [B]; 1 = segments swapped, 0 = in order (the
            next_sentence_labels feature of ALBERT data).
        mlm_denominator: optional float scalar replacing sum(w) + 1e-5 (see bert_pretrain_loss).

    Returns:
        dict of float32 scalars: loss (= mlm_loss + sop_loss), mlm_loss, sop_loss,
        mlm_accuracy (weighted by masked_lm_weights), sop_accuracy.
    """
    return sentence_pair_loss(outputs, masked_lm_ids, masked_lm_weights, sentence_order_labels,
                              "sop", mlm_denominator)
