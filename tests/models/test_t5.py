"""T5 v1.0 / v1.1 (garden/models/t5): parameter counts, Hugging Face parity on tiny random
references, the GenerativeLM contract (cached decoding = full recompute, causality, encoder
padding), float32 RMSNorm statistics under mixed_bfloat16, strict import and saving."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import keras
import tensorflow as tf

from convert_testing import max_abs_diff, randomize_torch_, save_hf_dir
from garden import convert
from garden.models import factory
from garden.models.t5 import PRESETS, T5Backbone, T5Seq2SeqLM, parameter_count

VOCAB = 97


def _tiny(dtype=None, **overrides):
    config = dict(PRESETS["t5_tiny"], vocab_size=VOCAB, dropout=0.0, dtype=dtype)
    config.update(overrides)
    keras.utils.set_random_seed(0)
    return T5Seq2SeqLM(T5Backbone(**config))


def _batch(seed=0, batch=3, source=21, target=9):
    """Right-padded encoder and decoder rows of different lengths (row 0 unpadded); decoder
    rows start with T5's start token 0."""
    rng = np.random.default_rng(seed)
    enc = rng.integers(2, VOCAB, (batch, source)).astype("int32")
    dec = rng.integers(2, VOCAB, (batch, target)).astype("int32")
    dec[:, 0] = 0
    enc_mask = np.zeros_like(enc)
    dec_mask = np.zeros_like(dec)
    for b in range(batch):
        enc_mask[b, :source - 5 * b] = 1
        dec_mask[b, :target - 3 * b] = 1
    enc[enc_mask == 0] = 0
    dec[(dec_mask == 0)] = 0
    return {"encoder_token_ids": enc, "encoder_padding_mask": enc_mask,
            "decoder_token_ids": dec, "decoder_padding_mask": dec_mask}


# ----------------------------------------------------------------------------------------
# Parameter counts.
# ----------------------------------------------------------------------------------------


def test_published_parameter_counts():
    # Raffel et al. / Hugging Face T5ForConditionalGeneration; v1.1 small with its lm_head.
    assert parameter_count(**PRESETS["t5_small"]) == 60_506_624
    assert parameter_count(**PRESETS["t5_base"]) == 222_903_552
    assert parameter_count(**PRESETS["t5_large"]) == 737_668_096
    assert parameter_count(**PRESETS["t5_v1_1_small"]) == 76_961_152
    assert all(PRESETS[n]["vocab_size"] == 32_128 for n in PRESETS)


@pytest.mark.parametrize("overrides", [
    {},  # v1.0 tiny: tied, ReLU
    dict(PRESETS["t5_v1_1_tiny"], vocab_size=VOCAB),  # gated, untied lm_head
    dict(num_decoder_layers=3, head_size=24, num_heads=3, num_buckets=16),
])
def test_parameter_count_formula_matches_built_models(overrides):
    # The formula is what sizes t5_large without allocating 3 GB; it must count what builds.
    lm = _tiny(**overrides)
    assert lm.count_params() == parameter_count(**lm.backbone.get_config())


# ----------------------------------------------------------------------------------------
# Hugging Face parity.
# ----------------------------------------------------------------------------------------


def _hf_t5(feed_forward_proj: str, untied: bool, **config):
    import torch
    import transformers

    torch.manual_seed(0)
    hf_config = transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=12, d_ff=48, num_layers=2, num_decoder_layers=3,
        num_heads=3, feed_forward_proj=feed_forward_proj, dropout_rate=0.0,
        tie_word_embeddings=not untied, **config)
    model = transformers.T5ForConditionalGeneration(hf_config).eval()
    randomize_torch_(model, seed=1, scale=0.15)
    if untied:
        # transformers 5 ties lm_head to shared even for v1.1; a real v1.1 checkpoint has its
        # own, so give it one (written with the full state dict below).
        model.lm_head.weight = torch.nn.Parameter(0.15 * torch.randn(VOCAB, 32))
    return model


def _hf_outputs(model, batch):
    import torch

    t = {k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}
    with torch.no_grad():
        out = model(input_ids=t["encoder_token_ids"], attention_mask=t["encoder_padding_mask"],
                    decoder_input_ids=t["decoder_token_ids"],
                    decoder_attention_mask=t["decoder_padding_mask"])
    return out.encoder_last_hidden_state.numpy(), out.logits.numpy()


