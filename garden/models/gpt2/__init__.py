"""GPT-2 (Radford et al., 2019): decoder-only backbone, causal LM, presets, converters."""

from garden.models.family import FamilySpec
from garden.models.gpt2.backbone import GPT2Backbone
from garden.models.gpt2.causal_lm import GPT2CausalLM
from garden.models.gpt2.presets import PRESETS, parameter_count

__all__ = ["SPEC", "GPT2Backbone", "GPT2CausalLM", "PRESETS", "parameter_count"]

SPEC = FamilySpec(
    name="gpt2", backbone=GPT2Backbone,
    tokenizer="bpe", layout="gpt2", lower_case=False,
    lm=GPT2CausalLM, framing="causal",
    converters={"huggingface": ".conversion:from_huggingface", "tf1": ".conversion:from_tf1",
                "keras_hub": ".keras_hub:from_keras_hub"},
    tf1_tokenizer_files={"vocab.json": "encoder.json", "merges.txt": "vocab.bpe"},
    pretraining="garden.tasks.pretraining.gpt2:RECORD")
