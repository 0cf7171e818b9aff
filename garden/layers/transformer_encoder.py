"""The Transformer encoder block shared by BERT, RoBERTa, ALBERT, ELECTRA, SpanBERT and DistilBERT."""

from __future__ import annotations

from typing import Optional

import keras
from keras import ops

from garden.layers.attention import MultiHeadAttention
from garden.layers.embeddings import truncated_normal
from garden.layers.masks import merge_masks, padding_mask_to_attention
from garden.layers.transformer_block import TransformerBlockBase


@keras.saving.register_keras_serializable(package="garden")
class TransformerEncoderBlock(TransformerBlockBase):
    """One encoder layer of "Attention Is All You Need" (Vaswani et al., 2017), as BERT uses it.

    Post-LN by default, exactly as BERT (Devlin et al., 2019):
        a = LayerNorm(x + Dropout(Dense_o(MultiHeadAttention(x))))
        y = LayerNorm(a + Dropout(Dense_2(GELU(Dense_1(a)))))
    Attention uses separate query/key/value projections with biases
    (`garden.layers.attention.MultiHeadAttention`: the weights of Keras' layer, computed
    with 2-D matmuls), scaled dot-product scores and dropout on the attention
    probabilities. `normalize_first=True` gives the pre-LN variant (GPT-2 style).

    Args:
        num_heads: int, attention heads; hidden size must be divisible by it.
        intermediate_size: int, width of the feed-forward layer (BERT: 4 * hidden).
        dropout: float, dropout on the attention output and the feed-forward output.
        attention_dropout: float or None, dropout on attention probabilities; None = dropout.
        activation: str or callable, feed-forward activation (garden.layers.activations.get):
            "gelu" is the exact erf GELU, "gelu_new" / "gelu_tanh" the tanh approximation.
        layer_norm_epsilon: float, LayerNorm epsilon (BERT: 1e-12).
        initializer_range: float, stddev of the truncated normal kernel initializers.
        normalize_first: bool, pre-LN instead of post-LN.
        share_attention_with: TransformerEncoderBlock or None; when given, this block uses that
            block's attention projections and attention LayerNorm (the same variables), as in
            ALBERT's shared-attention ablation (Lan et al., 2020, table 4). Not part of the
            config: the model that owns both blocks recreates the link when deserialized.
        share_feedforward_with: TransformerEncoderBlock or None; likewise for the two
            feed-forward dense layers and the output LayerNorm (ALBERT's shared-FFN ablation).
        head_width: int or None, the width d of each head; None = hidden size / num_heads.
            Given when heads were pruned (garden.bertology.prune): the block then keeps
            num_heads heads of the unpruned model's width, and H need not be num_heads * d.
        **kwargs: name, dtype, trainable.

    Call args:
        inputs: float [B, T, H].
        padding_mask: int or bool [B, T], 1 for real tokens; keys at 0 get no attention.
        attention_mask: int or bool [B, T, T] (1 = may attend), combined with padding_mask.
        output_positions: int [B, P] or None; when given, only these rows are computed and
            the output is [B, P, H] (equal to those rows of the full output).
        head_mask: float [A] or [B, A] or None, this layer's head mask (Hugging Face's
            semantics: multiplies each head's attention probabilities; 0 turns a head off).
        return_attention_scores: bool; True returns `(y, scores)` with the attention
            probabilities [B, A, T (or P), T] after the head mask.

    Example:
        block = TransformerEncoderBlock(num_heads=2, intermediate_size=512)
        x = keras.ops.zeros((2, 16, 128))
        y = block(x, padding_mask=keras.ops.ones((2, 16), "int32"))  # [2, 16, 128]
    """

    def __init__(
        self,
        num_heads: int,
        intermediate_size: int,
        dropout: float = 0.1,
        attention_dropout: Optional[float] = None,
        activation="gelu",
        layer_norm_epsilon: float = 1e-12,
        initializer_range: float = 0.02,
        normalize_first: bool = False,
        share_attention_with: Optional["TransformerEncoderBlock"] = None,
        share_feedforward_with: Optional["TransformerEncoderBlock"] = None,
        head_width: Optional[int] = None,
        **kwargs,
    ):
        super().__init__(num_heads, intermediate_size, dropout, attention_dropout, activation,
                         layer_norm_epsilon, initializer_range, normalize_first, **kwargs)
        self.head_width = None if head_width is None else int(head_width)
        # Plain references, deliberately not tracked: the donor is a layer of the owning model
        # in its own right; build() adopts (and so tracks) only the donated sublayers.
        object.__setattr__(self, "share_attention_with", share_attention_with)
        object.__setattr__(self, "share_feedforward_with", share_feedforward_with)

    def _head_width(self, hidden_size):
        return super()._head_width(hidden_size) if self.head_width is None else self.head_width

    def build(self, inputs_shape, padding_mask_shape=None, attention_mask_shape=None):
        self._head_width(inputs_shape[-1])  # refuses a hidden size that num_heads does not divide
        common = dict(dtype=self.dtype_policy)
        for donor in (self.share_attention_with, self.share_feedforward_with):
            if donor is not None and not donor.built:
                donor.build(inputs_shape)
        self._build_attention(inputs_shape, common)
        self._build_feedforward(inputs_shape, common)
        self.built = True

    def _build_attention(self, inputs_shape, common):
        if self.share_attention_with is not None:
            self.attention = self.share_attention_with.attention
            self.attention_dropout_layer = keras.layers.Dropout(self.dropout, name="attention_output_dropout", **common)
            self.attention_layer_norm = self.share_attention_with.attention_layer_norm
            return
        # MultiHeadAttention clones the initializer for each of q/k/v/output itself.
        self.attention = MultiHeadAttention(
            num_heads=self.num_heads, key_dim=self._head_width(inputs_shape[-1]),
            dropout=self.attention_dropout,
            kernel_initializer=truncated_normal(self.initializer_range),
            bias_initializer="zeros", name="attention", **common)
        self.attention.build(inputs_shape, inputs_shape, inputs_shape)
        self.attention_dropout_layer = keras.layers.Dropout(self.dropout, name="attention_output_dropout", **common)
        self.attention_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="attention_layer_norm", **common)
        self.attention_layer_norm.build(inputs_shape)

    def _build_feedforward(self, inputs_shape, common):
        if self.share_feedforward_with is not None:
            donor = self.share_feedforward_with
            self.intermediate_dense = donor.intermediate_dense
            self.output_dense = donor.output_dense
            self.output_dropout = keras.layers.Dropout(self.dropout, name="output_dropout", **common)
            self.output_layer_norm = donor.output_layer_norm
            return
        self._build_feedforward_layers(inputs_shape)

    def call(self, inputs, padding_mask=None, attention_mask=None, training=None,
             output_positions=None, head_mask=None, return_attention_scores=False):
        mask = merge_masks(padding_mask_to_attention(padding_mask), attention_mask)
        keys = self.attention_layer_norm(inputs) if self.normalize_first else inputs
        query, residual = keys, inputs
        if output_positions is not None:
            # Only these rows of the output are wanted (e.g. a pretrainer's last block needs
            # [CLS] and the masked positions): every row attends to all keys, and each output
            # row depends on its own query row alone, so the rest need not be computed.
            rows = ops.expand_dims(ops.cast(output_positions, "int32"), -1)
            query = ops.take_along_axis(keys, rows, axis=1)
            residual = ops.take_along_axis(inputs, rows, axis=1)
            if mask is not None and attention_mask is not None:  # [B, T, S]: its query rows
                mask = ops.take_along_axis(mask, rows, axis=1)
        x = self.attention(query, keys, attention_mask=mask, head_mask=head_mask,
                           return_attention_scores=return_attention_scores, training=training)
        if return_attention_scores:
            x, scores = x
        x = self.attention_dropout_layer(x, training=training)
        x = x + residual
        if not self.normalize_first:
            x = self.attention_layer_norm(x)
        x = self._feedforward(x, training)
        return (x, scores) if return_attention_scores else x

    def compute_output_spec(self, inputs, padding_mask=None, attention_mask=None, training=None,
                            output_positions=None, head_mask=None, return_attention_scores=False):
        # What call() returns, from the shapes alone. Keras' default traces call() into a graph
        # to find out, each time a functional model is built: in the suite under -n 2 that
        # tracing was 16% of the workers' CPU (py-spy, 2026-12-07); build() has made every
        # sublayer, so nothing is left for the trace to create.
        batch, length, width = inputs.shape
        rows = length if output_positions is None else output_positions.shape[1]
        y = keras.KerasTensor((batch, rows, width), dtype=self.compute_dtype)
        if not return_attention_scores:
            return y
        return y, keras.KerasTensor((batch, self.num_heads, rows, length), dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        if self.head_width is not None:  # only pruned blocks: the others' configs stay as they were
            config["head_width"] = self.head_width
        return config
