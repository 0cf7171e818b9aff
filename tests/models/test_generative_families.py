"""Every generative family's GenerativeLM in one process, in two orders.

Keras' functional construction of a Model subclass (`super().__init__(inputs=..., outputs=...)`)
rewrites the bases of every class above it: when GPT2CausalLM was functional, building one
turned GenerativeLM into a Functional subclass and every LM built afterwards (GPT, GPT-3, T5,
BART) failed with "Functional.__init__() missing ... inputs and outputs". The families are
subclassed models now and GenerativeLM refuses the functional form; these tests would fail if
either came back.
"""

from __future__ import annotations

import keras
import pytest

from garden import models
from garden.models import factory
from garden.models.generative import GenerativeLM

PRESETS = ("gpt2_tiny", "gpt_tiny", "gpt3_tiny", "t5_tiny", "bart_tiny")


def test_every_family_builds_after_every_other():
    """gpt2 first, then the rest, then the reverse order (so each family is built both before
    and after every other one), all in this process; GenerativeLM keeps keras.Model as its
    base and no LM is a functional model."""
    families = set()
    for preset in PRESETS + PRESETS[::-1]:
        lm = factory.generative_lm(preset=preset, vocab_size=50, num_layers=1)
        assert isinstance(lm, GenerativeLM), preset
        assert not isinstance(lm, keras.src.models.functional.Functional), preset
        assert GenerativeLM.__bases__ == (keras.Model,), (preset, GenerativeLM.__bases__)
        families.add(factory.family_of(preset).name)
    assert families == {f.name for f in models.families() if f.lm}  # every generative family


def test_functional_construction_is_refused():
    backbone = factory.backbone(preset="gpt_tiny", vocab_size=50, num_layers=1)

    class FunctionalLM(GenerativeLM):
        def __init__(self, backbone):
            super().__init__(inputs=backbone.input, outputs=backbone.output)

    with pytest.raises(TypeError, match=r"FunctionalLM: a GenerativeLM is built as a "
                                        r"subclassed model .* not from inputs/outputs"):
        FunctionalLM(backbone)
    assert GenerativeLM.__bases__ == (keras.Model,)
