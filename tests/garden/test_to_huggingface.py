"""garden.to_huggingface (issue 35 item 2): a garden model written back in the Hugging Face
layout loads in transformers with the garden model's outputs.

For BERT, GPT-2 and T5 (v1.1: unscaled decoder output, gated GELU, a shallower decoder) a tiny
random transformers model is written here, converted in by garden.convert and written back
out: every tensor transformers saved comes back equal (T5's lm_head, which transformers 5
saves as the tied `shared`, is written as well, for transformers 4),
`AutoModel.from_pretrained` loads the directory offline, and its outputs equal the original
transformers model's and the garden backbone's on the same ids (1e-4); the written tokenizer
gives the garden tokenizer's ids. A tiny BERT pretraining run of garden.train is written out by
the command line (`python -m garden.to_huggingface`): transformers' BertForPreTraining gives
the run's hidden states and its pretrainer's MLM and next-sentence logits. Another family, and
an --output that holds a model, are refused in one line.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from convert_testing import (  # noqa: E402
    convert_hf_bert, max_abs_diff, random_bert_inputs, randomize_torch_, save_hf_dir,
    write_hf_bert, write_hf_gpt2, write_sentencepiece_model)
from testing import pretrain_args, run_tool, train_in_process  # noqa: E402

TOL = 1e-4
# English, other scripts and symbols, an accent, empty and a long run.
TEXTS = ["The movie was GOOD, really!", "the plot was dull , the film great .",
         "Ελληνικά 日本語 テキスト 🙂 café ½ ∑", "", " ".join(["movie"] * 60)]


def _write_back(source, output):
    """garden.to_huggingface's main() in this process; asserts it succeeded."""
    from garden import to_huggingface

    assert to_huggingface.main([f"--model_dir={source}", f"--output={output}"]) == 0
    return output


def _hf_t5(folder):
    """A tiny random T5 v1.1 (config tie_word_embeddings false: no decoder scaling; gated
    GELU; 2 encoder / 1 decoder layers) with a SentencePiece spiece.model; the model."""
    folder.mkdir()
    pieces = write_sentencepiece_model(str(folder / "spiece.model"), vocab_size=60)
    config = transformers.T5Config(
        vocab_size=pieces + 4, d_model=32, d_kv=8, d_ff=64, num_layers=2,
        num_decoder_layers=1, num_heads=4, feed_forward_proj="gated-gelu",
        tie_word_embeddings=False, relative_attention_num_buckets=8,
        relative_attention_max_distance=32, dropout_rate=0.0, pad_token_id=0,
        decoder_start_token_id=0)
    torch.manual_seed(4)
    model = randomize_torch_(transformers.T5ForConditionalGeneration(config).eval(), seed=4)
    save_hf_dir(model, str(folder))
    return model


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    """family -> {model (the original transformers model), dir (its folder), out (converted
    by garden.convert), back (written back by garden.to_huggingface)}."""
    from garden import convert

    root = tmp_path_factory.mktemp("to_hf")
    made = {"bert": convert_hf_bert(root / "bert", seed=1)}
    gpt2, _ = write_hf_gpt2(root / "hf_gpt2", seed=3, n_positions=64)
    made["gpt2"] = {"model": gpt2, "dir": str(root / "hf_gpt2")}
    made["t5"] = {"model": _hf_t5(root / "hf_t5"), "dir": str(root / "hf_t5")}
    for family in ("gpt2", "t5"):
        out = root / f"out_{family}"
        assert convert.main(["--source=huggingface", f"--model={family}",
                             f"--input={made[family]['dir']}", f"--output={out}"]) == 0
        made[family]["out"] = out
    for family, entry in made.items():
        entry["back"] = _write_back(entry["out"], root / f"back_{family}")
    return made


def _tensors(directory):
    from safetensors.numpy import load_file

    return load_file(os.path.join(str(directory), "model.safetensors"))


@pytest.mark.parametrize("family", ["bert", "gpt2", "t5"])
def test_every_saved_tensor_comes_back_equal(family, families):
    """The weights transformers saved, converted in and written out: the same names (less the
    `transformer.` scope GPT2LMHeadModel adds to a GPT2Model's) and the same arrays."""
    entry = families[family]
    original, back = _tensors(entry["dir"]), _tensors(entry["back"])
    if family == "gpt2":
        original = {k if k.startswith("transformer.") else f"transformer.{k}": v
                    for k, v in original.items()}
    if family == "t5":  # transformers 5 saves v1.1's lm_head as `shared`; it is written out
        assert "lm_head.weight" not in original  # for transformers 4, which reads it
        original["lm_head.weight"] = original["shared.weight"]
    assert sorted(back) == sorted(original)
    for name, value in original.items():
        assert back[name].shape == value.shape, name
        assert np.array_equal(back[name], value), name


def _garden_backbone(out):
    from garden import runs

    return runs.open(str(out), who="test").backbone()


