"""GPT-2 pretraining learns: the tiny config (configs/gpt2_tiny.gin) trained through
`garden.train` under a tf.distribute strategy on make_pretrain --objective=gpt2 data of the
sample corpus (byte-level BPE from make_vocab), scored on a held-out corpus file against what a
model that ignores the context can do: next-token accuracy vs always guessing the most frequent
next token (margin in binomial standard errors of n), and loss vs the unigram entropy of the
held-out labels (the best context-free distribution, fitted on those very labels)."""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from benchmarks import objectives_learn as learn
from garden.tasks.pretraining import next_token_weights

SEQ = 64
VOCAB_SIZE = 1000
STEPS = 40  # 120 steps reached 85 SE over the constant guess; 40 keep a wide margin


def _held_out(task, model, batches: int = 6):
    """Next-token labels, argmax predictions and per-token losses on held-out blocks."""
    labels, predicted, nll = [], [], []
    for batch in learn._eval_batches(task, 32, batches):
        inputs = task.model_inputs(batch)
        logits = model(inputs, training=False)["logits"][:, :-1]
        target = inputs["token_ids"][:, 1:]
        real = next_token_weights(inputs["padding_mask"]).numpy() > 0
        labels.append(target.numpy()[real])
        predicted.append(tf.argmax(logits, -1, output_type=tf.int32).numpy()[real])
        nll.append(tf.nn.sparse_softmax_cross_entropy_with_logits(target, logits).numpy()[real])
    return np.concatenate(labels), np.concatenate(predicted), np.concatenate(nll)


def test_gpt2_tiny_learns_next_tokens_through_garden_train(generative_data, tmp_path):
    # tests/conftest.py generative_data: family_data's BPE vocabulary, gpt2 blocks of sample-
    # corpus file 0 for training and of the held-out file 1 for scoring.
    gd = generative_data
    bindings = learn.bindings("gpt2", gd.bpe, gd.data["gpt2-train"], gd.data["gpt2-eval"],
                              SEQ, STEPS, 16, learning_rate=3e-3,
                              extra=["garden.Pretraining.shuffle_buffer = 500",
                                     "train.eval_every = 0"])
    summary = learn.train_family("gpt2", str(tmp_path / "run"), bindings)
    first = summary["first_logged_metrics"]
    # Random init scores the vocabulary about uniformly: loss near ln(vocab).
    assert abs(first["lm_loss"] - math.log(VOCAB_SIZE)) < 0.5, first
    assert set(first) >= {"loss", "lm_loss", "lm_accuracy", "tokens"}, first
    assert first["tokens"] == 16 * SEQ  # every block is full: all of its tokens are real

    task, model = learn._restored_task("gpt2", str(tmp_path / "run"), bindings)
    labels, predicted, nll = _held_out(task, model)
    n = len(labels)
    guess = learn._constant_guess(labels)
    accuracy = float(np.mean(predicted == labels))
    margin = learn.margin_in_standard_errors(accuracy, guess["accuracy"], n)
    print(f"gpt2 learn: first {first}; held-out n={n} accuracy={accuracy:.4f} guess={guess} "
          f"margin={margin:.1f} SE loss={np.mean(nll):.3f}")
    assert n > 5000, n  # 6 x 32 blocks x 63 labels = 12,096
    assert margin >= 5.0, (accuracy, guess, n, margin)
    loss = float(np.mean(nll))
    # The loss's own standard error is std(nll) / sqrt(n): beat the entropy by 5 of them.
    assert loss < guess["entropy"] - 5 * float(np.std(nll)) / math.sqrt(n), (loss, guess)
