"""BERT encoder: embeddings -> post-LN Transformer blocks -> tanh pooler on [CLS]."""

from __future__ import annotations

import keras
from keras import ops

from garden.layers.embeddings import TransformerEmbeddings, truncated_normal
from garden.layers.transformer_encoder import TransformerEncoderBlock


@keras.saving.register_keras_serializable(package="garden")
class BertBackbone(keras.Model):
    """BERT (Devlin et al., 2019, "BERT: Pre-training of Deep Bidirectional Transformers for
    Language Understanding", arXiv:1810.04805) as a Keras functional model.

    Inputs (dict, int32 [B, T]): token_ids, segment_ids, padding_mask (1 = real token).
    Outputs (dict): sequence_output [B, T, H]; pooled_output [B, H] = tanh(dense(h[:, 0])).
    The constructor arguments are the config; `get_config()` returns them.

    Args:
        vocab_size: int, word-piece vocabulary size (BERT uncased: 30522).
        num_layers: int, Transformer blocks L.
        hidden_size: int, hidden width H.
        num_heads: int, attention heads A (H must be divisible by A).
        intermediate_size: int, feed-forward width (4H in the paper).
        max_sequence_length: int, rows of the learned position table (512).
        type_vocab_size: int, token types / segments (2).
        dropout: float, dropout on embeddings, attention probabilities and block outputs (0.1).
        initializer_range: float, stddev of every truncated normal initializer (0.02).
        layer_norm_epsilon: float, LayerNorm epsilon (1e-12).
        dtype: None, str or keras.DTypePolicy for every layer (e.g. "mixed_bfloat16").

    Example:
        backbone = BertBackbone(vocab_size=1000, num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512)
        ids = np.ones((2, 16), "int32")
        out = backbone({"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids})
    """

    def __init__(
        self,
        vocab_size: int,
        num_layers: int,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        max_sequence_length: int = 512,
        type_vocab_size: int = 2,
        dropout: float = 0.1,
        initializer_range: float = 0.02,
        layer_norm_epsilon: float = 1e-12,
        dtype=None,
        **kwargs,
    ):
        # === Layers ===
        embeddings = TransformerEmbeddings(
            vocab_size=vocab_size, hidden_size=hidden_size,
            max_sequence_length=max_sequence_length, type_vocab_size=type_vocab_size,
            dropout=dropout, initializer_range=initializer_range,
            layer_norm_epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings")
        encoder_blocks = [
            TransformerEncoderBlock(
                num_heads=num_heads, intermediate_size=intermediate_size, dropout=dropout,
                activation="gelu", layer_norm_epsilon=layer_norm_epsilon,
                initializer_range=initializer_range, dtype=dtype,
                name=f"transformer_layer_{i}")
            for i in range(num_layers)
        ]
        pooler = keras.layers.Dense(
            hidden_size, activation="tanh", kernel_initializer=truncated_normal(initializer_range),
            dtype=dtype, name="pooler_dense")

        # === Functional graph ===
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        segment_ids = keras.Input(shape=(None,), dtype="int32", name="segment_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        x = embeddings(token_ids, segment_ids)
        for block in encoder_blocks:
            x = block(x, padding_mask=padding_mask)
        sequence_output = x
        pooled_output = pooler(x[:, 0, :])
        super().__init__(
            inputs={"token_ids": token_ids, "segment_ids": segment_ids,
                    "padding_mask": padding_mask},
            outputs={"sequence_output": sequence_output, "pooled_output": pooled_output},
            **kwargs)

        # === Config ===
        self.embeddings = embeddings
        self.encoder_blocks = encoder_blocks
        self.pooler = pooler
        self.vocab_size = int(vocab_size)
        self.num_layers = int(num_layers)
        self.hidden_size = int(hidden_size)
        self.num_heads = int(num_heads)
        self.intermediate_size = int(intermediate_size)
        self.max_sequence_length = int(max_sequence_length)
        self.type_vocab_size = int(type_vocab_size)
        self.dropout = float(dropout)
        self.initializer_range = float(initializer_range)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        # A functional Model ignores a dtype argument; set it so heads built on top can follow.
        self._dtype_arg = dtype
        if dtype is not None:
            self.dtype_policy = keras.dtype_policies.get(dtype)

    def outputs_at(self, inputs, positions):
        """The sequence output at `positions` and the pooled output, computing less.

        Equal (up to float rounding, and dropout's random draws) to gathering `positions`
        from `self(inputs)["sequence_output"]`, but the last block computes only the rows the
        caller reads ([CLS] for the pooler and `positions`): a pretraining head that looks at
        20 of 128 positions skips about 85% of that block's attention and feed-forward work.

        Args:
            inputs: dict of token_ids, segment_ids, padding_mask [B, T] (symbolic or eager).
            positions: int [B, P].

        Returns:
            (sequence rows [B, P, H], pooled_output [B, H]).
        """
        positions = ops.cast(positions, "int32")
        x = self.embeddings(inputs["token_ids"], inputs["segment_ids"])
        for block in self.encoder_blocks[:-1]:
            x = block(x, padding_mask=inputs["padding_mask"])
        rows = ops.concatenate([ops.zeros_like(positions[:, :1]), positions], axis=1)
        y = self.encoder_blocks[-1](x, padding_mask=inputs["padding_mask"], output_positions=rows)
        return y[:, 1:, :], self.pooler(y[:, 0, :])

    @property
    def token_embedding(self) -> keras.layers.ReversibleEmbedding:
        """The word-piece table layer; the MLM head projects onto its (tied) weights."""
        return self.embeddings.token_embedding

    def get_config(self):
        dtype = self._dtype_arg
        if isinstance(dtype, keras.DTypePolicy):
            dtype = keras.dtype_policies.serialize(dtype)
        return {
            "name": self.name,
            "trainable": self.trainable,
            "vocab_size": self.vocab_size,
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "num_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "max_sequence_length": self.max_sequence_length,
            "type_vocab_size": self.type_vocab_size,
            "dropout": self.dropout,
            "initializer_range": self.initializer_range,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "dtype": dtype,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)
