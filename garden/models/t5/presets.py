"""T5 architecture presets: the sizes of the released checkpoints (Raffel et al., 2020, table 14
for v1.0; the t5.1.1 release for v1.1), plus tiny twins for CPUs and tests.

Each entry is a complete T5Backbone config, so `T5Backbone(**PRESETS[name])` works; the
parameter counts below are those of T5Seq2SeqLM (backbone + untied lm_head in v1.1), equal to
Hugging Face's T5ForConditionalGeneration. Vocabulary: 32,000 SentencePiece pieces + 100
sentinels = 32,100, padded to 32,128. Nothing here downloads weights (see conversion.py).

    t5_small       60,506,624   6+6 layers, d_model 512, 8 heads, d_ff 2048, ReLU, tied
    t5_base       222,903,552   12+12, 768, 12 heads, 3072
    t5_large      737,668,096   24+24, 1024, 16 heads, 4096
    t5_v1_1_small  76,961,152   8+8, 512, 6 heads, d_ff 1024, gated tanh-GELU, untied lm_head
(keras-hub's metadata gives t5_1.1_small 60,511,616, which is not what its config builds.)
"""

from __future__ import annotations

from typing import Dict, Optional

VOCAB_SIZE = 32128

_V1_0 = dict(activation="relu", gated_feedforward=False, tie_embeddings=True)
_V1_1 = dict(activation="gelu_tanh", gated_feedforward=True, tie_embeddings=False)


def _preset(num_layers: int, hidden_size: int, num_heads: int, intermediate_size: int,
            version: Dict, vocab_size: int = VOCAB_SIZE) -> Dict:
    return dict(vocab_size=vocab_size, num_layers=num_layers, hidden_size=hidden_size,
                num_heads=num_heads, intermediate_size=intermediate_size, head_size=64,
                **version)


PRESETS: Dict[str, Dict] = {
    "t5_small": _preset(6, 512, 8, 2048, _V1_0),
    "t5_base": _preset(12, 768, 12, 3072, _V1_0),
    "t5_large": _preset(24, 1024, 16, 4096, _V1_0),
    "t5_v1_1_small": _preset(8, 512, 6, 1024, _V1_1),
    # Tiny twins (L2 d64 A2 d_kv 32 FFN128) of each version, for CPUs and tests.
    "t5_tiny": dict(_preset(2, 64, 2, 128, _V1_0), head_size=32),
    "t5_v1_1_tiny": dict(_preset(2, 64, 2, 128, _V1_1), head_size=32),
}


def parameter_count(vocab_size: int, num_layers: int, hidden_size: int, num_heads: int,
                    intermediate_size: int, head_size: int = 64,
                    num_decoder_layers: Optional[int] = None, gated_feedforward: bool = False,
                    tie_embeddings: bool = True, num_buckets: int = 32, **unused) -> int:
    """T5Seq2SeqLM's parameter count from a config, without building it (t5_large holds 738M
    float32 weights, ~3 GB). tests/models/test_t5.py checks it against built models."""
    d, inner = hidden_size, num_heads * head_size
    decoder_layers = num_layers if num_decoder_layers is None else num_decoder_layers
    attention = 4 * d * inner + d  # q, k, v, o and the sublayer's RMSNorm scale
    feedforward = (3 if gated_feedforward else 2) * d * intermediate_size + d
    stack_extras = num_buckets * num_heads + d  # the relative table and the final norm
    encoder = num_layers * (attention + feedforward) + stack_extras
    decoder = decoder_layers * (2 * attention + feedforward) + stack_extras
    tables = vocab_size * d * (1 if tie_embeddings else 2)
    return encoder + decoder + tables
