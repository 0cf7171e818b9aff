"""XLNet (Yang et al., 2019) as a Keras functional model: the word embeddings, then XLNet's
two-stream relative-attention layers with Transformer-XL memory (garden/models/xlnet/layers.py,
whose docstring gives the attention, the streams and the memory).

Inputs of the functional graph (dict, int32 [B, T]): token_ids, segment_ids, padding_mask (1 =
real token, the house convention; real tokens end with <sep> <cls>, padded on the left as
Hugging Face's tokenizer does or on the right as garden.serving.text's "xlnet" layout does).
Outputs: sequence_output [B, T, H] (content stream), pooled_output [B, H] = the state of the
last REAL position (<cls>, last in XLNet's layout): T - 1 under left padding, as Hugging Face's
sequence_summary "last" takes it, and the last unpadded position under right padding (relative
positions and blocked padding keys make the real tokens' states the same either way). `XLNetBackbone.streams(...)` runs both streams with perm_mask,
target_mapping and memory; XLNetPretrainer scores the query stream against the tied word table.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import keras
import numpy as np
from keras import ops

from garden.models.backbone import Backbone, backbone_inputs
from garden.models.instrument import Readout, ValueTransform
from garden.models.xlnet.layers import (XLNetAttentionInputs, XLNetLayer, XLNetMaskEmbedding,
                                        XLNetMemory, normal_initializer, run_xlnet)


def last_real_state(h, padding_mask):
    """h [B, T, H] at each row's last position with padding_mask 1 (the largest such index:
    T - 1 for left padding, sum(mask) - 1 for right padding; 0 for an all-padding row)."""
    mask = ops.cast(padding_mask, "int32")
    positions = ops.cumsum(ops.ones_like(mask), axis=1) - 1  # (the length is dynamic)
    index = ops.max(mask * positions, axis=1)
    pick = ops.cast(ops.equal(positions, index[:, None]), h.dtype)  # one-hot [B, T]: exact
    return ops.einsum("bt,bth->bh", pick, h)


class _Parts:
    def __init__(self, **kw):
        self.__dict__.update(kw)


@keras.saving.register_keras_serializable(package="garden")
class XLNetBackbone(Backbone):
    """XLNet (Yang et al., 2019, "XLNet: Generalized Autoregressive Pretraining for Language
    Understanding", arXiv:1906.08237) as a Keras functional model; see the module docstrings
    (here and garden/models/xlnet/layers.py).

    Inputs (dict, int32 [B, T]): token_ids, segment_ids, padding_mask (1 = real token).
    Outputs: sequence_output [B, T, H] (content stream), pooled_output [B, H] (the last real
    position, <cls>, whichever side the padding is on); with output_hidden_states=True also
    hidden_states [L+1, B, T, H] (the word embeddings, then each layer's content stream), with
    output_attentions=True attention_probs [L, B, N, T, T] (the content stream's, without
    memory: every real token sees every real token, after the head mask); use_head_mask=True
    adds the input head_mask float [L, N] (garden.models.backbone.Backbone's: 1 keeps a head,
    0 zeroes its attention probabilities, in the content stream and, in `streams`, the query
    stream), for garden.bertology.
    `streams(inputs, perm_mask=..., target_mapping=..., mems=...)` gives both streams and the
    new memory. The constructor arguments are the config.

    Args:
        vocab_size: int (SentencePiece 32000).
        num_layers, hidden_size, num_heads: L, H, N (H = N * head_size).
        intermediate_size: feed-forward width (4H).
        head_size: d_head (default H / N; 64 in the releases).
        activation: "gelu" exact (Hugging Face) or "gelu_tanh" (the original's).
        dropout: on the embeddings, the position encodings, attention probabilities, outputs.
        initializer_range: stddev of the normal initialisers (0.02).
        layer_norm_epsilon: 1e-12.
        mem_len: tokens of memory kept per layer (0: `streams` returns no memory).
        reuse_len: tokens of each segment cached (the data's reuse half; 0: all).
        bi_data: forward and backward relative positions in the two batch halves.
        clamp_len: clip relative distances to +-clamp_len (-1: no clipping).
        dtype: dtype policy.
        output_hidden_states, output_attentions, use_head_mask: bool (see Outputs).

    Example:
        backbone = XLNetBackbone(vocab_size=1000, num_layers=2, hidden_size=64, num_heads=2, intermediate_size=128)
        out = backbone({"token_ids": ids, "segment_ids": seg, "padding_mask": mask})
        s = backbone.streams({...}, perm_mask=perm, target_mapping=mapping)  # s["query"]: [B, P, H]
    """

    presets_module = "garden.models.xlnet.presets"
    # Bidirectional at analysis time (no perm_mask: the content stream sees every real token);
    # its relative attention is XLNet's own, not garden's blocks (no block list to run alone).
    readout = Readout("bidirectional", "0: the word embeddings; 1..L: the content stream's "
                      "layers", blocks="", no_blocks=(
                          "XLNet's layers are its own relative-attention layers, which also "
                          "read the position encodings and segment relations, not garden's "
                          "Transformer blocks that run from hidden_states[0] alone"))

    def __init__(
        self,
        vocab_size: int,
        num_layers: int,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        head_size: Optional[int] = None,
        activation: str = "gelu",
        dropout: float = 0.1,
        initializer_range: float = 0.02,
        layer_norm_epsilon: float = 1e-12,
        mem_len: int = 0,
        reuse_len: int = 0,
        bi_data: bool = False,
        clamp_len: int = -1,
        dtype=None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        use_head_mask: bool = False,
        **kwargs,
    ):
        head_size = head_size or hidden_size // num_heads
        # === Layers ===
        word_embedding = keras.layers.ReversibleEmbedding(
            vocab_size, hidden_size, embeddings_initializer=normal_initializer(initializer_range),
            dtype=dtype, name="word_embedding")
        mask_embedding = XLNetMaskEmbedding(hidden_size, initializer_range, dtype=dtype,
                                            name="mask_embedding")
        attention_inputs = XLNetAttentionInputs(hidden_size, bi_data, clamp_len, dtype=dtype,
                                                name="attention_inputs")
        embedding_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="dropout")
        xlnet_layers = [XLNetLayer(num_heads, head_size, intermediate_size, activation, dropout,
                                   layer_norm_epsilon, initializer_range, dtype=dtype,
                                   name=f"layer_{i}") for i in range(num_layers)]
        memories = ([XLNetMemory(mem_len, reuse_len, dtype=dtype, name=f"memory_{i}")
                     for i in range(num_layers)] if mem_len > 0 else None)
        parts = _Parts(word_embedding=word_embedding, mask_embedding=mask_embedding,
                       attention_inputs=attention_inputs, embedding_dropout=embedding_dropout,
                       xlnet_layers=xlnet_layers, memories=None)

        # === Functional graph ===
        inputs = backbone_inputs(("token_ids", "segment_ids", "padding_mask"), use_head_mask,
                                 num_layers, num_heads)
        run = run_xlnet(parts, inputs["token_ids"], inputs["segment_ids"],
                        inputs["padding_mask"], output_attentions=output_attentions,
                        head_mask=inputs.get("head_mask"))
        h = run["content"]
        outputs = {"sequence_output": h,
                   "pooled_output": last_real_state(h, inputs["padding_mask"])}
        if output_hidden_states:
            outputs["hidden_states"] = ops.stack(run["layers"], axis=0)
        if output_attentions:
            outputs["attention_probs"] = ops.stack(run["attention"], axis=0)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config === (recorded by Backbone from the arguments above)
        self.word_embedding = word_embedding
        self.mask_embedding = mask_embedding
        self.attention_inputs = attention_inputs
        self.embedding_dropout = embedding_dropout
        self.xlnet_layers = xlnet_layers
        self.memories = memories
        # The query stream's start vector is not on the content-stream graph: built here so
        # that it is a weight of the backbone (saved, counted, converted).
        mask_embedding.build(None)

    @property
    def token_embedding(self) -> keras.layers.ReversibleEmbedding:
        return self.word_embedding

    def value_transforms(self) -> List[ValueTransform]:
        """Each layer's content-stream value transform (garden.models.instrument): v and o, no
        biases; post-LN, so the layer input goes in as it is. The relative position and
        segment terms change only the scores, never what a head adds."""
        return [ValueTransform(layer.rel_attn.v.numpy(),
                               np.transpose(layer.rel_attn.o.numpy(), (1, 2, 0)))
                for layer in self.xlnet_layers]

    def layer_groups(self):
        """Backbone.layer_groups: the word table and the query stream's start vector (a
        pretraining-only embedding), each layer_i (nothing sits above the top layer)."""
        return [[self.word_embedding, self.mask_embedding],
                *[[layer] for layer in self.xlnet_layers]]

    def streams(self, inputs: Dict, perm_mask=None, target_mapping=None, mems=None,
                training=None) -> Dict:
        """Both streams: {"content": [B, T, H], "query": [B, P, H] (None without
        target_mapping), "mems": the new memory, one [B, <= mem_len, H] per layer (None when
        mem_len is 0)}.

        Args:
            inputs: token_ids, segment_ids, padding_mask [B, T] (1 = real); head_mask [L, N]
                (optional, both streams).
            perm_mask: [B, T, T], 1 = position i cannot attend to j (the data's perm_mask).
            target_mapping: [B, P, T], row k one-hot at the k-th target's position.
            mems: None or one [B, M, H] per layer (a previous call's "mems").
        """
        return run_xlnet(self, inputs["token_ids"], inputs["segment_ids"],
                         inputs["padding_mask"], perm_mask=perm_mask,
                         target_mapping=target_mapping, mems=mems, training=training,
                         head_mask=inputs.get("head_mask"))


@keras.saving.register_keras_serializable(package="garden")
class XLNetLMHead(keras.layers.Layer):
    """logits = x @ word_table^T + bias (float32): Hugging Face's tied `lm_loss` and the
    original's lm_loss; no dense + LayerNorm transform (Model Garden's XLNet adds one)."""

    def __init__(self, token_embedding, **kwargs):
        super().__init__(**kwargs)
        self.token_embedding = token_embedding

    def build(self, input_shape):
        self.bias = self.add_weight(name="bias", shape=(self.token_embedding.input_dim,),
                                    initializer="zeros")
        self.built = True

    def call(self, x):
        logits = self.token_embedding(x, reverse=True)
        return ops.cast(logits, "float32") + ops.cast(self.bias, "float32")

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.token_embedding.input_dim,)

