"""Sequence (and sequence-pair) classification head: GLUE-style fine-tuning.

OBJECTIVES.md section 12: [CLS] A [SEP] (B [SEP]) -> backbone pooled output -> dropout 0.1 ->
dense(num_classes). Regression (STS-B) is num_classes=1 with an MSE loss on the logit.
"""

from __future__ import annotations

import keras

from garden.layers.embeddings import truncated_normal


@keras.saving.register_keras_serializable(package="garden")
class SequenceClassifier(keras.Model):
    """A backbone's pooled output -> dropout -> dense, as BERT fine-tunes on GLUE
    (Devlin et al., 2019, section 4.1).

    Inputs (dict, int32 [B, T]): token_ids, segment_ids, padding_mask.
    Outputs (dict): logits float32 [B, num_classes] (softmax not applied).

    Args:
        backbone: a backbone with those inputs and a "pooled_output" output (e.g. BertBackbone).
        num_classes: int, number of labels (1 for regression).
        dropout: float, dropout on the pooled output (0.1).
        **kwargs: name, trainable.

    Example:
        clf = SequenceClassifier(bert_backbone_from_preset("bert_tiny", vocab_size=1000), num_classes=2)
        logits = clf({"token_ids": ids, "segment_ids": seg, "padding_mask": mask})["logits"]
        loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    """

    def __init__(self, backbone, num_classes: int = 2, dropout: float = 0.1, **kwargs):
        # === Layers ===
        dtype = backbone.dtype_policy
        dropout_layer = keras.layers.Dropout(dropout, dtype=dtype, name="classifier_dropout")
        # float32 whatever the policy: the logits feed a softmax cross-entropy.
        classifier_dense = keras.layers.Dense(
            num_classes, kernel_initializer=truncated_normal(0.02), dtype="float32",
            name="classifier_dense")

        # === Functional graph ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in ("token_ids", "segment_ids", "padding_mask")
        }
        pooled = backbone(inputs)["pooled_output"]
        logits = classifier_dense(dropout_layer(pooled))
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)

        # === Config ===
        self.backbone = backbone
        self.num_classes = int(num_classes)
        self.dropout = float(dropout)
        self.classifier_dropout = dropout_layer
        self.classifier_dense = classifier_dense

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "backbone": keras.layers.serialize(self.backbone),
                "num_classes": self.num_classes, "dropout": self.dropout}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.layers.deserialize(config["backbone"])
        return cls(**config)
