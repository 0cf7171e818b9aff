"""CoVe's pretraining model: the MT-LSTM of McCann et al. (2017, section 3), an attentional
encoder-decoder whose encoder is a CoveBackbone.

    H = CoVe(source)                                   [B, S, 2U] (cove_output)
    h_t = LSTM^dec(z_(t-1), h_(t-1))                   decoder_layers unidirectional LSTMs
    alpha_t = softmax(H (W1 h_t + b1))                 over the real source tokens
    h~_t = tanh(W2 [H^T alpha_t; h_t] + b2)
    p(y_t | y_<t, source) = softmax(W_out h~_t + b_out)

One simplification, stated: the paper's decoder also reads the previous step's h~ (input
feeding); here it reads only the previous target word, so that teacher-forced training runs
each LSTM over the whole target at once (Luong et al.'s attention without input feeding).
The target words have their own table (decoder_embeddings): in translation the target is
another language, although the garden's pair tasks share one vocabulary file.

Inputs: token_ids, padding_mask (the source, as the backbone reads it), decoder_token_ids and
decoder_padding_mask (the target shifted right: [CLS] y). Outputs: {"logits": float32
[B, T, V]}, position t scoring target token t + 1.
"""

from __future__ import annotations

from typing import Optional

import keras
from keras import ops

from garden.layers.attention import softmax_in_float32
from garden.layers.recurrent import ProjectedLSTM
from garden.models.backbone import backbone_inputs


@keras.saving.register_keras_serializable(package="garden")
class CoveAttention(keras.layers.Layer):
    """h~ = tanh(W2 [H^T softmax(H (W1 h + b1)); h] + b2) (module docstring), the softmax over
    the real source positions only.

    Call: decoder_states [B, T, D], encoder_states [B, S, W], encoder_mask [B, S] -> [B, T, units].
    """

    def __init__(self, units: int, encoder_width: int, **kwargs):
        super().__init__(**kwargs)
        self.units, self.encoder_width = int(units), int(encoder_width)
        self.query = keras.layers.Dense(self.encoder_width, name="query")
        self.combine = keras.layers.Dense(self.units, activation="tanh", name="combine")

    def call(self, decoder_states, encoder_states, encoder_mask):
        scores = ops.einsum("btw,bsw->bts", self.query(decoder_states), encoder_states)
        real = ops.cast(encoder_mask, scores.dtype)[:, None, :]
        alpha = softmax_in_float32(scores + (1.0 - real) * -1e9)
        context = ops.einsum("bts,bsw->btw", alpha, encoder_states)
        return self.combine(ops.concatenate([context, decoder_states], axis=-1))

    def compute_output_shape(self, decoder_shape, *_):
        return (*decoder_shape[:-1], self.units)

    def get_config(self):
        return {**super().get_config(), "units": self.units, "encoder_width": self.encoder_width}


class CoveTranslator(keras.Model):
    """backbone (the CoVe encoder) -> attentional LSTM decoder -> softmax (module docstring).

    Args:
        backbone: a CoveBackbone.
        vocab_size: target vocabulary (default: the backbone's).
        decoder_layers: unidirectional LSTM layers (2, as the paper's MT-LSTM).
        decoder_units: their cells (default 2 x the encoder's units: the width of H).
        dropout: on the decoder's inputs and before the softmax (0.2).

    Example:
        model = CoveTranslator(CoveBackbone.untrained("cove_tiny", vocab_size=1000))
    """

    def __init__(self, backbone, vocab_size: Optional[int] = None, decoder_layers: int = 2,
                 decoder_units: Optional[int] = None, dropout: float = 0.2, **kwargs):
        vocab_size = vocab_size or backbone.vocab_size
        width = 2 * backbone.lstm_units
        units = decoder_units or width
        inputs = backbone_inputs(("token_ids", "padding_mask", "decoder_token_ids",
                                  "decoder_padding_mask"))
        table = keras.layers.Embedding(vocab_size, backbone.embedding_size,
                                       name="decoder_embeddings")
        lstms = [ProjectedLSTM(units, name=f"decoder_lstm_{i}") for i in range(decoder_layers)]
        attention = CoveAttention(units, width, name="attention")
        drop = keras.layers.Dropout(dropout, name="decoder_dropout")
        softmax = keras.layers.Dense(vocab_size, dtype="float32", name="softmax")
        encoded = backbone({"token_ids": inputs["token_ids"],
                            "padding_mask": inputs["padding_mask"]})["cove_output"]
        h = table(inputs["decoder_token_ids"])
        for lstm in lstms:
            h = lstm(drop(h), padding_mask=inputs["decoder_padding_mask"])
        attended = attention(h, encoded, inputs["padding_mask"])
        super().__init__(inputs=inputs, outputs={"logits": softmax(drop(attended))}, **kwargs)
        self.backbone, self.vocab_size = backbone, vocab_size
        # Every layer an attribute (checkpoints follow attributes, not Python lists).
        self.decoder_embeddings, self.attention, self.softmax = table, attention, softmax
        for lstm in lstms:
            setattr(self, lstm.name, lstm)
