"""RoBERTa and ALBERT fine-tuned from their own pretraining model_dir and served from raw text.

For each family: make_pretrain (--objective=roberta / albert) on the sample corpus slice with the
fixture's BPE / SentencePiece vocabulary, 3 steps of configs/<family>_tiny.gin through
garden.train, then configs/finetune/classification_<family>_tiny.gin on a sentence-pair task
(text_a, text_b) through garden.train with an export. Checked:
  - the fine-tuning backbone starts from the pretraining checkpoint's values;
  - a fresh process (tensorflow + tensorflow_text only) loads the export and its
    serving_default on raw text pairs gives the logits of the fine-tuned Keras model restored
    from the fine-tuning checkpoint, to 1e-5; the metadata names the family's tokenizer/layout.
"""

from __future__ import annotations

import csv
import json
import os

import gin
import keras
import numpy as np
import pytest
import tensorflow as tf

from benchmarks import objectives_learn as learn
from garden import train as train_lib
from testing import run_code

SEQ = 64
FAMILIES = {"roberta": ("bpe", "roberta"), "albert": ("sentencepiece", "bert")}

SERVE = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops before loading

m = tf.saved_model.load(sys.argv[1])
a, b = json.loads(sys.argv[2])
out = m.signatures["serving_default"](text_a=tf.constant(a), text_b=tf.constant(b))
print("RESULT" + json.dumps({k: v.numpy().tolist() for k, v in out.items() if k != "label"}))
"""


@pytest.fixture(autouse=True)
def _cwd_repo(monkeypatch):
    monkeypatch.chdir(train_lib.REPO_ROOT)  # configs include each other by repo paths


def _pair_task(serving_corpus, root: str):
    """train.tsv / dev.tsv with text_b: each row paired with the next row's text."""
    with open(os.path.join(serving_corpus.task_dir, "train.tsv"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[:240]
    paths = {}
    for split, part in (("train", rows[:192]), ("dev", rows[192:])):
        paths[split] = os.path.join(root, f"pairs-{split}.tsv")
        with open(paths[split], "w", encoding="utf-8") as f:
            f.write("text_a\ttext_b\tlabel\n")
            for row, following in zip(part, part[1:] + part[:1]):
                f.write(f"{row['text_a']}\t{following['text_a']}\t{row['label']}\n")
    return paths


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def pretrained(request, serving_corpus, tmp_path_factory):
    family = request.param
    kind = FAMILIES[family][0]
    root = str(tmp_path_factory.mktemp(f"{family}_pretrained"))
    vocab = serving_corpus.vocab[kind]
    data_dir = learn.pretrain_data(root, family, vocab, serving_corpus.corpus_slice, SEQ, 1,
                                   "train")
    spec = learn.FAMILIES[family]
    model_dir = os.path.join(root, "pretrain")
    phases = [{"start_step": 0, "data_dir": data_dir, "max_seq_length": SEQ}]
    assert train_lib.main([
        f"--config={spec.config}", f"--model_dir={model_dir}", "--strategy=one_device",
        f"--gin_param=VOCAB='{vocab}'", f"--gin_param=DATA_DIR='{data_dir}'",
        f"--gin_param=garden.{spec.task}.phases={phases!r}", "--gin_param=train.train_steps=3",
        "--gin_param=train.global_batch_size=16", "--gin_param=train.warmup_steps=1",
        "--gin_param=train.log_every=1", "--gin_param=train.peak_flops=1e12",
        f"--gin_param=garden.{spec.task}.shuffle_buffer=200"]) == 0
    keras.backend.clear_session(free_memory=False)
    return family, vocab, model_dir, _pair_task(serving_corpus, root)


def _bindings(vocab, files, init, export_base, steps):
    return [f"VOCAB = '{vocab}'", f"TRAIN_FILE = '{files['train']}'",
            f"EVAL_FILE = '{files['dev']}'", f"INIT_CHECKPOINT = '{init}'",
            f"EXPORT_BASE = {export_base!r}", f"TRAIN_STEPS = {steps}",
            "garden.Classification.text_b = True",
            f"garden.Classification.max_seq_length = {SEQ}",
            "train.global_batch_size = 16", "train.warmup_steps = 1", "train.log_every = 1",
            "train.peak_flops = 1e12"]


def _build(config, bindings):
    train_lib.parse_config([config], bindings)
    task = gin.query_parameter("train.task").scoped_configurable_fn()
    task.prepare()
    return task, task.build_model()[0]


def test_finetune_from_pretraining_and_serve_raw_text(pretrained, tmp_path):
    family, vocab, pretrain_dir, files = pretrained
    config = f"configs/finetune/classification_{family}_tiny.gin"
    ft_dir, export_base = tmp_path / "ft", tmp_path / "export"

    # 1. Fine-tuning and export through the CLI entry point.
    bindings = _bindings(vocab, files, pretrain_dir, str(export_base), 4)
    assert train_lib.main([f"--config={config}", f"--model_dir={ft_dir}", "--strategy=one_device",
                           *(f"--gin_param={b}" for b in bindings)]) == 0
    summary = json.loads((ft_dir / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["eval_examples"] == 48
    export_dir = summary["export_dir"]
    assert export_dir == str(export_base / f"{family}_tiny_classifier" / "1")
    with open(os.path.join(export_dir, "assets.extra", "garden_export.json")) as f:
        meta = json.load(f)
    assert (meta["tokenizer"], meta["layout"]) == FAMILIES[family] and meta["text_b"] is True
    keras.backend.clear_session(free_memory=False)

    # 2. Built from the config, before any step: the backbone holds the pretraining values
    # (every non-constant weight equals a tensor of the pretraining checkpoint, exactly).
    task, model = _build(config, bindings)
    assert (task.packer.kind, task.packer.layout) == FAMILIES[family]
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(f"{pretrain_dir}/checkpoints"))
    saved = [reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
             if k != "_CHECKPOINTABLE_OBJECT_GRAPH"]
    varying = [np.asarray(w) for w in model.backbone.weights if np.ptp(np.asarray(w)) > 0]
    assert len(varying) >= 10
    for w in varying:
        assert any(s.shape == w.shape and np.array_equal(s, w) for s in saved), w.shape

    # 3. The same Keras model, restored from the fine-tuning checkpoint, vs the export.
    before = [np.asarray(w).copy() for w in model.backbone.weights]
    status = tf.train.Checkpoint(model=model).read(
        tf.train.latest_checkpoint(str(ft_dir / "checkpoints")))
    status.expect_partial()
    status.assert_existing_objects_matched()
    assert not all(np.array_equal(np.asarray(w), b) for w, b in zip(model.backbone.weights, before))
    rows = task.eval_rows[:6] + [{"text_a": "Café: ünïcode & symbols!", "text_b": ""}]
    expected = task.predict(model, rows)
    texts = [[r["text_a"] for r in rows], [r["text_b"] for r in rows]]
    proc = run_code(SERVE, export_dir, json.dumps(texts), CUDA_VISIBLE_DEVICES="")
    served = json.loads([l for l in proc.stdout.splitlines()
                         if l.startswith("RESULT")][-1][len("RESULT"):])
    np.testing.assert_allclose(served["logits"], expected, atol=1e-5)
    assert served["label_id"] == expected.argmax(-1).tolist()
    keras.backend.clear_session(free_memory=False)
