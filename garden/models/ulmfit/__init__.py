"""ULMFiT (Howard & Ruder, 2018): the AWD-LSTM encoder with concat pooling, its tied-softmax
language model, presets.

Text goes through the garden's tokenizers (ULMFiT's own spaCy word vocabulary is not one of
them): WordPiece by default, [CLS] text [SEP] as its xxbos marks a text's start.
"""

from garden.models.family import FamilySpec
from garden.models.ulmfit.backbone import AwdLstmBackbone
from garden.models.ulmfit.presets import PRESETS, untrained_ulmfit_backbone
from garden.models.ulmfit.lm import AwdLstmLM

__all__ = ["SPEC", "AwdLstmBackbone", "PRESETS", "untrained_ulmfit_backbone"]

SPEC = FamilySpec(
    name="ulmfit", backbone=AwdLstmBackbone,
    tokenizer="wordpiece", layout="bert", lower_case=True,
    pretrainer=AwdLstmLM,
    pretraining="garden.tasks.pretraining.ulmfit:RECORD")
