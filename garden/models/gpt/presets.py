"""GPT (2018) architecture presets: the released model (openai/finetune-transformer-lm, Hugging
Face "openai-gpt") and a tiny twin for tests and learn runs. Architectures only: weights come
from garden.models.gpt.conversion.

gpt: 40,478 BPE tokens, 512 positions, 12 layers x 768, 12 heads, 3072 feed-forward, no special
tokens: 116,534,784 parameters (= Hugging Face OpenAIGPTModel; see backbone.py for the
fine-tuning specials).
"""

from __future__ import annotations

from typing import Dict

PRESETS: Dict[str, Dict] = {
    "gpt": dict(vocab_size=40478, num_layers=12, hidden_size=768, num_heads=12,
                intermediate_size=3072, max_sequence_length=512, num_special_tokens=0),
    "gpt_tiny": dict(vocab_size=40478, num_layers=2, hidden_size=64, num_heads=2,
                     intermediate_size=256, max_sequence_length=128, num_special_tokens=0),
}
