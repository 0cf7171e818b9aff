"""BERT pretraining heads (masked LM + next sentence prediction) and their loss.

docs/objectives.md section 1: the MLM head gathers the masked positions, transforms them
(dense gelu -> LayerNorm) and scores them against the tied word table plus an output bias; the
NSP head is dense(2) on the pooled [CLS] output; total loss = MLM + NSP.
"""

from __future__ import annotations

from typing import Dict

import keras
import tensorflow as tf

from garden.models.backbone import backbone_inputs
from garden.models.bert.backbone import BertBackbone
from garden.models.pretrainer import PAIR_INPUTS, SentencePairPretrainer, sentence_pair_loss


@keras.saving.register_keras_serializable(package="garden")
class BertPretrainer(SentencePairPretrainer):
    """A BERT backbone with the masked LM and next sentence heads of Devlin et al. (2019).

    Inputs (dict, int32): token_ids, segment_ids, padding_mask [B, T]; masked_lm_positions
    [B, P]. Outputs (dict, float32): mlm_logits [B, P, V], nsp_logits [B, 2] (class 1 =
    "B is a random sentence", as next_sentence_labels). The MLM output projection is the
    backbone's word table itself (tied).

    Args:
        backbone: BertBackbone (or any backbone with the same inputs/outputs and a
            `token_embedding` ReversibleEmbedding).
        **kwargs: name, trainable.

    Example:
        pretrainer = BertPretrainer(untrained_bert_backbone("bert_tiny", vocab_size=1000))
        outputs = pretrainer({**backbone_inputs, "masked_lm_positions": positions})
        metrics = bert_pretrain_loss(outputs, masked_lm_ids, masked_lm_weights, labels)
    """

    sentence = "nsp"
    sentence_head_name = "next_sentence_head"

    @staticmethod
    def masked_lm_and_pooled(backbone, masked_lm_head):
        if not isinstance(backbone, BertBackbone):
            return SentencePairPretrainer.masked_lm_and_pooled(backbone, masked_lm_head)
        # The heads read [CLS] and the masked positions only: the last block computes just
        # those rows (BertBackbone.outputs_at). Same outputs, less work.
        inputs = backbone_inputs((*PAIR_INPUTS, "masked_lm_positions"))
        masked_rows, pooled_output = backbone.outputs_at(
            {k: inputs[k] for k in PAIR_INPUTS}, inputs["masked_lm_positions"])
        return inputs, masked_lm_head(masked_rows), pooled_output


def bert_pretrain_loss(outputs: Dict[str, tf.Tensor], masked_lm_ids, masked_lm_weights,
                       next_sentence_labels, mlm_denominator=None) -> Dict[str, tf.Tensor]:
    """MLM + NSP loss and accuracies of one (per-replica) batch, in plain TF ops.

    mlm_loss = sum(w * nll) / (sum(w) + 1e-5) over the [B, P] predictions, as the original
    run_pretraining.py: padding predictions (w = 0) count nothing, and a batch without any
    prediction gives 0 instead of NaN. nsp_loss is the mean cross-entropy over the batch.
    No Keras metric objects, so it runs inside `strategy.run`; the values are per-replica
    means, so the trainer divides by the number of replicas when it sums gradients.

    Args:
        outputs: dict with "mlm_logits" float [B, P, V] and "nsp_logits" float [B, 2].
        masked_lm_ids: int [B, P], the original ids at the masked positions.
        masked_lm_weights: float [B, P], 1.0 for real predictions, 0.0 for padding.
        next_sentence_labels: int [B, 1] or [B]; 1 = B is random, 0 = B is the actual next.
        mlm_denominator: optional float scalar replacing sum(w) + 1e-5. The trainer passes
            this batch's share of the global weight sum (all replicas and accumulation steps),
            so that the averaged loss is the global weighted mean however the batch is split.

    Returns:
        dict of float32 scalars: loss (= mlm_loss + nsp_loss), mlm_loss, nsp_loss,
        mlm_accuracy (weighted by masked_lm_weights), nsp_accuracy.
    """
    return sentence_pair_loss(outputs, masked_lm_ids, masked_lm_weights, next_sentence_labels,
                              "nsp", mlm_denominator)
