"""Multiple-choice model (SWAG): each of N (context, ending) pairs scored by one shared head.

docs/tasks.md "Multiple choice: SWAG": inputs [B, N, T] -> folded to [B * N, T] -> backbone
pooled output -> dropout 0.1 -> dense(1) -> unfolded to logits [B, N]; a softmax over the N
choices (in the loss) picks the ending, as BERT's paper scores SWAG (section 4.4).
"""

from __future__ import annotations

import keras

from garden.layers.embeddings import truncated_normal
from garden.models.backbone import input_names
from garden.models.pretrainer import PretrainerConfig


@keras.saving.register_keras_serializable(package="garden")
class FoldChoices(keras.layers.Layer):
    """[B, N, T] -> [B * N, T] (the choices become batch rows)."""

    def call(self, x):
        return keras.ops.reshape(x, (-1, keras.ops.shape(x)[-1]))

    def compute_output_shape(self, input_shape):
        return (None, input_shape[-1])


@keras.saving.register_keras_serializable(package="garden")
class UnfoldChoices(keras.layers.Layer):
    """[B * N, 1] scores -> [B, N] logits."""

    def __init__(self, num_choices: int, **kwargs):
        super().__init__(**kwargs)
        self.num_choices = int(num_choices)

    def call(self, x):
        return keras.ops.reshape(x, (-1, self.num_choices))

    def compute_output_shape(self, input_shape):
        return (None, self.num_choices)

    def get_config(self):
        return {**super().get_config(), "num_choices": self.num_choices}


@keras.saving.register_keras_serializable(package="garden")
class MultipleChoiceModel(PretrainerConfig, keras.Model):
    """A backbone scoring N packed (context, ending) pairs per example.

    Inputs (dict, int32 [B, N, T]): the backbone's own inputs for every choice (token_ids,
        padding_mask, and segment_ids for the families that have them).
    Outputs (dict): logits float32 [B, N] (softmax over the choices not applied).

    Args:
        backbone: a backbone with dict inputs and a "pooled_output" output.
        num_choices: N (4 for SWAG).
        dropout: dropout on the pooled output (0.1).

    Example:
        model = MultipleChoiceModel(untrained_bert_backbone("bert_tiny", vocab_size=1000))
        logits = model({"token_ids": ids, "segment_ids": seg, "padding_mask": mask})["logits"]
        choice = keras.ops.argmax(logits, -1)  # [B]
    """

    config_attributes = ("num_choices", "dropout")

    def __init__(self, backbone, num_choices: int = 4, dropout: float = 0.1, **kwargs):
        # === Layers ===
        dtype = backbone.dtype_policy
        fold = FoldChoices(name="fold_choices")
        dropout_layer = keras.layers.Dropout(dropout, dtype=dtype, name="choice_dropout")
        score = keras.layers.Dense(1, kernel_initializer=truncated_normal(0.02),
                                   dtype="float32", name="choice_dense")
        unfold = UnfoldChoices(num_choices, dtype="float32", name="unfold_choices")

        # === Functional graph ===
        inputs = {name: keras.Input(shape=(num_choices, None), dtype="int32", name=name)
                  for name in input_names(backbone)}
        pooled = backbone({name: fold(x) for name, x in inputs.items()})["pooled_output"]
        logits = unfold(score(dropout_layer(pooled)))
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)

        # === Config === (get_config: PretrainerConfig, backbone + config_attributes)
        self.backbone = backbone
        self.num_choices = int(num_choices)
        self.dropout = float(dropout)
