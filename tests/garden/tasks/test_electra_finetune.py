"""ELECTRA fine-tuning starts from the pretraining run's discriminator (docs/objectives.md section 6):
a tiny ELECTRA pretraining through `garden.train`, then
configs/finetune/classification_electra_tiny.gin on its model_dir, then the export answering
raw text in a fresh process.

The pretraining here gives the generator the discriminator's sizes (H128 A2 FFN512 instead of
the tiny config's H32), so restoring the wrong tower would succeed silently: only the values
tell the towers apart, and the test compares them with the checkpoint's own tensors.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import gin
import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from garden import train as train_lib
from testing import run_code

SEQ = 64
FINETUNE_CONFIG = "configs/finetune/classification_electra_tiny.gin"
# The generator as wide as the discriminator (see the module docstring).
SAME_SIZE_GENERATOR = ("electra_towers.generator_hidden_size=128",
                       "electra_towers.generator_num_heads=2",
                       "electra_towers.generator_intermediate_size=512")


@dataclasses.dataclass
class Pretrained:
    vocab: str
    task_dir: str  # train.tsv / dev.tsv, labels library / reference
    eval_file: str  # the first 128 rows of dev.tsv (evaluation is not what is tested here)
    model_dir: str
    checkpoint: str


@pytest.fixture(autouse=True)
def _cwd_repo(monkeypatch):
    # Config files include each other by repo-relative paths, as on the command line.
    monkeypatch.chdir(train_lib.REPO_ROOT)


@pytest.fixture(scope="module")
def pretrained(bert_data, family_data, tmp_path_factory) -> Pretrained:
    """tests/conftest.py's session data, made with the project's own tools: family_data's
    WordPiece vocabulary (1000, corpus file 0) and make_pretrain --objective=electra data (64
    tokens) -> 3 steps of configs/electra_tiny.gin; the labelled sentences of bert_data's
    sample_corpus --task_output. (This module made the same vocabulary and data again.)"""
    root = str(tmp_path_factory.mktemp("electra_finetune"))
    task_dir = bert_data.task_dir
    eval_file = os.path.join(root, "dev-128.tsv")
    with open(os.path.join(task_dir, "dev.tsv"), encoding="utf-8") as f:
        lines = f.readlines()
    with open(eval_file, "w", encoding="utf-8") as f:
        f.writelines(lines[:129])  # header + 128 rows
    vocab, data_dir = family_data.vocab["electra"], family_data.data["electra"]
    model_dir = os.path.join(root, "pretrain")
    phases = [{"start_step": 0, "data_dir": data_dir, "max_seq_length": SEQ}]
    args = ["--config=configs/electra_tiny.gin", f"--model_dir={model_dir}",
            "--strategy=one_device", f"--gin_param=VOCAB='{vocab}'",
            f"--gin_param=DATA_DIR='{data_dir}'",
            f"--gin_param=garden.Pretraining.phases={phases!r}",
            "--gin_param=train.train_steps=3", "--gin_param=train.global_batch_size=16",
            "--gin_param=train.warmup_steps=1", "--gin_param=train.log_every=1",
            "--gin_param=train.peak_flops=1e12",
            "--gin_param=garden.Pretraining.shuffle_buffer=200",
            *(f"--gin_param={b}" for b in SAME_SIZE_GENERATOR)]
    assert train_lib.main(args) == 0
    keras.backend.clear_session(free_memory=False)
    checkpoint = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    return Pretrained(vocab=vocab, task_dir=task_dir, eval_file=eval_file, model_dir=model_dir,
                      checkpoint=checkpoint)


def _finetune_bindings(p: Pretrained, model_dir: str, steps: int, export_base=None) -> list:
    return [f"VOCAB = '{p.vocab}'", f"TRAIN_FILE = '{p.task_dir}/train.tsv'",
            f"EVAL_FILE = '{p.eval_file}'", f"INIT_CHECKPOINT = '{p.model_dir}'",
            f"EXPORT_BASE = {export_base!r}", f"TRAIN_STEPS = {steps}",
            "train.global_batch_size = 16", "train.warmup_steps = 1", "train.log_every = 1",
            "train.peak_flops = 1e12", f"garden.Classification.max_seq_length = {SEQ}"]


def _tower_tensors(checkpoint: str, tower: str) -> dict:
    """checkpoint key -> value of every variable reachable from the checkpoint's top-level
    object `tower`, found by walking the checkpoint's object graph (not by restoring)."""
    reader = tf.train.load_checkpoint(checkpoint)
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    start = [c.node_id for c in graph.nodes[0].children if c.local_name == tower]
    assert start, [c.local_name for c in graph.nodes[0].children]
    seen, stack = set(start), list(start)
    while stack:
        for child in graph.nodes[stack.pop()].children:
            if child.node_id not in seen:
                seen.add(child.node_id)
                stack.append(child.node_id)
    return {a.checkpoint_key: reader.get_tensor(a.checkpoint_key)
            for n in seen for a in graph.nodes[n].attributes if a.name == "VARIABLE_VALUE"}


