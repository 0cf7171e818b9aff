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
