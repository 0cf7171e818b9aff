"""A NumPy re-statement of the BERT forward pass (Devlin et al., 2019) read from the weights of a
garden BertBackbone / BertPretrainer. It is what the tests compare the Keras graph against, so a
change of layer order, LayerNorm placement, GELU flavour or attention scaling fails loudly.
"""

import math

import numpy as np

# (layers, hidden, heads, feed-forward) of the released checkpoints (google-research/bert: the
# compact models of Turc et al. 2019, base and large of Devlin et al. 2019), written out rather
# than read from PRESETS.
PUBLISHED = {
    "bert_tiny": (2, 128, 2, 512),
    "bert_mini": (4, 256, 4, 1024),
    "bert_small": (4, 512, 8, 2048),
    "bert_medium": (8, 512, 8, 2048),
    "bert_base": (12, 768, 12, 3072),
    "bert_large": (24, 1024, 16, 4096),
}

_erf = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))  # exact, not the tanh approximation


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def randomize_weights(model, seed=0):
    """Large random weights (kernels ~N(0, 0.1), biases and LayerNorms non-trivial) so that the
    comparison is sensitive: at the 0.02 init the pre-activations are so small that the exact
    and tanh GELU agree to 1e-6."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        shape = tuple(w.shape)
        if w.path.endswith("/gamma"):
            value = 1.0 + 0.2 * rng.normal(size=shape)
        else:
            value = 0.1 * rng.normal(size=shape)
        w.assign(value.astype("float32"))


def weights_by_path(model):
    return {w.path: np.asarray(w.numpy(), np.float64) for w in model.weights}


def backbone_forward(w, num_layers, token_ids, segment_ids, padding_mask, eps=1e-12, prefix=""):
    """sequence_output, pooled_output of a BertBackbone from its weights `w` (path -> array)."""
    g = lambda name: w[prefix + name]
    t = token_ids.shape[1]
    x = (g("embeddings/token_embedding/embeddings")[token_ids]
         + g("embeddings/position_embedding/embeddings")[:t][None]
         + g("embeddings/segment_embedding/embeddings")[segment_ids])
    x = layer_norm(x, g("embeddings/layer_norm/gamma"), g("embeddings/layer_norm/beta"), eps)
    # Padded keys get a -inf-like score; real keys are untouched.
    bias = np.where(padding_mask[:, None, None, :] > 0, 0.0, -1e9)
    for i in range(num_layers):
        p = f"transformer_layer_{i}/"
        proj = lambda n: (np.einsum("bth,hnd->btnd", x, g(p + f"attention/{n}/kernel"))
                          + g(p + f"attention/{n}/bias"))
        q, k, v = proj("query"), proj("key"), proj("value")
        scores = np.einsum("btnd,bsnd->bnts", q, k) / math.sqrt(q.shape[-1]) + bias
        ctx = np.einsum("bnts,bsnd->btnd", softmax(scores), v)
        attn = (np.einsum("btnd,ndh->bth", ctx, g(p + "attention/attention_output/kernel"))
                + g(p + "attention/attention_output/bias"))
        x = layer_norm(x + attn, g(p + "attention_layer_norm/gamma"),
                       g(p + "attention_layer_norm/beta"), eps)
        h = gelu(x @ g(p + "intermediate_dense/kernel") + g(p + "intermediate_dense/bias"))
        h = h @ g(p + "output_dense/kernel") + g(p + "output_dense/bias")
        x = layer_norm(x + h, g(p + "output_layer_norm/gamma"), g(p + "output_layer_norm/beta"), eps)
    pooled = np.tanh(x[:, 0] @ g("pooler_dense/kernel") + g("pooler_dense/bias"))
    return x, pooled


def mlm_logits(w, sequence_output, positions, eps=1e-12):
    """Masked LM head: gather -> dense gelu -> LayerNorm -> tied word table^T + bias."""
    x = np.take_along_axis(sequence_output, positions[..., None], axis=1)
    x = gelu(x @ w["masked_lm_head/transform_dense/kernel"] + w["masked_lm_head/transform_dense/bias"])
    x = layer_norm(x, w["masked_lm_head/layer_norm/gamma"], w["masked_lm_head/layer_norm/beta"], eps)
    return x @ w["embeddings/token_embedding/embeddings"].T + w["masked_lm_head/output_bias"]
