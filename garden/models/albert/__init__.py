"""ALBERT (Lan et al., 2020): backbone, pretraining heads and loss, presets, weight import."""

from garden.models.albert.backbone import AlbertBackbone, gelu_approximate
from garden.models.albert.presets import PRESETS, albert_backbone_from_preset
from garden.models.albert.pretrainer import AlbertPretrainer, albert_pretrain_loss

__all__ = ["AlbertBackbone", "AlbertPretrainer", "albert_pretrain_loss", "PRESETS",
           "albert_backbone_from_preset", "gelu_approximate"]
