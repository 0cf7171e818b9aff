"""The generation export (garden/serving/generation.py): a toy causal LM over a real byte-level
BPE vocabulary exported, served by `python -m garden.serve` in a fresh process and called over
HTTP; every answer equals garden.models.decoding.generate on prompts the test encodes itself with
the tokenizer's eager path. The encoder-decoder path (SentencePiece, T5-style suffix and decoder
start) is checked in process, and the detokenizer against sentencepiece and keras-hub."""

from __future__ import annotations


import numpy as np
import pytest
import tensorflow as tf

from text import tokenizers, vocab_files
from garden.models.decoding import GenerationConfig, generate
from garden.serving.export import export
from garden.serving.generation import GenerationServing, detokenize_numpy
from generative_testing import ToyCausalLM, ToySeq2SeqLM
from serve_testing import Client, ServerProcess

PROMPT_LENGTH, CAP, BEAMS = 12, 6, 2
PROMPTS = ["the module returns a value", "hello world",
           "a much longer prompt that is cut to its last twelve pieces by the export"]


def _left_padded(tok, prompts, length, pad_id):
    """The prompt dict garden.models.decoding takes, built from the tokenizer's eager ids."""
    ids = np.full((len(prompts), length), pad_id, np.int32)
    mask = np.zeros_like(ids)
    for row, pieces in enumerate(tok.tokenize(prompts)):
        pieces = pieces[-length:]
        ids[row, length - len(pieces):] = pieces
        mask[row, length - len(pieces):] = 1
    return {"token_ids": ids, "padding_mask": mask}


def _expected(model, tok, prompt, config, eos, pad):
    # jit_compile=False: the export runs the plain graph (TF Serving's XLA:CPU JIT is off by
    # default), and sampled tokens may differ under XLA.
    out = generate(model, prompt, config, eos_id=eos, pad_id=pad, jit_compile=False)
    return out, detokenize_numpy(tok, out["token_ids"], out["lengths"])


@pytest.fixture(scope="module")
def served(serving_corpus, tmp_path_factory):
    path = serving_corpus.vocab["bpe"]
    tok = tokenizers.load_tokenizer("bpe", path, lower_case=True)
    eos, pad = tok.vocab.special("eos"), tok.vocab.special("pad")
    model = ToyCausalLM(vocab_size=tok.vocab.size, seed=3)
    model({"token_ids": np.ones((1, 2), np.int32), "padding_mask": np.ones((1, 2), np.int32)})
    # A flatter next-token distribution than the toy's (tied table of std 1 repeats its input
    # token with probability ~1), so that beam search, sampling and greedy differ.
    model.token_table.embeddings.assign(model.token_table.embeddings * 0.15)
    module = GenerationServing(model, tok, path, eos_id=eos, pad_id=pad,
                               max_prompt_length=PROMPT_LENGTH, max_new_tokens=CAP,
                               max_beams=BEAMS)
    root = tmp_path_factory.mktemp("generation_export")
    export(module, str(root), "toy")
    server = ServerProcess(["--model_name=toy", f"--model_base_path={root / 'toy'}"],
                           str(root / "server.log"))
    client = Client(server)
    yield dict(model=model, tok=tok, eos=eos, pad=pad, client=client, server=server)
    client.close()
    server.stop()


def _settings_rows(n, **values):
    base = dict(max_new_tokens=CAP, method="greedy", num_beams=1, temperature=1.0, top_k=0,
                top_p=1.0, seed=0)
    base.update(values)
    return {k: [v] * n for k, v in base.items()}


def test_served_generation_equals_generate(served):
    model, tok, eos, pad, client = (served[k] for k in ("model", "tok", "eos", "pad", "client"))
    prompt = _left_padded(tok, PROMPTS, PROMPT_LENGTH, pad)
    # serving_default, row format: the export's defaults (greedy, CAP new tokens).
    out, texts = _expected(model, tok, prompt, GenerationConfig(max_new_tokens=CAP), eos, pad)
    texts_default = texts
    status, _, body = client.post("/v1/models/toy:predict",
                                  {"instances": [{"prompt": p} for p in PROMPTS]})
    assert status == 200, body
    assert [p["text"] for p in body["predictions"]] == texts
    assert [p["num_tokens"] for p in body["predictions"]] == out["lengths"].tolist()
    np.testing.assert_allclose([p["score"] for p in body["predictions"]], out["scores"],
                               rtol=1e-5, atol=1e-5)
    assert any(texts), "the toy generated no text at all: the comparison would be vacuous"

    # generate, columnar: beam search, sampling with top-k and a seed, a shorter greedy run.
    cases = [(dict(method="beam", num_beams=2),
              GenerationConfig(max_new_tokens=CAP, method="beam", num_beams=2)),
             (dict(method="sample", top_k=5, temperature=0.7, seed=11),
              GenerationConfig(max_new_tokens=CAP, method="sample", top_k=5, temperature=0.7,
                               seed=11)),
             (dict(max_new_tokens=3), GenerationConfig(max_new_tokens=3))]
    answers = []
    for values, config in cases:
        out, texts = _expected(model, tok, prompt, config, eos, pad)
        inputs = dict(_settings_rows(len(PROMPTS), **values), prompt=PROMPTS)
        status, _, body = client.post("/v1/models/toy:predict",
                                      {"signature_name": "generate", "inputs": inputs})
        assert status == 200, (values, body)
        assert body["outputs"]["text"] == texts, values
        assert body["outputs"]["num_tokens"] == out["lengths"].tolist(), values
        np.testing.assert_allclose(body["outputs"]["score"], out["scores"], rtol=1e-5,
                                   atol=1e-5)
        answers.append(body["outputs"]["text"])
    assert answers[0] != texts_default and answers[1] != texts_default, (
        "beam / sampling gave greedy's answers: the settings would not be tested")

    # serving_ids: the tokens themselves.
    out = generate(model, prompt, GenerationConfig(max_new_tokens=CAP), eos_id=eos, pad_id=pad,
                   jit_compile=False)
    status, _, body = client.post("/v1/models/toy:predict", {
        "signature_name": "serving_ids",
        "inputs": {k: v.tolist() for k, v in prompt.items()}})
    assert status == 200, body
    assert body["outputs"]["token_ids"] == out["token_ids"].tolist()
    assert "Number of warmup records read: 4" in served["server"].log()


