"""SpanBERT pretraining (MLM + span boundary objective, no NSP) as a task of the shared trainer.

OBJECTIVES.md section 4. The data is make_pretrain --objective=spanbert output: single-segment
blocks with span masks written by the pipeline (static masking, as the BERT task), and the SBO
targets aligned with the masked positions: span_left_positions (start-1), span_right_positions
(end+1), span_relative_positions (0-based offset in the span), sbo_weights (0 for spans touching
the block edge and offsets past the head's table). Reading, phases, checks and evaluation are
BertPretraining's; the model and the loss differ.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence

import tensorflow as tf

from garden.models.spanbert.pretrainer import SBO_INPUTS, SpanBertPretrainer, spanbert_pretrain_loss
from garden.tasks.bert_pretraining import BertPretraining, to_model_inputs


class SpanBertPretraining(BertPretraining):
    """Masked LM + span boundary objective on make_pretrain --objective=spanbert output.

    Args (beyond BertPretraining's backbone, vocab, phases, shuffle_buffer, eval_*):
        sbo_loss_weight: float, weight of the SBO term (Joshi et al. 2020: 1.0).
        max_targets: int, rows of the SBO relative-position table (15).
        position_embedding_size: int, width of the SBO relative-position embedding (200).
    """

    name = "spanbert_pretraining"
    objective = "spanbert"

    def __init__(self, backbone: Callable, vocab: str, phases: Sequence,
                 sbo_loss_weight: float = 1.0, max_targets: int = 15,
                 position_embedding_size: int = 200, **kwargs):
        super().__init__(backbone, vocab, phases, **kwargs)
        self.sbo_loss_weight = float(sbo_loss_weight)
        self.max_targets = int(max_targets)
        self.position_embedding_size = int(position_embedding_size)

    def prepare(self) -> None:
        super().prepare()
        needed = {"masked_lm_weights", "sbo_weights", *SBO_INPUTS}
        for d in self._dirs + ([self._eval_dir] if self._eval_dir else []):
            missing = sorted(needed - set(d.spec))
            if missing:
                raise ValueError(f"{d.path} lacks the SpanBERT features {missing}: make it "
                                 "with data_pipelines.make_pretrain --objective=spanbert")

    def build_model(self):
        backbone = self._checked_backbone()  # checked against the vocabulary and lengths
        model = SpanBertPretrainer(backbone, max_targets=self.max_targets,
                                   position_embedding_size=self.position_embedding_size)
        return model, {"model": model, "backbone": backbone}

    @staticmethod
    def summary_model(backbone):
        return SpanBertPretrainer(backbone)

    @staticmethod
    def loss_weights(batch) -> Dict[str, tf.Tensor]:
        """The two weighted means' denominators; the trainer sums them over the global batch."""
        return {"masked_lm_weights": tf.reduce_sum(tf.cast(batch["masked_lm_weights"], tf.float32)),
                "sbo_weights": tf.reduce_sum(tf.cast(batch["sbo_weights"], tf.float32))}

    def compute_metrics(self, model, batch, training: bool,
                        weight_shares: Optional[Dict[str, tf.Tensor]] = None) -> Dict[str, tf.Tensor]:
        inputs = to_model_inputs(batch)
        inputs.update({k: tf.cast(batch[k], tf.int32) for k in SBO_INPUTS})
        outputs = model(inputs, training=training)
        mlm_den = sbo_den = None
        if weight_shares is not None:
            mlm_den = weight_shares["masked_lm_weights"] + 1e-5
            sbo_den = weight_shares["sbo_weights"] + 1e-5
        metrics = spanbert_pretrain_loss(outputs, batch["masked_lm_ids"],
                                         batch["masked_lm_weights"], batch["sbo_weights"],
                                         sbo_loss_weight=self.sbo_loss_weight,
                                         mlm_denominator=mlm_den, sbo_denominator=sbo_den)
        metrics["tokens"] = tf.reduce_sum(tf.cast(batch["input_mask"], tf.float32))
        return metrics
