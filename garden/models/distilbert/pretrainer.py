"""DistilBERT's masked LM head: the student's own MLM output (Sanh et al., 2019).

The same head as BERT's (Hugging Face DistilBertForMaskedLM: vocab_transform -> gelu ->
vocab_layer_norm -> vocab_projector tied to the word table + bias). The distillation objective
that trains it against a teacher lives in distiller.py.
"""

from __future__ import annotations

import keras

from garden.models.pretrainer import Pretrainer, masked_lm_graph, tied_masked_lm_head


@keras.saving.register_keras_serializable(package="garden")
class DistilBertPretrainer(Pretrainer):
    """A DistilBERT backbone with the masked LM head (tied output projection).

    Inputs (dict, int32): token_ids, padding_mask [B, T]; masked_lm_positions [B, P].
    Outputs (dict): mlm_logits float32 [B, P, V]; sequence_output [B, T, H] (the last hidden
    states, which the distillation's cosine loss aligns with the teacher's).

    Args:
        backbone: DistilBertBackbone.
        **kwargs: name, trainable.

    Example:
        student = DistilBertPretrainer(untrained_distilbert_backbone("distilbert_base"))
        out = student({"token_ids": ids, "padding_mask": mask, "masked_lm_positions": positions})
        out["mlm_logits"]  # [B, P, 30522]
    """

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        masked_lm_head = tied_masked_lm_head(backbone)

        # === Functional graph ===
        inputs, backbone_outputs, mlm_logits = masked_lm_graph(
            backbone, masked_lm_head, ("token_ids", "padding_mask"))
        super().__init__(inputs=inputs,
                         outputs={"mlm_logits": mlm_logits,
                                  "sequence_output": backbone_outputs["sequence_output"]},
                         **kwargs)

        # === Config ===
        self.backbone = backbone
        self.masked_lm_head = masked_lm_head
