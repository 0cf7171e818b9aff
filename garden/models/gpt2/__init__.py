"""GPT-2 (Radford et al., 2019): decoder-only backbone, causal LM, presets, converters."""

from garden.models.family import FamilySpec
from garden.models.gpt2.backbone import GPT2Backbone
from garden.models.gpt2.causal_lm import GPT2CausalLM
from garden.models.gpt2.presets import PRESETS, parameter_count

__all__ = ["SPEC", "GPT2Backbone", "GPT2CausalLM", "PRESETS", "parameter_count"]

SPEC = FamilySpec(
    name="gpt2", backbone="garden.models.gpt2.backbone:GPT2Backbone",
    presets="garden.models.gpt2.presets", default_preset="gpt2_small",
    tokenizer="bpe", layout="gpt2", lower_case=False,
    lm="garden.models.gpt2.causal_lm:GPT2CausalLM", framing="causal",
    converters={"huggingface": "garden.models.gpt2.conversion:from_huggingface",
                "tf1": "garden.models.gpt2.conversion:from_tf1"},
    hf_model_types=("gpt2",),
    hf_tokenizer_files=("vocab.json", "merges.txt"),
    tf1_tokenizer_files={"vocab.json": "encoder.json", "merges.txt": "vocab.bpe"},
    pretraining="garden.tasks.pretraining_gpt2:RECORD")
