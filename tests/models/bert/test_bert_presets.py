import pytest

from garden.models.bert.backbone import BertBackbone
from garden.models.bert.presets import PRESETS, untrained_bert_backbone

from bert_reference import PUBLISHED


def test_presets_are_the_published_sizes():
    assert set(PRESETS) == set(PUBLISHED)
    for name, (layers, hidden, heads, ffn) in PUBLISHED.items():
        preset = PRESETS[name]
        assert (preset["num_layers"], preset["hidden_size"], preset["num_heads"],
                preset["intermediate_size"]) == (layers, hidden, heads, ffn), name
        assert (preset["vocab_size"], preset["max_sequence_length"], preset["type_vocab_size"]) \
            == (30522, 512, 2), name


def test_untrained_applies_overrides():
    backbone = untrained_bert_backbone("bert_tiny", vocab_size=1000, max_sequence_length=64,
                                         dropout=0.0)
    assert isinstance(backbone, BertBackbone)
    config = backbone.get_config()
    assert (config["vocab_size"], config["max_sequence_length"], config["dropout"]) == (1000, 64, 0.0)
    assert (config["num_layers"], config["hidden_size"]) == (2, 128)
    assert PRESETS["bert_tiny"]["vocab_size"] == 30522  # the preset itself is not modified


def test_unknown_preset_names_the_choices():
    with pytest.raises(ValueError, match="bert_base"):
        untrained_bert_backbone("bert_huge")
