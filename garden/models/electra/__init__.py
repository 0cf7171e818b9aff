"""ELECTRA (Clark et al., 2020): towers, replaced token detection pretrainer and loss, presets,
Hugging Face weight import."""

from garden.models.electra.backbone import ElectraBackbone
from garden.models.electra.presets import (GENERATORS, PRESETS, PRETRAINING,
                                           untrained_electra_backbone,
                                           untrained_electra_generator,
                                           untrained_electra_pretrainer)
from garden.models.electra.pretrainer import (ElectraDiscriminator, ElectraDiscriminatorHead,
                                              ElectraGenerator, ElectraMasking,
                                              ElectraPretrainer, ElectraReplacement,
                                              electra_mask, electra_pretrain_loss,
                                              electra_replace)
from garden.models.family import FamilySpec

__all__ = ["SPEC", "ElectraBackbone", "ElectraDiscriminator", "ElectraDiscriminatorHead",
           "ElectraGenerator", "ElectraMasking", "ElectraPretrainer", "ElectraReplacement",
           "electra_mask", "electra_replace", "electra_pretrain_loss", "PRESETS", "GENERATORS",
           "PRETRAINING", "untrained_electra_backbone", "untrained_electra_generator",
           "untrained_electra_pretrainer"]

SPEC = FamilySpec(
    name="electra", backbone=ElectraBackbone,
    tokenizer="wordpiece", layout="bert", lower_case=True,
    pretrainer=ElectraPretrainer,
    pretraining="garden.tasks.pretraining.electra:RECORD",
    converters={"huggingface": ".conversion:from_huggingface", "tf1": ".conversion:from_tf1"})
