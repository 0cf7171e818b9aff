"""BART (Lewis et al., 2020): the encoder-decoder backbone and its GenerativeLM.

BartBackbone is a Keras functional model (garden.models.backbone.Backbone records its config):
    shared token table (encoder input, decoder input and, in BartSeq2SeqLM, the tied softmax);
    learned positions with 2 offset rows (ids start at 2: a table of max_sequence_length + 2
    rows, Hugging Face's BartLearnedPositionalEmbedding); no embedding scaling; LayerNorm on
    the embeddings of each stack, then dropout; post-LN blocks (garden.layers
    TransformerEncoderBlock / TransformerDecoderBlock, exact GELU, eps 1e-5); no final LayerNorm.
Positions follow the padding mask, max(cumsum(mask) - 1, 0) + 2, so a left-padded row gives
the outputs of the same row unpadded (with right padding this is Hugging Face's arange + 2 on
every real token).

BartSeq2SeqLM (garden/models/generative.py) adds the logits x E^T + final_logits_bias (a
non-trainable [V] weight, a buffer in Hugging Face's checkpoints, zero in fresh ones) and the
cached decoding: start_decoding runs the encoder and projects every decoder layer's
cross-attention keys and values once; decode_step reads them as is.
"""

from __future__ import annotations

from typing import List

import keras
from keras import ops

from garden.layers import TransformerDecoderBlock
from garden.layers.attention import empty_caches
from garden.layers.transformer_decoder import cached_decoder_stack
from garden.layers.embeddings import truncated_normal
from garden.models.backbone import Backbone, backbone_inputs, encoder_block_list, run_encoder
from garden.models.instrument import Readout, ValueTransform, self_attention
from garden.models.generative import SEQ2SEQ_INPUTS, BackboneLM, tied_step_logits

POSITION_OFFSET = 2  # fairseq's learned positions start after the <pad> row (padding_idx + 1)
DECODER_START_IDS = (2, 0)  # </s> <s>


def bart_positions(padding_mask):
    """Position-table rows of [B, T] tokens: max(cumsum(mask) - 1, 0) + 2 (left-padding aware)."""
    mask = ops.cast(padding_mask, "int32")
    return ops.maximum(ops.cumsum(mask, axis=1) - 1, 0) + POSITION_OFFSET


def embed(backbone_layers, stack: str, token_ids, positions, training=None):
    """LayerNorm(tokens + positions) then dropout, for `stack` "encoder" or "decoder"."""
    layers = backbone_layers
    x = layers.token_embedding(token_ids) + getattr(layers, f"{stack}_position_embedding")(
        positions)
    x = getattr(layers, f"{stack}_embeddings_layer_norm")(x)
    return layers.embeddings_dropout(x, training=training)


def encode(backbone_layers, token_ids, padding_mask, training=None, **outputs):
    """The encoder stack: float [B, S, H]; with run_encoder's output_hidden_states /
    output_attentions switched on, (that, {"hidden_states", "attention_probs"})."""
    mask = ops.cast(padding_mask, "int32")
    x = embed(backbone_layers, "encoder", token_ids, bart_positions(mask), training)
    if any(outputs.values()):
        return run_encoder(x, backbone_layers.encoder_blocks, mask, **outputs)
    for block in backbone_layers.encoder_blocks:
        x = block(x, padding_mask=mask, training=training)
    return x


class _Layers:
    """The backbone's layers by name, before the functional model exists to hold them."""

    def __init__(self, **layers):
        self.__dict__.update(layers)


