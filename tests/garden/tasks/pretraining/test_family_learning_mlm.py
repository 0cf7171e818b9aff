"""The "objective learns" tests for the ALBERT and RoBERTa tiny configs (MLM against the best
constant guess), on the family_data session fixture; split from test_family_training.py so that
the learn tests spread over the xdist workers."""

from __future__ import annotations

import math

from benchmarks import objectives_learn as learn
from learn_testing import train_and_score


def test_albert_mlm_beats_the_constant_guess_after_a_short_run(family_data):
    """The tiny ALBERT config (lr 2e-2, no dropout), 160 steps of 32 on the training data: its
    MLM accuracy must beat always guessing the most frequent target by 5 binomial standard
    errors of that guess over the n predictions scored. (Measured: 160 steps 0.082 vs 0.052,
    n = 6283, 10.7 standard errors; 200 steps 0.13 vs 0.055, 26; 150 steps 8.6; 100 steps
    0.070 vs 0.052, only 6.2, so not fewer than 160.)"""
    result = train_and_score("albert", family_data.vocab["albert"], family_data.data["albert"],
                             family_data.root, 160, extra=["backbone.dropout = 0.0"])
    n, p0 = result["mlm_predictions"], result["mlm_constant_guess_accuracy"]
    assert n > 4000  # 20 batches x 32 sequences x ~10 predictions (15% of 64)
    margin = 5 * math.sqrt(p0 * (1 - p0) / n)  # 0.052 over 6283 -> 0.014
    assert result["mlm_accuracy"] > p0 + margin, result
    # And its loss is below the unigram entropy of the targets: it uses the context.
    assert result["mlm_loss"] < result["mlm_unigram_entropy"], result


def test_roberta_mlm_beats_the_constant_guess_after_a_short_run(family_data):
    """RoBERTa tiny, 200 steps of 32 with its dynamic masking (a fresh mask per batch in the
    input pipeline) on byte-level BPE blocks of 64: held out as the benchmark scores it (the
    pipeline's masks with seed 0), its MLM accuracy must beat the best constant guess by 5
    binomial standard errors. (The benchmark at seq 128: 0.058 vs 0.036 over 13k. Here at 200
    steps: 0.069 vs 0.035 over 4779, 12.9 standard errors; 300 steps before 2026-11-28.)"""
    result = train_and_score("roberta", family_data.vocab["roberta"], family_data.data["roberta"],
                             family_data.root, 200, extra=["backbone.dropout = 0.0"])
    assert result["mlm_predictions"] > 2000, result
    assert learn.margins(result)["mlm_margin_se"] > 5, result
