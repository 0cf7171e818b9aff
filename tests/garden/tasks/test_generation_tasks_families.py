"""The LM fine-tuning tasks (garden/tasks/text_to_text.py, causal_lm_finetuning.py) with the
REAL tiny twins, through `garden.train`: configs/finetune/text_to_text_tiny.gin (T5),
text_to_text_bart_tiny.gin (BART, byte-level BPE) and causal_lm_tiny.gin (GPT-2), on the seq2seq
sample task (data_pipelines.sample_tasks) with vocabularies made by data_pipelines.make_vocab.

- a short run of each config trains, evaluates (teacher-forced and generated) and writes its
  predictions, with the parameter count of the family's formula at the vocabulary's size,
  which `garden.train --summary` of the config prints too (what the tiny twins LEARN is
  measured by the toys' learn test in test_generation_tasks.py and the families' pretraining
  learn tests; these runs are the wiring);
- GPT-2 fine-tuned a few steps is exported by the trainer (`export_base`), loaded in a
  process of its own (tensorflow alone) and called through serving_default: its texts equal
  garden.models.decoding.generate (greedy) on the prompts the task's own data path encodes,
  detokenized by the export's eager twin (detokenize_numpy), and the run's predictions.jsonl;
  T5's export encodes a prompt as the task's data path does (encoder prefix/suffix, decoder
  start).
"""

from __future__ import annotations

import json
import math
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from text import tokenizers
from data_pipelines import make_vocab
from data_pipelines.sample_tasks import __main__ as sample_tasks
from garden.models import decoding
from garden import train as train_lib
from garden.models import factory
from garden.serving.generation import detokenize_numpy
from garden import tasks as garden_tasks
from garden.tasks.causal_lm_finetuning import CausalLMFinetuning
from garden.tasks.text_to_text import TextToText
from testing import run_code, train_in_process

STEPS, TRAIN_ROWS, EVAL_ROWS, TARGET, MIN_NEW = 4, 64, 4, 8, 3
GENERATION = {"min_new_tokens": MIN_NEW, "no_repeat_ngram_size": 1}
# config, task class, preset, vocabulary kind
TWINS = {
    "t5": ("configs/finetune/text_to_text_tiny.gin", "TextToText", "t5_tiny", "sp"),
    "bart": ("configs/finetune/text_to_text_bart_tiny.gin", "TextToText", "bart_tiny", "bpe"),
    "gpt2": ("configs/finetune/causal_lm_tiny.gin", "CausalLMFinetuning", "gpt2_tiny", "sp"),
}

# The process of its own (run_code): load the export, call serving_default, print its outputs as one line.
_SERVE = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  the tokenizer's ops
loaded = tf.saved_model.load(sys.argv[1])
out = loaded.signatures["serving_default"](prompt=tf.constant(json.loads(sys.argv[2])))
print("RESULT " + json.dumps({"text": [t.decode("utf-8") for t in out["text"].numpy()],
                              "num_tokens": out["num_tokens"].numpy().tolist(),
                              "score": out["score"].numpy().tolist()}))
"""


@pytest.fixture(autouse=True)
def _cwd_repo(monkeypatch):
    monkeypatch.chdir(train_lib.REPO_ROOT)  # configs include each other by repo paths


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """{"root", "train", "eval", "sp", "bpe"}: the seq2seq sample task cut to 64 train and 4 eval
    pairs, and a SentencePiece and a byte-level BPE vocabulary of its train sources."""
    root = tmp_path_factory.mktemp("lm_twins")
    sample_tasks.generator("seq2seq")(sample_tasks.documents(), str(root))
    with open(root / "train.jsonl", encoding="utf-8") as f:
        train = [json.loads(line) for line in f]
    with open(root / "dev.jsonl", encoding="utf-8") as f:
        dev = [json.loads(line) for line in f][:EVAL_ROWS]
    text = root / "sources.txt"
    text.write_text("".join(r["source"] + "\n" for r in train), "utf-8")
    for name, rows in (("train_small.jsonl", train[:TRAIN_ROWS]), ("eval_small.jsonl", dev)):
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    assert make_vocab.main(["--tokenizer=sentencepiece", f"--input={text}",
                            f"--output={root / 'sp.model'}", "--vocab_size=600"]) in (0, None)
    assert make_vocab.main(["--tokenizer=bpe", f"--input={text}", f"--output={root / 'bpe'}",
                            "--vocab_size=300"]) in (0, None)
    return {"root": root, "train": str(root / "train_small.jsonl"),
            "eval": str(root / "eval_small.jsonl"), "eval_rows": dev,
            "sp": str(root / "sp.model"), "bpe": str(root / "bpe" / "vocab.json")}


def _vocab_size(data, kind) -> int:
    name = "sentencepiece" if kind == "sp" else "bpe"
    return tokenizers.load_tokenizer(name, data[kind], lower_case=False).vocab.size


def _family_count(preset, vocab_size) -> int:
    """The GenerativeLM's parameters from the family's own formula, at the vocabulary's size."""
    from garden.models.bart.presets import bart_parameter_count
    from garden.models.gpt2.presets import parameter_count as gpt2_count
    from garden.models.t5.presets import parameter_count as t5_count

    config = {**factory.family_of(preset).preset_table()[preset], "vocab_size": vocab_size}
    if preset.startswith("bart"):
        return bart_parameter_count(**config) + vocab_size  # + final_logits_bias
    return t5_count(**config) if preset.startswith("t5") else gpt2_count(config)


