"""Outputs that a restructuring of the code must not change (issue 12, "What must not change").

Recorded on main at 587a325, before the second wave's refactor:
- the BERT shards of the sample corpus (first corpus file, the session's 2000-piece vocabulary,
  max_seq_length 64, --seed=12345 default, one dupe pass, two shards): their sha256;
- a fixed-seed tiny BERT pretraining run on those shards (6 steps, dropout 0.1, batch 16): per
  variable of the model's final weights, its sum and sum of squares. Compared with a relative
  tolerance of 1e-5: float summation order inside one op may differ between thread schedules,
  a real change of the computation (another init, loss, mask or update) moves them by far more.

If a change is meant to alter one of these (a new default, a fixed bug), re-record the figures
with `python tests/test_frozen_outputs.py` and say why in the commit.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from testing import pretrain_args, run_tool  # noqa: E402

FROZEN_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "frozen_outputs.json")


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def shard_digests(data_dir: str) -> dict:
    return {os.path.basename(p): _sha256(p)
            for p in sorted(glob.glob(os.path.join(data_dir, "train-*.tfrecord*")))}


def weight_digest(model_dir: str) -> dict:
    """{variable name: [sum, sum of squares]} of the model weights of model_dir's newest
    checkpoint (optimizer slots and counters left out)."""
    import tensorflow as tf

    path = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    reader = tf.train.load_checkpoint(path)
    dtypes = reader.get_variable_to_dtype_map()
    out = {}
    for name, dtype in sorted(dtypes.items()):
        # The weights: the model's own paths and the optimizer's list of trainable variables
        # (a checkpoint names most weights through it); not the slots (optimizer/_variables).
        weight = not name.startswith("optimizer/") or name.startswith("optimizer/_trainable_variables/")
        if not dtype.is_floating or not weight or "seed_states" in name:
            continue
        value = reader.get_tensor(name).astype(np.float64)
        out[name] = [float(value.sum()), float((value ** 2).sum())]
    return out


def _pretrain(bert_data, model_dir) -> dict:
    # `python -m garden.train`, forked from a server that has imported TensorFlow (run_tool).
    run_tool("garden.train", *pretrain_args(bert_data, model_dir, "--strategy=one_device",
                                            steps=6, dropout=0.1)[2:])
    return weight_digest(str(model_dir))


def _frozen() -> dict:
    with open(FROZEN_FILE) as f:
        return json.load(f)


def test_vocabulary_and_bert_shards_are_byte_identical(bert_data):
    frozen = _frozen()
    assert _sha256(bert_data.vocab) == frozen["vocab_sha256"]
    assert shard_digests(bert_data.data_dir) == frozen["bert_shards_sha256"]


def test_fixed_seed_tiny_bert_pretraining_ends_at_the_same_weights(bert_data, tmp_path):
    frozen = _frozen()["bert_tiny_weights"]
    got = _pretrain(bert_data, tmp_path / "run")
    # Weight values, not names: a checkpoint may name a variable by another object path after
    # a restructuring; the multiset of per-variable figures must be the same. Each recorded
    # figure is matched with the nearest one not yet taken (not by sorting: sums of about
    # +-1e-10, e.g. of a bias that barely moved, swap places between machines' rounding).
    assert len(got) == len(frozen), (len(got), len(frozen))
    left = [np.array(v) for v in got.values()]
    for name, figures in sorted(frozen.items()):
        figures = np.array(figures)
        distance = [np.max(np.abs(a - figures) / (1e-6 + 1e-5 * np.abs(figures))) for a in left]
        nearest = left.pop(int(np.argmin(distance)))
        np.testing.assert_allclose(nearest, figures, rtol=1e-5, atol=1e-6,
                                   err_msg=f"no variable's figures match {name}'s")


if __name__ == "__main__":  # re-record: python tests/test_frozen_outputs.py
    import tempfile

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from testing import run_module  # the recipe of conftest.bert_data, run by hand

    root = tempfile.mkdtemp()
    corpus, task = os.path.join(root, "corpus"), os.path.join(root, "task")
    run_module("data_pipelines.sample_corpus", f"--output={corpus}", f"--task_output={task}")
    first = sorted(glob.glob(os.path.join(corpus, "*.txt")))[0]
    vocab = os.path.join(root, "vocab.txt")
    run_module("data_pipelines.make_vocab", f"--input={first}", f"--output={vocab}",
               "--vocab_size=2000", "--lower_case")
    data_dir = os.path.join(root, "pretrain")
    run_module("data_pipelines.make_pretrain", "--objective=bert", f"--input={first}",
               f"--output_dir={data_dir}", f"--vocab={vocab}", "--max_seq_length=64",
               "--max_predictions_per_seq=10", "--dupe_factor=1", "--num_shards=2")

    class _Data:
        pass

    d = _Data()
    d.vocab, d.data_dir = vocab, data_dir
    record = {"vocab_sha256": _sha256(vocab), "bert_shards_sha256": shard_digests(data_dir),
              "bert_tiny_weights": _pretrain(d, os.path.join(root, "run"))}
    with open(FROZEN_FILE, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    print(f"wrote {FROZEN_FILE}: {len(record['bert_tiny_weights'])} variables")