@pytest.mark.parametrize("values,message", [
    (dict(method=["greedy", "beam", "greedy"]), "same value"),
    (dict(max_new_tokens=[CAP + 1] * 3), f"max_new_tokens must be <= {CAP}"),
    (dict(method=["nucleus"] * 3), "method must be one of"),
    (dict(method=["beam"] * 3, num_beams=[BEAMS + 1] * 3), f"num_beams must be in 1..{BEAMS}"),
])
def test_bad_settings_answer_400(served, values, message):
    inputs = dict(_settings_rows(len(PROMPTS)), prompt=PROMPTS)
    inputs.update(values)
    status, _, body = served["client"].post("/v1/models/toy:predict",
                                            {"signature_name": "generate", "inputs": inputs})
    assert status == 400 and message in body["error"], body


def test_encoder_decoder_in_process(serving_corpus):
    """T5-style: the prompt is the encoder input (+ </s>), the decoder starts from <pad>."""
    path = serving_corpus.vocab["sentencepiece"]
    tok = tokenizers.load_tokenizer("sentencepiece", path, lower_case=True)
    eos, pad = tok.vocab.special("eos"), tok.vocab.special("pad")
    model = ToySeq2SeqLM(vocab_size=tok.vocab.size, seed=2)
    module = GenerationServing(model, tok, path, eos_id=eos, pad_id=pad, max_prompt_length=10,
                               max_new_tokens=CAP, max_beams=BEAMS, prompt_suffix_ids=[eos],
                               decoder_start_ids=[pad])
    ids = np.full((len(PROMPTS), 10), pad, np.int32)
    for row, pieces in enumerate(tok.tokenize(PROMPTS)):
        pieces = pieces[:9] + [eos]  # the first pieces, then </s>, right-padded
        ids[row, :len(pieces)] = pieces
    prompt = {"encoder_token_ids": ids, "encoder_padding_mask": (ids != pad).astype(np.int32),
              "decoder_token_ids": np.full((3, 1), pad, np.int32),
              "decoder_padding_mask": np.ones((3, 1), np.int32)}
    out, texts = _expected(model, tok, prompt, GenerationConfig(max_new_tokens=CAP), eos, pad)
    got = module.generate_default(tf.constant(PROMPTS))
    assert [t.decode() for t in got["text"].numpy()] == texts
    assert got["num_tokens"].numpy().tolist() == out["lengths"].tolist()
    np.testing.assert_allclose(got["score"].numpy(), out["scores"], rtol=1e-5, atol=1e-5)


def test_detokenizer_matches_the_libraries(serving_corpus):
    import keras_hub
    import sentencepiece as spm

    rng = np.random.default_rng(0)
    sp_path = serving_corpus.vocab["sentencepiece"]
    sp_tok = tokenizers.load_tokenizer("sentencepiece", sp_path, lower_case=True)
    sp = spm.SentencePieceProcessor(model_file=sp_path)
    ids = rng.integers(0, sp_tok.vocab.size, (20, 12))
    lengths = rng.integers(0, 13, 20)
    specials = sorted(sp_tok.vocab.special_ids)  # pad, EOS, <unk>, control: every row has some
    ids[:, 1::3] = rng.choice(specials, ids[:, 1::3].shape)
    module = GenerationServing(ToyCausalLM(vocab_size=sp_tok.vocab.size), sp_tok, sp_path,
                               eos_id=1, pad_id=0, max_prompt_length=4, max_new_tokens=2)
    ours = [t.decode() for t in module.decode_text(tf.constant(ids, tf.int32),
                                                   tf.constant(lengths, tf.int32)).numpy()]
    assert ours == detokenize_numpy(sp_tok, ids, lengths)
    assert ours == [sp.decode([int(i) for i in row[:n]]) for row, n in zip(ids, lengths)]

    bpe_path = serving_corpus.vocab["bpe"]
    bpe_tok = tokenizers.load_tokenizer("bpe", bpe_path, lower_case=True)
    vocab_json, merges = vocab_files.bpe_files(bpe_path)
    reference = keras_hub.tokenizers.BytePairTokenizer(vocabulary=vocab_json, merges=merges)
    specials = bpe_tok.vocab.special_ids
    ids = rng.integers(0, bpe_tok.vocab.size, (20, 12))
    ids[:, 1::3] = rng.choice(sorted(specials), ids[:, 1::3].shape)
    expected = []
    for row, n in zip(ids, lengths):
        text = reference.detokenize(tf.constant([int(i) for i in row[:n] if i not in specials],
                                                tf.int32))
        expected.append(text if isinstance(text, str) else text.numpy().decode("utf-8",
                                                                               "replace"))
    assert detokenize_numpy(bpe_tok, ids, lengths) == expected
