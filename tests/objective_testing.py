"""Checks shared by the pretraining-objective tests (tests/data_pipelines/test_*_objective.py)."""

from __future__ import annotations

import argparse
import math


def within(observed: float, n: int, p: float, sigmas: float = 5.0) -> bool:
    """Whether `observed` successes in `n` draws fit a Binomial(n, p) rate within `sigmas`
    standard deviations: loose enough never to flake, tight enough that a wrong rate fails."""
    return abs(observed / n - p) <= sigmas * math.sqrt(p * (1 - p) / n) + 1e-12


def originals(inst: dict) -> list:
    """input_ids with the masked positions restored to their labels."""
    ids = list(inst["input_ids"])
    for pos, label in zip(inst["masked_lm_positions"], inst["masked_lm_ids"]):
        ids[pos] = label
    return ids


def run_documents(objective, segment_lists, options, vocab, seed: int = 1):
    """``objective``'s instances of one pool of documents doc0000, doc0001, ... made of
    ``segment_lists`` (per document, its segments of piece ids), dupe pass 0:
    ([(key, features)], the pool's stats)."""
    from data_pipelines.objectives import base

    docs = [base.Doc(id="doc%04d" % k, segments=[list(s) for s in segs])
            for k, segs in enumerate(segment_lists)]
    ctx = base.PoolContext(seed=seed, dupe=0, vocab=vocab, options=options)
    return list(objective.create_instances(docs, ctx)), ctx.stats


def random_documents(rng, first_word: int, vocab_size: int, documents: int, sentences: tuple,
                     pieces: tuple) -> list:
    """``documents`` documents of rng.integers(*sentences) sentences of rng.integers(*pieces)
    piece ids in [first_word, vocab_size)."""
    return [[[int(t) for t in rng.integers(first_word, vocab_size, size=int(rng.integers(*pieces)))]
             for _ in range(int(rng.integers(*sentences)))] for _ in range(documents)]


def objective_parser(objective, max_seq_length: int = 128, **int_flags) -> argparse.ArgumentParser:
    """A command line as make_pretrain builds one for `objective`: the shared --max_seq_length
    (and any other shared int flags, name=default), the objective's own flag group, then its
    defaults over the shared ones."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_seq_length", type=int, default=max_seq_length)
    for flag, default in int_flags.items():
        parser.add_argument(f"--{flag}", type=int, default=default)
    objective.add_flags(parser.add_argument_group(objective.name))
    parser.set_defaults(**objective.defaults)
    return parser


def write_bilm_data(lm_vocab, root, *flags: str, documents: int = 150):
    """make_pretrain --objective=bilm on the first `documents` documents of lm_vocab's corpus
    file (tests/conftest.py's session fixture: sample-corpus file 0 and its lower-cased
    WordPiece vocabulary of 800) under root; returns (vocab path, data dir). Tests take it
    through conftest's bilm_data fixture, which makes each set of flags once per run."""
    from pathlib import Path

    from testing import run_fixture_tool

    root = Path(root)
    (root / "corpus").mkdir()
    (root / "corpus" / "part-0.txt").write_text(
        "\n\n".join(Path(lm_vocab.corpus_file).read_text(encoding="utf-8")
                     .split("\n\n")[:documents]) + "\n")
    data = root / "bilm"
    run_fixture_tool("data_pipelines.make_pretrain", "--objective=bilm",
                     f"--input={root / 'corpus' / '*.txt'}", f"--output_dir={data}",
                     f"--vocab={lm_vocab.vocab}", "--num_shards=1", *flags)
    return lm_vocab.vocab, data


def bilm_lm_args(config: str, model_dir, vocab, data, steps: int, *extra: str) -> list:
    """garden.train arguments of a recurrent LM config (configs/elmo_tiny.gin, ulmfit_tiny.gin)
    on write_bilm_data's vocabulary and data, batch 16, `steps` steps."""
    return [f"--config={config}", f"--model_dir={model_dir}", f"--gin_param=VOCAB='{vocab}'",
            f"--gin_param=DATA_DIR='{data}'", f"--gin_param=train.train_steps={steps}",
            "--gin_param=train.global_batch_size=16", *extra]
