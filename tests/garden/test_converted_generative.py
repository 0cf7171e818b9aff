"""Converted T5 and BART (Hugging Face) as the starting point of text-to-text fine-tuning
(garden/pretrained.py, garden/tasks/text_to_text.py TextToText).

Tiny random T5ForConditionalGeneration (a SentencePiece spiece.model trained here, T5's layout
<pad>=0 </s>=1 <unk>=2) and BartForConditionalGeneration (a byte-level BPE vocab.json +
merges.txt trained here with the `tokenizers` library) are written in Hugging Face's layout and
converted by garden.convert (in-process main()). For each, with equal and with unequal encoder /
decoder depths: the TextToText task's LM, built and restored from OUT through the task's own
code path, gives the source model's logits within 1e-4 at step 0, and the task's encoder ids
are the source tokenizer's. The unequal-depth ones are fine-tuned a few steps by garden.train
(T5 through a fresh `python -m garden.train`, BART in-process), exported, and both exports
answer in a fresh process.
"""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from convert_testing import max_abs_diff, randomize_torch_, save_hf_dir  # noqa: E402
from testing import run_code, run_tool, train_in_process  # noqa: E402

TOL = 1e-4
CORPUS = [f"summarize: the {m} was {a} {b} ." for m in ("movie", "film", "plot", "story")
          for a in ("very", "really", "quite", "not") for b in ("good", "great", "bad", "dull")]
SAMPLES = ["summarize: the movie was Good!", "the plot was dull , the film great .",
           "très bien: unknown words here"]
# (name, family, encoder layers, decoder layers)
MODELS = [("t5_2_2", "t5", 2, 2), ("t5_2_1", "t5", 2, 1),
          ("bart_2_2", "bart", 2, 2), ("bart_2_1", "bart", 2, 1)]


def write_t5_spiece(path: str) -> int:
    """T5's spiece.model layout: <pad>=0 </s>=1 <unk>=2, no <s>; returns its size. (T5's
    model is a unigram one; on this tiny corpus a unigram model learns only characters, so
    the pieces here are SentencePiece BPE's: the ids' layout is what is tested.)"""
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 4), model_writer=model, vocab_size=60,
        model_type="bpe", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, hard_vocab_limit=False,
        minloglevel=2)
    with open(path, "wb") as f:
        f.write(model.getvalue())
    return spm.SentencePieceProcessor(model_file=path).get_piece_size()


