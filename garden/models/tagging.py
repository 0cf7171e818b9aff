"""The tagging kind's model (CoNLL-2003 NER) on any encoder backbone, fine-tuned or
feature-based.

Fine-tuned (Devlin et al., 2019, section 4.3): sequence output -> dropout -> dense(num_labels)
per token; the task scores each word's first sub-token.

Feature-based (the paper's table 7): the backbone is frozen (not trainable, run in inference
mode) and its last `feature_layers` hidden states (backbone output `hidden_states`, built with
output_hidden_states=True) are concatenated per token; optionally a bidirectional LSTM
(`lstm_units` per direction) runs over them before the dense layer. The paper's best
feature-based setting concatenates the last four layers into a two-layer 768-unit BiLSTM
(96.1 dev F1 against 96.4 fine-tuned); here one BiLSTM layer is the option.
"""

from __future__ import annotations

import keras
from keras import ops

from garden.layers.embeddings import truncated_normal
from garden.layers.recurrent import ScalarMix
from garden.models.backbone import backbone_inputs, input_names
from garden.models.pretrainer import PretrainerConfig


@keras.saving.register_keras_serializable(package="garden")
class TokenTagger(PretrainerConfig, keras.Model):
    """A backbone's per-token states -> dropout -> dense(num_labels).

    Inputs (dict, int32 [B, T]): the backbone's own inputs (token_ids, padding_mask, and
        segment_ids for the families that have them).
    Outputs (dict): logits float32 [B, T, num_labels].

    Args:
        backbone: a backbone with dict inputs and a "sequence_output" output; with
            feature_layers > 0 also "hidden_states" (build it with output_hidden_states=True).
        num_labels: int, number of tags.
        dropout: float, dropout before the dense layer (0.1).
        feature_layers: 0 fine-tunes the backbone; k > 0 freezes it and concatenates its last
            k hidden states (4 in the BERT paper).
        lstm_units: with feature_layers, a BiLSTM of this many units per direction over the
            concatenated features (0: none).
        scalar_mix: with feature_layers, ELMo's task-trained mix of those layers
            (garden.layers.recurrent.ScalarMix: gamma * softmax(w) weighted sum) instead of
            their concatenation.

    Example:
        tagger = TokenTagger(untrained_bert_backbone("bert_tiny", vocab_size=1000), 9)
        logits = tagger({"token_ids": ids, "segment_ids": seg, "padding_mask": mask})["logits"]
        loss only where labels >= 0 (the first sub-token of each word)
    """

    config_attributes = ("num_labels", "dropout", "feature_layers", "lstm_units", "scalar_mix")

    def __init__(self, backbone, num_labels: int, dropout: float = 0.1, feature_layers: int = 0,
                 lstm_units: int = 0, scalar_mix: bool = False, **kwargs):
        # === Layers ===
        dtype = backbone.dtype_policy
        family = backbone.family() if hasattr(backbone, "family") else type(backbone).__name__
        outputs = backbone.output if isinstance(backbone.output, dict) else {}
        if "sequence_output" not in outputs:
            raise ValueError(f"a token tagger reads an encoder's per-token sequence_output; the "
                             f"{family} backbone ({type(backbone).__name__}) gives "
                             f"{sorted(outputs)}: tag with an encoder family")
        if feature_layers:
            if "hidden_states" not in outputs:
                raise ValueError(f"feature_layers={feature_layers} needs the backbone's "
                                 f"hidden_states: build {backbone.name} with "
                                 f"output_hidden_states=True")
            available = outputs["hidden_states"].shape[0]
            if available is not None and not 0 < feature_layers <= available:
                raise ValueError(f"feature_layers={feature_layers}: the {family} backbone gives "
                                 f"{available} hidden states (the embeddings and "
                                 f"{available - 1} layers); choose 1 to {available}")
            backbone.trainable = False
        if (lstm_units or scalar_mix) and not feature_layers:
            raise ValueError("lstm_units and scalar_mix are options of the feature-based tagger "
                             "(feature_layers > 0)")
        mix = ScalarMix(feature_layers, name="scalar_mix") if scalar_mix else None
        lstm = (keras.layers.Bidirectional(keras.layers.LSTM(lstm_units, return_sequences=True),
                                           name="tagger_bilstm") if lstm_units else None)
        dropout_layer = keras.layers.Dropout(dropout, dtype=dtype, name="tagger_dropout")
        # float32 whatever the policy: the logits feed a softmax cross-entropy.
        dense = keras.layers.Dense(num_labels, kernel_initializer=truncated_normal(0.02),
                                   dtype="float32", name="tagger_dense")

        # === Functional graph ===
        inputs = backbone_inputs(input_names(backbone))
        if feature_layers:
            # Frozen and in inference mode (no dropout inside): the features of a frozen model.
            states = backbone(inputs, training=False)["hidden_states"]  # [L+1, B, T, H]
            layers = [states[-k] for k in range(feature_layers, 0, -1)]
            x = mix(layers) if mix is not None else ops.concatenate(layers, axis=-1)
            if lstm is not None:
                x = lstm(x, mask=ops.cast(inputs["padding_mask"], "bool"))
        else:
            x = backbone(inputs)["sequence_output"]
        logits = dense(dropout_layer(x))
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)

        # === Config === (get_config: PretrainerConfig, backbone + config_attributes)
        self.backbone = backbone
        self.num_labels, self.dropout = int(num_labels), float(dropout)
        self.feature_layers, self.lstm_units = int(feature_layers), int(lstm_units)
        self.scalar_mix = bool(scalar_mix)
        self.tagger_dense = dense
