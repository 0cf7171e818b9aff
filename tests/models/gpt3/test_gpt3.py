"""GPT-3-style model: the published count, alternating dense / banded layers, the KV cache
against the full recompute (prompts and decodes longer than the band, left padding), causality
and the Keras round trip."""

from __future__ import annotations

import numpy as np

import keras

from convert_testing import max_abs_diff
from garden.layers.attention import MultiHeadAttention
from garden.layers.local_attention import LocalMultiHeadAttention
from garden.models import factory
from garden.models.gpt3.backbone import GPT3CausalLM
from garden.models.gpt3.presets import PRESETS, parameter_count
from model_testing import assert_keras_file_round_trip


def test_gpt3_small_has_the_published_parameter_count():
    # From the sizes (garden.models.gpt3.presets.parameter_count); that the formula is the
    # model's own count is checked on a real tiny build in test_layers_alternate_dense_and_banded.
    assert parameter_count(PRESETS["gpt3_small"]) == 125_226_240


def _tiny_lm(band_width=3):
    keras.utils.set_random_seed(4)
    return factory.generative_lm(preset="gpt3_tiny", vocab_size=53, dropout=0.0,
                                 max_sequence_length=32, band_width=band_width, num_layers=2)


def test_layers_alternate_dense_and_banded():
    lm = _tiny_lm()
    assert isinstance(lm, GPT3CausalLM)
    first, second = (block.self_attention for block in lm.backbone.decoder_blocks)
    assert type(first) is MultiHeadAttention
    assert isinstance(second, LocalMultiHeadAttention) and second.band_width == 3
    # The count formula of the published size is this real model's own (tied logits: the
    # LM's count is the backbone's).
    assert lm.count_params() == parameter_count(lm.backbone.get_config()) > 0


def test_no_position_sees_the_future():
    lm = _tiny_lm()
    ids = (np.arange(12, dtype="int32")[None] * 7) % 53
    changed = ids.copy()
    changed[0, 9:] = (changed[0, 9:] + 5) % 53
    a = lm({"token_ids": ids, "padding_mask": np.ones_like(ids)})["logits"].numpy()
    b = lm({"token_ids": changed, "padding_mask": np.ones_like(ids)})["logits"].numpy()
    assert max_abs_diff(a[:, :9], b[:, :9]) == 0.0  # causal: no position sees the future
    assert max_abs_diff(a[:, 9:], b[:, 9:]) > 1e-3


def test_cached_decoding_equals_full_recompute_past_the_band():
    lm = _tiny_lm(band_width=3)
    rng = np.random.default_rng(5)
    total, prompt_len, pad = 14, 7, 2
    full = rng.integers(0, 53, (2, total)).astype("int32")
    prompt = full[:, :prompt_len].copy()
    mask = np.ones_like(prompt)
    prompt[1, :pad], mask[1, :pad] = 0, 0  # row 1 left-padded
    logits, state = lm.start_decoding({"token_ids": prompt, "padding_mask": mask}, total)
    steps = [logits.numpy()]
    for index in range(prompt_len, total - 1):
        logits, state = lm.decode_step(full[:, index], index, state)
        steps.append(logits.numpy())
    cached = np.stack(steps, axis=1)  # scores of tokens prompt_len .. total-1
    ref = lm({"token_ids": full, "padding_mask": np.ones_like(full)})["logits"].numpy()
    assert max_abs_diff(cached[0], ref[0, prompt_len - 1:total - 1]) <= 1e-4
    short = full[1:, pad:]
    ref_short = lm({"token_ids": short, "padding_mask": np.ones_like(short)})["logits"].numpy()
    assert max_abs_diff(cached[1], ref_short[0, prompt_len - pad - 1:total - pad - 1]) <= 1e-4


def test_keras_round_trip(tmp_path):
    lm = _tiny_lm()
    ids = np.array([[5, 6, 7, 8, 9]], "int32")
    loaded = assert_keras_file_round_trip(lm, tmp_path / "gpt3.keras",
                                          {"token_ids": ids, "padding_mask": np.ones_like(ids)},
                                          keys=["logits"])
    assert loaded.backbone.decoder_blocks[1].band_width == 3
