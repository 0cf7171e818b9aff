"""GPT (Radford et al., 2018): post-LN decoder, positions in the token table."""

from garden.models.family import FamilySpec


SPEC = FamilySpec(
    name="gpt", backbone="garden.models.gpt.backbone:GPTBackbone",
    presets="garden.models.gpt.presets", default_preset="gpt",
    tokenizer="bpe", layout="roberta", lower_case=False,
    lm="garden.models.gpt.backbone:GPTCausalLM", framing="causal",
    converters={"huggingface": "garden.models.gpt.conversion:from_huggingface"},
    hf_model_types=("openai-gpt",))
