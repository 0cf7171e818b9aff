"""The gin factory of every encoder family's backbone (the edge of the config system).

`backbone(preset=...)` builds any family: the preset name picks it (preset names are unique
across families, see FAMILIES), an experiment file overrides only what differs (a tiny twin:
`num_layers = 2`, `hidden_size = 128`, ...). The task passes `default_vocab_size` (the
vocabulary the data was made with), which a bound `vocab_size` overrides; with neither (e.g.
`garden.train --summary` without a vocabulary) the preset's published size is used. The family
names (`bert_backbone`, `roberta_backbone`, `albert_backbone`, `distilbert_backbone`) are the
same factory with the family's default preset, so existing bindings such as
`bert_backbone.dropout = 0.0` keep working. `electra_towers` builds ELECTRA's two towers on it.
Models never import gin: only these functions are configurable.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Dict, Optional

import gin


@dataclasses.dataclass(frozen=True)
class Family:
    """One row of the family table: where a family's backbone class and presets live."""

    name: str
    backbone: str  # "module:Class"
    presets: str   # module with a PRESETS dict (preset name -> complete constructor config)
    default_preset: str
    # Generative families: "module:Class" of the GenerativeLM (garden/models/generative.py)
    # made from the backbone, Class(backbone) -> the model that trains, decodes and serves.
    lm: str = ""

    def backbone_class(self):
        module, cls = self.backbone.split(":")
        return getattr(importlib.import_module(module), cls)

    def preset_table(self) -> Dict[str, Dict]:
        return importlib.import_module(self.presets).PRESETS


_BERT = "garden.models.bert.backbone:BertBackbone"
# SpanBERT and ERNIE are BERT's encoder (ERNIE binds bert_backbone with its own vocabulary).
FAMILIES = (
    Family("bert", _BERT, "garden.models.bert.presets", "bert_base"),
    Family("spanbert", _BERT, "garden.models.spanbert.presets", "spanbert_base"),
    Family("roberta", "garden.models.roberta.backbone:RobertaBackbone",
           "garden.models.roberta.presets", "roberta_base"),
    Family("albert", "garden.models.albert.backbone:AlbertBackbone",
           "garden.models.albert.presets", "albert_base"),
    Family("electra", "garden.models.electra.backbone:ElectraBackbone",
           "garden.models.electra.presets", "electra_small"),
    Family("distilbert", "garden.models.distilbert.backbone:DistilBertBackbone",
           "garden.models.distilbert.presets", "distilbert_base"),
    Family("gpt", "garden.models.gpt.backbone:GPTBackbone", "garden.models.gpt.presets", "gpt",
           lm="garden.models.gpt.backbone:GPTCausalLM"),
    Family("gpt3", "garden.models.gpt3.backbone:GPT3Backbone", "garden.models.gpt3.presets",
           "gpt3_small", lm="garden.models.gpt3.backbone:GPT3CausalLM"),
    Family("bart", "garden.models.bart.backbone:BartBackbone", "garden.models.bart.presets", "bart_base", lm="garden.models.bart.backbone:BartSeq2SeqLM"),
    Family("gpt2", "garden.models.gpt2.backbone:GPT2Backbone", "garden.models.gpt2.presets",
           "gpt2_small", lm="garden.models.gpt2.causal_lm:GPT2CausalLM"),
    Family("xlnet", "garden.models.xlnet.backbone:XLNetBackbone", "garden.models.xlnet.presets", "xlnet_base"),
    Family("t5", "garden.models.t5:T5Backbone", "garden.models.t5.presets", "t5_small", lm="garden.models.t5:T5Seq2SeqLM"),
)


def family_of(preset: str) -> Family:
    """The family whose presets hold `preset`."""
    for family in FAMILIES:
        if preset in family.preset_table():
            return family
    known = sorted(name for family in FAMILIES for name in family.preset_table())
    raise ValueError(f"unknown backbone preset {preset!r}; choose one of {known} (bind e.g. "
                     "backbone.preset = 'bert_base')")


def preset_config(preset: str, default_vocab_size: Optional[int] = None,
                  default_padding_idx: Optional[int] = None, **overrides) -> Dict:
    """The preset's config with the task's defaults, then the non-None overrides, over it."""
    config = dict(family_of(preset).preset_table()[preset])
    if default_vocab_size is not None:
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


def _family_factory(family_name: str):
    """`backbone` under a family's gin name, defaulting to that family's preset."""
    family = next(f for f in FAMILIES if f.name == family_name)

    def factory(default_vocab_size: Optional[int] = None,
                default_padding_idx: Optional[int] = None, preset: str = family.default_preset,
                **overrides):
        return backbone(default_vocab_size, default_padding_idx, preset, **overrides)

    factory.__name__ = factory.__qualname__ = f"{family_name}_backbone"
    factory.__doc__ = (f"`backbone` with preset {family.default_preset!r} by default: the gin "
                       f"name {family_name}_backbone of the family's configs.")
    return factory


roberta_backbone = gin.configurable(_family_factory("roberta"))
albert_backbone = gin.configurable(_family_factory("albert"))
distilbert_backbone = gin.configurable(_family_factory("distilbert"))
bert_backbone = gin.configurable(_family_factory("bert"))

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
        raise ValueError(f"preset {preset!r} is a {family.name} encoder, which does not "
                         "generate; choose a preset of a generative family (gpt, gpt2, gpt3, "
                         "t5, bart)")
    module, cls = family.lm.split(":")
    lm_class = getattr(importlib.import_module(module), cls)
    return lm_class(backbone(default_vocab_size, preset=preset, **overrides))
