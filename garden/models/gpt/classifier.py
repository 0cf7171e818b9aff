"""GPT's fine-tuning model (Radford et al., 2018, section 3.2): the final hidden state of the
LAST real token -> dropout -> linear layer; the auxiliary LM loss reads the same states.

    h = backbone(token_ids, padding_mask)["sequence_output"]          [B, T, H]
    logits = W Dropout(h[b, last_b]),  last_b = the last position with padding_mask 1

The last position is found from the mask (right or left padding alike). The model also outputs
sequence_output so that the task computes the LM logits through the backbone's tied table
(`backbone.output_table()`), keeping this a plain functional model that
garden.serving.classification.ClassificationServing exports like SequenceClassifier.
"""

from __future__ import annotations

import keras
from keras import ops

from garden.layers.embeddings import truncated_normal
from garden.models.backbone import backbone_inputs, input_names
from garden.models.pretrainer import PretrainerConfig


def last_positions(padding_mask):
    """int32 [B]: the index of each row's last real token (0 for an all-padding row)."""
    mask = ops.cast(padding_mask, "int32")
    index = ops.cumsum(ops.ones_like(mask), axis=1) - 1  # 0..T-1, also for a symbolic T
    return ops.max(mask * index, axis=1)


@keras.saving.register_keras_serializable(package="garden")
class LastTokenClassifier(PretrainerConfig, keras.Model):
    """A decoder backbone's last-token state -> dropout -> dense (GPT fine-tuning).

    Inputs (dict, int32 [B, T]): token_ids, padding_mask.
    Outputs (dict): logits float32 [B, num_classes]; sequence_output [B, T, H].

    Args:
        backbone: a decoder backbone with dict inputs token_ids, padding_mask and output
            sequence_output (GPTBackbone, GPT3Backbone).
        num_classes: int (1 for regression).
        dropout: float, on the last-token state (0.1, the paper's clf_pdrop).
        **kwargs: name, trainable.

    Example:
        clf = LastTokenClassifier(GPTBackbone.untrained("gpt_tiny", vocab_size=1000), 2)
        logits = clf({"token_ids": ids, "padding_mask": mask})["logits"]
    """

    config_attributes = ("num_classes", "dropout")

    def __init__(self, backbone, num_classes: int = 2, dropout: float = 0.1, **kwargs):
        # === Layers ===
        dropout_layer = keras.layers.Dropout(dropout, dtype=backbone.dtype_policy,
                                             name="classifier_dropout")
        classifier_dense = keras.layers.Dense(  # float32: the logits feed a softmax
            num_classes, kernel_initializer=truncated_normal(0.02), dtype="float32",
            name="classifier_dense")

        # === Functional graph ===
        inputs = backbone_inputs(input_names(backbone))
        hidden = backbone(inputs)["sequence_output"]
        last = last_positions(inputs["padding_mask"])
        features = ops.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]
        logits = classifier_dense(dropout_layer(features))
        super().__init__(inputs=inputs, outputs={"logits": logits, "sequence_output": hidden},
                         **kwargs)

        # === Config === (get_config: PretrainerConfig, backbone + config_attributes)
        self.backbone = backbone
        self.num_classes = int(num_classes)
        self.dropout = float(dropout)
        self.classifier_dropout = dropout_layer
        self.classifier_dense = classifier_dense

