"""`python -m garden.generate` on a model directory written by garden.generate_dir's
save_model_dir: a toy causal LM over a real byte-level BPE vocabulary (the 6 specials, the 256
byte symbols and two merges), run in a fresh process."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest

from text.vocab_files import BPE_SPECIALS
from text.bpe import bytes_to_unicode
from garden import generate as cli
from garden.generate_dir import save_model_dir
from garden.models.decoding import GenerationConfig, generate
from generative_testing import ToyCausalLM
from testing import REPO_ROOT, run_module

EOS, PAD = BPE_SPECIALS.index("<|endoftext|>"), BPE_SPECIALS.index("<pad>")
PIECES = BPE_SPECIALS + list(bytes_to_unicode().values()) + ["\u0120t", "he"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("generate")
    (root / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(PIECES)}))
    (root / "merges.txt").write_text("#version: 0.2\n\u0120 t\nh e\n")
    model = ToyCausalLM(vocab_size=len(PIECES), seed=3)
    ones = np.ones((1, 2), np.int32)
    model({"token_ids": ones, "padding_mask": ones})
    out = save_model_dir(str(root / "model"), model, tokenizer_kind="bpe",
                         vocab=str(root / "vocab.json"), eos_id=EOS, pad_id=PAD)
    return out, model


def expected_text(model, prompts, config):
    """What the CLI should print: each prompt, then its greedy continuation decoded piece by
    piece through GPT-2's byte table (up to EOS)."""
    from text.tokenizers import load_tokenizer

    tokenizer = load_tokenizer("bpe", os.path.join(model[0], "vocab.json"), lower_case=False)
    ids = tokenizer.tokenize(prompts)
    width = max(len(r) for r in ids)
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    lines = []
    for text, row in zip(prompts, ids):
        token_ids = np.zeros((1, width), np.int32)
        mask = np.zeros((1, width), np.int32)
        token_ids[0, width - len(row):], mask[0, width - len(row):] = row, 1
        out = generate(model[1], {"token_ids": token_ids, "padding_mask": mask}, config,
                       eos_id=EOS, pad_id=PAD, jit_compile=False)
        new = out["token_ids"][0, :out["lengths"][0]].tolist()
        new = new[:-1] if new and new[-1] == EOS else new
        data = b"".join(bytes(byte_of[c] for c in PIECES[t]) for t in new)
        lines.append(text + data.decode("utf-8", errors="replace"))
    return lines


def test_the_cli_streams_each_prompts_continuation_in_a_fresh_process(model_dir):
    prompts = ["the cat sat", "hi"]
    proc = run_module("garden.generate", f"--model_dir={model_dir[0]}", f"--prompt={prompts[0]}",
                      f"--prompt={prompts[1]}", "--max_new_tokens=6", "--no-jit",
                      env_extra={"PYTHONPATH": os.path.join(REPO_ROOT, "tests")}, timeout=300)
    expected = expected_text(model_dir, prompts, GenerationConfig(max_new_tokens=6))
    assert proc.stdout.splitlines() == expected
    assert all(len(line) > len(p) for line, p in zip(expected, prompts))  # text was generated
    # The default --intra_op_threads=1 took effect: nothing ran an op before the CLI set it.
    assert "thread pools left as they are" not in proc.stderr, proc.stderr[-2000:]


def test_the_saved_directory_round_trips_and_bad_input_is_named(model_dir, tmp_path, capsys):
    loaded = cli.load_model_dir(model_dir[0])
    prompt = loaded.encode(["the cat", "hi"])
    assert prompt["padding_mask"].tolist()[1][0] == 0  # "hi" is left-padded
    np.testing.assert_allclose(loaded.model(prompt)["logits"], model_dir[1](prompt)["logits"],
                               atol=1e-6)
    out = io.StringIO()
    assert cli.main([f"--model_dir={tmp_path}", "--prompt=x"], out=out) == 2
    err = capsys.readouterr().err  # a run directory, a convert or a generate directory
    assert f"{tmp_path} is neither" in err and "(no generation.json)" in err, err
    assert "(no operative_config.gin)" in err, err
    assert cli.main([f"--model_dir={model_dir[0]}", "--prompt=x", "--top_p=0"], out=out) == 2
    assert "top_p=0.0 must be in (0, 1]" in capsys.readouterr().err
    with pytest.raises(FileExistsError):
        save_model_dir(model_dir[0], model_dir[1], tokenizer_kind="bpe",
                       vocab=os.path.join(model_dir[0], "vocab.json"), eos_id=EOS, pad_id=PAD)


def test_convert_writes_a_generate_directory_that_continues_as_hugging_face_does(
        model_dir, tmp_path, capsys):
    """garden.convert of a Hugging Face GPT-2 directory holding vocab.json + merges.txt also
    writes OUT/generate/; garden.generate on it prints the prompt and the continuation that
    Hugging Face's own greedy generate gives, decoded through GPT-2's byte table."""
    import torch
    import transformers

    from convert_testing import randomize_torch_
    from garden import convert

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=len(PIECES), n_positions=64, n_embd=32,
                                     n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0, eos_token_id=EOS, bos_token_id=EOS)
    hf = randomize_torch_(transformers.GPT2LMHeadModel(config).eval(), scale=0.3)
    hf_dir = tmp_path / "hf"
    hf.save_pretrained(str(hf_dir))
    for name in ("vocab.json", "merges.txt"):
        (hf_dir / name).write_bytes(open(os.path.join(model_dir[0], name), "rb").read())
    out_dir = tmp_path / "out"
    argv = ["--source=huggingface", "--model=gpt2", f"--input={hf_dir}", f"--output={out_dir}"]
    assert convert.main(argv) == 0
    info = json.load(open(out_dir / "convert_info.json"))
    assert info["generate_dir"] == str(out_dir / "generate")
    assert json.load(open(out_dir / "generate" / "generation.json"))["eos_id"] == EOS
    # A second conversion into the same OUT refuses to overwrite generate/.
    assert convert.main(argv) == 2
    assert "generate exists" in capsys.readouterr().err

    prompt = "the cat sat"
    printed = io.StringIO()
    assert cli.main([f"--model_dir={out_dir / 'generate'}", f"--prompt={prompt}",
                     "--max_new_tokens=8", "--no-jit"], out=printed) == 0
    from text.tokenizers import load_tokenizer

    ids = load_tokenizer("bpe", str(hf_dir / "vocab.json"), lower_case=False).tokenize([prompt])
    with torch.inference_mode():
        full = hf.generate(torch.tensor(ids), attention_mask=torch.ones(1, len(ids[0]),
                                                                        dtype=torch.long),
                           max_new_tokens=8, do_sample=False, pad_token_id=EOS,
                           eos_token_id=EOS)[0, len(ids[0]):].tolist()
    new = full[:full.index(EOS)] if EOS in full else full
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    text = b"".join(bytes(byte_of[c] for c in PIECES[t]) for t in new).decode("utf-8", "replace")
    assert printed.getvalue().rstrip("\n") == prompt + text
    assert len(text) > 0

    # Without the tokenizer files there is no generate/ directory, and a note says why.
    for name in ("vocab.json", "merges.txt"):
        (hf_dir / name).unlink()
    assert convert.main(["--source=huggingface", "--model=gpt2", f"--input={hf_dir}",
                         f"--output={tmp_path / 'bare'}"]) == 0
    assert "no vocab.json, merges.txt" in capsys.readouterr().out
    assert not (tmp_path / "bare" / "generate").exists()
