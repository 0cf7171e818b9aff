"""GPT-2: exact parameter counts of the released sizes, Hugging Face and OpenAI-checkpoint
parity (tiny random reference built here, nothing downloaded), the causal mask, left padding,
the KV cache against the full recompute, and the .keras round trip of GPT2CausalLM."""

from __future__ import annotations

import json
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from convert_testing import (max_abs_diff, openai_gpt2_weights, randomize_torch_, save_hf_dir,
                             torch_state_dict_to_numpy, write_tf1_checkpoint)
from garden import convert
from garden.models import factory
from garden.models.gpt2 import GPT2Backbone, GPT2CausalLM, PRESETS, parameter_count
from garden.models.gpt2.conversion import from_huggingface, from_tf1

TOL = 1e-4
HF_TINY = dict(vocab_size=101, n_positions=32, n_embd=64, n_layer=2, n_head=4,
               resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def _left_padded(batch_size=2, length=12, vocab=101, seed=0):
    """Token ids and a mask with row b left-padded by 3*b pads (row 0 unpadded)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, (batch_size, length)).astype("int32")
    mask = np.ones((batch_size, length), "int32")
    for b in range(batch_size):
        mask[b, :3 * b] = 0
    return ids, mask


def _positions(mask):
    return np.maximum(np.cumsum(mask, axis=1) - 1, 0)


# -- sizes -------------------------------------------------------------------------------------

def test_released_sizes_have_their_exact_parameter_counts():
    counts = {name: parameter_count(PRESETS[name]) for name in PRESETS}
    assert counts["gpt2_small"] == 124_439_808
    assert counts["gpt2_medium"] == 354_823_168
    assert counts["gpt2_large"] == 774_030_080
    assert counts["gpt2_xl"] == 1_557_611_200
    # The formula is the model's own count: a real tiny model (full 50,257 vocabulary) and an
    # odd shape (feed-forward not 4H) agree with count_params().
    for config in (PRESETS["gpt2_tiny"],
                   dict(vocab_size=37, num_layers=3, hidden_size=24, num_heads=3,
                        intermediate_size=40, max_sequence_length=16)):
        assert GPT2Backbone(**config).count_params() == parameter_count(config)
        keras.backend.clear_session(free_memory=False)


# -- Hugging Face and OpenAI parity ------------------------------------------------------------

@pytest.fixture(scope="module")
def hf_gpt2(tmp_path_factory):
    """A tiny random GPT2LMHeadModel, its safetensors directory, inputs, reference outputs."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**HF_TINY)).eval()
    randomize_torch_(model, seed=0)
    with torch.no_grad():  # LayerNorm gains around 1 (randomize_torch_ matches BERT's names)
        for name, p in model.named_parameters():
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape))
    directory = save_hf_dir(model, str(tmp_path_factory.mktemp("hf_gpt2")))
    ids, mask = _left_padded()
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids, dtype=torch.long),
                    attention_mask=torch.tensor(mask, dtype=torch.long),
                    position_ids=torch.tensor(_positions(mask), dtype=torch.long),
                    output_hidden_states=True)
    return dict(dir=directory, ids=ids, mask=mask, logits=out.logits.numpy(),
                hidden=np.stack([h.numpy() for h in out.hidden_states]),
                weights=torch_state_dict_to_numpy(model), config=model.config.to_dict())


def _assert_parity(backbone, reference):
    ids, mask, real = reference["ids"], reference["mask"], reference["mask"].astype(bool)
    inputs = {"token_ids": ids, "padding_mask": mask}
    logits = GPT2CausalLM(backbone)(inputs)["logits"]
    assert logits.dtype == "float32"
    assert max_abs_diff(np.asarray(logits)[real], reference["logits"][real]) < TOL
    with_states = GPT2Backbone(**{**backbone.get_config(), "output_hidden_states": True})
    with_states.set_weights(backbone.get_weights())
    hidden = np.asarray(with_states(inputs)["hidden_states"])
    assert hidden.shape == reference["hidden"].shape
    assert max_abs_diff(hidden[:, real], reference["hidden"][:, real]) < TOL


def test_huggingface_parity_with_left_padding(hf_gpt2):
    models = convert.load_huggingface(hf_gpt2["dir"], "gpt2")
    _assert_parity(models["backbone"], hf_gpt2)
    # The reference really depends on the layout details: a transposed kernel breaks parity.
    w = dict(hf_gpt2["weights"])
    w["transformer.h.0.attn.c_proj.weight"] = w["transformer.h.0.attn.c_proj.weight"].T.copy()
    broken = from_huggingface(hf_gpt2["config"], w)["lm"]
    real = hf_gpt2["mask"].astype(bool)
    got = np.asarray(broken({"token_ids": hf_gpt2["ids"], "padding_mask": hf_gpt2["mask"]})["logits"])
    assert max_abs_diff(got[real], hf_gpt2["logits"][real]) > 100 * TOL


def test_openai_checkpoint_parity_through_the_cli(hf_gpt2, tmp_path):
    weights = openai_gpt2_weights(hf_gpt2["weights"])
    assert weights["model/h0/attn/c_attn/w"].shape == (1, 64, 192)
    prefix = write_tf1_checkpoint(weights, str(tmp_path / "model.ckpt"))
    hparams = tmp_path / "hparams.json"
    hparams.write_text(json.dumps({"n_vocab": 101, "n_ctx": 32, "n_embd": 64, "n_head": 4,
                                   "n_layer": 2}))
    out = tmp_path / "out"
    assert convert.main(["--source=tf1", "--model=gpt2", f"--input={prefix}",
                         f"--config={hparams}", f"--output={out}"]) == 0
    backbone = keras.saving.load_model(os.path.join(out, "backbone.keras"))
    assert isinstance(backbone, GPT2Backbone)
    _assert_parity(backbone, hf_gpt2)


