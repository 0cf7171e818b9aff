"""Input embeddings shared by the encoder families (BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT).

BERT sums three tables -- word pieces, learned absolute positions, token types -- then applies
LayerNorm and dropout. The other families are the same block with a knob turned: RoBERTa and
DistilBERT have one (or no) token type, ALBERT and ELECTRA keep the tables at a small width E and
project to the hidden width H after the LayerNorm. The word table is a
`keras.layers.ReversibleEmbedding` so that the MLM head can reuse it (tied weights) as the output
projection.
"""

from __future__ import annotations

from typing import Optional

import keras
from keras import ops


def truncated_normal(stddev: float = 0.02) -> keras.initializers.Initializer:
    """A fresh TruncatedNormal initializer (mean 0, cut at 2 stddev, like BERT's TF1 code).

    Keras 3 initializers draw their seed once at construction, so one instance shared by two
    layers would give both the same values: every layer gets its own instance from here.
    """
    return keras.initializers.TruncatedNormal(stddev=stddev)


@keras.saving.register_keras_serializable(package="garden")
class PositionEmbedding(keras.layers.Layer):
    """Learned absolute position embeddings (Devlin et al., 2019, section 3).

    Returns the first T rows of a [max_sequence_length, width] table, broadcast over the batch,
    for an input of shape [B, T, ...]. Position i of every sequence gets row i, unless explicit
    `position_ids` [B, T] are given (RoBERTa's padding-offset positions): then those rows.

    Args:
        max_sequence_length: int, number of rows (BERT: 512).
        initializer_range: float, stddev of the truncated normal initializer.
        **kwargs: name, dtype, trainable.

    Example:
        pos = PositionEmbedding(max_sequence_length=512)
        x = keras.ops.zeros((2, 16, 128))
        y = x + pos(x)  # [2, 16, 128]
    """

    def __init__(self, max_sequence_length: int, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.max_sequence_length = int(max_sequence_length)
        self.initializer_range = float(initializer_range)

    def build(self, input_shape):
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_sequence_length, input_shape[-1]),
            initializer=truncated_normal(self.initializer_range),
            trainable=True,
        )
        self.built = True

    def call(self, inputs, position_ids=None):
        shape = ops.shape(inputs)
        seq_len = shape[1]
        table = ops.convert_to_tensor(self.position_embeddings)
        if position_ids is not None:
            return ops.take(table, ops.cast(position_ids, "int32"), axis=0)
        rows = ops.slice(table, (0, 0), (seq_len, shape[-1]))
        return ops.broadcast_to(ops.expand_dims(rows, 0), shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(max_sequence_length=self.max_sequence_length,
                      initializer_range=self.initializer_range)
        return config


@keras.saving.register_keras_serializable(package="garden")
class TransformerEmbeddings(keras.layers.Layer):
    """Word + position + token-type embeddings -> LayerNorm -> dropout (-> projection).

    The embedding block of BERT (Devlin et al., 2019, "BERT: Pre-training of Deep Bidirectional
    Transformers for Language Understanding", figure 2), reused by RoBERTa (type_vocab_size=1),
    DistilBERT (type_vocab_size=0: no token types), ALBERT and ELECTRA (embedding_size E < H: the
    tables are E wide and a dense layer maps E -> H after the dropout, as both originals do).

    Args:
        vocab_size: int, rows of the word-piece table.
        hidden_size: int, width of the output.
        max_sequence_length: int, rows of the position table.
        type_vocab_size: int, rows of the token-type table; 0 for none.
        embedding_size: int or None, width of the tables; None means hidden_size (no projection).
        dropout: float, dropout rate after the LayerNorm.
        initializer_range: float, stddev of the truncated normal initializers.
        layer_norm_epsilon: float, LayerNorm epsilon (BERT: 1e-12).
        **kwargs: name, dtype, trainable.

    Example:
        emb = TransformerEmbeddings(vocab_size=1000, hidden_size=128, max_sequence_length=512)
        ids = keras.ops.ones((2, 16), "int32")
        x = emb(ids, keras.ops.zeros_like(ids))  # [2, 16, 128]
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        max_sequence_length: int = 512,
        type_vocab_size: int = 2,
        embedding_size: Optional[int] = None,
        dropout: float = 0.1,
        initializer_range: float = 0.02,
        layer_norm_epsilon: float = 1e-12,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = int(vocab_size)
        self.hidden_size = int(hidden_size)
        self.max_sequence_length = int(max_sequence_length)
        self.type_vocab_size = int(type_vocab_size)
        self.embedding_size = None if embedding_size is None else int(embedding_size)
        self.dropout = float(dropout)
        self.initializer_range = float(initializer_range)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        width = self.embedding_size or self.hidden_size

        self.token_embedding = keras.layers.ReversibleEmbedding(
            self.vocab_size, width, tie_weights=True,
            embeddings_initializer=truncated_normal(initializer_range),
            dtype=self.dtype_policy, name="token_embedding")
        self.position_embedding = PositionEmbedding(
            self.max_sequence_length, initializer_range,
            dtype=self.dtype_policy, name="position_embedding")
        self.segment_embedding = None
        if self.type_vocab_size > 0:
            self.segment_embedding = keras.layers.Embedding(
                self.type_vocab_size, width,
                embeddings_initializer=truncated_normal(initializer_range),
                dtype=self.dtype_policy, name="segment_embedding")
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm")
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy,
                                                  name="dropout")
        self.projection = None
        if self.embedding_size is not None and self.embedding_size != self.hidden_size:
            self.projection = keras.layers.Dense(
                self.hidden_size, kernel_initializer=truncated_normal(initializer_range),
                dtype=self.dtype_policy, name="projection")

    def build(self, token_ids_shape, segment_ids_shape=None):
        width = self.embedding_size or self.hidden_size
        self.token_embedding.build(token_ids_shape)
        x_shape = tuple(token_ids_shape) + (width,)
        self.position_embedding.build(x_shape)
        if self.segment_embedding is not None:
            self.segment_embedding.build(token_ids_shape)
        self.layer_norm.build(x_shape)
        if self.projection is not None:
            self.projection.build(x_shape)
        self.built = True

    def call(self, token_ids, segment_ids=None, training=None, position_ids=None,
             token_vectors=None):
        # token_vectors [B, T, E]: the word-piece vectors to use instead of the table's rows
        # of token_ids (garden.bertology.attributions interpolates them); None in every model.
        x = self.token_embedding(token_ids) if token_vectors is None else token_vectors
        # position_ids None: rows 0..T-1 (BERT); RoBERTa passes its padding-offset positions.
        x = x + self.position_embedding(x, position_ids=position_ids)
        if self.segment_embedding is not None:
            if segment_ids is None:
                segment_ids = ops.zeros_like(token_ids)
            x = x + self.segment_embedding(segment_ids)
        x = self.layer_norm(x)
        x = self.dropout_layer(x, training=training)
        if self.projection is not None:
            x = self.projection(x)
        return x

    def compute_output_shape(self, token_ids_shape, segment_ids_shape=None):
        return tuple(token_ids_shape) + (self.hidden_size,)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            max_sequence_length=self.max_sequence_length,
            type_vocab_size=self.type_vocab_size,
            embedding_size=self.embedding_size,
            dropout=self.dropout,
            initializer_range=self.initializer_range,
            layer_norm_epsilon=self.layer_norm_epsilon,
        )
        return config
