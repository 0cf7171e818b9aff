"""Blocks shared by two or more model families."""

from garden.layers.attention import MultiHeadAttention
from garden.layers.embeddings import PositionEmbedding, TransformerEmbeddings, truncated_normal
from garden.layers.heads import MaskedLMHead
from garden.layers.transformer_encoder import TransformerEncoderBlock

__all__ = ["MultiHeadAttention", "PositionEmbedding", "TransformerEmbeddings", "TransformerEncoderBlock",
           "MaskedLMHead", "truncated_normal"]
