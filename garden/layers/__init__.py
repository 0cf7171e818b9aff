"""Blocks shared by two or more model families."""

from garden.layers import activations
from garden.layers.attention import MultiHeadAttention
from garden.layers.embeddings import PositionEmbedding, TransformerEmbeddings, truncated_normal
from garden.layers.heads import MaskedLMHead
from garden.layers.masks import causal_mask, merge_masks, padding_mask_to_attention
from garden.layers.norms import RMSNorm
from garden.layers.position_bias import RelativePositionBias, relative_position_buckets
from garden.layers.transformer_decoder import TransformerDecoderBlock
from garden.layers.transformer_encoder import TransformerEncoderBlock

__all__ = ["MaskedLMHead", "MultiHeadAttention", "PositionEmbedding", "RMSNorm",
           "RelativePositionBias", "TransformerDecoderBlock", "TransformerEmbeddings",
           "TransformerEncoderBlock", "activations", "causal_mask", "merge_masks",
           "padding_mask_to_attention", "relative_position_buckets", "truncated_normal"]
