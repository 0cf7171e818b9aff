"""The recurrent layers of the models before the Transformer (ELMo, ULMFiT, CoVe, CVT).

    ProjectedLSTM        one LSTM layer over [batch, time, features]: optional projection of
                         the state (LSTMP, ELMo's 4096 cells -> 512), cell and projection
                         clipping (ELMo: 3), DropConnect on the hidden-to-hidden weights
                         (AWD-LSTM), padding held (a padded step keeps the state), either
                         direction (backward: each sequence reversed within its length)
    VariationalDropout   one dropout mask per sequence, the same at every time step (Gal &
                         Ghahramani 2016; AWD-LSTM's "locked" dropout)
    RowDroppedEmbedding  an Embedding whose rows (whole words) are dropped in training, the
                         kept rows scaled by 1 / (1 - rate) (AWD-LSTM's embedding dropout)
    ScalarMix            gamma * sum_j softmax(w)_j h_j over a model's layers (ELMo; w = 0 and
                         gamma = 1 at initialisation: the plain mean)

Keras' LSTM layer has neither projection, clipping nor a weight mask drawn once per sequence
(its recurrent_dropout masks the state, per step), so ProjectedLSTM runs its own tf.scan over
time; the gate order is Keras' and AllenNLP's (input, forget, cell, output).
"""

from __future__ import annotations

from typing import Optional, Sequence

import keras
import tensorflow as tf
from keras import ops


