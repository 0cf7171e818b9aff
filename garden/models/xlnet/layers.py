"""XLNet (Yang et al., 2019): two-stream relative attention with Transformer-XL memory.

The attention is XLNet's own and lives here, not in garden.layers (no other family uses it):

score(i, j) = (ac + bd + ef) / sqrt(d_head), per head, with the query q_i of the stream:
  ac = (q_i + r_w_bias) . k_j                content term
  bd = (q_i + r_r_bias) . r_{i-j}            position term: sinusoidal encodings of the relative
                                             distances klen ... -qlen+1, projected by `r`, then
                                             rel_shift (reshape, drop the first row, slice klen)
  ef = (q_i + r_s_bias) . s_{[seg_i != seg_j]}   relative segment term (seg_embed[0] = same
                                             segment, [1] = different; memory is segment 0)
Masks use the original's convention, 1 = blocked, and are applied as score - 1e30 * mask
(Hugging Face's arithmetic, so fully blocked rows behave identically).

Two streams share every weight:
  content stream h: starts from the word embeddings; position i sees what perm_mask allows and
    always itself (the original's non_tgt_mask);
  query stream g: starts from a learned mask embedding, one row per target (target_mapping
    [B, P, T] one-hot places target k at its position); it sees what perm_mask allows and never
    its own position's content, so it can predict the token there.
Both streams then go through the same post-LN feed-forward (eps 1e-12).

Head mask (garden.bertology): a float [N] per layer multiplies each head's probabilities after
the softmax, in both streams (Michel et al., 2019; Hugging Face's XLNet head_mask), or with
head_mask_mode "uniform" moves the masked share to even attention over the keys the stream may
see, as garden.layers.attention.MultiHeadAttention does.

Memory (Transformer-XL): each layer's input h (the embeddings for layer 0) is cached as
new_mem = stop_gradient(concat(mem, h[:, :reuse_len])[:, -mem_len:]) (reuse_len 0 = all of h),
and the next segment's keys are concat(mem, h). bi_data: the first half of the batch gets the
forward distances klen ... -qlen+1, the second half the negated ones (needs an even batch).

XLNetBackbone (garden/models/xlnet/backbone.py) builds the functional model from these layers.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

import keras
import tensorflow as tf
from keras import ops

from garden.layers import activations
from garden.layers.attention import apply_head_mask, softmax_in_float32


def normal_initializer(stddev: float) -> keras.initializers.Initializer:
    # The original initialises every XLNet weight from N(0, 0.02) (initializer_range).
    return keras.initializers.RandomNormal(stddev=stddev)


def _blocked_value(dtype) -> float:
    return 65500.0 if keras.backend.standardize_dtype(dtype) == "float16" else 1e30


def rel_shift(x, klen):
    """[B, N, T, R] scores against R = klen + T relative distances -> [B, N, T, klen], where
    out[..., i, j] = x[..., i, T - i + j] (distance klen - (T - i + j) = i + mlen - j)."""
    b, n, t, r = (ops.shape(x)[k] for k in range(4))
    x = ops.reshape(x, (b, n, r, t))[:, :, 1:, :]
    x = ops.reshape(x, (b, n, t, r - 1))
    return x[:, :, :, :klen]


@keras.saving.register_keras_serializable(package="garden")
class XLNetRelativeAttention(keras.layers.Layer):
    """XLNet's two-stream relative multi-head attention with post-LN (see the module docstring).

    Weights (Hugging Face's names and layouts): q, k, v, o, r [H, N, d]; r_w_bias, r_r_bias,
    r_s_bias [N, d]; seg_embed [2, N, d]; layer_norm.
    """

    # The weight matrices the inputs are multiplied by (garden.training.pruning prunes them).
    kernel_attributes = ("q", "k", "v", "o", "r")

    def __init__(self, num_heads: int, head_size: int, dropout: float = 0.1,
                 layer_norm_epsilon: float = 1e-12, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        # What a head mask does, garden.layers.attention.HEAD_MASK_MODES: an analysis-time
        # attribute that garden.bertology.heads switches, not part of the config.
        self.head_mask_mode = "scale"
        self.num_heads, self.head_size = int(num_heads), int(head_size)
        self.dropout_rate = float(dropout)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.initializer_range = float(initializer_range)
        self.dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm")

    def build(self, input_shape):
        hidden = input_shape[-1]
        nd = (self.num_heads, self.head_size)
        for name in ("q", "k", "v", "o", "r"):
            setattr(self, name, self.add_weight(name=name, shape=(hidden,) + nd,
                                                initializer=normal_initializer(self.initializer_range)))
        for name in ("r_w_bias", "r_r_bias", "r_s_bias"):
            setattr(self, name, self.add_weight(name=name, shape=nd,
                                                initializer=normal_initializer(self.initializer_range)))
        self.seg_embed = self.add_weight(name="seg_embed", shape=(2,) + nd,
                                         initializer=normal_initializer(self.initializer_range))
        self.layer_norm.build(input_shape)
        self.built = True

    def _core(self, q_head, k_head, v_head, k_head_r, seg_onehot, mask, training,
              return_probs=False, head_mask=None):
        klen = ops.shape(k_head)[1]
        ac = ops.einsum("bind,bjnd->bnij", q_head + self.r_w_bias, k_head)
        bd = rel_shift(ops.einsum("bind,brnd->bnir", q_head + self.r_r_bias, k_head_r), klen)
        ef = ops.einsum("bins,bijs->bnij",
                        ops.einsum("bind,snd->bins", q_head + self.r_s_bias, self.seg_embed),
                        seg_onehot)
        score = (ac + bd + ef) * (1.0 / math.sqrt(self.head_size))
        probs = softmax_in_float32(score - _blocked_value(score.dtype) * mask[:, None, :, :])
        if head_mask is not None:  # "uniform": even over the keys the stream sees
            probs = apply_head_mask(probs, head_mask, self.head_mask_mode,
                                    allowed=ops.less_equal(mask[:, None, :, :], 0))
        vec = ops.einsum("bnij,bjnd->bind", self.dropout(probs, training=training), v_head)
        return (vec, probs) if return_probs else vec

    def _post(self, x, attn_vec, training):
        out = self.dropout(ops.einsum("bind,hnd->bih", attn_vec, self.o), training=training)
        return self.layer_norm(out + x)

    def call(self, h, pos_emb, seg_onehot, mask_h, g=None, mask_g=None, target_mapping=None,
             mem=None, return_attention_scores=False, head_mask=None, training=None):
        """h [B, T, H]; pos_emb [B, klen + T, H]; seg_onehot [B, T, klen, 2]; mask_h, mask_g
        [B, T, klen] (1 = blocked); g [B, P, H] with target_mapping [B, P, T]; mem [B, M, H];
        head_mask [N] (both streams) or None.
        Returns h' without g, else (h', g'); return_attention_scores (content stream only,
        without g): (h', the content stream's probabilities [B, N, T, klen], after the head
        mask)."""
        cat = h if mem is None else ops.concatenate([ops.cast(mem, h.dtype), h], axis=1)
        k_head = ops.einsum("bjh,hnd->bjnd", cat, self.k)
        v_head = ops.einsum("bjh,hnd->bjnd", cat, self.v)
        k_head_r = ops.einsum("brh,hnd->brnd", ops.cast(pos_emb, h.dtype), self.r)
        q_head_h = ops.einsum("bih,hnd->bind", h, self.q)
        if return_attention_scores:
            if g is not None:
                raise ValueError(f"{self.name}: attention scores of the content stream only "
                                 "(call without g)")
            vec, probs = self._core(q_head_h, k_head, v_head, k_head_r, seg_onehot, mask_h,
                                    training, return_probs=True, head_mask=head_mask)
            return self._post(h, vec, training), probs
        out_h = self._post(h, self._core(q_head_h, k_head, v_head, k_head_r, seg_onehot, mask_h,
                                         training, head_mask=head_mask), training)
        if g is None:
            return out_h
        q_head_g = ops.einsum("bmh,hnd->bmnd", g, self.q)
        # Each target's query at its position, attention under mask_g, back to target order.
        q_head_g = ops.einsum("bmnd,bml->blnd", q_head_g, target_mapping)
        vec_g = self._core(q_head_g, k_head, v_head, k_head_r, seg_onehot, mask_g, training,
                           head_mask=head_mask)
        vec_g = ops.einsum("blnd,bml->bmnd", vec_g, target_mapping)
        return out_h, self._post(g, vec_g, training)

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "head_size": self.head_size,
                "dropout": self.dropout_rate, "layer_norm_epsilon": self.layer_norm_epsilon,
                "initializer_range": self.initializer_range}


@keras.saving.register_keras_serializable(package="garden")
class XLNetLayer(keras.layers.Layer):
    """One XLNet layer: relative attention, then the post-LN feed-forward
    (layer_1 -> activation -> layer_2 -> + input -> LayerNorm), applied to both streams."""

    def __init__(self, num_heads: int, head_size: int, intermediate_size: int,
                 activation="gelu", dropout: float = 0.1, layer_norm_epsilon: float = 1e-12,
                 initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.config = dict(num_heads=int(num_heads), head_size=int(head_size),
                           intermediate_size=int(intermediate_size), activation=activation,
                           dropout=float(dropout), layer_norm_epsilon=float(layer_norm_epsilon),
                           initializer_range=float(initializer_range))
        p = self.dtype_policy
        self.rel_attn = XLNetRelativeAttention(num_heads, head_size, dropout, layer_norm_epsilon,
                                               initializer_range, dtype=p, name="rel_attn")
        self.activation = activations.get(activation)
        self.layer_1 = keras.layers.Dense(intermediate_size, dtype=p, name="layer_1",
                                          kernel_initializer=normal_initializer(initializer_range))
        self.layer_2 = None  # built with the hidden width
        self.ff_layer_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=p,
                                                             name="ff_layer_norm")
        self.dropout = keras.layers.Dropout(dropout, dtype=p)

    def build(self, input_shape):
        hidden = input_shape[-1]
        self.rel_attn.build(input_shape)
        self.layer_1.build(input_shape)
        self.layer_2 = keras.layers.Dense(hidden, dtype=self.dtype_policy, name="layer_2",
                                          kernel_initializer=normal_initializer(
                                              self.config["initializer_range"]))
        self.layer_2.build(tuple(input_shape[:-1]) + (self.config["intermediate_size"],))
        self.ff_layer_norm.build(input_shape)
        self.built = True

    def _ff(self, x, training):
        y = self.dropout(self.activation(self.layer_1(x)), training=training)
        y = self.dropout(self.layer_2(y), training=training)
        return self.ff_layer_norm(y + x)

    def call(self, h, pos_emb, seg_onehot, mask_h, g=None, mask_g=None, target_mapping=None,
             mem=None, return_attention_scores=False, head_mask=None, training=None):
        """Returns h' without g (a functional graph takes no None output), else (h', g');
        return_attention_scores (without g): (h', the probabilities [B, N, T, klen]);
        head_mask [N] or None: this layer's head mask (XLNetRelativeAttention)."""
        if return_attention_scores:
            h, probs = self.rel_attn(h, pos_emb, seg_onehot, mask_h, mem=mem,
                                     return_attention_scores=True, head_mask=head_mask,
                                     training=training)
            return self._ff(h, training), probs
        if g is None:
            return self._ff(self.rel_attn(h, pos_emb, seg_onehot, mask_h, mem=mem,
                                          head_mask=head_mask, training=training), training)
        h, g = self.rel_attn(h, pos_emb, seg_onehot, mask_h, g=g, mask_g=mask_g,
                             target_mapping=target_mapping, mem=mem, head_mask=head_mask,
                             training=training)
        return self._ff(h, training), self._ff(g, training)

    def compute_output_spec(self, h, pos_emb, seg_onehot, mask_h, g=None, mask_g=None,
                            target_mapping=None, mem=None, return_attention_scores=False,
                            head_mask=None, training=None):
        # What call() returns, from the shapes alone, as garden.layers' blocks do (why there);
        # with a memory or the query stream the call is traced, as Keras does by default.
        if mem is not None or g is not None:
            return super().compute_output_spec(h, pos_emb, seg_onehot, mask_h, g, mask_g,
                                               target_mapping, mem, return_attention_scores,
                                               head_mask, training)
        dtype = self.compute_dtype
        out_h = keras.KerasTensor(h.shape, dtype=dtype)
        if return_attention_scores:
            batch, length = h.shape[0], h.shape[1]
            return out_h, keras.KerasTensor((batch, self.config["num_heads"], length, length),
                                            dtype=dtype)
        return out_h

    def get_config(self):
        return {**super().get_config(), **self.config}


@keras.saving.register_keras_serializable(package="garden")
class XLNetAttentionInputs(keras.layers.Layer):
    """The weightless per-call tensors every layer shares: the sinusoidal relative position
    encodings, the relative segment one-hot, and the two streams' masks (1 = blocked).

    Call: (token_ids [B, T], segment_ids [B, T], padding_mask [B, T] (1 = real), perm_mask
    [B, T, T] float or None, mem [B, M, H] or None) -> (pos_emb [B, M+2T, H], seg_onehot
    [B, T, M+T, 2], mask_h, mask_g [B, T, M+T]).
    """

    def __init__(self, hidden_size: int, bi_data: bool = False, clamp_len: int = -1, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size, self.bi_data, self.clamp_len = int(hidden_size), bool(bi_data), int(clamp_len)

    def _sinusoid(self, pos_seq):
        inv_freq = 1.0 / ops.power(10000.0, ops.arange(0, self.hidden_size, 2, dtype="float32")
                                   / self.hidden_size)
        if self.clamp_len > 0:
            pos_seq = ops.clip(pos_seq, -self.clamp_len, self.clamp_len)
        x = pos_seq[:, None] * inv_freq[None, :]
        return ops.concatenate([ops.sin(x), ops.cos(x)], axis=-1)

    def call(self, token_ids, segment_ids, padding_mask, perm_mask=None, mem=None):
        b, qlen = ops.shape(token_ids)[0], ops.shape(token_ids)[1]
        mlen = 0 if mem is None else ops.shape(mem)[1]
        klen = mlen + qlen
        fwd = ops.cast(ops.arange(klen, -qlen, -1), "float32")
        if self.bi_data:
            tf.debugging.assert_equal(b % 2, 0, message="XLNet bi_data needs an even batch")
            half = b // 2
            pos_emb = ops.concatenate(
                [ops.broadcast_to(self._sinusoid(fwd)[None], (half, klen + qlen, self.hidden_size)),
                 ops.broadcast_to(self._sinusoid(-fwd)[None], (half, klen + qlen, self.hidden_size))],
                axis=0)
        else:
            pos_emb = ops.broadcast_to(self._sinusoid(fwd)[None], (b, klen + qlen, self.hidden_size))
        seg = ops.cast(segment_ids, "int32")
        cat_seg = seg if mem is None else ops.concatenate(
            [ops.zeros((b, mlen), "int32"), seg], axis=1)
        seg_onehot = ops.one_hot(ops.cast(seg[:, :, None] != cat_seg[:, None, :], "int32"), 2,
                                 dtype=self.compute_dtype)
        # Padding keys blocked for every query, plus the permutation mask; memory never blocked.
        blocked = ops.broadcast_to((1.0 - ops.cast(padding_mask, "float32"))[:, None, :],
                                   (b, qlen, qlen))
        if perm_mask is not None:
            blocked = blocked + ops.cast(perm_mask, "float32")
        if mem is not None:
            blocked = ops.concatenate([ops.zeros((b, qlen, mlen)), blocked], axis=2)
        mask_g = ops.cast(blocked > 0, "float32")
        # The content stream always sees itself.
        eye = ops.eye(qlen, dtype="float32")
        if mem is not None:
            eye = ops.concatenate([ops.zeros((qlen, mlen)), eye], axis=1)
        mask_h = ops.cast(mask_g - eye[None] > 0, "float32")
        c = self.compute_dtype
        return ops.cast(pos_emb, c), seg_onehot, ops.cast(mask_h, c), ops.cast(mask_g, c)

    def get_config(self):
        return {**super().get_config(), "hidden_size": self.hidden_size, "bi_data": self.bi_data,
                "clamp_len": self.clamp_len}


@keras.saving.register_keras_serializable(package="garden")
class XLNetMaskEmbedding(keras.layers.Layer):
    """The query stream's learned start vector mask_emb [1, 1, H], one copy per target:
    call(target_mapping [B, P, T]) -> [B, P, H]."""

    def __init__(self, hidden_size: int, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size, self.initializer_range = int(hidden_size), float(initializer_range)

    def build(self, input_shape):
        self.mask_emb = self.add_weight(name="mask_emb", shape=(1, 1, self.hidden_size),
                                        initializer=normal_initializer(self.initializer_range))
        self.built = True

    def call(self, target_mapping):
        shape = ops.shape(target_mapping)
        return ops.broadcast_to(ops.cast(self.mask_emb, self.compute_dtype),
                                (shape[0], shape[1], self.hidden_size))

    def get_config(self):
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "initializer_range": self.initializer_range}


@keras.saving.register_keras_serializable(package="garden")
class XLNetMemory(keras.layers.Layer):
    """Transformer-XL's cache of one layer's input: stop_gradient(concat(mem, h[:, :reuse_len])
    [:, -mem_len:]) (reuse_len <= 0: all of h)."""

    def __init__(self, mem_len: int, reuse_len: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.mem_len, self.reuse_len = int(mem_len), int(reuse_len)

    def call(self, h, mem=None):
        cur = h[:, :self.reuse_len] if self.reuse_len > 0 else h
        if mem is not None:
            cur = ops.concatenate([ops.cast(mem, cur.dtype), cur], axis=1)
        return ops.stop_gradient(cur[:, -self.mem_len:])

    def get_config(self):
        return {**super().get_config(), "mem_len": self.mem_len, "reuse_len": self.reuse_len}


def run_xlnet(parts, token_ids, segment_ids, padding_mask, perm_mask=None, target_mapping=None,
              mems: Optional[Sequence] = None, training=None,
              output_attentions: bool = False, head_mask=None) -> Dict:
    """Both streams through `parts` (an XLNetBackbone or the namespace of its layers):
    {"content" [B, T, H], "query" [B, P, H] or None, "mems": list of [B, M', H] or None,
    "layers": the content stream's input to each layer then the last layer's output (L + 1),
    "attention": with output_attentions (no query stream), each layer's content-stream
    probabilities [B, N, T, klen]}. head_mask: float [L, N] or None, row i layer i's (both
    streams)."""
    if output_attentions and target_mapping is not None:
        raise ValueError("XLNet's attention probabilities are the content stream's: ask for "
                         "them without target_mapping")
    mems = list(mems) if mems is not None else [None] * len(parts.xlnet_layers)
    pos_emb, seg_onehot, mask_h, mask_g = parts.attention_inputs(
        token_ids, segment_ids, padding_mask, perm_mask=perm_mask, mem=mems[0] if mems else None)
    pos_emb = parts.embedding_dropout(pos_emb, training=training)
    h = parts.embedding_dropout(parts.word_embedding(token_ids), training=training)
    g = None
    if target_mapping is not None:
        target_mapping = ops.cast(target_mapping, h.dtype)
        g = parts.embedding_dropout(parts.mask_embedding(target_mapping), training=training)
    new_mems: List = []
    layers, attention = [h], []
    for i, (layer, memory, mem) in enumerate(
            zip(parts.xlnet_layers, parts.memories or [None] * len(mems), mems)):
        if memory is not None:
            new_mems.append(memory(h, mem))
        # Only when given: without a head mask the layer call is the plain one.
        masked = {} if head_mask is None else {"head_mask": head_mask[i]}
        if output_attentions:
            h, probs = layer(h, pos_emb, seg_onehot, mask_h, mem=mem,
                             return_attention_scores=True, training=training, **masked)
            attention.append(probs)
        elif g is None:
            h = layer(h, pos_emb, seg_onehot, mask_h, mem=mem, training=training, **masked)
        else:
            h, g = layer(h, pos_emb, seg_onehot, mask_h, g=g, mask_g=mask_g,
                         target_mapping=target_mapping, mem=mem, training=training, **masked)
        layers.append(h)
    return {"content": parts.embedding_dropout(h, training=training),
            "query": None if g is None else parts.embedding_dropout(g, training=training),
            "mems": new_mems or None, "layers": layers, "attention": attention}
