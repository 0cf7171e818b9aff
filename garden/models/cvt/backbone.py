"""Cross-View Training's encoder (Clark et al. 2018, "Semi-Supervised Sequence Modeling with
Cross-View Training"): word embeddings -> a stack of bidirectional LSTM layers.

    token_ids -> embedding -> dropout -> layer 1: forward and backward LSTMs (their outputs
    first_forward, first_backward) -> [f1; b1] -> layer 2 ... -> sequence_output = [f_L; b_L],
    pooled_output = its mean over the real tokens.

The auxiliary prediction modules of CVT read the first layer's two directions separately
(garden.models.cvt.tagger): above it each direction has seen the other.

With output_hidden_states=True, hidden_states [L + 1, B, T, H_max] for garden.bertology and
feature-based tagging: index 0 the word vectors (the embedding's output, before dropout), index
i the i-th layer's [f_i; b_i] (hidden_states[-1] is sequence_output's value). The widths differ
(the paper's: 300, 2 x 1024, 2 x 512), so each is zero-padded on the last axis to the widest
(H_max = 2048 there) before stacking. Zeros add nothing to a dot product or a norm, so cosine
similarities, norms and singular values are those of the unpadded vectors, and a linear probe
gains nothing from them (a constant column; StandardScaler leaves a zero-variance column at
zero). Slice hidden_states[i, ..., :width_i] for the layer's own vectors.
"""

from __future__ import annotations

from typing import Sequence

import keras
from keras import ops

from garden.layers.recurrent import ProjectedLSTM, stacked_states
from garden.models.backbone import Backbone, backbone_inputs
from garden.models.instrument import Readout


@keras.saving.register_keras_serializable(package="garden")
class CvtBackbone(Backbone):
    """CVT's BiLSTM encoder (module docstring).

    Args:
        vocab_size: int.
        embedding_size: word vectors (300: the paper's GloVe size).
        layer_units: units per direction of each BiLSTM layer ((1024, 512): the paper's
            sequence tagging encoder).
        dropout: on the embeddings and between layers in training (0.5, the paper's).
        output_hidden_states: add `hidden_states` [L + 1, B, T, H_max], every layer
            zero-padded to the widest (module docstring); off, the graph is the plain encoder.
        dtype: None, str or keras.DTypePolicy.

    Example:
        backbone = CvtBackbone(vocab_size=1000, embedding_size=32, layer_units=(48, 32))
    """

    presets_module = "garden.models.cvt.presets"
    readout = Readout(None, "0: the word vectors (before dropout); 1..L: the biLSTM layers "
                      "[forward; backward]; each zero-padded on the last axis to the widest "
                      "(zeros change no cosine similarity, norm, singular value or linear "
                      "probe: they add nothing to dot products or norms)",
                      no_attention="CVT has no attention: its layers are LSTMs, which read the "
                                   "sequence in order", blocks="")

    def __init__(self, vocab_size: int, embedding_size: int = 300,
                 layer_units: Sequence[int] = (1024, 512), dropout: float = 0.5,
                 output_hidden_states: bool = False, dtype=None, **kwargs):
        # === Layers ===
        embeddings = keras.layers.Embedding(vocab_size, embedding_size, dtype=dtype,
                                            name="embeddings")
        drop = keras.layers.Dropout(dropout, dtype=dtype, name="dropout")
        layers = [(ProjectedLSTM(units, dtype=dtype, name=f"lstm_layer_{i}_forward"),
                   ProjectedLSTM(units, go_backwards=True, dtype=dtype,
                                 name=f"lstm_layer_{i}_backward"))
                  for i, units in enumerate(layer_units)]
        # === Functional graph ===
        inputs = backbone_inputs(("token_ids", "padding_mask"))
        mask = inputs["padding_mask"]
        x = embeddings(inputs["token_ids"])
        firsts, states = None, [x]
        for forward, backward in layers:
            h = drop(x)
            f, b = forward(h, padding_mask=mask), backward(h, padding_mask=mask)
            firsts = firsts or (f, b)
            x = ops.concatenate([f, b], axis=-1)
            states.append(x)
        real = ops.cast(mask, x.dtype)[:, :, None]
        pooled = ops.sum(x * real, axis=1) / ops.maximum(ops.sum(real, axis=1), 1.0)
        outputs = {"sequence_output": x, "pooled_output": pooled, "first_forward": firsts[0],
                   "first_backward": firsts[1]}
        if output_hidden_states:
            outputs["hidden_states"] = stacked_states(states)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        self.embeddings = embeddings

    @property
    def token_embedding(self) -> keras.layers.Embedding:
        return self.embeddings

    def layer_groups(self):
        """Backbone.layer_groups: the word table, each layer's two directions."""
        return [[self.embeddings], *[[self.get_layer(f"lstm_layer_{i}_{direction}")
                                      for direction in ("forward", "backward")]
                                     for i in range(len(self.layer_units))]]