def write_bart_bpe(directory: str) -> int:
    """BART's byte-level BPE (<s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4, the 256 byte symbols,
    merges) trained by the `tokenizers` library: vocab.json + merges.txt; returns its size."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300, min_frequency=2, show_progress=False,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    tok.model.save(directory)
    with open(os.path.join(directory, "vocab.json")) as f:
        return len(json.load(f))


def _hf_model(family: str, folder: str, encoder_layers: int, decoder_layers: int, seed: int):
    if family == "t5":
        vocab = write_t5_spiece(os.path.join(folder, "spiece.model"))
        config = transformers.T5Config(
            vocab_size=vocab, d_model=32, d_kv=8, d_ff=64, num_layers=encoder_layers,
            num_decoder_layers=decoder_layers, num_heads=4, feed_forward_proj="relu",
            relative_attention_num_buckets=8, relative_attention_max_distance=32,
            dropout_rate=0.0, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
        model = transformers.T5ForConditionalGeneration(config)
    else:
        vocab = write_bart_bpe(folder)
        config = transformers.BartConfig(
            vocab_size=vocab, d_model=32, encoder_layers=encoder_layers,
            decoder_layers=decoder_layers, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, dropout=0.0,
            attention_dropout=0.0, activation_dropout=0.0, pad_token_id=1, bos_token_id=0,
            eos_token_id=2, decoder_start_token_id=2, forced_bos_token_id=None,
            forced_eos_token_id=None)
        model = transformers.BartForConditionalGeneration(config)
    torch.manual_seed(seed)
    model = randomize_torch_(model.eval(), seed=seed, scale=0.1)
    if family == "bart":
        with torch.no_grad():
            model.final_logits_bias.normal_(0, 0.5)  # a buffer: randomize_torch_ leaves it
    save_hf_dir(model, folder)
    return model


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("byoc_generative")


@pytest.fixture(scope="module")
def data(root):
    rows = [{"source": f"summarize: the {m} was {a} {b} .", "target": b}
            for m in ("movie", "film", "plot") for a in ("very", "not") for b in ("good", "dull")]
    (root / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows * 2) + "\n")
    (root / "dev.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:3]) + "\n")
    return root


@pytest.fixture(scope="module")
def converted(root):
    """name -> {dir, model, out, family}: the Hugging Face directories and garden.convert's
    output directories (converted by the CLI's main() in this process)."""
    from garden import convert

    out = {}
    for seed, (name, family, enc, dec) in enumerate(MODELS):
        folder = root / f"hf_{name}"
        folder.mkdir()
        model = _hf_model(family, str(folder), enc, dec, seed)
        target = root / f"out_{name}"
        assert convert.main(["--source=huggingface", f"--model={family}", f"--input={folder}",
                             f"--output={target}"]) == 0
        out[name] = dict(dir=str(folder), model=model, out=target, family=family)
    return out


def _task(src, data):
    """The TextToText task of a converted directory, prepared, and its built + restored LM."""
    import gin

    from garden.models import factory
    from garden.tasks.text_to_text import TextToText

    gin.clear_config()
    task = TextToText(model=factory.generative_lm, vocab=None,
                      train_file=str(data / "train.jsonl"), eval_file=str(data / "dev.jsonl"),
                      init_checkpoint=str(src["out"]), max_source_length=48,
                      max_target_length=6)
    task.prepare()
    model, _ = task.build_model()
    return task, model


def _source_ids(src, text):
    """The source tokenizer's ids of `text` as a model input."""
    if src["family"] == "bart":
        return transformers.BartTokenizer.from_pretrained(src["dir"])(text)["input_ids"]
    # T5: transformers 5's T5Tokenizer needs a protobuf / tiktoken conversion this venv does
    # not have; the slow T5Tokenizer is SentencePiece's pieces followed by </s>.
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=os.path.join(src["dir"], "spiece.model"))
    return sp.encode(text) + [sp.piece_to_id("</s>")]


def _inputs(task, vocab_size, seed):
    """Right-padded encoder rows of 11, 7, 4 real ids and decoder rows starting with the task's
    start ids (T5 [0], BART [2, 0])."""
    rng = np.random.default_rng(seed)
    enc = rng.integers(5, vocab_size, (3, 11)).astype("int32")
    dec = rng.integers(5, vocab_size, (3, 7)).astype("int32")
    start = task.start_ids
    dec[:, :len(start)] = start
    enc_mask, dec_mask = np.zeros_like(enc), np.zeros_like(dec)
    for b, (n, m) in enumerate(((11, 7), (7, 5), (4, 7))):
        enc_mask[b, :n], dec_mask[b, :m] = 1, 1
    enc[enc_mask == 0], dec[dec_mask == 0] = task.pad_id, task.pad_id
    return {"encoder_token_ids": enc, "encoder_padding_mask": enc_mask,
            "decoder_token_ids": dec, "decoder_padding_mask": dec_mask}


