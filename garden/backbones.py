"""Moved: the backbone gin factories live in garden/models/factory.py.

Kept so that `from garden import backbones` (garden.train's task registration) and
`from garden.backbones import electra_towers` keep working until their callers import
garden.models.factory; it holds no code of its own.
"""

from garden.models.factory import (albert_backbone, backbone, distilbert_backbone,  # noqa: F401
                                   electra_discriminator, electra_towers, roberta_backbone)
