"""Blocks shared by two or more model families."""

from garden.layers import activations
from garden.layers.attention import MultiHeadAttention
from garden.layers.embeddings import PositionEmbedding, TransformerEmbeddings, truncated_normal
from garden.layers.heads import MaskedLMHead
from garden.layers.masks import causal_mask, merge_masks, padding_mask_to_attention
from garden.layers.norms import RMSNorm
from garden.layers.transformer_encoder import TransformerEncoderBlock

__all__ = ["MultiHeadAttention", "PositionEmbedding", "TransformerEmbeddings", "TransformerEncoderBlock",
           "MaskedLMHead", "RMSNorm", "activations", "causal_mask", "merge_masks",
           "padding_mask_to_attention", "truncated_normal"]
