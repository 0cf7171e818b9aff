"""The gin factory of every encoder family's backbone (the edge of the config system).

`backbone(preset=...)` builds any family: the preset name picks it (preset names are unique
across the families of garden.models.families(), each family's FamilySpec names its presets
module), an experiment file overrides only what differs (a tiny twin: `num_layers = 2`,
`hidden_size = 128`, ...). The task passes `default_vocab_size` (the
vocabulary the data was made with), which a bound `vocab_size` overrides; with neither (e.g.
`garden.train --summary` without a vocabulary) the preset's published size is used. Two
backbones of one run (DistilBERT's teacher and student) are two gin scopes of it
(`@teacher/backbone`, `@student/backbone`). `electra_towers` builds ELECTRA's two towers on it
and `generative_lm` a generative family's LM. Models never import gin: only these functions are
configurable.
"""

from __future__ import annotations

import inspect
from typing import Dict, Optional

import gin

from garden import models
from garden.models.family import FamilySpec


def family_of(preset: str) -> FamilySpec:
    """The family whose presets hold `preset`."""
    for family in models.families():
        if preset in family.preset_table():
            return family
    known = sorted(name for family in models.families() for name in family.preset_table())
    raise ValueError(f"unknown backbone preset {preset!r}; choose one of {known} (bind e.g. "
                     "backbone.preset = 'bert_base')")


def preset_config(preset: str, default_vocab_size: Optional[int] = None,
                  default_padding_idx: Optional[int] = None, **overrides) -> Dict:
    """The preset's config with the task's defaults, then the non-None overrides, over it."""
    family = family_of(preset)
    config = dict(family.preset_table()[preset])
    # ELMo reads characters: its backbone has no word vocabulary to size.
    if default_vocab_size is not None and \
            "vocab_size" in inspect.signature(family.backbone_class()).parameters:
        config["vocab_size"] = default_vocab_size
    # Only RoBERTa's positions depend on the <pad> id; other families take no padding_idx.
    if default_padding_idx is not None and "padding_idx" in config:
        config["padding_idx"] = default_padding_idx
    config.update({k: v for k, v in overrides.items() if v is not None})
    return config


@gin.configurable
def backbone(default_vocab_size: Optional[int] = None, default_padding_idx: Optional[int] = None,
             preset: str = "bert_base", **overrides):
    """A freshly initialised backbone of `preset`, of whichever family holds it.

    Args:
        default_vocab_size: the task's vocabulary size; a bound `vocab_size` wins over it.
        default_padding_idx: the task's <pad> id (RoBERTa's positions are offset by it); a
            bound `padding_idx` wins over it.
        preset: a preset name of garden/models/<family>/presets.py ("bert_tiny", "roberta_base",
            "albert_base", "electra_small", "distilbert_base", "spanbert_base", ...).
        **overrides: constructor arguments of the family's backbone (None = the preset's).

    Example (gin): backbone.preset = 'albert_base'
                   backbone.num_layers = 2
    """
    family = family_of(preset)
    return family.backbone_class()(**preset_config(
        preset, default_vocab_size, default_padding_idx, **overrides))


_TOWER_SIZES = ("hidden_size", "num_heads", "intermediate_size")


@gin.configurable
def electra_towers(default_vocab_size: Optional[int] = None, preset: str = "electra_small",
                   generator_hidden_size: Optional[int] = None,
                   generator_num_heads: Optional[int] = None,
                   generator_intermediate_size: Optional[int] = None, **overrides) -> Dict:
    """ELECTRA's two towers of `preset` ("electra_small" | "electra_base" | "electra_large",
    Clark et al. 2020 tables 6-7): {"generator", "discriminator"}, sharing one embeddings layer.

    The overrides (depth, vocabulary, E, dropout, ...) apply to both towers, except
    hidden_size/num_heads/intermediate_size, which size the discriminator; the generator takes
    its own generator_* values (default: the preset's published fraction of the discriminator).
    """
    from garden.models.electra.presets import GENERATORS

    if family_of(preset).name != "electra":
        raise ValueError(f"electra_towers.preset={preset!r} is not an ELECTRA preset; choose "
                         f"one of {sorted(GENERATORS)}")
    shared = {k: v for k, v in overrides.items() if k not in _TOWER_SIZES}
    discriminator = backbone(default_vocab_size, preset=preset, name="discriminator", **overrides)
    generator_sizes = {**GENERATORS[preset], **{k: v for k, v in dict(
        hidden_size=generator_hidden_size, num_heads=generator_num_heads,
        intermediate_size=generator_intermediate_size).items() if v is not None}}
    generator = backbone(default_vocab_size, preset=preset, name="generator",
                         embeddings=discriminator.embeddings, **{**shared, **generator_sizes})
    return {"generator": generator, "discriminator": discriminator}


@gin.configurable
def electra_discriminator(default_vocab_size: Optional[int] = None):
    """The discriminator tower of `electra_towers`, for fine-tuning (Clark et al. 2020 fine-tune
    the discriminator only). It takes electra_towers' bindings, so a pretraining size file
    (configs/models/electra_tiny.gin) sizes the fine-tuned backbone exactly as the checkpoint's;
    restore it from the pretraining checkpoint's `discriminator` object. The generator tower
    built alongside is dropped."""
    return electra_towers(default_vocab_size=default_vocab_size)["discriminator"]


@gin.configurable
def generative_lm(default_vocab_size: Optional[int] = None, preset: str = "gpt2_small",
                  **overrides):
    """The GenerativeLM of a generative family's `preset` (GPT, GPT-2, GPT-3-style, T5, BART):
    `backbone(...)` of that preset wrapped in the family's `lm` class; the arguments are
    `backbone`'s. The LM tasks (causal LM and text-to-text fine-tuning) take it as their model.

    Example (gin): generative_lm.preset = 'gpt2_tiny'
    """
    family = family_of(preset)
    if not family.lm:
        generative = sorted(f.name for f in models.families() if f.lm)
        raise ValueError(f"preset {preset!r} is a {family.name} encoder, which does not "
                         f"generate; choose a preset of a generative family "
                         f"({', '.join(generative)})")
    return family.lm_class()(backbone(default_vocab_size, preset=preset, **overrides))