@pytest.mark.parametrize("version,feed_forward_proj,untied,extra", [
    ("v1.0", "relu", False, {}),
    # v1.1 with a short max distance, so the capped log buckets are exercised too.
    ("v1.1", "gated-gelu", True, {"relative_attention_max_distance": 24}),
])
def test_huggingface_parity(tmp_path, version, feed_forward_proj, untied, extra):
    model = _hf_t5(feed_forward_proj, untied, **extra)
    directory = save_hf_dir(model, str(tmp_path / "hf"), safetensors=not untied)
    models = convert.load_huggingface(directory, "t5")
    lm = models["pretrainer"]
    assert lm.backbone.tie_embeddings is (not untied)
    assert lm.count_params() == sum(p.numel() for n, p in model.named_parameters())
    batch = _batch(source=40, target=24)
    hf_encoder, hf_logits = _hf_outputs(model, batch)
    ours = lm.backbone(batch)
    logits = lm(batch)["logits"].numpy()
    enc_real = batch["encoder_padding_mask"].astype(bool)
    dec_real = batch["decoder_padding_mask"].astype(bool)
    assert max_abs_diff(ours["encoder_sequence_output"].numpy()[enc_real],
                        hf_encoder[enc_real]) <= 1e-4
    assert max_abs_diff(logits[dec_real], hf_logits[dec_real]) <= 1e-4
    # The weights matter at this scale: the logits spread (a 1e-4 match is not trivial).
    assert np.std(hf_logits[dec_real]) > 0.1


def test_conversion_is_strict(tmp_path):
    from convert_testing import assert_refused, torch_state_dict_to_numpy
    from garden.models.t5 import conversion

    model = _hf_t5("relu", untied=False)
    config = model.config.to_dict()
    weights = torch_state_dict_to_numpy(model)
    name = "decoder.block.1.layer.1.EncDecAttention.k.weight"
    assert_refused(conversion.from_huggingface, config, weights, name, drop=[name])
    assert_refused(conversion.from_huggingface, config, weights, "extra.bias",
                   put={"extra.bias": np.zeros(3, np.float32)})
    # A scaled (v1.0) checkpoint with its own lm_head cannot be tied.
    assert_refused(conversion.from_huggingface, config, weights, "lm_head",
                   put={"lm_head.weight": weights["shared.weight"] + 1.0})
    # --model=t5 on another family's checkpoint is refused by model_type.
    directory = save_hf_dir(model, str(tmp_path / "hf"))
    with open(os.path.join(directory, "config.json")) as f:
        hf_config = json.load(f)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(dict(hf_config, model_type="bart"), f)
    with pytest.raises(ValueError, match="'bart'"):
        convert.load_huggingface(directory, "t5")


# ----------------------------------------------------------------------------------------
# The GenerativeLM contract.
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["t5_tiny", "t5_v1_1_tiny"])
def test_cached_decoding_equals_full_recompute(preset):
    """Start with a left-padded decoder prompt (row 1: [pad, 0], others [s, 0] where s is a
    start token placed in the prompt), then feed tokens one by one: every step's logits equal
    the full recompute's at that position."""
    lm = _tiny(**dict(PRESETS[preset], vocab_size=VOCAB))
    batch = _batch(seed=3)
    rng = np.random.default_rng(4)
    steps, max_length = 7, 12
    prompt_ids = np.array([[5, 0], [0, 0], [7, 0]], "int32")
    prompt_mask = np.array([[1, 1], [0, 1], [1, 1]], "int32")
    prompt = {"encoder_token_ids": batch["encoder_token_ids"],
              "encoder_padding_mask": batch["encoder_padding_mask"],
              "decoder_token_ids": prompt_ids, "decoder_padding_mask": prompt_mask}
    logits, state = lm.start_decoding(prompt, max_length)
    new = rng.integers(2, VOCAB, (3, steps)).astype("int32")
    cached = [logits.numpy()]
    for i in range(steps):
        logits, state = lm.decode_step(new[:, i], np.int32(2 + i), state)
        cached.append(logits.numpy())
    assert {t.shape[2] for pair in state["self_cache"] for t in pair} == {max_length}
    full = lm({**prompt, "decoder_token_ids": np.concatenate([prompt_ids, new], 1),
               "decoder_padding_mask": np.concatenate([prompt_mask, np.ones_like(new)], 1)})
    full = full["logits"].numpy()[:, 1:]
    assert max_abs_diff(np.stack(cached, 1), full) <= 1e-4
    # Left padding changes nothing: row 1's logits equal its unpadded run's.
    alone = lm({k: v[1:2] for k, v in {**prompt, "decoder_token_ids": np.concatenate(
        [prompt_ids, new], 1)[:, 1:], "decoder_padding_mask": np.ones((3, steps + 1),
                                                                      "int32")}.items()})
    assert max_abs_diff(alone["logits"].numpy()[0], full[1]) <= 1e-4


def test_cross_attention_is_projected_once():
    """decode_step reads the cross-attention cache as is: overwriting the encoder's keys and
    values in the state changes the step's logits (they are used) and nothing recomputes them
    (the cache comes back unchanged)."""
    lm = _tiny()
    batch = _batch()
    prompt = dict(batch, decoder_token_ids=batch["decoder_token_ids"][:, :1],
                  decoder_padding_mask=np.ones((3, 1), "int32"))
    _, state = lm.start_decoding(prompt, 4)
    token = np.array([3, 4, 5], "int32")
    logits, after = lm.decode_step(token, np.int32(1), state)
    for kept, given in zip(tf.nest.flatten(after["cross_cache"]),
                           tf.nest.flatten(state["cross_cache"])):
        np.testing.assert_array_equal(kept.numpy(), given.numpy())
    moved = dict(state, cross_cache=tf.nest.map_structure(lambda t: t * 2.0,
                                                          state["cross_cache"]))
    logits2, _ = lm.decode_step(token, np.int32(1), moved)
    assert max_abs_diff(logits, logits2) > 1e-3