@keras.saving.register_keras_serializable(package="garden")
class ProjectedLSTM(keras.layers.Layer):
    """One LSTM layer, optionally projected, clipped and with DropConnect (module docstring).

        z_t = x_t W + h_(t-1) U' + b,   U' = U * Bernoulli(1 - p) / (1 - p) in training
        i, f, g, o = sigmoid(z_i), sigmoid(z_f), tanh(z_g), sigmoid(z_o)
        c_t = clip(f c_(t-1) + i g, cell_clip)
        h_t = clip((o tanh(c_t)) P, projection_clip)          (P: the projection, if any)

    U' is drawn once per call (one mask for the whole batch and sequence, as AWD-LSTM's
    WeightDrop does); outside training U' = U.

    Args:
        units: cells.
        projection_size: width of the projected state h (None: h = o tanh(c), width units).
        cell_clip, projection_clip: clip values (None: none).
        recurrent_dropconnect: p, the rate of DropConnect on U.
        go_backwards: read each sequence from its last real step to its first; the outputs
            are put back in input order.
        unit_forget_bias: forget-gate bias initialised to 1.

    Call: inputs [B, T, D], padding_mask [B, T] (1 = real; optional, right padding),
    training. Returns [B, T, projection_size or units], zero at padded steps.

    Example:
        lstm = ProjectedLSTM(4096, projection_size=512, cell_clip=3.0, projection_clip=3.0)
        h = lstm(x, padding_mask=mask)      # [B, T, 512]
    """

    def __init__(self, units: int, projection_size: Optional[int] = None,
                 cell_clip: Optional[float] = None, projection_clip: Optional[float] = None,
                 recurrent_dropconnect: float = 0.0, go_backwards: bool = False,
                 unit_forget_bias: bool = True, kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= recurrent_dropconnect < 1.0:
            raise ValueError(f"recurrent_dropconnect={recurrent_dropconnect}: need 0 <= p < 1")
        self.units, self.projection_size = int(units), projection_size
        self.cell_clip, self.projection_clip = cell_clip, projection_clip
        self.recurrent_dropconnect = float(recurrent_dropconnect)
        self.go_backwards, self.unit_forget_bias = bool(go_backwards), bool(unit_forget_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer)

    @property
    def state_size(self) -> int:
        return self.projection_size or self.units

    def build(self, input_shape):
        u = self.units
        self.kernel = self.add_weight(name="kernel", shape=(input_shape[-1], 4 * u),
                                      initializer=self.kernel_initializer)
        self.recurrent_kernel = self.add_weight(name="recurrent_kernel",
                                                shape=(self.state_size, 4 * u),
                                                initializer=self.recurrent_initializer)

        def bias_init(shape, dtype=None):
            bias = ops.zeros(shape, dtype=dtype)
            if self.unit_forget_bias:
                bias = ops.concatenate([ops.zeros((u,)), ops.ones((u,)), ops.zeros((2 * u,))])
            return ops.cast(bias, dtype or "float32")

        self.bias = self.add_weight(name="bias", shape=(4 * u,), initializer=bias_init)
        if self.projection_size:
            self.projection_kernel = self.add_weight(
                name="projection_kernel", shape=(u, self.projection_size),
                initializer=self.kernel_initializer)
        self.built = True

    def recurrent_weights(self, training: bool = False):
        """U' of this call: U with DropConnect in training, U otherwise."""
        if training and self.recurrent_dropconnect > 0:
            return tf.nn.dropout(self.recurrent_kernel, rate=self.recurrent_dropconnect)
        return ops.convert_to_tensor(self.recurrent_kernel)

    def call(self, inputs, padding_mask=None, training=False):
        x = ops.cast(inputs, self.compute_dtype)
        batch, steps = tf.shape(x)[0], tf.shape(x)[1]
        mask = (tf.ones([batch, steps], x.dtype) if padding_mask is None
                else ops.cast(padding_mask, x.dtype))
        lengths = tf.cast(tf.reduce_sum(mask, axis=1), tf.int32)
        if self.go_backwards:
            x = tf.reverse_sequence(x, lengths, seq_axis=1, batch_axis=0)
        projected = tf.einsum("btd,dg->tbg", x, self.kernel) + self.bias  # time-major
        recurrent = self.recurrent_weights(training)
        zeros = tf.zeros([batch, self.units], x.dtype)
        state = (tf.zeros([batch, self.state_size], x.dtype), zeros)
        h, _ = tf.scan(lambda s, e: self._step(s, e, recurrent),
                       (projected, tf.transpose(mask)[:, :, None]), initializer=state)
        outputs = tf.transpose(h, [1, 0, 2]) * mask[:, :, None]
        if self.go_backwards:
            outputs = tf.reverse_sequence(outputs, lengths, seq_axis=1, batch_axis=0)
        return outputs

    def _step(self, state, elements, recurrent):
        h, c = state
        z, keep = elements
        i, f, g, o = tf.split(z + tf.matmul(h, recurrent), 4, axis=-1)
        c_new = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        if self.cell_clip is not None:
            c_new = tf.clip_by_value(c_new, -self.cell_clip, self.cell_clip)
        h_new = tf.sigmoid(o) * tf.tanh(c_new)
        if self.projection_size:
            h_new = tf.matmul(h_new, self.projection_kernel)
            if self.projection_clip is not None:
                h_new = tf.clip_by_value(h_new, -self.projection_clip, self.projection_clip)
        # A padded step keeps the state (right padding: nothing real follows it anyway).
        return keep * h_new + (1 - keep) * h, keep * c_new + (1 - keep) * c

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.state_size)

    def get_config(self):
        return {**super().get_config(), "units": self.units,
                "projection_size": self.projection_size, "cell_clip": self.cell_clip,
                "projection_clip": self.projection_clip,
                "recurrent_dropconnect": self.recurrent_dropconnect,
                "go_backwards": self.go_backwards, "unit_forget_bias": self.unit_forget_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "recurrent_initializer":
                    keras.initializers.serialize(self.recurrent_initializer)}


@keras.saving.register_keras_serializable(package="garden")
class VariationalDropout(keras.layers.Dropout):
    """Dropout of [B, T, D] with one mask per sequence: the same features are dropped at every
    time step (noise shape [B, 1, D])."""

    def __init__(self, rate: float, **kwargs):
        kwargs.pop("noise_shape", None)
        super().__init__(rate, noise_shape=(None, 1, None), **kwargs)