def test_bert_outputs_equal_the_source_and_the_garden_backbone(families):
    entry = families["bert"]
    loaded = transformers.AutoModel.from_pretrained(str(entry["back"])).eval()
    assert type(loaded).__name__ == "BertModel"
    inputs, _ = random_bert_inputs(3, 16, loaded.config.vocab_size, seed=5)
    real = inputs["padding_mask"].astype(bool)
    kwargs = {"input_ids": torch.tensor(inputs["token_ids"], dtype=torch.long),
              "token_type_ids": torch.tensor(inputs["segment_ids"], dtype=torch.long),
              "attention_mask": torch.tensor(inputs["padding_mask"], dtype=torch.long)}
    with torch.no_grad():
        ours = loaded(**kwargs)
        source = entry["model"](**kwargs)
    garden = _garden_backbone(entry["out"])(inputs, training=False)
    assert max_abs_diff(ours.last_hidden_state.numpy()[real],
                        source.last_hidden_state.numpy()[real]) <= TOL
    assert max_abs_diff(ours.last_hidden_state.numpy()[real],
                        np.asarray(garden["sequence_output"])[real]) <= TOL
    assert max_abs_diff(ours.pooler_output, source.pooler_output) <= TOL


def test_gpt2_outputs_and_tied_lm_head(families):
    entry = families["gpt2"]
    base = transformers.AutoModel.from_pretrained(str(entry["back"])).eval()
    lm = transformers.AutoModelForCausalLM.from_pretrained(str(entry["back"])).eval()
    assert type(base).__name__ == "GPT2Model" and type(lm).__name__ == "GPT2LMHeadModel"
    config = json.loads((entry["back"] / "config.json").read_text())
    eos = lm.config.vocab_size - 1  # write_hf_gpt2's <|endoftext|>, last
    assert config["bos_token_id"] == config["eos_token_id"] == eos
    ids = np.random.default_rng(6).integers(0, lm.config.vocab_size, (2, 12))
    with torch.no_grad():
        hidden = base(input_ids=torch.tensor(ids)).last_hidden_state.numpy()
        logits = lm(input_ids=torch.tensor(ids)).logits.numpy()
        source = entry["model"](input_ids=torch.tensor(ids), output_hidden_states=True)
    garden = _garden_backbone(entry["out"])(
        {"token_ids": ids.astype("int32"), "padding_mask": np.ones_like(ids, "int32")},
        training=False)
    assert max_abs_diff(hidden, source.hidden_states[-1]) <= TOL
    assert max_abs_diff(hidden, garden["sequence_output"]) <= TOL
    assert max_abs_diff(logits, source.logits) <= TOL  # lm_head: the tied token table


def test_t5_outputs_equal_the_source_and_the_garden_backbone(families):
    entry = families["t5"]
    config = json.loads((entry["back"] / "config.json").read_text())
    assert config["tie_word_embeddings"] is False and config["feed_forward_proj"] == "gated-gelu"
    base = transformers.AutoModel.from_pretrained(str(entry["back"])).eval()
    lm = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(entry["back"])).eval()
    assert type(base).__name__ == "T5Model"
    rng = np.random.default_rng(7)
    encoder_ids = rng.integers(3, lm.config.vocab_size, (2, 10))
    decoder_ids = rng.integers(3, lm.config.vocab_size, (2, 6))
    kwargs = {"input_ids": torch.tensor(encoder_ids),
              "decoder_input_ids": torch.tensor(decoder_ids)}
    with torch.no_grad():
        ours = base(**kwargs)
        logits = lm(**kwargs).logits.numpy()
        source = entry["model"](**kwargs, output_hidden_states=True)
    garden = _garden_backbone(entry["out"])(
        {"encoder_token_ids": encoder_ids.astype("int32"),
         "encoder_padding_mask": np.ones_like(encoder_ids, "int32"),
         "decoder_token_ids": decoder_ids.astype("int32"),
         "decoder_padding_mask": np.ones_like(decoder_ids, "int32")}, training=False)
    assert max_abs_diff(ours.last_hidden_state, source.decoder_hidden_states[-1]) <= TOL
    assert max_abs_diff(ours.encoder_last_hidden_state, source.encoder_last_hidden_state) <= TOL
    assert max_abs_diff(ours.last_hidden_state, garden["decoder_sequence_output"]) <= TOL
    assert max_abs_diff(ours.encoder_last_hidden_state,
                        garden["encoder_sequence_output"]) <= TOL
    assert max_abs_diff(logits, source.logits) <= TOL  # v1.1: the decoder output unscaled


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_the_written_tokenizer_gives_the_garden_ids(family, families):
    from garden import runs

    entry = families[family]
    ours = runs.open(str(entry["out"]), who="test").text.tokenizer()
    theirs = transformers.AutoTokenizer.from_pretrained(str(entry["back"]))
    for text in TEXTS:
        assert theirs(text, add_special_tokens=False)["input_ids"] == ours.tokenize([text])[0]
    if family == "bert":  # uncased: the lower-casing is the written tokenizer_config.json's
        assert theirs("GOOD", add_special_tokens=False)["input_ids"] == \
            theirs("good", add_special_tokens=False)["input_ids"]