def _fresh_lm(preset, vocab_size):
    return factory.generative_lm(default_vocab_size=vocab_size, preset=preset)


def _finetune(data, tmp_path, twin, *extra):
    config, task, _, kind = TWINS[twin]
    model_dir = str(tmp_path / twin)
    summary = train_in_process([
        f"--config={config}", f"--model_dir={model_dir}", f"--gin_param=VOCAB='{data[kind]}'",
        f"--gin_param=TRAIN_FILE='{data['train']}'", f"--gin_param=EVAL_FILE='{data['eval']}'",
        "--gin_param=INIT_CHECKPOINT=None", f"--gin_param=TRAIN_STEPS={STEPS}",
        "--gin_param=train.global_batch_size=8", "--gin_param=train.warmup_steps=1",
        "--gin_param=train.log_every=1", f"--gin_param=garden.{task}.eval_batch_size=4",
        f"--gin_param=garden.{task}.max_target_length={TARGET}", *extra],
        model_dir, steps=STEPS)
    keras.backend.clear_session(free_memory=False)
    with open(os.path.join(model_dir, "predictions.jsonl"), encoding="utf-8") as f:
        predictions = [json.loads(line) for line in f]
    return model_dir, summary, predictions


def _check_run(data, twin, summary, predictions, capsys):
    """The run's summary and predictions; `garden.train --summary` of the same config prints
    the model that trained, the family's model at the vocabulary's size."""
    config, task, preset, kind = TWINS[twin]
    assert summary["task"] == garden_tasks.get(task).name
    assert summary["parameters"] == _family_count(preset, _vocab_size(data, kind))
    capsys.readouterr()
    assert train_lib.main(["--summary", f"--config={config}",
                           f"--gin_param=VOCAB='{data[kind]}'"]) == 0, twin
    out = capsys.readouterr().out
    keras.backend.clear_session(free_memory=False)
    total = re.search(r"^Total parameters: ([\d,]+) \(", out, re.MULTILINE)
    assert total and int(total.group(1).replace(",", "")) == summary["parameters"], out[-2000:]
    first, last = summary["first_logged_metrics"], summary["last_logged_metrics"]
    assert all(math.isfinite(m["loss"]) for m in (first, last)), (first, last)
    assert math.isfinite(summary["eval_loss"]) and summary["eval_examples"] == EVAL_ROWS
    assert [p["source"] for p in predictions] == [r["source"] for r in data["eval_rows"]]
    assert all(isinstance(p["prediction"], str) for p in predictions)
    assert summary["generation"]["method"] == "greedy"
    assert summary["generation"]["max_new_tokens"] == TARGET


@pytest.mark.parametrize("twin", ["t5", "bart"])
def test_text_to_text_twin_fine_tunes(data, tmp_path, capsys, twin):
    model_dir, summary, predictions = _finetune(data, tmp_path, twin)
    _check_run(data, twin, summary, predictions, capsys)
    assert "export_dir" not in summary  # no export_base: no export
    if twin != "t5":
        return
    # T5's export encodes a prompt string as the task's data path encodes the source:
    # pieces + </s> into the encoder (right-padded), <pad> as the decoder's start.
    task = TextToText(None, data["sp"], data["train"], data["eval"],
                                 max_source_length=64, max_target_length=TARGET)
    task.prepare()
    module = task.serving_module(_fresh_lm("t5_tiny", task.token_vocab.size))
    rows = task.eval_rows
    expected = next(iter(task._dataset(rows, len(rows), for_generation=True)))
    encoded = module.encode_prompts([r["source"] for r in rows])
    assert sorted(encoded) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(encoded[name], value.numpy(), err_msg=name)
    assert encoded["decoder_token_ids"].tolist() == [[task.pad_id]] * len(rows)
    assert (encoded["encoder_token_ids"][np.arange(len(rows)),
                                         encoded["encoder_padding_mask"].sum(1) - 1]
            == task.eos_id).all()


