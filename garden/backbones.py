"""gin factories of the encoder families' backbones (the edge of the config system).

`bert_backbone` builds BERT from its arguments; the other factories build their families from
their presets (garden/models/<family>/presets.py): an experiment file names a preset and
overrides only what differs (a tiny twin: `num_layers = 2`, `hidden_size = 128`, ...). Each
factory takes `default_vocab_size` from the task (the vocabulary the data was made with), which
the config's own `vocab_size` overrides; with neither (e.g. `garden.train --summary` without a
vocabulary) the preset's published vocabulary size is used. Models never import gin: only these
functions are configurable.
"""

from __future__ import annotations

from typing import Dict, Optional

import gin


def _config(presets: Dict[str, Dict], family: str, preset: str, default_vocab_size: Optional[int],
            **given) -> Dict:
    """The preset's config with the bound (non-None) values over it; vocab_size from the
    binding, else the task's vocabulary, else the preset."""
    if preset not in presets:
        raise ValueError(f"unknown {family} preset {preset!r}; choose one of {sorted(presets)}")
    config = dict(presets[preset])
    if given.get("vocab_size") is None and default_vocab_size is not None:
        given["vocab_size"] = default_vocab_size
    config.update({k: v for k, v in given.items() if v is not None})
    return config


@gin.configurable
def roberta_backbone(default_vocab_size: Optional[int] = None,
                     default_padding_idx: Optional[int] = None, preset: str = "roberta_base",
                     vocab_size: Optional[int] = None, num_layers: Optional[int] = None,
                     hidden_size: Optional[int] = None, num_heads: Optional[int] = None,
                     intermediate_size: Optional[int] = None,
                     max_sequence_length: Optional[int] = None, padding_idx: Optional[int] = None,
                     dropout: Optional[float] = None, initializer_range: Optional[float] = None):
    """RobertaBackbone of `preset` ("roberta_base" | "roberta_large") with the bound overrides.

    padding_idx (the <pad> id, which RoBERTa's positions are offset by) defaults to the task's
    vocabulary's <pad> (`default_padding_idx`), else the preset's 1 (fairseq's dictionary).
    """
    from garden.models.roberta.backbone import RobertaBackbone
    from garden.models.roberta.presets import PRESETS

    if padding_idx is None:
        padding_idx = default_padding_idx
    return RobertaBackbone(**_config(
        PRESETS, "RoBERTa", preset, default_vocab_size, vocab_size=vocab_size,
        num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
        intermediate_size=intermediate_size, max_sequence_length=max_sequence_length,
        padding_idx=padding_idx, dropout=dropout, initializer_range=initializer_range))


@gin.configurable
def albert_backbone(default_vocab_size: Optional[int] = None, preset: str = "albert_base",
                    vocab_size: Optional[int] = None, num_layers: Optional[int] = None,
                    hidden_size: Optional[int] = None, num_heads: Optional[int] = None,
                    intermediate_size: Optional[int] = None, embedding_size: Optional[int] = None,
                    max_sequence_length: Optional[int] = None, num_groups: Optional[int] = None,
                    share: Optional[str] = None, dropout: Optional[float] = None,
                    activation: Optional[str] = None, initializer_range: Optional[float] = None):
    """AlbertBackbone of `preset` ("albert_base" | "albert_large" | "albert_xlarge" |
    "albert_xxlarge", Lan et al. 2020 table 1) with the bound overrides."""
    from garden.models.albert.backbone import AlbertBackbone
    from garden.models.albert.presets import PRESETS

    return AlbertBackbone(**_config(
        PRESETS, "ALBERT", preset, default_vocab_size, vocab_size=vocab_size,
        num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
        intermediate_size=intermediate_size, embedding_size=embedding_size,
        max_sequence_length=max_sequence_length, num_groups=num_groups, share=share,
        dropout=dropout, activation=activation, initializer_range=initializer_range))


