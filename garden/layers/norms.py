"""Normalization layers beyond Keras' LayerNormalization."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="garden")
class RMSNorm(keras.layers.Layer):
    """Root-mean-square layer norm (Zhang & Sennrich, 2019) as T5 computes it.

        y = x * rsqrt(mean(x^2, last axis) + epsilon) * scale

    No mean subtraction and no bias. The statistics are taken in float32 even under a
    mixed-precision policy (a bfloat16 mean of squares loses the small terms); the normalized
    value is cast back to the compute dtype before the scale, as T5's T5LayerNorm does.

    Args:
        epsilon: float (T5: 1e-6).
        **kwargs: name, dtype, trainable.

    Example:
        norm = RMSNorm(epsilon=1e-6)
        y = norm(keras.ops.ones((2, 5, 16)))  # [2, 5, 16]; weight "scale" [16], ones at init
    """

    def __init__(self, epsilon: float = 1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = float(epsilon)

    def build(self, inputs_shape):
        self.scale = self.add_weight(name="scale", shape=(inputs_shape[-1],),
                                     initializer="ones")
        self.built = True

    def call(self, inputs):
        x = ops.cast(inputs, "float32")
        mean_square = ops.mean(ops.square(x), axis=-1, keepdims=True)
        normalized = ops.cast(x * ops.rsqrt(mean_square + self.epsilon), self.compute_dtype)
        return normalized * ops.cast(self.scale, self.compute_dtype)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(epsilon=self.epsilon)
        return config
