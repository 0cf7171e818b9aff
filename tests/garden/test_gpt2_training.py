"""GPT-2 pretraining learns: the tiny config (configs/gpt2_tiny.gin) trained through
`garden.train` under a tf.distribute strategy on make_pretrain --objective=gpt2 data of the
sample corpus (byte-level BPE from make_vocab), scored on a held-out corpus file against what a
model that ignores the context can do: next-token accuracy vs always guessing the most frequent
next token (margin in binomial standard errors of n), and loss vs the unigram entropy of the
held-out labels (the best context-free distribution, fitted on those very labels)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import glob
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import objectives_learn as learn
from data_pipelines import make_vocab
from garden.tasks.pretraining_gpt2 import next_token_weights

SEQ = 64
VOCAB_SIZE = 1000
STEPS = 40  # 120 steps reached 85 SE over the constant guess; 40 keep a wide margin


@dataclasses.dataclass
class GPT2Data:
    root: str
    vocab: str
    train_dir: str
    eval_dir: str


def _build(root, files) -> dict:
    root = str(root)
    # make_vocab in this process (as learn.vocabulary runs it, without a second interpreter):
    # the same arguments, the same output path.
    vocab = os.path.join(root, f"bpe-{VOCAB_SIZE}", "vocab.json")
    make_vocab.main(["--tokenizer=bpe", f"--input={files[0]}", f"--output={os.path.dirname(vocab)}",
                     f"--vocab_size={VOCAB_SIZE}", "--lower_case"])
    assert vocab == learn.vocabulary(root, "bpe", files[0], VOCAB_SIZE)  # found, not rebuilt
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # two make_pretrain processes
        jobs = [pool.submit(learn.pretrain_data, root, "gpt2", vocab, files[i], SEQ, 1, tag)
                for i, tag in ((0, "train"), (learn.HELD_OUT, "eval"))]
        train_dir, eval_dir = (job.result() for job in jobs)
    return dict(root=root, vocab=vocab, train_dir=train_dir, eval_dir=eval_dir)


@pytest.fixture(scope="module")
def gpt2_data(shared_artefacts, bert_data) -> GPT2Data:
    """BPE vocabulary and gpt2 blocks of the sample corpus the bert_data fixture generated
    (file 0 for training, the held-out file 1 for scoring)."""
    files = sorted(glob.glob(os.path.join(os.path.dirname(bert_data.corpus_glob), "*.txt")))
    return shared_artefacts("gpt2_data", lambda root: _build(root, files), GPT2Data)


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


def test_gpt2_tiny_learns_next_tokens_through_garden_train(gpt2_data, tmp_path):
    bindings = learn.bindings("gpt2", gpt2_data.vocab, gpt2_data.train_dir, gpt2_data.eval_dir,
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
