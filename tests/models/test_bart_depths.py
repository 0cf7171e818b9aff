"""BART whose encoder and decoder differ in depth (the distilled BARTs: distilbart-cnn-12-6,
distilbart-xsum-12-3): a tiny random Hugging Face BartForConditionalGeneration with
encoder_layers=3, decoder_layers=1, converted by garden.convert, gives Hugging Face's encoder
and decoder outputs and logits, and its greedy `generate` tokens through the cached decode;
the saved .keras files reload with both depths; the distilbart presets have Hugging Face's
parameter counts (both built for shapes only)."""


import keras
import numpy as np
import pytest

from garden import convert
from garden.models.decoding import GenerationConfig, generate
from garden.models.bart import BartBackbone, BartSeq2SeqLM, PRESETS, bart_parameter_count
from garden.models.bart.conversion import backbone_config_from_huggingface

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from convert_testing import max_abs_diff, randomize_torch_, save_hf_dir  # noqa: E402
from generative_testing import seq2seq_inputs  # noqa: E402

VOCAB, PAD, EOS = 67, 1, 2
ENCODER_LAYERS, DECODER_LAYERS = 3, 1
NEW = 8


def _config(**overrides):
    settings = dict(vocab_size=VOCAB, d_model=16, encoder_layers=ENCODER_LAYERS,
                    decoder_layers=DECODER_LAYERS, encoder_attention_heads=2,
                    decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24,
                    max_position_embeddings=32, dropout=0.0, attention_dropout=0.0,
                    activation_dropout=0.0, pad_token_id=PAD, eos_token_id=EOS,
                    forced_bos_token_id=None, forced_eos_token_id=None)
    settings.update(overrides)
    return transformers.BartConfig(**settings)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    torch.manual_seed(0)
    # Scale 0.3: a one-layer decoder at 0.5 greedily repeats one token from the first step.
    model = randomize_torch_(transformers.BartForConditionalGeneration(_config()).eval(),
                             seed=0, scale=0.3)
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.5)  # a buffer: randomize_torch_ leaves it at 0
    directory = save_hf_dir(model, str(tmp_path_factory.mktemp("hf-bart-3-1")))
    return model, directory


@pytest.fixture(scope="module")
def converted(reference):
    models, config = convert.convert("huggingface", "bart", reference[1])
    assert config["encoder_layers"] == ENCODER_LAYERS
    assert config["decoder_layers"] == DECODER_LAYERS
    return models


def _inputs(seed=1):
    return seq2seq_inputs(VOCAB, PAD, seed)


def _hf_outputs(model, inputs):
    with torch.no_grad():
        return model(input_ids=torch.tensor(inputs["encoder_token_ids"], dtype=torch.long),
                     attention_mask=torch.tensor(inputs["encoder_padding_mask"]),
                     decoder_input_ids=torch.tensor(inputs["decoder_token_ids"],
                                                    dtype=torch.long),
                     decoder_attention_mask=torch.tensor(inputs["decoder_padding_mask"]),
                     output_hidden_states=True)


def _assert_depths(lm, encoder=ENCODER_LAYERS, decoder=DECODER_LAYERS):
    backbone = lm.backbone
    assert (len(backbone.encoder_blocks), len(backbone.decoder_blocks)) == (encoder, decoder)
    assert backbone.get_config()["num_layers"] == encoder
    assert backbone.get_config()["num_decoder_layers"] == decoder


# ----------------------------------------------------------------------------------------
# Configs, presets and counts.
# ----------------------------------------------------------------------------------------


def test_config_carries_the_decoder_depth():
    kwargs = backbone_config_from_huggingface(_config().to_dict())
    assert (kwargs["num_layers"], kwargs["num_decoder_layers"]) == (3, 1)
    # Equal stacks keep the default (None = num_layers): configs saved before are unchanged.
    same = backbone_config_from_huggingface(_config(decoder_layers=3).to_dict())
    assert same["num_decoder_layers"] is None
    # Widths must still agree; the message names the key.
    with pytest.raises(ValueError, match="decoder_ffn_dim=32"):
        backbone_config_from_huggingface(_config(decoder_ffn_dim=32).to_dict())
    with pytest.raises(ValueError, match="at least one layer per stack"):
        BartBackbone(vocab_size=VOCAB, num_layers=2, num_decoder_layers=0, hidden_size=16,
                     num_heads=2, intermediate_size=24, max_sequence_length=8)


@pytest.mark.parametrize("name,decoder_layers,published", [
    ("distilbart_cnn_12_6", 6, 305_510_400), ("distilbart_xsum_12_3", 3, 255_120_384)])
def test_distilbart_presets_have_hugging_face_counts(name, decoder_layers, published):
    # The sizes of sshleifer/distilbart-cnn-12-6 and -xsum-12-3 (bart-large's width, 12
    # encoder layers, vocab 50264): Hugging Face's BartModel on the meta device and our
    # backbone in a stateless scope, shapes only (1.2 GB each if allocated).
    config = _config(vocab_size=50264, d_model=1024, encoder_layers=12,
                     decoder_layers=decoder_layers, encoder_attention_heads=16,
                     decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096,
                     max_position_embeddings=1024)
    with torch.device("meta"):
        hf = transformers.BartModel(config)
    expected = sum(p.numel() for p in hf.parameters())
    del hf
    preset = PRESETS[name]
    kwargs = backbone_config_from_huggingface(config.to_dict())
    assert {k: kwargs[k] for k in preset} == preset
    assert bart_parameter_count(**preset) == expected == published
    with keras.StatelessScope(initialize_variables=False):
        backbone = BartBackbone.untrained(name)
        assert (len(backbone.encoder_blocks), len(backbone.decoder_blocks)) == (12,
                                                                                decoder_layers)
        assert backbone.count_params() == expected


