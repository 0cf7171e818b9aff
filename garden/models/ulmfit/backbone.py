"""ULMFiT's encoder: the AWD-LSTM of Merity et al. (2018, "Regularizing and Optimizing LSTM
Language Models") as Howard & Ruder (2018, "Universal Language Model Fine-tuning for Text
Classification") fine-tune it.

    token_ids -> embedding (whole rows dropped, embedding_dropout)
              -> variational dropout (input_dropout, one mask per sequence)
              -> LSTM layer 0 .. L-1 (hidden_size cells; the last has embedding_size, so the
                 LM's softmax can share the embedding table), DropConnect (weight_dropout) on
                 each hidden-to-hidden matrix, variational dropout (hidden_dropout) between
                 layers
    sequence_output [B, T, embedding_size]; pooled_output [B, 3 x embedding_size]: ULMFiT's
    concat pooling [last real step, max, mean] that its classifier reads.

With output_hidden_states=True, hidden_states [L + 1, B, T, H_max] for garden.bertology and
feature-based tagging: index 0 the word vectors (the embedding's output, before the input
dropout), index i the i-th LSTM layer's output (before the dropout between layers;
hidden_states[-1] is sequence_output's value). The widths differ (the paper's: 400, 1152, 1152,
400), so each is zero-padded on the last axis to the widest (H_max = max(embedding_size,
hidden_size)) before stacking. Zeros add nothing to a dot product or a norm, so cosine
similarities, norms and singular values are those of the unpadded vectors, and a linear probe
gains nothing from them (a constant column; StandardScaler leaves a zero-variance column at
zero). Slice hidden_states[i, ..., :width_i] for the layer's own vectors.

The layers are named embeddings and lstm_layer_{i}, which garden.optimization's layer-wise
rates (train.layer_decay = 1 / 2.6: ULMFiT's discriminative fine-tuning) and gradual
unfreezing (train.unfreeze_every) read as depths 0 and i + 1.
"""

from __future__ import annotations

import keras

from garden.layers.recurrent import (ConcatPooling, ProjectedLSTM, RowDroppedEmbedding,
                                     VariationalDropout, stacked_states)
from garden.models.backbone import Backbone, backbone_inputs
from garden.models.instrument import Readout


@keras.saving.register_keras_serializable(package="garden")
class AwdLstmBackbone(Backbone):
    """AWD-LSTM (module docstring); fastai's language-model dropouts by default.

    Args:
        vocab_size: int.
        embedding_size: int, the embedding width and the last layer's cells (400).
        hidden_size: int, the cells of the other layers (1152).
        num_layers: int (3).
        embedding_dropout: share of the table's rows dropped per batch (0.02).
        input_dropout: variational dropout on the embeddings (0.25).
        hidden_dropout: variational dropout between LSTM layers (0.15).
        weight_dropout: DropConnect on the hidden-to-hidden weights (0.2).
        output_hidden_states: add `hidden_states` [L + 1, B, T, H_max], every layer
            zero-padded to the widest (module docstring); off, the graph is the plain encoder.
        dtype: None, str or keras.DTypePolicy.

    The "ulmfit" preset has 44,262,464 parameters with a 60,000-word vocabulary (fastai's
    PyTorch LSTMs count a second bias per layer: 10,816 more).

    Example:
        backbone = AwdLstmBackbone(vocab_size=1000, embedding_size=32, hidden_size=48)
        ids = np.ones((2, 16), "int32")
        out = backbone({"token_ids": ids, "padding_mask": ids})   # pooled_output [2, 96]
    """

    presets_module = "garden.models.ulmfit.presets"
    readout = Readout(None, "0: the word vectors (before dropout); 1..L: the LSTM layers; "
                      "each zero-padded on the last axis to the widest (zeros change no "
                      "cosine similarity, norm, singular value or linear probe: they add "
                      "nothing to dot products or norms)",
                      no_attention="ULMFiT (AWD-LSTM) has no attention: its layers are LSTMs, "
                                   "which read the sequence in order", blocks="",
                      left_to_right=True)

    def __init__(self, vocab_size: int, embedding_size: int = 400, hidden_size: int = 1152,
                 num_layers: int = 3, embedding_dropout: float = 0.02,
                 input_dropout: float = 0.25, hidden_dropout: float = 0.15,
                 weight_dropout: float = 0.2, output_hidden_states: bool = False, dtype=None,
                 **kwargs):
        # === Layers ===
        embeddings = RowDroppedEmbedding(
            vocab_size, embedding_size, row_dropout=embedding_dropout,
            embeddings_initializer=keras.initializers.RandomUniform(-0.1, 0.1), dtype=dtype,
            name="embeddings")
        lstm_layers = [
            ProjectedLSTM(hidden_size if i < num_layers - 1 else embedding_size,
                          recurrent_dropconnect=weight_dropout, dtype=dtype,
                          name=f"lstm_layer_{i}") for i in range(num_layers)]
        input_drop = VariationalDropout(input_dropout, dtype=dtype, name="input_dropout")
        hidden_drops = [VariationalDropout(hidden_dropout, dtype=dtype,
                                           name=f"hidden_dropout_{i}")
                        for i in range(num_layers - 1)]
        # === Functional graph ===
        inputs = backbone_inputs(("token_ids", "padding_mask"))
        mask = inputs["padding_mask"]
        x = embeddings(inputs["token_ids"])
        states = [x]
        x = input_drop(x)
        for i, lstm in enumerate(lstm_layers):
            x = lstm(x, padding_mask=mask)
            states.append(x)
            if i < num_layers - 1:
                x = hidden_drops[i](x)
        pooled = ConcatPooling(dtype=dtype, name="concat_pooling")(x, mask)
        outputs = {"sequence_output": x, "pooled_output": pooled}
        if output_hidden_states:
            outputs["hidden_states"] = stacked_states(states)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        self.embeddings, self.lstm_layers = embeddings, lstm_layers

    @property
    def token_embedding(self) -> keras.layers.Embedding:
        """The word table (the LM's tied softmax weights)."""
        return self.embeddings

    def layer_groups(self):
        """Backbone.layer_groups: ULMFiT's layer groups, the word table and each LSTM layer
        (the concat pooling has no weights): with layer_decay = 1 / 2.6 the top layer learns
        at the head's rate / 2.6, as in the paper."""
        return [[self.embeddings], *[[lstm] for lstm in self.lstm_layers]]
