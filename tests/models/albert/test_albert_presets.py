import pytest

from garden.models.albert.backbone import AlbertBackbone
from garden.models.albert.presets import PRESETS, untrained_albert_backbone
from garden.models.albert.pretrainer import AlbertPretrainer

# (layers, hidden, heads, feed-forward) of the released checkpoints (Lan et al., 2020, table 1;
# heads from the released albert_config.json files: xlarge has 16 heads of width 128).
PUBLISHED = {
    "albert_base": (12, 768, 12, 3072),
    "albert_large": (24, 1024, 16, 4096),
    "albert_xlarge": (24, 2048, 16, 8192),
    "albert_xxlarge": (12, 4096, 64, 16384),
}


def _parameter_count(V, L, H, F, E=128, P=512, T=2, share="all", num_groups=1):
    """Parameters of an AlbertBackbone, counted by hand."""
    embeddings = V * E + P * E + T * E + 2 * E + (E * H + H)   # tables, LayerNorm at E, E -> H
    attention = 4 * (H * H + H) + 2 * H                        # q, k, v, output + LayerNorm
    feed_forward = (H * F + F) + (F * H + H) + 2 * H           # two dense + LayerNorm
    distinct = {"all": num_groups * (attention + feed_forward),
                "attention": attention + L * feed_forward,
                "ffn": L * attention + feed_forward,
                "none": L * (attention + feed_forward)}[share]
    pooler = H * H + H
    return embeddings + distinct + pooler


def test_presets_are_the_published_sizes():
    assert set(PRESETS) == set(PUBLISHED)
    for name, (layers, hidden, heads, ffn) in PUBLISHED.items():
        p = PRESETS[name]
        assert (p["num_layers"], p["hidden_size"], p["num_heads"], p["intermediate_size"]) \
            == (layers, hidden, heads, ffn), name
        assert (p["vocab_size"], p["embedding_size"], p["max_sequence_length"],
                p["type_vocab_size"], p["share"], p["num_groups"], p["dropout"],
                p["activation"]) == (30000, 128, 512, 2, "all", 1, 0.0, "gelu_new"), name


def test_untrained_applies_overrides():
    backbone = untrained_albert_backbone("albert_base", vocab_size=1000, num_layers=2,
                                           hidden_size=64, num_heads=2, intermediate_size=128)
    assert isinstance(backbone, AlbertBackbone)
    config = backbone.get_config()
    assert (config["vocab_size"], config["num_layers"], config["embedding_size"]) == (1000, 2, 128)
    assert PRESETS["albert_base"]["vocab_size"] == 30000  # the preset itself is not modified


def test_unknown_preset_names_the_choices():
    with pytest.raises(ValueError, match="albert_xxlarge"):
        untrained_albert_backbone("albert_huge")


# One share mode with groups here; each mode with one group at 12 layers below.
@pytest.mark.parametrize("share,num_groups", [("all", 2)])
def test_count_formula_matches_keras_on_a_small_model(share, num_groups):
    backbone = AlbertBackbone(vocab_size=97, num_layers=4, hidden_size=32, num_heads=4,
                              intermediate_size=37, embedding_size=16, max_sequence_length=40,
                              share=share, num_groups=num_groups)
    assert backbone.count_params() == _parameter_count(97, 4, 32, 37, E=16, P=40, share=share,
                                                       num_groups=num_groups)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_equal_hugging_face(name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    p = PRESETS[name]
    config = transformers.AlbertConfig(
        vocab_size=p["vocab_size"], embedding_size=p["embedding_size"],
        hidden_size=p["hidden_size"], num_hidden_layers=p["num_layers"],
        num_attention_heads=p["num_heads"], intermediate_size=p["intermediate_size"],
        max_position_embeddings=p["max_sequence_length"], type_vocab_size=p["type_vocab_size"])
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        reference = sum(t.numel() for t in transformers.AlbertModel(config).parameters())
    expected = _parameter_count(p["vocab_size"], p["num_layers"], p["hidden_size"],
                                p["intermediate_size"])
    assert expected == reference
    if name in ("albert_base", "albert_large"):  # a couple of seconds each; xxlarge takes ~20 s
        assert untrained_albert_backbone(name).count_params() == reference
    # Paper, table 1: 12M, 18M, 60M, 235M (its rounding); HF's model list: 11M, 17M, 58M, 223M.
    assert reference == {"albert_base": 11_683_584, "albert_large": 17_683_968,
                         "albert_xlarge": 58_724_864, "albert_xxlarge": 222_595_584}[name]


def test_pretrainer_parameter_count_equals_hugging_face():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.AlbertConfig(hidden_size=768, num_attention_heads=12,
                                       intermediate_size=3072)
    with torch.device("meta"):
        # parameters() lists the tied decoder weight and bias once, as our one table + one bias.
        reference = sum(t.numel() for t in transformers.AlbertForPreTraining(config).parameters())
    assert AlbertPretrainer(untrained_albert_backbone("albert_base")).count_params() == reference


@pytest.mark.parametrize("share,millions", [("all", 12), ("ffn", 38), ("attention", 64),
                                            ("none", 89)])
def test_sharing_ablation_sizes_of_the_paper(share, millions):
    # Lan et al. (2020), table 4, ALBERT-base with E = 128: all-shared 12M, shared-FFN 38M,
    # shared-attention 64M, not-shared 89M. Building them takes over a minute here, so the
    # backbone's sharing is counted at the paper's depth (12 layers) on narrow widths, where
    # it must equal the formula (with one group of shared weights; two groups are counted
    # above); the formula then counts the paper's widths.
    narrow = AlbertBackbone(vocab_size=97, num_layers=12, hidden_size=32, num_heads=4,
                            intermediate_size=37, embedding_size=16, max_sequence_length=40,
                            share=share)
    assert narrow.count_params() == _parameter_count(97, 12, 32, 37, E=16, P=40, share=share)
    count = _parameter_count(30000, 12, 768, 3072, share=share)
    assert abs(count / 1e6 - millions) < 1.0, count
