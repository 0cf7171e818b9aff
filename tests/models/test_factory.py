"""garden.models.factory: one gin factory for every family (the bound preset picks it, gin scopes
build two backbones of one run), and ELECTRA's two towers on it."""

from __future__ import annotations

import collections

import gin
import pytest

from garden import models
from garden.models import factory
from garden.models.albert.backbone import AlbertBackbone
from garden.models.bert.backbone import BertBackbone
from garden.models.distilbert.backbone import DistilBertBackbone
from garden.models.electra.backbone import ElectraBackbone
from garden.models.roberta.backbone import RobertaBackbone

SMALL = dict(num_layers=1, hidden_size=32, num_heads=2, intermediate_size=48)


@pytest.fixture(autouse=True)
def _clear_gin():
    gin.clear_config()
    yield
    gin.clear_config()


def test_preset_names_are_unique_across_families():
    count = collections.Counter(name for family in models.families()
                                for name in family.preset_table())
    assert count and max(count.values()) == 1


@pytest.mark.parametrize("preset,cls", [
    ("bert_tiny", BertBackbone), ("spanbert_tiny", BertBackbone),
    ("roberta_base", RobertaBackbone), ("albert_base", AlbertBackbone),
    ("electra_small", ElectraBackbone), ("distilbert_base", DistilBertBackbone)])
def test_the_preset_picks_the_family(preset, cls):
    model = factory.backbone(default_vocab_size=77, preset=preset, **SMALL)
    assert type(model) is cls
    config = model.get_config()
    assert {k: config[k] for k in SMALL} == SMALL
    assert config["vocab_size"] == 77  # the task's vocabulary
    # Everything not overridden is the preset's.
    preset_config = factory.family_of(preset).preset_table()[preset]
    assert {k: config[k] for k in preset_config if k not in SMALL and k != "vocab_size"} == \
        {k: v for k, v in preset_config.items() if k not in SMALL and k != "vocab_size"}


def test_bound_values_win_over_the_task_defaults_and_none_means_the_preset():
    model = factory.backbone(default_vocab_size=77, default_padding_idx=0, preset="roberta_base",
                             vocab_size=50, dropout=None, **SMALL)
    assert (model.vocab_size, model.padding_idx, model.dropout) == (50, 0, 0.1)
    # Only RoBERTa takes the <pad> id; BERT ignores it.
    assert "padding_idx" not in factory.backbone(default_padding_idx=0, preset="bert_tiny",
                                                 **SMALL).get_config()
    # Without a vocabulary the preset's published size is used.
    assert factory.backbone(preset="albert_base", **SMALL).vocab_size == 30000


def test_unknown_preset_names_the_choices():
    with pytest.raises(ValueError, match="unknown backbone preset 'bert_huge'.*bert_base"):
        factory.backbone(preset="bert_huge")


def test_gin_bindings_pick_the_family_by_preset_and_scopes_build_two_backbones():
    """One factory for every family: the bound preset picks it, and two backbones of one run
    (distillation's teacher and student) are two scopes reading the unscoped bindings too."""
    gin.parse_config("""
        backbone.preset = 'bert_tiny'
        backbone.num_layers = 1
        student/backbone.preset = 'distilbert_base'
        student/backbone.hidden_size = 32
        student/backbone.num_heads = 2
        roberta/backbone.preset = 'roberta_base'
        roberta/backbone.hidden_size = 32
        roberta/backbone.num_heads = 2
    """)
    teacher = factory.backbone(default_vocab_size=60)
    assert isinstance(teacher, BertBackbone)
    assert (teacher.num_layers, teacher.hidden_size, teacher.vocab_size) == (1, 128, 60)
    with gin.config_scope("student"):
        student = factory.backbone(default_vocab_size=60)
    assert isinstance(student, DistilBertBackbone)
    assert (student.num_layers, student.hidden_size) == (1, 32)  # the unscoped depth, its width
    with gin.config_scope("roberta"):
        roberta = factory.backbone(default_vocab_size=60)
    assert isinstance(roberta, RobertaBackbone)
    assert (roberta.num_layers, roberta.hidden_size, roberta.vocab_size) == (1, 32, 60)


def test_backbone_defaults_to_bert_base():
    model = factory.backbone(default_vocab_size=90, num_layers=1)
    assert isinstance(model, BertBackbone)
    assert (model.hidden_size, model.num_heads, model.vocab_size) == (768, 12, 90)


def test_electra_towers_share_embeddings_and_size_each_tower():
    towers = factory.electra_towers(default_vocab_size=70, preset="electra_small", num_layers=1,
                                    hidden_size=64, generator_num_heads=2)
    disc, gen = towers["discriminator"], towers["generator"]
    assert disc.embeddings is gen.embeddings
    assert (disc.hidden_size, disc.num_heads, disc.num_layers) == (64, 4, 1)
    # The generator keeps the preset's published fraction unless told otherwise.
    assert (gen.hidden_size, gen.num_heads, gen.num_layers, gen.vocab_size) == (64, 2, 1, 70)
    assert disc.name == "discriminator" and gen.name == "generator"
    with pytest.raises(ValueError, match="not an ELECTRA preset"):
        factory.electra_towers(preset="bert_tiny")


def test_electra_discriminator_takes_the_towers_bindings():
    gin.parse_config("electra_towers.num_layers = 1\nelectra_towers.embedding_size = 16")
    disc = factory.electra_discriminator(default_vocab_size=40)
    assert isinstance(disc, ElectraBackbone)
    assert (disc.num_layers, disc.embedding_size, disc.vocab_size) == (1, 16, 40)
