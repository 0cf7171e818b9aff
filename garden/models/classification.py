"""Sequence (and sequence-pair) classification model: GLUE-style fine-tuning of any backbone.

docs/objectives.md section 12: packed text -> backbone pooled output -> dropout 0.1 ->
dense(num_classes). A regression task (STS-B) uses num_classes=1 and trains the one logit with
a squared error (garden.tasks.classification, regression=True).
"""

from __future__ import annotations

import keras

from garden.layers.embeddings import truncated_normal
from garden.models.backbone import backbone_inputs, input_names
from garden.models.pretrainer import PretrainerConfig


@keras.saving.register_keras_serializable(package="garden")
class SequenceClassifier(PretrainerConfig, keras.Model):
    """A backbone's pooled output -> dropout -> dense, as BERT fine-tunes on GLUE
    (Devlin et al., 2019, section 4.1).

    Inputs (dict, int32 [B, T]): the backbone's own inputs (token_ids, padding_mask, and
        segment_ids for the families that have them; RoBERTa has none).
    Outputs (dict): logits float32 [B, num_classes] (softmax not applied).

    Args:
        backbone: a backbone with dict inputs and a "pooled_output" output (e.g. BertBackbone);
            one without (DistilBERT) gets DistilBertForSequenceClassification's head: the first
            token's sequence_output -> pre_classifier Dense(H) + ReLU, then dropout -> dense.
        num_classes: int, number of labels (1 for regression).
        dropout: float, dropout on the pooled output (0.1).
        **kwargs: name, trainable.

    Example:
        clf = SequenceClassifier(untrained_bert_backbone("bert_tiny", vocab_size=1000), num_classes=2)
        logits = clf({"token_ids": ids, "segment_ids": seg, "padding_mask": mask})["logits"]
        loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    """

    config_attributes = ("num_classes", "dropout")

    def __init__(self, backbone, num_classes: int = 2, dropout: float = 0.1, **kwargs):
        # === Layers ===
        dtype = backbone.dtype_policy
        dropout_layer = keras.layers.Dropout(dropout, dtype=dtype, name="classifier_dropout")
        # float32 whatever the policy: the logits feed a softmax cross-entropy.
        classifier_dense = keras.layers.Dense(
            num_classes, kernel_initializer=truncated_normal(0.02), dtype="float32",
            name="classifier_dense")

        # === Functional graph ===
        inputs = backbone_inputs(input_names(backbone))
        outputs = backbone(inputs)
        pre_classifier = None
        if "pooled_output" in outputs:
            pooled = outputs["pooled_output"]
        else:
            # A backbone without a pooler (DistilBERT): Hugging Face's
            # DistilBertForSequenceClassification head, hidden[:, 0] -> pre_classifier
            # Dense(H) + ReLU -> dropout -> classifier (its pre_classifier plays BERT's pooler).
            sequence = outputs["sequence_output"]
            pre_classifier = keras.layers.Dense(
                sequence.shape[-1], activation="relu", kernel_initializer=truncated_normal(0.02),
                dtype=dtype, name="pre_classifier")
            pooled = pre_classifier(sequence[:, 0, :])
        logits = classifier_dense(dropout_layer(pooled))
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)

        # === Config === (get_config: PretrainerConfig, backbone + config_attributes)
        self.backbone = backbone
        self.num_classes = int(num_classes)
        self.dropout = float(dropout)
        self.classifier_dropout = dropout_layer
        self.classifier_dense = classifier_dense
        self.pre_classifier = pre_classifier  # None when the backbone has a pooled_output
        self.input_keys = tuple(inputs)

    def __call__(self, inputs, *args, **kwargs):
        # The "bert" text layout packs segment_ids, which a backbone without token types
        # (DistilBERT) does not take; Keras pairs a dict with extra keys with the inputs by
        # sorted position (only warning), so the keys the model does not take are dropped.
        names = getattr(self, "input_keys", None)
        if names and isinstance(inputs, dict) and set(names) < set(inputs):
            inputs = {k: inputs[k] for k in names}
        return super().__call__(inputs, *args, **kwargs)