def test_conversion_is_strict(hf_gpt2):
    weights, config = hf_gpt2["weights"], hf_gpt2["config"]
    missing = {k: v for k, v in weights.items() if k != "transformer.h.1.ln_2.bias"}
    with pytest.raises(ValueError, match=r"missing parameters: \['h\.1\.ln_2\.bias'\]"):
        from_huggingface(config, missing)
    with pytest.raises(ValueError, match=r"unexpected parameters: \['h\.0\.attn\.extra'\]"):
        from_huggingface(config, {**weights, "transformer.h.0.attn.extra": np.zeros(3)})
    untied = {**weights, "lm_head.weight": weights["transformer.wte.weight"] + 1.0}
    with pytest.raises(ValueError, match="lm_head.weight is not tied"):
        from_huggingface(config, untied)
    with pytest.raises(ValueError, match="activation_function"):
        from_huggingface({**config, "activation_function": "relu"}, weights)
    openai = openai_gpt2_weights(weights)
    hparams = {"n_vocab": 101, "n_ctx": 32, "n_embd": 64, "n_head": 4, "n_layer": 2}
    del openai["model/h1/mlp/c_fc/w"]
    with pytest.raises(ValueError, match=r"model/h1/mlp/c_fc/w"):
        from_tf1(hparams, openai)


# -- causality, padding, cache -----------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_lm():
    keras.utils.set_random_seed(1)
    # Larger-than-init weights so that every path moves the logits well above the tolerances.
    backbone = GPT2Backbone(vocab_size=101, num_layers=2, hidden_size=64, num_heads=4,
                            max_sequence_length=32, dropout=0.0)
    rng = np.random.default_rng(1)
    backbone.set_weights([w + rng.normal(0, 0.1, w.shape).astype("float32")
                          for w in backbone.get_weights()])
    return GPT2CausalLM(backbone)


def test_changing_a_later_token_never_changes_earlier_logits(tiny_lm):
    ids, mask = _left_padded(batch_size=1, length=12)
    base = np.asarray(tiny_lm({"token_ids": ids, "padding_mask": mask})["logits"])
    for t in (4, 11):
        changed = ids.copy()
        changed[0, t] = (changed[0, t] + 7) % 101
        out = np.asarray(tiny_lm({"token_ids": changed, "padding_mask": mask})["logits"])
        assert max_abs_diff(out[:, :t], base[:, :t]) == 0.0
        assert max_abs_diff(out[:, t:], base[:, t:]) > 1e-3  # the change is seen from t on


def test_left_padded_row_equals_the_unpadded_row(tiny_lm):
    ids, mask = _left_padded(batch_size=2, length=12)
    padded = np.asarray(tiny_lm({"token_ids": ids, "padding_mask": mask})["logits"])
    alone = np.asarray(tiny_lm({"token_ids": ids[1:, 3:],
                                "padding_mask": mask[1:, 3:]})["logits"])
    assert max_abs_diff(padded[1, 3:], alone[0]) < 1e-5


def test_cached_decoding_equals_the_full_recompute(tiny_lm):
    ids, mask = _left_padded(batch_size=2, length=14)
    full = np.asarray(tiny_lm({"token_ids": ids, "padding_mask": mask})["logits"])
    prompt = 6
    step = tf.function(tiny_lm.decode_step)  # as garden.models.decoding runs it: one traced graph
    logits, state = tiny_lm.start_decoding({"token_ids": ids[:, :prompt],
                                            "padding_mask": mask[:, :prompt]}, max_length=16)
    assert max_abs_diff(logits, full[:, prompt - 1]) < 1e-5
    shapes = tf.nest.map_structure(lambda t: tuple(t.shape), state)
    for t in range(prompt, 14):
        logits, state = step(tf.constant(ids[:, t]), tf.constant(t), state)
        assert tf.nest.map_structure(lambda x: tuple(x.shape), state) == shapes
        assert max_abs_diff(logits, full[:, t]) < 1e-5, t
    with pytest.raises(ValueError, match="exceeds GPT-2's 32 positions"):
        tiny_lm.start_decoding({"token_ids": ids, "padding_mask": mask}, max_length=33)


def test_causal_lm_round_trips_through_keras_file_and_the_factory(tiny_lm, tmp_path):
    ids, mask = _left_padded()
    path = str(tmp_path / "lm.keras")
    tiny_lm.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, GPT2CausalLM) and loaded.max_decoder_length == 32
    inputs = {"token_ids": ids, "padding_mask": mask}
    assert max_abs_diff(loaded(inputs)["logits"], tiny_lm(inputs)["logits"]) == 0.0
    lm = factory.generative_lm(default_vocab_size=50, preset="gpt2_tiny", num_layers=1)
    assert isinstance(lm, GPT2CausalLM) and lm.backbone.vocab_size == 50
    assert lm.count_params() == parameter_count({**PRESETS["gpt2_tiny"], "vocab_size": 50,
                                                  "num_layers": 1})
