"""T5's relative position bias: one learned scalar per head and distance bucket, added to the
attention scores (Raffel et al., 2020, section 2.1; Shaw et al., 2018)."""

from __future__ import annotations

import math

import keras
from keras import ops


def relative_position_buckets(relative_position, bidirectional: bool = True,
                              num_buckets: int = 32, max_distance: int = 128):
    """Key position - query position (int tensor) -> bucket ids in [0, num_buckets).

    Mesh TensorFlow's scheme as T5 checkpoints were trained with it: with `bidirectional`
    (encoders) half the buckets are for keys after the query, half for keys before; within
    each half, distances below half its buckets get one bucket each, larger ones share
    log-spaced buckets up to max_distance, and everything beyond goes to the last bucket.
    Decoders (bidirectional=False) see no later keys, so those all map to bucket 0.
    With the defaults (32, 128, bidirectional): distances 0..7 -> buckets 0..7 (16..23 for
    later keys), 8..127 share buckets 8..15, 128 and beyond -> 15 (31).
    """
    relative_position = ops.cast(relative_position, "int32")
    if bidirectional:
        num_buckets //= 2
        half = ops.where(relative_position > 0, num_buckets, 0)
        distance = ops.abs(relative_position)
    else:
        half = 0
        distance = ops.maximum(-relative_position, 0)
    exact = num_buckets // 2
    # Clamped at 1 so that log never sees 0 (those distances take the exact branch anyway).
    log_ratio = ops.log(ops.maximum(ops.cast(distance, "float32"), 1.0) / exact)
    large = exact + ops.cast(log_ratio / math.log(max_distance / exact) * (num_buckets - exact),
                             "int32")
    large = ops.minimum(large, num_buckets - 1)
    return half + ops.where(distance < exact, distance, large)


@keras.saving.register_keras_serializable(package="garden")
class RelativePositionBias(keras.layers.Layer):
    """The [1, A, Tq, Tk] additive attention bias of T5, for MultiHeadAttention's
    `attention_bias` (T5 computes it in the first layer of each stack and reuses it).

    Args:
        num_heads: int, A.
        num_buckets: int (T5: 32).
        max_distance: int (T5: 128).
        bidirectional: bool, True for an encoder, False for a (causal) decoder.
        embeddings_initializer: for the [num_buckets, A] table.
        **kwargs: name, dtype, trainable.

    Call args:
        query_length, key_length: int or int scalar tensors, Tq and Tk (by keyword: Keras
            takes only tensors positionally).
        offset: int or int scalar tensor, the position of the first query (the KV cache's
            update index when decoding step by step); keys are at 0..Tk-1.

    Example:
        bias = RelativePositionBias(num_heads=8, bidirectional=False)
        b = bias(query_length=16, key_length=16)  # [1, 8, 16, 16], for attention_bias=b
    """

    def __init__(self, num_heads: int, num_buckets: int = 32, max_distance: int = 128,
                 bidirectional: bool = True, embeddings_initializer="uniform", **kwargs):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.num_buckets = int(num_buckets)
        self.max_distance = int(max_distance)
        self.bidirectional = bool(bidirectional)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, *args):
        self.embeddings = self.add_weight(name="embeddings",
                                          shape=(self.num_buckets, self.num_heads),
                                          initializer=self.embeddings_initializer)
        self.built = True

    def call(self, query_length, key_length, offset=0):
        queries = ops.arange(query_length, dtype="int32") + ops.cast(offset, "int32")
        keys = ops.arange(key_length, dtype="int32")
        relative = ops.expand_dims(keys, 0) - ops.expand_dims(queries, 1)  # [Tq, Tk]
        buckets = relative_position_buckets(relative, self.bidirectional, self.num_buckets,
                                            self.max_distance)
        bias = ops.take(self.embeddings, buckets, axis=0)  # [Tq, Tk, A]
        return ops.expand_dims(ops.transpose(bias, (2, 0, 1)), 0)

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, num_buckets=self.num_buckets,
                      max_distance=self.max_distance, bidirectional=self.bidirectional,
                      embeddings_initializer=keras.initializers.serialize(
                          self.embeddings_initializer))
        return config
