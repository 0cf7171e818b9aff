import numpy as np
import keras
import pytest

from garden.models.electra.backbone import ElectraBackbone
from garden.models.electra.presets import (GENERATORS, PRESETS, PRETRAINING,
                                           untrained_electra_backbone,
                                           untrained_electra_pretrainer)
from model_testing import (assert_config_round_trip, assert_encoder_output_shapes,
                           assert_keras_file_round_trip, padded_batch)

VOCAB = 100
TINY = dict(vocab_size=VOCAB, num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64,
            embedding_size=16, max_sequence_length=64)


def _inputs(batch=2, length=12, real_lengths=(12, 7)):
    return padded_batch(VOCAB, batch, length, 0, real_lengths, low=5)


@pytest.fixture(scope="module")
def backbone():
    keras.utils.set_random_seed(1)
    return ElectraBackbone(**TINY)


def test_output_shapes_and_no_pooler(backbone):
    out = backbone(_inputs(batch=3, length=10, real_lengths=(10, 4, 1)))
    assert_encoder_output_shapes(out, 3, 10, 32, pooled=False)
    # No pooler dense (HF ElectraModel has none): the pooled output is the [CLS] state itself,
    # as the original's get_pooled_output, and no layer holds pooler weights.
    np.testing.assert_array_equal(out["pooled_output"].numpy(),
                                  out["sequence_output"].numpy()[:, 0])
    assert not [w.path for w in backbone.weights if "pool" in w.path]
    # Tables at E = 16, this tower's own projection to H = 32.
    assert tuple(backbone.token_embedding.embeddings.shape) == (VOCAB, 16)
    assert tuple(backbone.embeddings_project.kernel.shape) == (16, 32)
    assert backbone.embeddings.projection is None
    # E == H (base, large): no projection at all, as HF's ElectraModel.
    assert ElectraBackbone(**dict(TINY, embedding_size=32, num_layers=1)).embeddings_project is None


def test_config_round_trip_and_keras_file(backbone, tmp_path):
    config, _ = assert_config_round_trip(backbone, TINY)
    loaded = assert_keras_file_round_trip(backbone, tmp_path / "electra_backbone.keras", _inputs(),
                                          ("sequence_output",))
    assert loaded.get_config() == config


def test_shared_embeddings_must_fit():
    discriminator = ElectraBackbone(**dict(TINY, num_layers=1))
    with pytest.raises(ValueError, match="shared embeddings"):
        ElectraBackbone(**dict(TINY, num_layers=1, embedding_size=8),
                        embeddings=discriminator.embeddings)


def test_presets_are_the_published_sizes():
    published = {  # (L, H, A, FFN, E), generator (H, A, FFN), mask_prob
        "electra_small": ((12, 256, 4, 1024, 128), (64, 1, 256), 0.15),
        "electra_base": ((12, 768, 12, 3072, 768), (256, 4, 1024), 0.15),
        "electra_large": ((24, 1024, 16, 4096, 1024), (256, 4, 1024), 0.25),
    }
    assert set(PRESETS) == set(GENERATORS) == set(PRETRAINING) == set(published)
    for name, (tower, generator, mask_prob) in published.items():
        p, g = PRESETS[name], GENERATORS[name]
        assert (p["num_layers"], p["hidden_size"], p["num_heads"], p["intermediate_size"],
                p["embedding_size"]) == tower, name
        assert (p["vocab_size"], p["max_sequence_length"], p["type_vocab_size"]) == (30522, 512, 2)
        assert (g["hidden_size"], g["num_heads"], g["intermediate_size"]) == generator, name
        assert g["hidden_size"] // 64 == g["num_heads"]  # heads = hidden / 64
        assert PRETRAINING[name]["mask_prob"] == mask_prob
    with pytest.raises(ValueError, match="electra_small"):
        untrained_electra_backbone("electra_huge")


def _hf_parameter_count(torch, transformers, preset):
    config = transformers.ElectraConfig(
        vocab_size=preset["vocab_size"], embedding_size=preset["embedding_size"],
        hidden_size=preset["hidden_size"], num_hidden_layers=preset["num_layers"],
        num_attention_heads=preset["num_heads"], intermediate_size=preset["intermediate_size"],
        max_position_embeddings=preset["max_sequence_length"],
        type_vocab_size=preset["type_vocab_size"])
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        model = transformers.ElectraModel(config)
    return sum(p.numel() for p in model.parameters())


def _formula(V, L, H, F, E, P=512, T=2):
    embeddings = (V + P + T) * E + 2 * E + (E * H + H if E != H else 0)
    block = 4 * (H * H + H) + 2 * H + (H * F + F) + (F * H + H) + 2 * H
    return embeddings + L * block


def test_parameter_counts_equal_hugging_face():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    # ELECTRA-small built for real: discriminator and generator, sharing the embeddings.
    pretrainer = untrained_electra_pretrainer("electra_small", mask_token_id=103,
                                                unmaskable_token_ids=(101, 102))
    small, small_generator = PRESETS["electra_small"], {**PRESETS["electra_small"],
                                                         **GENERATORS["electra_small"]}
    disc = _hf_parameter_count(torch, transformers, small)
    gen = _hf_parameter_count(torch, transformers, small_generator)
    assert pretrainer.discriminator.count_params() == disc == 13_483_008  # "13.5M"
    assert pretrainer.generator.count_params() == gen
    assert pretrainer.mask_prob == 0.15 and pretrainer.generator.hidden_size == 64
    # Jointly: the embedding block (tables + LayerNorm) once, plus the two heads.
    V, E, H, Hg = 30522, 128, 256, 64
    shared = (V + 512 + 2) * E + 2 * E
    heads = (H * H + H + H + 1) + (Hg * E + E + 2 * E + V)
    assert pretrainer.count_params() == disc + gen - shared + heads
    # Base and large: our count (checked equal to the built model above) against HF's.
    for name in ("electra_base", "electra_large"):
        for preset in (PRESETS[name], {**PRESETS[name], **GENERATORS[name]}):
            want = _hf_parameter_count(torch, transformers, preset)
            assert _formula(preset["vocab_size"], preset["num_layers"], preset["hidden_size"],
                            preset["intermediate_size"], preset["embedding_size"]) == want, name
    assert _formula(30522, 12, 256, 1024, 128) == 13_483_008
