"""CoVe (McCann et al. 2017): the MT-LSTM encoder with its word embeddings ([GloVe(x); CoVe(x)]
features), the attentional translation model that pretrains it, presets.

Text goes through the garden's tokenizers: WordPiece by default, [CLS] text [SEP].
garden.CovePretraining (garden/tasks/pretraining/cove.py) trains the translation model on
sentence pairs; garden.models.cove.sample_pairs writes a synthetic pair task for tests.
"""

from garden.models.cove.backbone import CoveBackbone, read_glove
from garden.models.cove.presets import PRESETS, untrained_cove_backbone
from garden.models.family import FamilySpec
from garden.models.cove.translation import CoveTranslator

__all__ = ["SPEC", "CoveBackbone", "read_glove", "PRESETS", "untrained_cove_backbone"]

SPEC = FamilySpec(
    name="cove", backbone=CoveBackbone,
    tokenizer="wordpiece", layout="bert", lower_case=True,
    pretrainer=CoveTranslator)
