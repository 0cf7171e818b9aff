"""ELMo (Peters et al., 2018): the character-CNN biLM backbone, presets.

Text goes through the garden's tokenizers; each piece's characters (make_pretrain
--objective=bilm --characters) are the model's input.
"""

from garden.models.elmo.backbone import ELMO_FILTERS, CharacterEncoder, ElmoBackbone, Highway
from garden.models.elmo.presets import PRESETS, untrained_elmo_backbone
from garden.models.family import FamilySpec
from garden.models.elmo.bilm import ElmoBiLM

__all__ = ["SPEC", "ElmoBackbone", "CharacterEncoder", "Highway", "ELMO_FILTERS", "PRESETS",
           "untrained_elmo_backbone"]

SPEC = FamilySpec(
    name="elmo", backbone=ElmoBackbone,
    tokenizer="wordpiece", layout="bert", lower_case=False,
    pretrainer=ElmoBiLM,
    pretraining="garden.tasks.pretraining.elmo:RECORD",
    converters={"allennlp": ".conversion:from_allennlp"})
