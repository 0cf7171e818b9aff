"""GPT-2 causal LM blocks (docs/objectives.md section 11).

Radford et al. 2019 train on WebText tokenized with byte-level BPE; the usual data recipe
(OpenAI's and the Hugging Face ``run_clm`` "group_texts" one) concatenates the documents with
``<|endoftext|>`` between them and cuts the stream into ``block_size`` (1024) chunks; the
labels are the inputs shifted by one, computed by the model, not stored.

Here, per pool (the pool's documents in the given order):

* a document's sentences are concatenated (no separator inside a document) and followed by
  ``<|endoftext|>`` (vocabulary role ``eod``): every document, the pool's last one included,
  ends with one, so between any two documents of the training stream there is exactly one;
* the stream is cut into blocks of exactly ``max_seq_length`` pieces (default 1024); blocks
  cross document boundaries freely;
* the tail (fewer than ``max_seq_length`` pieces at the end of a pool) is DROPPED, as
  ``group_texts`` does, and counted (``dropped/tail_tokens``, ``dropped/tail``): every written
  block is full, ``input_mask`` is all ones. With pools of ~1000 documents the loss is under
  one block per pool; a pool shorter than one block gives no block at all.

Features (``features.gpt2_pretrain_spec``): input_ids, input_mask. The model predicts
``input_ids[t + 1]`` from positions ``<= t``: the loss covers positions 0..L-2 (weights
``input_mask[1:]``); the last position of a block has no label (the next block's first piece is
not shown to it). No randomness is used: blocks are a deterministic function of the pool.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Dict, Iterator, List, Sequence, Tuple

from text import features
from data_pipelines.objectives import base


@dataclasses.dataclass(frozen=True)
class GPT2Options:
    """Only the job's flags: --max_seq_length is the block size."""

    max_seq_length: int = 1024

    def __post_init__(self):
        if self.max_seq_length < 2:
            raise ValueError(f"max_seq_length must be >= 2 (an input and its next token), got "
                             f"{self.max_seq_length}")


def concatenate_documents(documents: Sequence[Sequence[Sequence[int]]], eod_id: int) -> Tuple[List[int], List[int]]:
    """``(stream, starts)``: every non-empty document's pieces followed by ``<|endoftext|>``,
    and the offset in the stream where each document starts (-1 for an empty one)."""
    stream: List[int] = []
    starts: List[int] = []
    for doc in documents:
        pieces = [int(t) for s in doc for t in s]
        if not pieces:
            starts.append(-1)
            continue
        starts.append(len(stream))
        stream.extend(pieces)
        stream.append(eod_id)
    return stream, starts


def cut_blocks(stream: Sequence[int], block_size: int) -> Tuple[List[List[int]], int]:
    """``(full blocks, number of tail pieces dropped)``."""
    n = len(stream) // block_size
    return [list(stream[i * block_size:(i + 1) * block_size]) for i in range(n)], len(stream) - n * block_size


def make_blocks(documents: Sequence[Sequence[Sequence[int]]], eod_id: int,
                options: GPT2Options = GPT2Options()) -> Tuple[List[Tuple[int, List[int]]], int]:
    """``([(index of the document holding the block's first piece, block)], tail dropped)``."""
    stream, starts = concatenate_documents(documents, eod_id)
    blocks, tail = cut_blocks(stream, options.max_seq_length)
    # Offsets of the non-empty documents, for finding the document a block starts in.
    present = [(s, k) for k, s in enumerate(starts) if s >= 0]
    offsets = [s for s, _ in present]
    out = []
    for b, block in enumerate(blocks):
        j = bisect.bisect_right(offsets, b * options.max_seq_length) - 1
        out.append((present[j][1], block))
    return out, tail


# ---------------------------------------------------------------------------------------------
# The objective as the Beam job sees it (data_pipelines/objectives/base.py).


def _create(docs: Sequence[base.Doc], ctx: base.PoolContext) -> Iterator[Tuple[str, Dict[str, list]]]:
    options: GPT2Options = ctx.options
    eod_id = ctx.vocab.special("eod", "gpt2")
    blocks, tail = make_blocks([d.segments for d in docs], eod_id, options)
    for d in docs:
        if not any(len(s) for s in d.segments):
            ctx.count("dropped/empty_document")
        else:
            ctx.count("eod_tokens")
    ctx.count("dropped/tail_tokens", tail)
    ctx.count("dropped/tail", int(tail > 0))
    for key, ids in base.block_keys(docs, blocks):
        ctx.count("real_tokens", len(ids))
        yield key, {"input_ids": ids, "input_mask": [1] * len(ids)}


OBJECTIVE = base.Objective(
    name="gpt2",
    recipe="GPT-2 (Radford et al. 2019): causal LM on byte-level BPE documents joined by <|endoftext|>, "
    "cut into full blocks",
    tokenizer="bpe",
    options=GPT2Options,
    feature_spec=lambda o: features.gpt2_pretrain_spec(o.max_seq_length),
    create_instances=_create,
    job_defaults=base.SINGLE_PASS_CASED,
    summary={
        # Share of the pieces (<|endoftext|> included) lost in the pools' tails.
        "tail_drop_rate": base.tail_drop_rate,
        "eod_rate": ("eod_tokens", "real_tokens"),
    },
)