def _by_value(arrays):
    return sorted(arrays, key=lambda a: (a.shape, a.tobytes()))


def test_finetuning_starts_from_the_discriminator_then_trains_and_exports(pretrained, tmp_path):
    # 1. The task the fine-tuning config builds, before any step.
    train_lib.parse_config([FINETUNE_CONFIG], _finetune_bindings(pretrained, "unused", 1))
    task = gin.query_parameter("train.task").scoped_configurable_fn()
    task.prepare()
    model, items = task.build_model()
    assert items["backbone"] is model.backbone
    weights = [np.asarray(w) for w in model.backbone.weights]

    discriminator = _tower_tensors(pretrained.checkpoint, "discriminator")
    generator = _tower_tensors(pretrained.checkpoint, "generator")
    # L2 discriminator: 5 embedding variables (word, position, type, LayerNorm x2) + the E -> H
    # projection (2) + 2 blocks of 16 = 39; the generator shares the 5 embedding variables.
    assert len(discriminator) == len(weights) == 39
    assert len(set(discriminator) & set(generator)) == 5
    # The backbone's weights are the discriminator's, one for one (compared as multisets of
    # exact values: the classifier's variables do not carry the checkpoint's keys).
    for ours, theirs in zip(_by_value(weights), _by_value(discriminator.values())):
        np.testing.assert_array_equal(ours, theirs)
    # ... and none is a generator-only tensor, though all 34 of those have a shape of ours. (The
    # attention key biases get no gradient and stay at their zero init in both towers: a
    # constant tensor tells nothing, so only tensors with two distinct values count.)
    generator_only = [v for k, v in generator.items() if k not in discriminator and np.ptp(v) > 0]
    shapes = {w.shape for w in weights}
    assert sum(v.shape in shapes for v in generator_only) >= 30
    for v in generator_only:
        assert not any(w.shape == v.shape and np.array_equal(w, v) for w in weights)
    # The [CLS] state is what the classifier reads (no pooler dense in ELECTRA).
    assert not [w.path for w in model.weights if "pool" in w.path]
    keras.backend.clear_session(free_memory=False)

    # 2. Fine-tuning runs through the CLI entry point, then exports.
    ft_dir, export_base = tmp_path / "ft", tmp_path / "export"
    bindings = _finetune_bindings(pretrained, str(ft_dir), 4, str(export_base))
    assert train_lib.main([f"--config={FINETUNE_CONFIG}", f"--model_dir={ft_dir}",
                           "--strategy=one_device",
                           *(f"--gin_param={b}" for b in bindings)]) == 0
    summary = json.loads((ft_dir / "summary.json").read_text())
    assert summary["task"] == "classification" and summary["steps"] == 4
    # A fresh two-class head: cross-entropy near ln 2 at the first step.
    assert abs(summary["first_logged_metrics"]["loss"] - math.log(2)) < 0.3, summary
    # The accuracy is a count of right answers out of the 128 examples.
    right = summary["eval_accuracy"] * 128
    assert summary["eval_examples"] == 128 and abs(right - round(right)) < 1e-6, summary
    operative = (ft_dir / "operative_config.gin").read_text()
    assert "init_checkpoint_object = 'discriminator'" in operative
    assert "layer_decay = 0.8" in operative
    assert summary["export_dir"] == str(export_base / "electra_tiny_classifier" / "1")

    # 3. The export answers raw text in a fresh process with no garden import.
    code = ("import json, sys, tensorflow as tf, tensorflow_text\n"
            "m = tf.saved_model.load(sys.argv[1])\n"
            "texts = tf.constant(['The for statement.', 'Return a list.'])\n"
            "out = m.signatures['serving_default'](text_a=texts)\n"
            "print(json.dumps([[l.decode() for l in out['label'].numpy()],\n"
            "                  out['probabilities'].numpy().sum(-1).tolist()]))\n")
    proc = run_code(code, summary["export_dir"], CUDA_VISIBLE_DEVICES="")
    labels, sums = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(labels) == 2 and all(l in ("library", "reference") for l in labels)
    assert all(abs(s - 1.0) < 1e-5 for s in sums)


def test_the_default_backbone_object_is_refused_with_a_hint(pretrained):
    # A BERT fine-tuning setting (restore `backbone`) on an ELECTRA model_dir: the checkpoint
    # holds generator/discriminator, so the task says which object to bind.
    train_lib.parse_config([FINETUNE_CONFIG], _finetune_bindings(pretrained, "unused", 1) + [
        "garden.Classification.init_checkpoint_object = 'backbone'"])
    task = gin.query_parameter("train.task").scoped_configurable_fn()
    with pytest.raises(ValueError, match="no 'backbone' object") as e:
        task.prepare()
    assert "init_checkpoint_object = 'discriminator'" in str(e.value)
    assert "generator" in str(e.value)
