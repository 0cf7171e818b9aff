"""garden.models.decoding on converted weights gives Hugging Face's `generate` token for token:
greedy and beam search, GPT-2 (left-padded batch), T5 and BART (encoder-decoder, padded
encoder batch), on tiny randomly initialised reference models (nothing downloaded).

The two sides share no code: Hugging Face runs its torch models and its own decoding
(generation config set explicitly: no forced BOS/EOS, no n-gram blocking, EOS as given), ours
runs the converted Keras model in garden.models.decoding. Beam parity is checked over lengths
where no hypothesis ends early, where both implementations' rules coincide (top 2k candidates
per step, the best finished hypothesis by log-probability); the EOS rules (early finish,
length penalty, the finished set) are checked against a brute-force search in
tests/models/test_decoding.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from convert_testing import randomize_torch_, save_hf_dir
from garden import convert
from garden.models.decoding import GenerationConfig, generate

NEW = 8


def _hf_generate(model, **kwargs):
    import torch
    import transformers

    settings = dict(max_new_tokens=NEW, do_sample=False, num_beams=1, no_repeat_ngram_size=0,
                    forced_bos_token_id=None, forced_eos_token_id=None, length_penalty=0.0,
                    early_stopping=False, min_new_tokens=0)
    gen_keys = {"num_beams", "eos_token_id", "pad_token_id", "decoder_start_token_id",
                "length_penalty", "min_new_tokens"}
    settings.update({k: v for k, v in kwargs.items() if k in gen_keys})
    config = transformers.GenerationConfig(**settings)
    inputs = {k: torch.from_numpy(v.astype("int64")) for k, v in kwargs.items()
              if k not in gen_keys}
    with torch.inference_mode():
        return model.generate(**inputs, generation_config=config).numpy()


def _ours(lm, prompt, method: str, num_beams: int, eos_id: int, pad_id: int):
    config = GenerationConfig(max_new_tokens=NEW, method=method, num_beams=num_beams)
    out = generate(lm, prompt, config, eos_id=eos_id, pad_id=pad_id)
    return np.asarray(out["token_ids"])


def _convert(model, family: str, tmp_path):
    return convert.load_huggingface(save_hf_dir(model, str(tmp_path / family)), family)["pretrainer"]


@pytest.mark.parametrize("method,num_beams", [("greedy", 1), ("beam", 3)])
def test_gpt2_left_padded_batch_equals_hugging_face(method, num_beams, tmp_path):
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=97, n_positions=64, n_embd=32, n_layer=2,
                                     n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = randomize_torch_(transformers.GPT2LMHeadModel(config).eval(), scale=0.3)
    lm = _convert(model, "gpt2", tmp_path)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 96, (3, 7)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, :3] = 0  # rows 1 and 2 are shorter prompts, left-padded
    mask[2, :5] = 0
    ids[mask == 0] = 0
    eos = 96  # never a prompt token
    expected = _hf_generate(model, input_ids=ids, attention_mask=mask, num_beams=num_beams,
                            eos_token_id=eos, pad_token_id=0)[:, ids.shape[1]:]
    got = _ours(lm, {"token_ids": ids, "padding_mask": mask}, method, num_beams, eos, 0)
    assert expected.shape == (3, NEW)
    np.testing.assert_array_equal(got, expected)
    assert len(set(map(tuple, got.tolist()))) > 1  # the rows are not one repeated answer


def _encoder_batch(vocab_size: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, vocab_size, (2, 9)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 6:] = 0  # the encoder is right-padded
    ids[mask == 0] = 1
    return ids, mask


@pytest.mark.parametrize("method,num_beams", [("greedy", 1), ("beam", 3)])
def test_t5_equals_hugging_face(method, num_beams, tmp_path):
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=91, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                   num_decoder_layers=2, num_heads=4, dropout_rate=0.0,
                                   relative_attention_num_buckets=8,
                                   relative_attention_max_distance=16,
                                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    model = randomize_torch_(transformers.T5ForConditionalGeneration(config).eval(), scale=0.3)
    lm = _convert(model, "t5", tmp_path)
    ids, mask = _encoder_batch(91)
    expected = _hf_generate(model, input_ids=ids, attention_mask=mask, num_beams=num_beams,
                            eos_token_id=1, pad_token_id=0, decoder_start_token_id=0)[:, 1:]
    start = np.zeros((2, 1), "int32")
    prompt = {"encoder_token_ids": ids, "encoder_padding_mask": mask,
              "decoder_token_ids": start, "decoder_padding_mask": np.ones_like(start)}
    got = _ours(lm, prompt, method, num_beams, 1, 0)
    np.testing.assert_array_equal(got[:, :expected.shape[1]], expected)
    assert expected.shape[1] == NEW or (expected[:, -1] == 1).any() or (expected == 0).any()


@pytest.mark.parametrize("method,num_beams", [("greedy", 1), ("beam", 3)])
def test_bart_equals_hugging_face(method, num_beams, tmp_path):
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.BartConfig(vocab_size=93, d_model=32, encoder_layers=2,
                                     decoder_layers=2, encoder_attention_heads=4,
                                     decoder_attention_heads=4, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64, max_position_embeddings=64,
                                     dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                                     forced_bos_token_id=None, forced_eos_token_id=None)
    model = randomize_torch_(transformers.BartForConditionalGeneration(config).eval(), scale=0.3)
    lm = _convert(model, "bart", tmp_path)
    ids, mask = _encoder_batch(93)
    start = np.tile(np.array([[2, 0]], "int32"), (2, 1))  # </s> <s>, as BART's decoder starts
    expected = _hf_generate(model, input_ids=ids, attention_mask=mask,
                            decoder_input_ids=start, num_beams=num_beams, eos_token_id=2,
                            pad_token_id=1)[:, 2:]
    prompt = {"encoder_token_ids": ids, "encoder_padding_mask": mask,
              "decoder_token_ids": start, "decoder_padding_mask": np.ones_like(start)}
    got = _ours(lm, prompt, method, num_beams, 2, 1)
    np.testing.assert_array_equal(got[:, :expected.shape[1]], expected)
