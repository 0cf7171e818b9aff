"""GPT (2018): the published parameter count, Hugging Face openai-gpt parity (strict import),
the KV cache against the full recompute, left padding, and the Keras round trip."""

from __future__ import annotations

import numpy as np
import pytest

import keras

from convert_testing import (assert_refused, max_abs_diff, randomize_torch_, save_hf_dir,
                             torch_state_dict_to_numpy)
from garden.convert import load_huggingface
from garden.models.gpt import conversion
from garden.models.gpt.backbone import GPTBackbone, GPTCausalLM
from garden.models.gpt.presets import PRESETS, parameter_count
from model_testing import assert_keras_file_round_trip


def test_gpt_preset_has_the_published_parameter_count():
    # Hugging Face OpenAIGPTModel (40478 tokens, 512 positions, 12 x 768) counts the same.
    # The paper's fine-tuning adds 3 special-token rows to the one table. Counted from the
    # sizes (presets.parameter_count), which is the model's own count: a real tiny build of
    # an odd shape (special tokens, feed-forward not 4H) counts the same, table included.
    assert parameter_count(PRESETS["gpt"]) == 116_534_784
    assert parameter_count({**PRESETS["gpt"], "num_special_tokens": 3}) == 116_534_784 + 3 * 768
    odd = dict(vocab_size=37, num_special_tokens=2, num_layers=3, hidden_size=24, num_heads=3,
               intermediate_size=40, max_sequence_length=16)
    backbone = GPTBackbone(**odd)
    assert backbone.count_params() == parameter_count(odd)
    assert tuple(backbone.embeddings.embeddings.shape) == (37 + 2 + 16, 24)


@pytest.fixture(scope="module")
def hf_gpt(tmp_path_factory):
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.OpenAIGPTConfig(vocab_size=97, n_positions=24, n_embd=32, n_layer=2,
                                          n_head=4, resid_pdrop=0.0, attn_pdrop=0.0,
                                          embd_pdrop=0.0)
    # Weights N(0, 0.3): at randomize_torch_'s default 0.1 the tanh and exact GELU (and even
    # swapped q / k kernels) agree to 1e-4 on this width, so parity could not fail.
    model = randomize_torch_(transformers.OpenAIGPTLMHeadModel(config).eval(), scale=0.3)
    directory = save_hf_dir(model, str(tmp_path_factory.mktemp("openai_gpt")))
    return model, directory


def _inputs(vocab, batch=3, length=11, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, (batch, length)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 8:] = 0  # right padding: positions 0.. as Hugging Face's arange
    return ids, mask


def test_huggingface_openai_gpt_parity(hf_gpt):
    import torch

    model, directory = hf_gpt
    models = load_huggingface(directory, "gpt")
    assert models["pretrainer"].count_params() == models["backbone"].count_params() == sum(
        p.numel() for p in model.parameters())  # tied: the LM adds no weight
    ids, mask = _inputs(97)
    with torch.no_grad():
        ref = model(input_ids=torch.tensor(ids, dtype=torch.long),
                    attention_mask=torch.tensor(mask), output_hidden_states=True)
    ours = models["pretrainer"]({"token_ids": ids, "padding_mask": mask})
    real = mask.astype(bool)
    assert max_abs_diff(ours["sequence_output"].numpy()[real],
                        ref.hidden_states[-1].numpy()[real]) <= 1e-4
    assert max_abs_diff(ours["logits"].numpy()[real], ref.logits.numpy()[real]) <= 1e-4


def test_conversion_is_strict(hf_gpt):
    model, _ = hf_gpt
    weights = torch_state_dict_to_numpy(model)
    config = model.config.to_dict()
    assert_refused(conversion.from_huggingface, config, weights,
                   match="transformer.h.1.mlp.c_fc.bias", drop=["transformer.h.1.mlp.c_fc.bias"])
    assert_refused(conversion.from_huggingface, config, weights, match="transformer.h.9.extra",
                   put={"transformer.h.9.extra": np.zeros(3, "float32")})
    untied = weights["lm_head.weight"] + 1.0
    assert_refused(conversion.from_huggingface, config, weights, match="not tied",
                   put={"lm_head.weight": untied})


def _tiny_lm(**overrides):
    keras.utils.set_random_seed(1)
    backbone = GPTBackbone(**{**PRESETS["gpt_tiny"], "vocab_size": 61, "dropout": 0.0,
                              "max_sequence_length": 32, "num_special_tokens": 3, **overrides})
    return GPTCausalLM(backbone)


def test_cached_decoding_equals_full_recompute_with_left_padding():
    lm = _tiny_lm()
    rng = np.random.default_rng(2)
    full = rng.integers(0, 64, (2, 12)).astype("int32")
    # Row 1 is left-padded by 3: its prompt is shorter, its logits must be the unpadded row's.
    prompt_len = 5
    prompt = full[:, :prompt_len].copy()
    mask = np.ones_like(prompt)
    prompt[1, :3], mask[1, :3] = 0, 0
    logits, state = lm.start_decoding({"token_ids": prompt, "padding_mask": mask}, 12)
    steps = [logits.numpy()]
    for index in range(prompt_len, 12):
        logits, state = lm.decode_step(full[:, index], index, state)
        steps.append(logits.numpy())
    cached = np.stack(steps[:-1], axis=1)  # scores of tokens prompt_len .. 11
    reference = lm({"token_ids": full, "padding_mask": np.ones_like(full)})["logits"].numpy()
    assert max_abs_diff(cached[0], reference[0, prompt_len - 1:11]) <= 1e-4
    # Left-padded row 1 equals the row without its 3 first tokens, unpadded.
    short = full[1:, 3:]
    ref_short = lm({"token_ids": short, "padding_mask": np.ones_like(short)})["logits"].numpy()
    assert max_abs_diff(cached[1], ref_short[0, prompt_len - 4:8]) <= 1e-4


def test_no_position_sees_the_future():
    lm = _tiny_lm()
    ids = np.arange(10, dtype="int32")[None] % 61
    changed = ids.copy()
    changed[0, 6:] = (changed[0, 6:] + 7) % 61
    a = lm({"token_ids": ids, "padding_mask": np.ones_like(ids)})["logits"].numpy()
    b = lm({"token_ids": changed, "padding_mask": np.ones_like(ids)})["logits"].numpy()
    assert max_abs_diff(a[:, :6], b[:, :6]) == 0.0
    assert max_abs_diff(a[:, 6:], b[:, 6:]) > 1e-3


def test_keras_round_trip(tmp_path):
    lm = _tiny_lm()
    ids = np.array([[1, 2, 3, 4]], "int32")
    inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    loaded = assert_keras_file_round_trip(lm, tmp_path / "gpt.keras", inputs, keys=["logits"])
    assert loaded.backbone.num_special_tokens == 3