def test_the_t5_sentencepiece_model_is_written_as_spiece_model(families):
    """T5Tokenizer reads spiece.model; this venv's protobuf cannot parse it through
    transformers (as for ALBERT in test_converted_checkpoints), so the written file is read
    by sentencepiece itself, and its sentinels sit above the pieces as T5Tokenizer lays them."""
    import sentencepiece as spm

    from garden import runs

    entry = families["t5"]
    written = entry["back"] / "spiece.model"
    assert written.read_bytes() == (entry["out"] / "spiece.model").read_bytes()
    sp = spm.SentencePieceProcessor(model_file=str(written))
    ours = runs.open(str(entry["out"]), who="test").text.tokenizer()
    for text in TEXTS:
        assert sp.encode(text) == ours.tokenize([text])[0]
    config = json.loads((entry["back"] / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "T5Tokenizer"
    assert sp.get_piece_size() + config["extra_ids"] == entry["model"].config.vocab_size


# --- a garden.train run -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pretraining_run(bert_data, tmp_path_factory):
    """A 4-step tiny BERT pretraining run, written out by `python -m garden.to_huggingface`."""
    root = tmp_path_factory.mktemp("to_hf_run")
    model_dir = root / "run"
    train_in_process(pretrain_args(bert_data, model_dir, steps=4)[2:], str(model_dir),
                     steps=4)
    back = root / "back_run"
    proc = run_tool("garden.to_huggingface", f"--model_dir={model_dir}", f"--output={back}")
    return {"model_dir": model_dir, "back": back, "stdout": proc.stdout}


def test_a_pretraining_run_loads_as_bert_for_pretraining(pretraining_run):
    from garden import runs

    assert "BertForPreTraining" in pretraining_run["stdout"]
    loaded = transformers.BertForPreTraining.from_pretrained(str(pretraining_run["back"])).eval()
    assert loaded.cls.predictions.decoder.weight.data_ptr() == \
        loaded.bert.embeddings.word_embeddings.weight.data_ptr()  # tied, as transformers ties
    run = runs.open(str(pretraining_run["model_dir"]), who="test")
    backbone, pretrainer = run.backbone(), run.task_model()
    inputs, positions = random_bert_inputs(2, 16, loaded.config.vocab_size, seed=8)
    real = inputs["padding_mask"].astype(bool)
    with torch.no_grad():
        out = loaded(input_ids=torch.tensor(inputs["token_ids"], dtype=torch.long),
                     token_type_ids=torch.tensor(inputs["segment_ids"], dtype=torch.long),
                     attention_mask=torch.tensor(inputs["padding_mask"], dtype=torch.long),
                     output_hidden_states=True)
    garden = backbone(inputs, training=False)
    assert max_abs_diff(out.hidden_states[-1].numpy()[real],
                        np.asarray(garden["sequence_output"])[real]) <= TOL
    heads = pretrainer({**inputs, "masked_lm_positions": positions}, training=False)
    assert max_abs_diff(np.take_along_axis(out.prediction_logits.numpy(), positions[..., None], 1),
                        heads["mlm_logits"]) <= TOL
    assert max_abs_diff(out.seq_relationship_logits, heads["nsp_logits"]) <= TOL
    theirs = transformers.AutoTokenizer.from_pretrained(str(pretraining_run["back"]))
    assert theirs(TEXTS[0], add_special_tokens=False)["input_ids"] == \
        run.text.tokenizer().tokenize([TEXTS[0]])[0]


# --- refusals -----------------------------------------------------------------------------------

def _refused(capsys, model_dir, output) -> str:
    """garden.to_huggingface of model_dir into output exits 2 with one line (returned)."""
    from garden import to_huggingface

    capsys.readouterr()
    assert to_huggingface.main([f"--model_dir={model_dir}", f"--output={output}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def _converted(folder, family, out):
    from garden import convert

    assert convert.main(["--source=huggingface", f"--model={family}", f"--input={folder}",
                         f"--output={out}"]) == 0
    return out


def test_another_family_a_written_output_and_no_vocabulary_are_refused(families, tmp_path,
                                                                       capsys):
    config = transformers.DistilBertConfig(vocab_size=120, dim=32, n_layers=1, n_heads=4,
                                           hidden_dim=64, max_position_embeddings=32)
    save_hf_dir(transformers.DistilBertModel(config).eval(), str(tmp_path / "hf_distilbert"))
    out = _converted(tmp_path / "hf_distilbert", "distilbert", tmp_path / "out_distilbert")
    err = _refused(capsys, out, tmp_path / "x")
    assert str(out) in err and "distilbert" in err and "bert, gpt2, t5" in err
    assert not (tmp_path / "x").exists()

    err = _refused(capsys, families["bert"]["out"], families["bert"]["back"])
    assert "model.safetensors exists" in err

    # A BERT converted without its vocab.txt: refused before anything is written.
    source = write_hf_bert(str(tmp_path / "hf_bert_no_vocab"))
    os.remove(source["vocab"])
    out = _converted(source["dir"], "bert", tmp_path / "out_no_vocab")
    err = _refused(capsys, out, tmp_path / "y")
    assert "records no vocabulary" in err and str(out) in err
    assert not (tmp_path / "y").exists()
