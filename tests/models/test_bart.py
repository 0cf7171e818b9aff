"""BART: parameter counts, parity with a tiny random Hugging Face BartForConditionalGeneration
(strict import), cached decoding against the full recompute, decoder causality, padding
invariance and Keras serialization of BartSeq2SeqLM."""

import keras
import numpy as np
import pytest

from garden import convert
from garden.models.bart import BartBackbone, BartSeq2SeqLM, PRESETS, bart_parameter_count
from garden.models.bart.conversion import from_huggingface
from garden.models.factory import generative_lm

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from convert_testing import (max_abs_diff, randomize_torch_, save_hf_dir,  # noqa: E402
                             torch_state_dict_to_numpy)
from generative_testing import seq2seq_inputs  # noqa: E402

VOCAB, PAD = 61, 1
TINY = dict(vocab_size=VOCAB, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=24,
            max_sequence_length=20, dropout=0.0)


@pytest.fixture(scope="module")
def lm():
    keras.utils.set_random_seed(0)
    model = BartSeq2SeqLM(BartBackbone(**TINY))
    # Non-zero bias and LayerNorms far from identity: every weight must matter.
    rng = np.random.default_rng(0)
    for v in model.weights:
        v.assign(rng.normal(0, 0.3, v.shape).astype("float32") + (1.0 if "gamma" in v.path else 0))
    return model


def _inputs(seed=1):
    return seq2seq_inputs(VOCAB, PAD, seed)


def _logits(lm, inputs):
    return np.asarray(lm(inputs)["logits"])


# ----------------------------------------------------------------------------------------
# Parameter counts.
# ----------------------------------------------------------------------------------------


def test_parameter_counts_of_the_presets(lm, reference):
    # The formula counts what BartBackbone builds and what Hugging Face's BartModel holds for
    # one config (TINY's sizes: the reference's body; parameters() counts the tied table
    # once); then the published sizes follow without allocating bart_large (1.6 GB).
    # final_logits_bias is the LM's, non-trainable, and not in the preset count.
    assert lm.count_params() == bart_parameter_count(**TINY) + VOCAB
    assert [v.path for v in lm.non_trainable_weights] == [lm.final_logits_bias.path]
    assert sum(p.numel() for p in reference[1].model.parameters()) == bart_parameter_count(**TINY)
    assert bart_parameter_count(**PRESETS["bart_base"]) == 139_420_416
    assert bart_parameter_count(**PRESETS["bart_large"]) == 406_291_456


# ----------------------------------------------------------------------------------------
# Parity with Hugging Face.
# ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.BartConfig(
        vocab_size=VOCAB, d_model=16, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=24,
        decoder_ffn_dim=24, max_position_embeddings=20, dropout=0.0, pad_token_id=PAD)
    model = randomize_torch_(transformers.BartForConditionalGeneration(config).eval(), seed=0,
                             scale=0.5)  # FFN pre-activations ~N(0, 2): the GELU form matters
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.5)  # a buffer: randomize_torch_ leaves it at 0
    directory = save_hf_dir(model, str(tmp_path_factory.mktemp("hf-bart")))
    return config, model, directory


def test_parity_with_hugging_face_bart(reference):
    config, model, directory = reference
    models = convert.load_huggingface(directory, "bart")  # safetensors: tied copies dropped
    lm = models["lm"]
    assert models["not_in_checkpoint"] == []
    inputs = _inputs()
    with torch.no_grad():
        hf = model(input_ids=torch.tensor(inputs["encoder_token_ids"], dtype=torch.long),
                   attention_mask=torch.tensor(inputs["encoder_padding_mask"]),
                   decoder_input_ids=torch.tensor(inputs["decoder_token_ids"], dtype=torch.long),
                   decoder_attention_mask=torch.tensor(inputs["decoder_padding_mask"]))
    ours = lm.backbone(inputs)
    enc_real = inputs["encoder_padding_mask"].astype(bool)
    dec_real = inputs["decoder_padding_mask"].astype(bool)
    assert max_abs_diff(np.asarray(ours["encoder_sequence_output"])[enc_real],
                        hf.encoder_last_hidden_state.numpy()[enc_real]) <= 1e-4
    logits = _logits(lm, inputs)
    assert max_abs_diff(logits[dec_real], hf.logits.numpy()[dec_real]) <= 1e-4
    # The tolerance can fail: without final_logits_bias the logits are far off.
    bias = np.asarray(lm.final_logits_bias)
    assert np.abs(bias).max() > 0.3
    assert max_abs_diff(logits[dec_real] - bias, hf.logits.numpy()[dec_real]) > 0.3