# ----------------------------------------------------------------------------------------
# Parity with Hugging Face.
# ----------------------------------------------------------------------------------------


def test_outputs_and_logits_equal_hugging_face(reference, converted):
    model, _ = reference
    lm = converted["lm"]
    _assert_depths(lm)
    assert converted["not_in_checkpoint"] == []
    inputs = _inputs()
    hf = _hf_outputs(model, inputs)
    assert len(hf.encoder_hidden_states) == ENCODER_LAYERS + 1
    assert len(hf.decoder_hidden_states) == DECODER_LAYERS + 1
    ours = lm.backbone(inputs)
    enc_real = inputs["encoder_padding_mask"].astype(bool)
    dec_real = inputs["decoder_padding_mask"].astype(bool)
    assert max_abs_diff(np.asarray(ours["encoder_sequence_output"])[enc_real],
                        hf.encoder_last_hidden_state.numpy()[enc_real]) <= 1e-4
    assert max_abs_diff(np.asarray(ours["decoder_sequence_output"])[dec_real],
                        hf.decoder_hidden_states[-1].numpy()[dec_real]) <= 1e-4
    logits = np.asarray(lm(inputs)["logits"])
    assert max_abs_diff(logits[dec_real], hf.logits.numpy()[dec_real]) <= 1e-4
    # The tolerance can fail: a different encoder changes the decoder's logits.
    other = dict(inputs, encoder_token_ids=np.roll(inputs["encoder_token_ids"], 1, axis=1))
    assert max_abs_diff(np.asarray(lm(other)["logits"])[dec_real],
                        hf.logits.numpy()[dec_real]) > 1e-2


def test_cached_greedy_decode_equals_hugging_face_generate(reference, converted):
    model, _ = reference
    lm = converted["pretrainer"]
    rng = np.random.default_rng(2)
    ids = rng.integers(3, VOCAB, (2, 9)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 6:] = 0  # the encoder is right-padded
    ids[mask == 0] = PAD
    start = np.tile(np.array([[2, 0]], "int32"), (2, 1))  # </s> <s>, as BART's decoder starts
    config = transformers.GenerationConfig(
        max_new_tokens=NEW, do_sample=False, num_beams=1, no_repeat_ngram_size=0,
        forced_bos_token_id=None, forced_eos_token_id=None, length_penalty=0.0,
        early_stopping=False, min_new_tokens=0, eos_token_id=EOS, pad_token_id=PAD)
    with torch.inference_mode():
        expected = model.generate(input_ids=torch.from_numpy(ids.astype("int64")),
                                  attention_mask=torch.from_numpy(mask.astype("int64")),
                                  decoder_input_ids=torch.from_numpy(start.astype("int64")),
                                  generation_config=config).numpy()[:, 2:]
    prompt = {"encoder_token_ids": ids, "encoder_padding_mask": mask,
              "decoder_token_ids": start, "decoder_padding_mask": np.ones_like(start)}
    got = np.asarray(generate(lm, prompt, GenerationConfig(max_new_tokens=NEW, method="greedy"),
                              eos_id=EOS, pad_id=PAD)["token_ids"])
    assert expected.shape[1] >= 4
    np.testing.assert_array_equal(got[:, :expected.shape[1]], expected)
    assert len(set(map(tuple, got.tolist()))) > 1  # the rows are not one repeated answer
    assert len(set(got[0].tolist())) > 2  # nor one repeated token
    # The cached state has one self and one cross pair per decoder layer, not per encoder layer.
    _, state = lm.start_decoding(prompt, max_length=NEW + 2)
    assert len(state["self_cache"]) == len(state["cross_cache"]) == DECODER_LAYERS


def test_saved_models_reload_with_both_depths(reference, tmp_path):
    out = tmp_path / "converted"
    assert convert.main(["--source=huggingface", "--model=bart", f"--input={reference[1]}",
                         f"--output={out}"]) == 0
    lm = keras.saving.load_model(str(out / "pretrainer.keras"))
    assert isinstance(lm, BartSeq2SeqLM)
    _assert_depths(lm)
    backbone = keras.saving.load_model(str(out / "backbone.keras"))
    assert (len(backbone.encoder_blocks), len(backbone.decoder_blocks)) == (ENCODER_LAYERS,
                                                                            DECODER_LAYERS)
    inputs = _inputs()
    hf = _hf_outputs(reference[0], inputs)
    dec_real = inputs["decoder_padding_mask"].astype(bool)
    assert max_abs_diff(np.asarray(lm(inputs)["logits"])[dec_real],
                        hf.logits.numpy()[dec_real]) <= 1e-4
    assert lm.count_params() == bart_parameter_count(**lm.backbone.get_config()) + VOCAB
