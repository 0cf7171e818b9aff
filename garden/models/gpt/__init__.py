"""GPT (Radford et al., 2018): post-LN decoder, positions in the token table."""

from garden.models.family import FamilySpec
from garden.models.gpt.backbone import GPTBackbone, GPTCausalLM


SPEC = FamilySpec(
    name="gpt", backbone=GPTBackbone,
    tokenizer="bpe", layout="roberta", lower_case=False,
    lm=GPTCausalLM, framing="causal",
    converters={"huggingface": ".conversion:from_huggingface"},
    hf_model_types=("openai-gpt",), hf_tokenizer_files=())
