"""RoBERTa (Liu et al., 2019): backbone, masked LM pretrainer and loss, presets, HF import."""

from garden.models.family import FamilySpec
from garden.models.roberta.backbone import RobertaBackbone, padding_offset_positions
from garden.models.roberta.presets import PRESETS, untrained_roberta_backbone
from garden.models.roberta.pretrainer import RobertaPretrainer, roberta_pretrain_loss

__all__ = ["SPEC", "RobertaBackbone", "RobertaPretrainer", "roberta_pretrain_loss", "PRESETS",
           "untrained_roberta_backbone", "padding_offset_positions"]

SPEC = FamilySpec(
    name="roberta", backbone=RobertaBackbone,
    tokenizer="bpe", layout="roberta", lower_case=False,
    pretrainer=RobertaPretrainer,
    pretraining="garden.tasks.pretraining.roberta:RECORD",
    converters={"huggingface": ".conversion:from_huggingface"})
