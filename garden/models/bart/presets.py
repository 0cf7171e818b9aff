"""BART architecture presets: the sizes of fairseq's bart.base and bart.large (Lewis et al.,
2020, section 2.1 / 3: base 6 + 6 layers d768, large 12 + 12 layers d1024), the distilled
summarizers of Shleifer & Rush (2020, "Pre-trained Summarization Distillation"; Hugging Face
sshleifer/distilbart-cnn-12-6 and sshleifer/distilbart-xsum-12-3: bart-large's width, 12
encoder layers, 6 or 3 decoder layers, the 50,264-row table of bart-large-cnn / -xsum), and a
tiny twin.

Each entry is a complete BartBackbone config. Parameter counts (`bart_parameter_count`, equal
to BartBackbone.count_params(), tested): bart_base 139,420,416 and bart_large 406,291,456,
Hugging Face's BartModel counts with 1026 position rows per stack; distilbart_cnn_12_6
305,510,400 and distilbart_xsum_12_3 255,120,384 (the model cards' 306M and 255M).
final_logits_bias (one value per token, a buffer in Hugging Face, a non-trainable weight of
BartSeq2SeqLM) is NOT included.
Architectures only: weights come from the converters.
"""

from __future__ import annotations

from typing import Dict

# GPT-2 byte-level BPE with fairseq's 4 specials; 1024 positions (+ 2 offset rows).
_COMMON = dict(vocab_size=50265, max_sequence_length=1024, layer_norm_epsilon=1e-5)

PRESETS: Dict[str, Dict] = {
    "bart_base": dict(num_layers=6, hidden_size=768, num_heads=12, intermediate_size=3072,
                      **_COMMON),
    "bart_large": dict(num_layers=12, hidden_size=1024, num_heads=16, intermediate_size=4096,
                       **_COMMON),
    # Distilled summarizers: encoder 12 layers, decoder num_decoder_layers (Hugging Face
    # config.json encoder_layers / decoder_layers), vocab 50264 (bart-large-cnn's table).
    "distilbart_cnn_12_6": dict(num_layers=12, num_decoder_layers=6, hidden_size=1024,
                                num_heads=16, intermediate_size=4096,
                                **dict(_COMMON, vocab_size=50264)),
    "distilbart_xsum_12_3": dict(num_layers=12, num_decoder_layers=3, hidden_size=1024,
                                 num_heads=16, intermediate_size=4096,
                                 **dict(_COMMON, vocab_size=50264)),
    # CPU twin for tests and benchmarks/objectives_learn.py (vocab from the task's BPE).
    "bart_tiny": dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512,
                      vocab_size=50265, max_sequence_length=512, layer_norm_epsilon=1e-5),
}


def bart_parameter_count(vocab_size: int, num_layers: int, hidden_size: int,
                         intermediate_size: int, max_sequence_length: int,
                         num_decoder_layers=None, **_) -> int:
    """Parameters of a BartBackbone config, counted without building it (bart_large needs
    1.6 GB in float32): shared table, two position tables of max_sequence_length + 2 rows,
    two embedding LayerNorms, num_layers encoder layers (attention, FFN, 2 LayerNorms) and
    num_decoder_layers (None: num_layers) decoder layers (with cross-attention and its
    LayerNorm)."""
    h, f = hidden_size, intermediate_size
    attention = 4 * (h * h + h)
    feedforward = (h * f + f) + (f * h + h)
    norm = 2 * h
    encoder_layer = attention + feedforward + 2 * norm
    decoder_layer = 2 * attention + feedforward + 3 * norm
    embeddings = vocab_size * h + 2 * (max_sequence_length + 2) * h + 2 * norm
    decoder_layers = num_layers if num_decoder_layers is None else num_decoder_layers
    return embeddings + num_layers * encoder_layer + decoder_layers * decoder_layer