def test_causal_lm_export_serves_what_generate_gives(data, tmp_path, capsys):
    # A model this fresh stops at once or repeats one piece (U+2581, a space) for any prompt:
    # the texts would compare nothing. So the task's generation settings (the export's
    # defaults) ask for at least MIN_NEW tokens and ban repeating any token (of the prompt
    # too), which makes the greedy texts words that depend on the prompt.
    export_base = tmp_path / "exports"
    model_dir, summary, predictions = _finetune(
        data, tmp_path, "gpt2", f"--gin_param=garden.CausalLMFinetuning.export_base="
        f"'{export_base}'", "--gin_param=garden.CausalLMFinetuning.max_beams=1",
        f"--gin_param=garden.CausalLMFinetuning.generation={GENERATION}")
    _check_run(data, "gpt2", summary, predictions, capsys)
    assert {k: summary["generation"][k] for k in GENERATION} == GENERATION
    export_dir = summary["export_dir"]
    assert export_dir.startswith(str(export_base / "gpt2_tiny_causal_lm"))
    prompts = [r["source"] for r in data["eval_rows"]]

    # Reference: the trained weights (the run's last checkpoint) in a fresh GenerativeLM, the
    # prompts as the task's data path lays them out (<prompt> + " =>" left-padded), greedy
    # garden.models.decoding, the export's eager detokenizer.
    task = CausalLMFinetuning(None, data["sp"], data["train"], data["eval"],
                                         max_prompt_length=64, max_target_length=TARGET,
                                         generation=GENERATION)
    task.prepare()
    model = _fresh_lm("gpt2_tiny", task.token_vocab.size)
    status = tf.train.Checkpoint(model=model).read(summary["checkpoint"])
    status.expect_partial().assert_existing_objects_matched()
    prompt = next(iter(task._dataset(task.eval_rows, len(prompts), for_generation=True)))
    out = decoding.generate(model, {k: v.numpy() for k, v in prompt.items()},
                              task.generation_config,
                              eos_id=task.eos_id, pad_id=task.pad_id)
    texts = detokenize_numpy(task.eager_tokenizer, out["token_ids"], out["lengths"])
    assert all(n >= MIN_NEW for n in out["lengths"]), out["lengths"]
    assert all(re.search(r"\w", t) for t in texts) and len(set(texts)) > 1, texts

    # A process of its own with tensorflow alone (testing.run_code: forked with TensorFlow
    # imported, no garden module) loads the export and serves the prompts.
    stdout = run_code(_SERVE, export_dir, json.dumps(prompts), timeout=120).stdout
    served = json.loads(next(line for line in stdout.splitlines()
                             if line.startswith("RESULT "))[len("RESULT "):])
    assert served["text"] == texts
    assert served["num_tokens"] == out["lengths"].tolist()
    np.testing.assert_allclose(served["score"], out["scores"], rtol=1e-5, atol=1e-5)
    # The trainer's own eval generated the same (its detokenizer strips the ends).
    assert [p["prediction"] for p in predictions] == [t.strip() for t in texts]
    assert os.path.exists(os.path.join(export_dir, "assets.extra", "tf_serving_warmup_requests"))


def test_lengths_beyond_the_models_positions_are_refused_before_training(data):
    def lm(preset, positions):
        return lambda default_vocab_size: factory.generative_lm(
            default_vocab_size=default_vocab_size, preset=preset, num_layers=1,
            max_sequence_length=positions)

    # 12 + 8 - 1 = 19 training positions fit GPT-2's 19; generating 8 after 12 slots does not.
    task = CausalLMFinetuning(lm("gpt2_tiny", 19), data["sp"], data["train"],
                                         data["eval"], max_prompt_length=12,
                                         max_target_length=8)
    task.prepare()
    with pytest.raises(ValueError, match=r"^causal_lm_finetuning: generation \(12 prompt slots "
                                         r"\+ max_new_tokens 8\) needs 20 decoder positions, "
                                         r"GPT2CausalLM has 19 \(lower"):
        task.build_model()
    task.model_fn = lm("gpt2_tiny", 20)
    task.build_model()  # exactly enough
    task = TextToText(lm("bart_tiny", 32), data["sp"], data["train"], data["eval"],
                                 max_source_length=40, max_target_length=8)
    task.prepare()
    with pytest.raises(ValueError, match=r"^text_to_text: max_source_length 40 exceeds the 32 "
                                         r"encoder positions of BartSeq2SeqLM"):
        task.build_model()
