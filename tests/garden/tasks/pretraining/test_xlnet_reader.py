"""The XLNet trainer's expansion of the records (garden/tasks/pretraining/xlnet.py): on real
make_pretrain --objective=xlnet records of the sample corpus, the perm_mask and target_mapping
the model gets from `Pretraining.model_inputs` equal the original construction
(objectives.xlnet.reference_perm_mask, local_perm_mask per half plus the cross-half blocks,
with each half's order read from the record's perm_rank) and the one-hot rows of the targets;
and the TensorFlow expansion equals the objective's numpy one on instances it makes."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from data_pipelines.objectives import xlnet
from garden.tasks.pretraining import xlnet as xlnet_record

SEQ = 64  # tests/conftest.py GENERATIVE_RUNS' xlnet data (reuse_len 32, num_predict 12)
REUSE, NUM_PREDICT = 32, 12


def _order_of(rank: np.ndarray) -> np.ndarray:
    """A permutation of 0..n-1 that orders the half's positions as their ranks do (ties, the
    context, in position order: local_perm_mask ignores the context's order)."""
    return np.argsort(np.argsort(rank, kind="stable"), kind="stable")


@pytest.fixture(scope="module")
def task(generative_data):
    from garden.models.factory import backbone
    from garden.tasks.pretraining import Pretraining

    t = Pretraining(backbone=lambda **kw: backbone(preset="xlnet_tiny", **kw),
                    vocab=generative_data.sentencepiece, tokenizer="sentencepiece", lower_case=False,
                    phases=[{"start_step": 0, "data_dir": generative_data.data["xlnet-train"],
                             "max_seq_length": SEQ}], family="xlnet")
    t.prepare()
    return t


def test_reader_masks_equal_the_original_construction_on_pipeline_records(task):
    sep, cls = task.vocabulary.special("sep", "xlnet"), task.vocabulary.special("cls", "xlnet")
    ds = task._dataset(task.data_dirs[0], 32, seed=0, shuffle_buffer=0, repeat=False).take(4)
    seen = 0
    for batch in ds:
        inputs = task.model_inputs(batch)
        perm, mapping = inputs["perm_mask"].numpy(), inputs["target_mapping"].numpy()
        assert perm.dtype == mapping.dtype == np.float32
        assert perm.shape[1:] == (SEQ, SEQ) and mapping.shape[1:] == (NUM_PREDICT, SEQ)
        tokens, q, rank = batch["input_k"].numpy(), batch["input_q"].numpy(), batch["perm_rank"].numpy()
        for b in range(len(tokens)):
            is_target, is_func = q[b] > 0, np.isin(tokens[b], [sep, cls])
            assert is_func.sum() == 3 and is_target.sum() == NUM_PREDICT
            reference = xlnet.reference_perm_mask(is_target, is_func, _order_of(rank[b, :REUSE]),
                                                  _order_of(rank[b, REUSE:]), REUSE)
            np.testing.assert_array_equal(perm[b], reference)
            positions = np.flatnonzero(is_target)
            expect = np.zeros((NUM_PREDICT, SEQ), np.float32)
            expect[np.arange(len(positions)), positions] = 1
            np.testing.assert_array_equal(mapping[b], expect)
            # The k-th row names the k-th target token.
            assert tokens[b][positions].tolist() == batch["target"].numpy()[b].tolist()
            seen += 1
    assert seen == 128


def test_tf_expansion_equals_the_objectives_on_its_instances():
    """Fewer targets than num_predict (zero rows after the last), a sequence with none, and
    targets in both halves: the step's tf ops against the objective's numpy expansion."""
    rng = np.random.default_rng(0)
    is_start = np.zeros(60, dtype=bool)
    is_start[::2] = True
    vocab = xlnet.XLNetVocab(sep_id=4, cls_id=3, eod_id=7, is_start=is_start)
    ranks, qs, targets = [], [], []
    for num_predict in (0, 5, 9, 9):
        tokens = rng.integers(10, 60, 40)
        tokens[30], tokens[-2], tokens[-1] = 4, 4, 3
        options = xlnet.XLNetOptions(max_seq_length=40, reuse_len=20, num_predict=num_predict)
        feats, _ = xlnet.make_instance(tokens, 20, rng, vocab, options)
        ranks.append(feats["perm_rank"])
        qs.append(feats["input_q"])
        targets.append(np.flatnonzero(feats["input_q"]))
    perm = xlnet_record.perm_mask_from_rank(tf.constant(np.stack(ranks)), tf.constant(np.stack(qs))).numpy()
    np.testing.assert_array_equal(perm, xlnet.perm_mask_from_rank(np.stack(ranks), np.stack(qs)).astype(np.float32))
    mapping = xlnet_record.target_mapping_from(tf.constant(np.stack(qs)), 9).numpy()
    for b, positions in enumerate(targets):
        expect = np.zeros((9, 40), np.float32)
        expect[np.arange(len(positions)), positions] = 1
        np.testing.assert_array_equal(mapping[b], expect)


def test_data_made_before_perm_rank_is_refused_by_name(generative_data, tmp_path):
    """A data directory written with perm_mask / target_mapping (before perm_rank) is refused
    with its path, the missing feature and the command that remakes it, before any step."""
    import json
    import shutil

    from garden.data import DataDirError
    from garden.models.factory import backbone
    from garden.tasks.pretraining import Pretraining

    old = tmp_path / "xlnet-train-old"
    shutil.copytree(generative_data.data["xlnet-train"], old)
    with open(old / "info.json") as f:
        info = json.load(f)
    spec = info["feature_spec"]
    spec["perm_mask"] = dict(spec.pop("perm_rank"), length=SEQ * SEQ)
    with open(old / "info.json", "w") as f:
        json.dump(info, f)
    t = Pretraining(backbone=lambda **kw: backbone(preset="xlnet_tiny", **kw),
                    vocab=generative_data.sentencepiece, tokenizer="sentencepiece",
                    lower_case=False, family="xlnet",
                    phases=[{"start_step": 0, "data_dir": str(old), "max_seq_length": SEQ}])
    with pytest.raises(DataDirError, match=rf"{old} lacks the features \['perm_rank'\] that .*"
                                           r"make_pretrain --objective=xlnet"):
        t.prepare()
