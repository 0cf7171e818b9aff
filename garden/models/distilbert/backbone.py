"""DistilBERT encoder: word + position embeddings (no token types) -> post-LN Transformer blocks.
No pooler."""

from __future__ import annotations

import keras

from garden.layers.embeddings import TransformerEmbeddings
from garden.layers.transformer_encoder import TransformerEncoderBlock


@keras.saving.register_keras_serializable(package="garden")
class DistilBertBackbone(keras.Model):
    """DistilBERT (Sanh et al., 2019, "DistilBERT, a distilled version of BERT: smaller, faster,
    cheaper and lighter", arXiv:1910.01108) as a Keras functional model.

    BERT's encoder with half the layers, no token-type embeddings and no pooler (section 3 of
    the paper). The layer names and shapes are BERT's, so `init_student_from_teacher` copies a
    teacher's layers one to one.

    Inputs (dict, int32 [B, T]): token_ids, padding_mask (1 = real token).
    Outputs (dict): sequence_output [B, T, H].

    Args:
        vocab_size: int, word-piece vocabulary size (BERT uncased: 30522).
        num_layers: int, Transformer blocks (6).
        hidden_size: int, hidden width H (768).
        num_heads: int, attention heads (12).
        intermediate_size: int, feed-forward width (3072).
        max_sequence_length: int, rows of the learned position table (512).
        dropout: float, dropout on embeddings and block outputs (0.1).
        attention_dropout: float, dropout on attention probabilities (0.1).
        initializer_range: float, stddev of every truncated normal initializer (0.02).
        layer_norm_epsilon: float, LayerNorm epsilon (1e-12).
        dtype: None, str or keras.DTypePolicy for every layer (e.g. "mixed_bfloat16").

    Example:
        backbone = DistilBertBackbone(vocab_size=1000, num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512)
        ids = np.ones((2, 16), "int32")
        out = backbone({"token_ids": ids, "padding_mask": ids})  # sequence_output [2, 16, 128]
    """

    def __init__(
        self,
        vocab_size: int = 30522,
        num_layers: int = 6,
        hidden_size: int = 768,
        num_heads: int = 12,
        intermediate_size: int = 3072,
        max_sequence_length: int = 512,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        initializer_range: float = 0.02,
        layer_norm_epsilon: float = 1e-12,
        dtype=None,
        **kwargs,
    ):
        # === Layers ===
        embeddings = TransformerEmbeddings(
            vocab_size=vocab_size, hidden_size=hidden_size,
            max_sequence_length=max_sequence_length, type_vocab_size=0,
            dropout=dropout, initializer_range=initializer_range,
            layer_norm_epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings")
        encoder_blocks = [
            TransformerEncoderBlock(
                num_heads=num_heads, intermediate_size=intermediate_size, dropout=dropout,
                attention_dropout=attention_dropout, activation="gelu",
                layer_norm_epsilon=layer_norm_epsilon, initializer_range=initializer_range,
                dtype=dtype, name=f"transformer_layer_{i}")
            for i in range(num_layers)
        ]

        # === Functional graph ===
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        x = embeddings(token_ids)
        for block in encoder_blocks:
            x = block(x, padding_mask=padding_mask)
        super().__init__(
            inputs={"token_ids": token_ids, "padding_mask": padding_mask},
            outputs={"sequence_output": x}, **kwargs)

        # === Config ===
        self.embeddings = embeddings
        self.encoder_blocks = encoder_blocks
        self.vocab_size = int(vocab_size)
        self.num_layers = int(num_layers)
        self.hidden_size = int(hidden_size)
        self.num_heads = int(num_heads)
        self.intermediate_size = int(intermediate_size)
        self.max_sequence_length = int(max_sequence_length)
        self.dropout = float(dropout)
        self.attention_dropout = float(attention_dropout)
        self.initializer_range = float(initializer_range)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        # A functional Model ignores a dtype argument; set it so heads built on top can follow.
        self._dtype_arg = dtype
        if dtype is not None:
            self.dtype_policy = keras.dtype_policies.get(dtype)

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
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
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