@keras.saving.register_keras_serializable(package="garden")
class RowDroppedEmbedding(keras.layers.Embedding):
    """An Embedding whose rows are dropped in training: each call draws one keep/drop per row
    of the table (a word dropped is zero wherever it occurs in the batch), kept rows scaled by
    1 / (1 - row_dropout). Outside training: the plain Embedding.

    Example:
        embed = RowDroppedEmbedding(30000, 400, row_dropout=0.1)
    """

    def __init__(self, input_dim: int, output_dim: int, row_dropout: float = 0.0, **kwargs):
        super().__init__(input_dim, output_dim, **kwargs)
        if not 0.0 <= row_dropout < 1.0:
            raise ValueError(f"row_dropout={row_dropout}: need 0 <= rate < 1")
        self.row_dropout = float(row_dropout)

    def call(self, inputs, training=False):
        if not training or self.row_dropout == 0:
            return super().call(inputs)
        table = ops.convert_to_tensor(self.embeddings)
        keep = tf.nn.dropout(tf.ones([tf.shape(table)[0], 1], table.dtype),
                             rate=self.row_dropout)
        return ops.cast(tf.gather(table * keep, ops.cast(inputs, "int32")), self.compute_dtype)

    def compute_output_spec(self, inputs, training=False):
        return super().compute_output_spec(inputs)

    def get_config(self):
        return {**super().get_config(), "row_dropout": self.row_dropout}


@keras.saving.register_keras_serializable(package="garden")
class ScalarMix(keras.layers.Layer):
    """ELMo's task-specific mix of a model's layers: gamma * sum_j softmax(w)_j h_j, with w = 0
    and gamma = 1 at initialisation (the mean of the layers). Works on any backbone's
    hidden_states list (BERT's included).

    Example:
        mix = ScalarMix(num_layers=3)
        features = mix([h0, h1, h2])        # [B, T, D]
    """

    def __init__(self, num_layers: int, **kwargs):
        super().__init__(**kwargs)
        self.num_layers = int(num_layers)

    def build(self, input_shape):
        self.layer_weights = self.add_weight(name="layer_weights", shape=(self.num_layers,),
                                             initializer="zeros")
        self.gamma = self.add_weight(name="gamma", shape=(), initializer="ones")
        self.built = True

    def call(self, layers: Sequence):
        if len(layers) != self.num_layers:
            raise ValueError(f"ScalarMix of {self.num_layers} layers called on {len(layers)}")
        shares = ops.softmax(self.layer_weights)
        mixed = sum(shares[j] * ops.cast(h, self.compute_dtype) for j, h in enumerate(layers))
        return self.gamma * mixed

    def compute_output_shape(self, input_shape):
        return input_shape[0]

    def get_config(self):
        return {**super().get_config(), "num_layers": self.num_layers}


@keras.saving.register_keras_serializable(package="garden")
class ConcatPooling(keras.layers.Layer):
    """ULMFiT's classifier input: [h_T, maxpool(H), meanpool(H)] over each sequence's real
    steps (Howard & Ruder 2018, section 3.3), [B, T, D] + padding_mask [B, T] -> [B, 3D]."""

    def call(self, sequence, padding_mask):
        mask = ops.cast(padding_mask, sequence.dtype)[:, :, None]
        lengths = ops.cast(ops.sum(padding_mask, axis=1), "int32")
        last = ops.take_along_axis(
            sequence, ops.maximum(lengths - 1, 0)[:, None, None], axis=1)[:, 0, :]
        lowest = ops.cast(ops.min(sequence), sequence.dtype) - 1
        maximum = ops.max(sequence * mask + (1 - mask) * lowest, axis=1)
        mean = ops.sum(sequence * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1)
        return ops.concatenate([last, maximum, mean], axis=-1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], 3 * input_shape[-1])


def stacked_states(states: Sequence) -> "keras.KerasTensor":
    """Layer states [B, T, H_i] of different widths as one hidden_states tensor
    [L + 1, B, T, max H_i]: each zero-padded on the last axis to the widest. Zeros add nothing
    to a dot product or a norm, so what the analyses compute per layer (cosines, norms,
    singular values, linear probes) is that of the layer's own vectors."""
    widest = max(state.shape[-1] for state in states)
    return ops.stack([ops.pad(state, [[0, 0], [0, 0], [0, widest - state.shape[-1]]])
                      for state in states], axis=0)