@keras.saving.register_keras_serializable(package="garden")
class BartBackbone(Backbone):
    """BART's encoder-decoder as a Keras functional model.

    Inputs (dict, int32): encoder_token_ids, encoder_padding_mask [B, S]; decoder_token_ids,
    decoder_padding_mask [B, T] (1 = real token; decoder_token_ids are the targets shifted
    right behind </s>).
    Outputs (dict): encoder_sequence_output [B, S, H], decoder_sequence_output [B, T, H];
        with output_hidden_states=True also encoder_hidden_states [L+1, B, S, H] and
        decoder_hidden_states [L'+1, B, T, H] (each stack's embeddings, then each layer's
        output), with output_attentions=True encoder_attention_probs [L, B, A, S, S] and
        decoder_attention_probs [L', B, A, T, T] (self-attention; the decoder's causal), for
        garden.bertology (garden.models.stack_view.StackView reads one stack).

    Args:
        vocab_size: int, byte-level BPE vocabulary (50265 with fairseq's 4 specials).
        num_layers: int, encoder layers, and decoder layers unless num_decoder_layers
            (base 6, large 12).
        hidden_size: int, d_model (768 / 1024).
        num_heads: int, attention heads of every attention (12 / 16).
        intermediate_size: int, feed-forward width (3072 / 4096).
        max_sequence_length: int, longest encoder or decoder input (1024); the position tables
            have max_sequence_length + 2 rows.
        dropout: float, on the embeddings and the block outputs (0.1).
        attention_dropout: float or None, on the attention probabilities (None: `dropout`).
        initializer_range: float, stddev of the initializers (0.02).
        layer_norm_epsilon: float (1e-5).
        num_decoder_layers: int or None (= num_layers): decoder layers, for the distilled
            BARTs whose stacks differ (distilbart-cnn-12-6: 12 + 6, distilbart-xsum-12-3:
            12 + 3). Recorded in get_config, so a saved model reloads with its depths.
        dtype: None, str or keras.DTypePolicy.
        output_hidden_states, output_attentions: bool (see Outputs).

    Example:
        backbone = BartBackbone.untrained("bart_tiny", vocab_size=1000)
        out = backbone({"encoder_token_ids": ids, "encoder_padding_mask": mask,
                        "decoder_token_ids": dec, "decoder_padding_mask": dec_mask})
    """

    presets_module = "garden.models.bart.presets"
    # Analysed one stack at a time (garden.models.stack_view.StackView, which states its own).
    # Its encoder's blocks are garden's TransformerEncoderBlocks (the StackView of the encoder
    # reads them block by block).
    readout = Readout("bidirectional", "the encoder's or the decoder's layers (StackView)",
                      blocks="encoder_blocks", stacks=("encoder", "decoder"))

    def __init__(
        self,
        vocab_size: int = 50265,
        num_layers: int = 6,
        hidden_size: int = 768,
        num_heads: int = 12,
        intermediate_size: int = 3072,
        max_sequence_length: int = 1024,
        dropout: float = 0.1,
        attention_dropout=None,
        initializer_range: float = 0.02,
        layer_norm_epsilon: float = 1e-5,
        num_decoder_layers=None,
        dtype=None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        **kwargs,
    ):
        # === Layers ===
        def table(rows, name):
            return keras.layers.Embedding(rows, hidden_size, dtype=dtype, name=name,
                                          embeddings_initializer=truncated_normal(
                                              initializer_range))

        def norm(name):
            return keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=dtype,
                                                   name=name)

        block_args = dict(num_heads=num_heads, intermediate_size=intermediate_size,
                          dropout=dropout, attention_dropout=attention_dropout,
                          activation="gelu", layer_norm_epsilon=layer_norm_epsilon,
                          initializer_range=initializer_range, dtype=dtype)
        rows = max_sequence_length + POSITION_OFFSET
        decoder_depth = num_layers if num_decoder_layers is None else int(num_decoder_layers)
        if int(num_layers) < 1 or decoder_depth < 1:
            raise ValueError(f"BartBackbone needs at least one layer per stack: num_layers="
                             f"{num_layers}, num_decoder_layers={num_decoder_layers}")
        layers = _Layers(
            token_embedding=table(vocab_size, "token_embedding"),
            encoder_position_embedding=table(rows, "encoder_position_embedding"),
            decoder_position_embedding=table(rows, "decoder_position_embedding"),
            encoder_embeddings_layer_norm=norm("encoder_embeddings_layer_norm"),
            decoder_embeddings_layer_norm=norm("decoder_embeddings_layer_norm"),
            embeddings_dropout=keras.layers.Dropout(dropout, dtype=dtype,
                                                    name="embeddings_dropout"),
            encoder_blocks=encoder_block_list(num_layers, **block_args),
            decoder_blocks=[TransformerDecoderBlock(name=f"decoder_layer_{i}", **block_args)
                            for i in range(decoder_depth)])

        # === Functional graph ===
        inputs = backbone_inputs(SEQ2SEQ_INPUTS)
        switches = dict(output_hidden_states=output_hidden_states,
                        output_attentions=output_attentions)
        encoded = encode(layers, inputs["encoder_token_ids"], inputs["encoder_padding_mask"],
                         **switches)
        outputs = {}
        if any(switches.values()):
            encoded, extras = encoded
            outputs.update({f"encoder_{name}": value for name, value in extras.items()})
        decoder_mask = inputs["decoder_padding_mask"]
        x = embed(layers, "decoder", inputs["decoder_token_ids"], bart_positions(decoder_mask))
        states, scores = [x], []
        for block in layers.decoder_blocks:
            x = block(x, encoded, decoder_padding_mask=decoder_mask,
                      encoder_padding_mask=inputs["encoder_padding_mask"],
                      return_attention_scores=output_attentions)
            if output_attentions:
                x, self_scores, _ = x  # the cross-attention's probabilities are not kept
                scores.append(self_scores)
            states.append(x)
        if output_hidden_states:
            outputs["decoder_hidden_states"] = ops.stack(states, axis=0)
        if output_attentions:
            outputs["decoder_attention_probs"] = ops.stack(scores, axis=0)
        outputs = {"encoder_sequence_output": encoded, "decoder_sequence_output": x, **outputs}
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config === (recorded by Backbone from the arguments above)
        for name, layer in vars(layers).items():
            setattr(self, name, layer)

    @property
    def token_embedding(self) -> keras.layers.Embedding:
        return self._token_embedding

    @token_embedding.setter
    def token_embedding(self, layer):
        self._token_embedding = layer

    def value_transforms(self, stack: str) -> List[ValueTransform]:
        """Each block's self-attention value transform in `stack` ("encoder" or "decoder";
        garden.models.instrument); post-LN. The decoder's cross-attention is another
        sublayer, not part of it."""
        return [ValueTransform.of(*self_attention(block))
                for block in getattr(self, f"{stack}_blocks")]

    def layer_groups(self):
        """Backbone.layer_groups: every table and embedding norm (the token table is shared
        by both stacks and the LM head), the encoder's layers, then the decoder's (a source
        sequence runs through the encoder, then the decoder reads it); nothing above the last
        decoder layer (post-LN: no final norm)."""
        return [[self._token_embedding, self.encoder_position_embedding,
                 self.encoder_embeddings_layer_norm, self.decoder_position_embedding,
                 self.decoder_embeddings_layer_norm],
                *[[block] for block in self.encoder_blocks],
                *[[block] for block in self.decoder_blocks]]


