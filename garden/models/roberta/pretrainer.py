"""RoBERTa pretraining head (masked LM only, no NSP) and its loss.

docs/objectives.md section 3: one segment, no next sentence prediction; the masks are drawn afresh
each time a sequence is seen (dynamic masking, in the input pipeline), so the model itself is
BERT's MLM head on the RoBERTa backbone: gather the masked positions -> dense(H, gelu) ->
LayerNorm -> logits on the tied BPE table + output bias (fairseq `RobertaLMHead`).
"""

from __future__ import annotations

from typing import Dict

import keras
import tensorflow as tf

from garden.losses import masked_lm_metrics, with_total_loss
from garden.models.pretrainer import Pretrainer, masked_lm_graph, tied_masked_lm_head


@keras.saving.register_keras_serializable(package="garden")
class RobertaPretrainer(Pretrainer):
    """A RoBERTa backbone with the masked LM head of Liu et al. (2019); no NSP head.

    Inputs (dict, int32): token_ids, padding_mask [B, T]; masked_lm_positions [B, P].
    Outputs (dict, float32): mlm_logits [B, P, V]. The output projection is the backbone's
    word table itself (tied), as in fairseq and Hugging Face (`lm_head.decoder`).

    Args:
        backbone: RobertaBackbone (or any backbone with inputs token_ids/padding_mask, a
            sequence_output and a `token_embedding` ReversibleEmbedding).
        **kwargs: name, trainable.

    Example:
        pretrainer = RobertaPretrainer(untrained_roberta_backbone("roberta_base", num_layers=2))
        outputs = pretrainer({"token_ids": ids, "padding_mask": mask, "masked_lm_positions": pos})
        metrics = roberta_pretrain_loss(outputs, masked_lm_ids, masked_lm_weights)
    """

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        masked_lm_head = tied_masked_lm_head(backbone)

        # === Functional graph ===
        inputs, _, mlm_logits = masked_lm_graph(backbone, masked_lm_head,
                                                ("token_ids", "padding_mask"))
        super().__init__(inputs=inputs, outputs={"mlm_logits": mlm_logits}, **kwargs)

        # === Config ===
        self.backbone = backbone
        self.masked_lm_head = masked_lm_head


def roberta_pretrain_loss(outputs: Dict[str, tf.Tensor], masked_lm_ids, masked_lm_weights,
                          mlm_denominator=None) -> Dict[str, tf.Tensor]:
    """Masked LM loss and accuracy of one (per-replica) batch, in plain TF ops.

    loss = sum(w * nll) / (sum(w) + 1e-5) over the [B, P] predictions, exactly BERT's MLM term
    (padding predictions with w = 0 count nothing; no prediction at all gives 0, not NaN).
    Runs inside `strategy.run` (no Keras metric objects).

    Args:
        outputs: dict with "mlm_logits" float [B, P, V].
        masked_lm_ids: int [B, P], the original ids at the masked positions.
        masked_lm_weights: float [B, P], 1.0 for real predictions, 0.0 for padding.
        mlm_denominator: optional float scalar replacing sum(w) + 1e-5 (the trainer's share
            of the global weight sum, so the loss is the global mean however the batch is split).

    Returns:
        dict of float32 scalars: loss (= mlm_loss), mlm_loss, mlm_accuracy.
    """
    return with_total_loss(masked_lm_metrics(outputs["mlm_logits"], masked_lm_ids,
                                             masked_lm_weights, mlm_denominator), mlm=1.0)