@pytest.mark.parametrize("name", [m[0] for m in MODELS])
def test_step0_logits_and_tokenizer_equal_the_source(name, converted, data):
    src = converted[name]
    info = json.loads((src["out"] / "convert_info.json").read_text())
    kind = "sentencepiece" if src["family"] == "t5" else "bpe"
    assert info["tokenizer"]["tokenizer"] == kind and info["tokenizer"]["lower_case"] is False
    config = info["architecture"]["config"]
    depths = [m[2:] for m in MODELS if m[0] == name][0]
    assert (config["num_layers"], config.get("num_decoder_layers") or config["num_layers"]) \
        == depths

    task, model = _task(src, data)
    assert task.start_ids == ([0] if src["family"] == "t5" else [2, 0])
    assert (task.pad_id, task.eos_id) == ((0, 1) if src["family"] == "t5" else (1, 2))
    # The task's encoder ids (prefix + pieces + suffix, right-padded) are the source
    # tokenizer's.
    rows = [{"source": s, "target": "good"} for s in SAMPLES]
    batch = next(iter(task._dataset(rows, len(rows), for_generation=True)))
    for i, text in enumerate(SAMPLES):
        n = int(batch["encoder_padding_mask"][i].numpy().sum())
        assert batch["encoder_token_ids"][i, :n].numpy().tolist() == _source_ids(src, text), text

    inputs = _inputs(task, src["model"].config.vocab_size, seed=len(name))
    t = {k: torch.tensor(v, dtype=torch.long) for k, v in inputs.items()}
    with torch.no_grad():
        ref = src["model"](input_ids=t["encoder_token_ids"],
                           attention_mask=t["encoder_padding_mask"],
                           decoder_input_ids=t["decoder_token_ids"],
                           decoder_attention_mask=t["decoder_padding_mask"]).logits.numpy()
    ours = model(inputs, training=False)["logits"].numpy()
    real = inputs["decoder_padding_mask"].astype(bool)
    assert np.std(ref[real]) > 0.1  # the weights matter: a 1e-4 match is not trivial
    diff = max_abs_diff(ours[real], ref[real])
    assert diff <= TOL, diff


def _train_args(config, src, data, model_dir, export_base, name, steps):
    return [f"--config={config}", f"--model_dir={model_dir}",
            f"--gin_param=INIT_CHECKPOINT='{src['out']}'", f"--gin_param=TRAIN_STEPS={steps}",
            f"--gin_param=TRAIN_FILE='{data / 'train.jsonl'}'",
            f"--gin_param=EVAL_FILE='{data / 'dev.jsonl'}'",
            f"--gin_param=garden.TextToText.export_base='{export_base}'",
            f"--gin_param=garden.TextToText.model_name='{name}'",
            "--gin_param=garden.TextToText.max_source_length=24",
            "--gin_param=garden.TextToText.max_target_length=6",
            "--gin_param=garden.TextToText.max_beams=1",
            "--gin_param=train.global_batch_size=8", "--gin_param=train.warmup_steps=1",
            "--gin_param=train.log_every=1"]


@pytest.fixture(scope="module")
def finetuned(converted, data, root):
    """The unequal-depth T5 (fresh `python -m garden.train`) and BART (in-process) fine-tuned
    2 steps from their converted directories and exported."""
    exports = {}
    t5_dir = root / "run_t5"
    proc = run_tool("garden.train", *_train_args(
        "configs/finetune/text_to_text_tiny.gin", converted["t5_2_1"], data, t5_dir,
        root / "exports", "t5_converted", 2), timeout=600)
    exports["t5"] = str(root / "exports" / "t5_converted" / "1")
    bart_dir = root / "run_bart"
    summary = train_in_process(_train_args(
        "configs/finetune/text_to_text_bart_tiny.gin", converted["bart_2_1"], data, bart_dir,
        root / "exports", "bart_converted", 2), str(bart_dir), steps=2)
    exports["bart"] = str(root / "exports" / "bart_converted" / "1")
    return exports, proc.stdout, summary


_ANSWER = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401
out = {}
for name, path in json.loads(sys.argv[1]).items():
    serve = tf.saved_model.load(path).signatures["serving_default"]
    spec = serve.structured_input_signature[1]
    inputs = {n: tf.constant(["summarize: the movie was very good ."]) for n in spec
              if spec[n].dtype == tf.string}
    out[name] = {k: v.numpy().tolist() if v.dtype != tf.string else
                 [t.decode() for t in v.numpy().reshape(-1)] for k, v in serve(**inputs).items()}
print(json.dumps(out))
"""


def test_finetuned_exports_answer_in_a_fresh_process(finetuned, root):
    exports, t5_log, summary = finetuned
    assert "T5Backbone from converted huggingface t5 checkpoint" in t5_log
    assert "num_layers=2, num_decoder_layers=1" in t5_log
    assert summary["task"] == "text_to_text"
    for run in ("run_t5", "run_bart"):
        assert (root / run / "predictions.jsonl").exists()
    proc = run_code(_ANSWER, json.dumps(exports))
    answered = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(answered) == ["bart", "t5"] and all(answered.values()), answered
