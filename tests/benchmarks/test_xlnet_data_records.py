"""benchmarks.xlnet_data reads our records as the trainer does: ``ours_batches`` expands the
written perm_rank / input_q with garden.tasks.pretraining.xlnet's functions, and the benchmark's
invariant checks and target accounting pass on what it gets (and the masks are those of the
objective's own expansion)."""

import numpy as np

from benchmarks import xlnet_data
from text import features
from data_pipelines.objectives import xlnet

SEQ, REUSE, NUM_PREDICT = 48, 24, 8
SEP, CLS = xlnet_data.SEP_ID, xlnet_data.CLS_ID


def test_ours_batches_expand_written_records_that_keep_every_invariant(tmp_path):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    is_start = np.zeros(60, dtype=bool)
    is_start[::2] = True
    vocab = xlnet.XLNetVocab(sep_id=SEP, cls_id=CLS, eod_id=xlnet_data.EOD_ID, is_start=is_start)
    options = xlnet.XLNetOptions(max_seq_length=SEQ, reuse_len=REUSE, num_predict=NUM_PREDICT)
    rows = []
    for _ in range(20):
        tokens = rng.integers(10, 60, SEQ)
        tokens[REUSE + int(rng.integers(1, 20))], tokens[-2], tokens[-1] = SEP, SEP, CLS
        feats, _ = xlnet.make_instance(tokens, REUSE, rng, vocab, options)
        feats["seg_id"] = np.zeros(SEQ, np.int64)
        rows.append(feats)
    batch = xlnet.instance_batch([str(i) for i in range(len(rows))], rows,
                                 features.xlnet_pretrain_spec(SEQ, NUM_PREDICT))
    path = str(tmp_path / "ours.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for record in features.serialize_columns(features.xlnet_pretrain_spec(SEQ, NUM_PREDICT), batch.columns,
                                                 batch.lengths):
            w.write(record)

    batches = list(xlnet_data.ours_batches([path], SEQ, NUM_PREDICT, batch=8))
    assert [len(b["tokens"]) for b in batches] == [8, 8, 4]
    cannot = np.concatenate([b["cannot"] for b in batches])
    expect = np.stack([xlnet.perm_mask_from_rank(r["perm_rank"], r["input_q"]) for r in rows])
    np.testing.assert_array_equal(cannot, expect)
    result = xlnet_data.summarize(iter(batches), REUSE, "test")
    assert (result["sequences"], result["targets_per_sequence"], result["mapping_errors"]) == (20, 8.0, 0)
    assert result["violations"] and sum(result["violations"].values()) == 0
    assert result["leaked_target_fraction"] == 0.0