def test_import_is_strict(reference):
    config, model, _ = reference
    weights = torch_state_dict_to_numpy(model)  # every tied copy present, and equal
    # One missing and one unexpected parameter: both named in one error.
    wrong = {k: v for k, v in weights.items() if k != "model.decoder.layers.1.fc2.bias"}
    wrong["model.decoder.layers.2.fc1.bias"] = np.zeros(16, "float32")
    with pytest.raises(ValueError, match=r"missing parameters: \['decoder.layers.1.fc2.bias'\]; "
                       r"unexpected parameters: \['decoder.layers.2.fc1.bias'\]"):
        from_huggingface(config.to_dict(), wrong)
    untied = dict(weights, **{"lm_head.weight": weights["lm_head.weight"] + 1})
    with pytest.raises(ValueError, match="lm_head.weight is not tied"):
        from_huggingface(config.to_dict(), untied)
    with pytest.raises(ValueError, match="scale_embedding"):
        from_huggingface(dict(config.to_dict(), scale_embedding=True), weights)
    # A BartModel file (no head, no bias): the LM is built, the bias reported missing.
    body = {k: v for k, v in weights.items() if k.startswith("model.")}
    assert from_huggingface(config.to_dict(), body)["not_in_checkpoint"] == ["final_logits_bias"]


# ----------------------------------------------------------------------------------------
# Decoding and masks.
# ----------------------------------------------------------------------------------------


def test_cached_decoding_equals_the_full_recompute(lm):
    inputs = _inputs()
    inputs["decoder_padding_mask"][:] = 1  # a prompt of 2 start tokens, then 5 steps
    full = _logits(lm, inputs)
    prompt = {k: inputs[k] for k in ("encoder_token_ids", "encoder_padding_mask")}
    prompt.update(decoder_token_ids=inputs["decoder_token_ids"][:, :2],
                  decoder_padding_mask=inputs["decoder_padding_mask"][:, :2])
    logits, state = lm.start_decoding(prompt, max_length=7)
    steps = [np.asarray(logits)]
    for index in range(2, 7):
        logits, state = lm.decode_step(inputs["decoder_token_ids"][:, index], index, state)
        steps.append(np.asarray(logits))
        assert {t.shape[2] for pair in state["self_cache"] for t in pair} == {7}
        assert {t.shape[2] for pair in state["cross_cache"] for t in pair} == {9}
    assert max_abs_diff(np.stack(steps, axis=1), full[:, 1:]) <= 1e-4
    # The cross caches hold the projected encoder: a different encoder changes every step.
    other = dict(prompt, encoder_token_ids=np.roll(prompt["encoder_token_ids"], 1, axis=1))
    assert max_abs_diff(lm.start_decoding(other, 7)[0], steps[0]) > 1e-2


def test_decoder_is_causal(lm):
    inputs = _inputs()
    base = _logits(lm, inputs)
    changed = dict(inputs, decoder_token_ids=inputs["decoder_token_ids"].copy())
    changed["decoder_token_ids"][:, 4] = (changed["decoder_token_ids"][:, 4] + 7) % VOCAB
    after = _logits(lm, changed)
    np.testing.assert_allclose(after[:, :4], base[:, :4], atol=1e-5)
    assert np.abs(after[0, 4:] - base[0, 4:]).max() > 1e-2


def test_padding_changes_nothing_left_or_right(lm):
    inputs = _inputs()
    base = _logits(lm, inputs)
    # Row 1 alone, unpadded, gives the padded row's logits at its real positions ...
    alone = {k: v[1:2, :(6 if k.startswith("encoder") else 5)] for k, v in inputs.items()}
    np.testing.assert_allclose(_logits(lm, alone)[0], base[1, :5], atol=1e-4)
    # ... and so does the same row left-padded on both sides (positions follow the mask).
    left = {k: np.concatenate([np.full((1, 3), PAD if "ids" in k else 0, "int32"), v], axis=1)
            for k, v in alone.items()}
    np.testing.assert_allclose(_logits(lm, left)[0, 3:], base[1, :5], atol=1e-4)
    # Sensitivity: the padded encoder keys would change the logits if they were attended.
    unmasked = dict(inputs, encoder_padding_mask=np.ones_like(inputs["encoder_padding_mask"]))
    assert np.abs(_logits(lm, unmasked)[1, :5] - base[1, :5]).max() > 1e-2


def test_generative_lm_factory_and_keras_round_trip(tmp_path):
    lm = generative_lm(default_vocab_size=VOCAB, preset="bart_tiny", num_layers=1,
                       hidden_size=16, intermediate_size=24, max_sequence_length=20)
    assert isinstance(lm, BartSeq2SeqLM) and lm.max_decoder_length == 20
    assert lm.is_encoder_decoder and lm.backbone.num_heads == PRESETS["bart_tiny"]["num_heads"]
    lm.final_logits_bias.assign(np.arange(VOCAB, dtype="float32"))
    inputs = _inputs()
    path = str(tmp_path / "bart.keras")
    lm.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, BartSeq2SeqLM)
    np.testing.assert_allclose(_logits(loaded, inputs), _logits(lm, inputs), atol=1e-6)
