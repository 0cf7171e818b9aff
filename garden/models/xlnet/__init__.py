"""XLNet (Yang et al., 2019): two-stream relative-attention backbone with Transformer-XL memory,
permutation-LM pretrainer and loss, presets, Hugging Face import."""

from garden.models.family import FamilySpec
from garden.models.xlnet.backbone import XLNetBackbone
from garden.models.xlnet.presets import PRESETS, untrained_xlnet_backbone
from garden.models.xlnet.pretrainer import XLNetPretrainer, xlnet_pretrain_loss

__all__ = ["SPEC", "XLNetBackbone", "XLNetPretrainer", "xlnet_pretrain_loss", "PRESETS",
           "untrained_xlnet_backbone"]

SPEC = FamilySpec(
    name="xlnet", backbone=XLNetBackbone,
    tokenizer="sentencepiece", layout="xlnet", lower_case=False,
    pretrainer=XLNetPretrainer,
    pretraining="garden.tasks.pretraining.xlnet:RECORD",
    converters={"huggingface": ".conversion:from_huggingface"})