def test_decoder_is_causal():
    lm = _tiny()
    batch = _batch()
    base = lm(batch)["logits"].numpy()
    changed = dict(batch, decoder_token_ids=batch["decoder_token_ids"].copy())
    changed["decoder_token_ids"][:, 4] = (changed["decoder_token_ids"][:, 4] + 1) % VOCAB
    out = lm(changed)["logits"].numpy()
    assert max_abs_diff(out[:, :4], base[:, :4]) == 0.0  # earlier positions see nothing new
    assert max_abs_diff(out[0, 4:], base[0, 4:]) > 1e-3  # position 4 and later do


def test_encoder_padding_does_not_change_real_positions():
    lm = _tiny()
    batch = _batch(batch=1)
    base = lm.backbone(batch)
    base_logits = lm(batch)["logits"].numpy()
    # Six more encoder slots of junk ids, masked out.
    pad = {"encoder_token_ids": np.concatenate([batch["encoder_token_ids"],
                                                np.full((1, 6), 13, "int32")], 1),
           "encoder_padding_mask": np.concatenate([batch["encoder_padding_mask"],
                                                   np.zeros((1, 6), "int32")], 1)}
    padded = dict(batch, **pad)
    out = lm.backbone(padded)
    assert max_abs_diff(out["encoder_sequence_output"].numpy()[:, :21],
                        base["encoder_sequence_output"].numpy()) <= 1e-5
    assert max_abs_diff(lm(padded)["logits"].numpy(), base_logits) <= 1e-5
    # Unmasked, the same ids do change the outputs (the mask is what hides them).
    unmasked = dict(padded, encoder_padding_mask=np.ones_like(pad["encoder_padding_mask"]))
    assert max_abs_diff(lm(unmasked)["logits"].numpy(), base_logits) > 1e-3


def test_rms_norm_statistics_are_float32_under_mixed_bfloat16():
    """Under mixed_bfloat16 every RMSNorm takes its statistics in float32: with unit scales
    the output is exactly the bfloat16 rounding of the float32 result (one rounding); taking
    mean(x^2) and rsqrt in bfloat16 rounds three times more and misses on some elements."""
    lm = _tiny(dtype="mixed_bfloat16")
    norm = lm.backbone.encoder.blocks[0].self_attention_norm
    assert norm.compute_dtype == "bfloat16" and norm.scale.dtype == "float32"
    x = keras.ops.cast(np.random.default_rng(0).normal(size=(64, 64)) * 3.0, "bfloat16")
    ours = keras.ops.convert_to_numpy(keras.ops.cast(norm(x), "float32"))
    x32 = keras.ops.convert_to_numpy(keras.ops.cast(x, "float32")).astype(np.float64)
    ref = x32 / np.sqrt(np.mean(x32 ** 2, axis=-1, keepdims=True) + 1e-6)
    ref = keras.ops.convert_to_numpy(keras.ops.cast(keras.ops.cast(ref, "bfloat16"), "float32"))
    np.testing.assert_array_equal(ours, ref)
    # The whole model runs in bfloat16 and still returns float32 logits near float32's.
    batch = _batch()
    logits = lm(batch)["logits"]
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    full = _tiny()(batch)["logits"].numpy()
    real = batch["decoder_padding_mask"].astype(bool)
    assert max_abs_diff(logits.numpy()[real], full[real]) < 0.1 * np.abs(full[real]).max()


def test_saves_and_loads_as_keras_file_and_from_the_factory(tmp_path):
    lm = factory.generative_lm(default_vocab_size=VOCAB, preset="t5_v1_1_tiny", dropout=0.0)
    assert isinstance(lm, T5Seq2SeqLM) and lm.lm_head is not None
    batch = _batch()
    path = str(tmp_path / "t5.keras")
    lm.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, T5Seq2SeqLM)
    assert max_abs_diff(loaded(batch)["logits"], lm(batch)["logits"]) == 0.0


def test_tensorflow_checkpoint_holds_every_weight(tmp_path):
    """garden.train saves tf.train.Checkpoint(model=lm): every weight must be in it (blocks
    kept in a Keras list would be left out without an error) and restore into a fresh model."""
    import tensorflow as tf

    lm = _tiny(**dict(PRESETS["t5_v1_1_tiny"], vocab_size=VOCAB))
    path = tf.train.Checkpoint(model=lm).save(str(tmp_path / "ckpt"))
    saved = [n for n in tf.train.load_checkpoint(path).get_variable_to_shape_map()
             if n.startswith("model/")]
    assert len(saved) == len(lm.weights)
    keras.utils.set_random_seed(1)
    fresh = T5Seq2SeqLM(T5Backbone(**lm.backbone.get_config()))
    tf.train.Checkpoint(model=fresh).restore(path).assert_existing_objects_matched()
    batch = _batch()
    assert max_abs_diff(fresh(batch)["logits"], lm(batch)["logits"]) == 0.0