@gin.configurable
def electra_towers(default_vocab_size: Optional[int] = None, preset: str = "electra_small",
                   vocab_size: Optional[int] = None, num_layers: Optional[int] = None,
                   hidden_size: Optional[int] = None, num_heads: Optional[int] = None,
                   intermediate_size: Optional[int] = None, embedding_size: Optional[int] = None,
                   max_sequence_length: Optional[int] = None, dropout: Optional[float] = None,
                   generator_hidden_size: Optional[int] = None,
                   generator_num_heads: Optional[int] = None,
                   generator_intermediate_size: Optional[int] = None) -> Dict:
    """ELECTRA's two towers of `preset` ("electra_small" | "electra_base" | "electra_large",
    Clark et al. 2020 tables 6-7): {"generator", "discriminator"}, sharing one embeddings layer.

    The shared overrides (depth, vocabulary, E, dropout) apply to both towers; the
    discriminator takes hidden_size/num_heads/intermediate_size, the generator its own
    generator_* values (default: the preset's published fraction of the discriminator).
    """
    from garden.models.electra.backbone import ElectraBackbone
    from garden.models.electra.presets import GENERATORS, PRESETS

    shared = _config(PRESETS, "ELECTRA", preset, default_vocab_size, vocab_size=vocab_size,
                     num_layers=num_layers, embedding_size=embedding_size,
                     max_sequence_length=max_sequence_length, dropout=dropout)
    discriminator_config = {**shared, **{k: v for k, v in dict(
        hidden_size=hidden_size, num_heads=num_heads,
        intermediate_size=intermediate_size).items() if v is not None}}
    generator_config = {**shared, **GENERATORS[preset], **{k: v for k, v in dict(
        hidden_size=generator_hidden_size, num_heads=generator_num_heads,
        intermediate_size=generator_intermediate_size).items() if v is not None}}
    discriminator = ElectraBackbone(**discriminator_config, name="discriminator")
    generator = ElectraBackbone(**generator_config, embeddings=discriminator.embeddings,
                                name="generator")
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
def distilbert_backbone(default_vocab_size: Optional[int] = None, preset: str = "distilbert_base",
                        vocab_size: Optional[int] = None, num_layers: Optional[int] = None,
                        hidden_size: Optional[int] = None, num_heads: Optional[int] = None,
                        intermediate_size: Optional[int] = None,
                        max_sequence_length: Optional[int] = None,
                        dropout: Optional[float] = None,
                        attention_dropout: Optional[float] = None,
                        initializer_range: Optional[float] = None):
    """DistilBertBackbone of `preset` ("distilbert_base": L6 H768, Sanh et al. 2019) with the
    bound overrides: the student of garden.Distillation. Its width, heads and feed-forward size
    must equal the teacher's (its layers are copied from the teacher)."""
    from garden.models.distilbert.backbone import DistilBertBackbone
    from garden.models.distilbert.presets import PRESETS

    return DistilBertBackbone(**_config(
        PRESETS, "DistilBERT", preset, default_vocab_size, vocab_size=vocab_size,
        num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
        intermediate_size=intermediate_size, max_sequence_length=max_sequence_length,
        dropout=dropout, attention_dropout=attention_dropout,
        initializer_range=initializer_range))


@gin.configurable
def bert_backbone(default_vocab_size: Optional[int] = None, vocab_size: Optional[int] = None,
                  num_layers: int = 12, hidden_size: int = 768, num_heads: int = 12,
                  intermediate_size: int = 3072, max_sequence_length: int = 512,
                  type_vocab_size: int = 2, dropout: float = 0.1,
                  initializer_range: float = 0.02):
    """BertBackbone from gin bindings; vocab_size defaults to the task's vocabulary size.

    (Moved as-is from garden/train.py, which names no family; the models engineer reconciles
    it with the other factories.)"""
    from garden.models.bert.backbone import BertBackbone

    size = vocab_size if vocab_size is not None else default_vocab_size
    if size is None:
        raise ValueError("bert_backbone.vocab_size is unset and no vocabulary gives it: bind "
                         "bert_backbone.vocab_size or the task's vocab")
    return BertBackbone(vocab_size=size, num_layers=num_layers, hidden_size=hidden_size,
                        num_heads=num_heads, intermediate_size=intermediate_size,
                        max_sequence_length=max_sequence_length, type_vocab_size=type_vocab_size,
                        dropout=dropout, initializer_range=initializer_range)