@keras.saving.register_keras_serializable(package="garden")
class BartSeq2SeqLM(BackboneLM):
    """BART with its tied LM head: the GenerativeLM of garden/models/generative.py.

    call(inputs) -> {"logits": float32 [B, T, V]} for the seq2seq inputs of BartBackbone.
    start_decoding(prompt, max_length) / decode_step(token_ids, index, state): cached decoding;
    state = {"self_cache": a list of L (keys, values) pairs, one per decoder block (L = the
    backbone's decoder depth, num_decoder_layers or num_layers), each
    [B, A, max_length, d] (garden.layers.MultiHeadAttention's cache; never stacked over
    layers), "cross_cache": L pairs of [B, A, S, d] (projected once, read as is),
    "encoder_padding_mask" [B, S], "padding_mask" [B, max_length], "positions" [B]}.

    Args:
        backbone: BartBackbone.

    Example:
        lm = BartSeq2SeqLM(BartBackbone.untrained("bart_tiny", vocab_size=1000))
        logits, state = lm.start_decoding({**encoder_inputs, "decoder_token_ids": [[2, 0]] * B,
                                           "decoder_padding_mask": [[1, 1]] * B}, 32)
    """

    is_encoder_decoder = True

    def __init__(self, backbone: BartBackbone, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.max_decoder_length = int(backbone.max_sequence_length)
        self.final_logits_bias = self.add_weight(
            shape=(int(backbone.vocab_size),), initializer="zeros", trainable=False,
            name="final_logits_bias")
        self.built = True  # the backbone is a built functional model; the bias exists

    def _logits(self, x):
        table = self.backbone.token_embedding.embeddings
        logits = ops.matmul(x, ops.cast(ops.transpose(table), x.dtype))
        return ops.cast(logits, "float32") + ops.cast(self.final_logits_bias, "float32")

    def _step_logits(self, x):
        """`_logits` of one decoder state per row [B, H] (a decode step's), the products in
        the kernel that is faster for the batch (generative.tied_step_logits)."""
        logits = tied_step_logits(x, self.backbone.token_embedding.embeddings)
        return ops.cast(logits, "float32") + ops.cast(self.final_logits_bias, "float32")

    def call(self, inputs, training=False):
        outputs = self.backbone({k: inputs[k] for k in SEQ2SEQ_INPUTS}, training=training)
        return {"logits": self._logits(outputs["decoder_sequence_output"])}

    def _decoder_layers(self, x, encoded, state, index, cross_index):
        return cached_decoder_stack(self.backbone.decoder_blocks, x, encoded, state, index,
                                    cross_index)

    def start_decoding(self, prompt, max_length):
        b = self.backbone
        encoder_mask = ops.cast(prompt["encoder_padding_mask"], "int32")
        encoded = encode(b, prompt["encoder_token_ids"], encoder_mask, training=False)
        mask = ops.cast(prompt["decoder_padding_mask"], "int32")
        batch, length = ops.shape(mask)[0], ops.shape(mask)[1]
        # Slots after the prompt count as real: the causal mask hides them until written.
        slots = ops.concatenate([mask, ops.ones((batch, max_length - length), "int32")], axis=1)
        x = embed(b, "decoder", prompt["decoder_token_ids"], bart_positions(mask), False)
        width = b.hidden_size // b.num_heads
        layers = len(b.decoder_blocks)
        state = {
            "self_cache": empty_caches(layers, batch, b.num_heads, max_length, width, encoded.dtype),
            "cross_cache": empty_caches(layers, batch, b.num_heads, ops.shape(encoded)[1], width,
                                        encoded.dtype),
            "encoder_padding_mask": encoder_mask, "padding_mask": slots,
            "positions": ops.sum(mask, axis=1) + POSITION_OFFSET}
        # Cross index 0: each layer projects the encoder's keys and values into its cache.
        x, self_cache, cross_cache = self._decoder_layers(x, encoded, state, 0, 0)
        state.update(self_cache=self_cache, cross_cache=cross_cache)
        return self._step_logits(x[:, -1]), state

    def decode_step(self, token_ids, index, state):
        b = self.backbone
        x = embed(b, "decoder", token_ids[:, None], state["positions"][:, None], False)
        # The cross caches are read as is (index None): this stand-in for the encoder output
        # only gives the blocks their shapes and is never projected.
        encoded = ops.zeros((ops.shape(x)[0], ops.shape(state["cross_cache"][0][0])[2],
                             b.hidden_size), x.dtype)
        x, self_cache, _ = self._decoder_layers(x, encoded, state, index, None)
        state = dict(state, self_cache=self_cache, positions=state["positions"] + 1)
        return self._step_logits(x[:, 0]), state
