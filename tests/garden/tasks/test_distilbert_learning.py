"""The "objective learns" test for DistilBERT: a BERT tiny teacher, then the tiny student distilled
from it, on family_data's corpus and WordPiece vocabulary; split from test_family_training.py so
that the learn tests spread over the xdist workers."""

from __future__ import annotations

import math
import os

from benchmarks import objectives_learn as learn
from learn_testing import SEQ


def test_distilbert_student_beats_the_constant_guess_after_a_short_run(family_data):
    """DistilBERT through the benchmark's own path: a BERT tiny teacher trained 100 steps, then
    the tiny student distilled from it for 300 steps of 32 (64-token BERT data made with the
    WordPiece vocabulary of the ELECTRA data). Scored on batches masked as the student's
    training masks them (rare pieces favoured) and on BERT's own masks of the data, its MLM
    accuracy must beat the best constant guess of those targets by 5 binomial standard errors
    each time. (Measured: 0.033 vs 0.006 over n = 2980, and 0.102 vs 0.040 over n = 3089; the
    teacher on the same batches 0.007 and 0.057. About 65 s on 2 cores beside the fixture.)"""
    root = family_data.root
    vocab = family_data.vocab["electra"]  # WordPiece
    corpus = learn.sample_corpus(root)[0]
    bert_data = learn.pretrain_data(root, "bert", vocab, corpus, SEQ, 1, "train")
    teacher_dir, teacher = learn.bert_teacher(
        root, vocab, bert_data, bert_data, max_seq_length=SEQ, steps=100, batch_size=32,
        learning_rate=None, eval_batches=5)
    bindings = learn.bindings("distilbert", vocab, bert_data, bert_data, SEQ, steps=300,
                              batch_size=32, teacher=teacher_dir,
                              extra=["student/backbone.dropout = 0.0",
                                     "garden.Distillation.shuffle_buffer = 1000"])
    model_dir = os.path.join(root, "learn-distilbert")
    learn.train_family("distilbert", model_dir, bindings)
    task, model = learn._restored_task("distilbert", model_dir, bindings)
    for static_masks in (False, True):
        result = learn.score(task, model, batch_size=32, num_batches=10, eval_dir=bert_data,
                             static_masks=static_masks)
        n, p0 = result["mlm_predictions"], result["mlm_constant_guess_accuracy"]
        assert n > 2000  # 10 batches x 32 sequences x ~9 predictions (15% of ~60 real tokens)
        margin = 5 * math.sqrt(p0 * (1 - p0) / n)
        assert result["mlm_accuracy"] > p0 + margin, (static_masks, result)
        # The teacher's scores on the same batches come with it: a count of the same n
        # predictions (a score over other batches or a default would not be).
        hits = result["teacher_mlm_accuracy"] * n
        assert abs(hits - round(hits)) < 1e-6 * n and 0 < round(hits) < n, (n, result)
    assert teacher["family"] == "bert (teacher)"
