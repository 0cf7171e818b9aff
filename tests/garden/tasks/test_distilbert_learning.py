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
    the tiny student distilled from it for 150 steps of 32 at learning rate 3e-3 (at the
    config's 1e-3 it took 300 steps) on 64-token BERT data made with the WordPiece vocabulary
    of the ELECTRA data. Scored on batches masked as the student's training masks them (rare
    pieces favoured) and on BERT's own masks of the data, its MLM accuracy must beat the best
    constant guess of those targets by 5 binomial standard errors each time. (Measured at 150
    steps, lr 3e-3: 0.036 vs 0.0053 over n = 3000 (23.3 standard errors, bar 0.012), and 0.105
    vs 0.041 over n = 3104 (17.9, bar 0.059); the teacher on the same batches 0.004 and 0.051.
    200 steps at 2e-3: 27.8 and 19.5; 300 steps at 1e-3: 21.8 and 16.9; 150 steps at 1e-3:
    0.0077, below the bar. A teacher of 50 steps still predicts the constant guess, and so did
    its student. The teacher's own held-out score is one batch: only the student's is
    asserted.)"""
    root = family_data.root
    vocab = family_data.vocab["electra"]  # WordPiece
    corpus = learn.sample_corpus(root)[0]
    bert_data = learn.pretrain_data(root, "bert", vocab, corpus, SEQ, 1, "train")
    teacher_dir, teacher = learn.bert_teacher(
        root, vocab, bert_data, bert_data, max_seq_length=SEQ, steps=100, batch_size=32,
        learning_rate=None, eval_batches=1)
    bindings = learn.bindings("distilbert", vocab, bert_data, bert_data, SEQ, steps=150,
                              batch_size=32, teacher=teacher_dir,
                              extra=["student/backbone.dropout = 0.0", "train.learning_rate = 3e-3",
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
