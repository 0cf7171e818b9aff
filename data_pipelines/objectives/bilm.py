"""Bidirectional language-model blocks for the recurrent models (docs/objectives.md section 13).

ELMo (Peters et al. 2018) trains a forward and a backward LSTM language model on sentences
between <S> and </S>, read as a stream in windows of 20 tokens ("unroll steps" of bilm-tf), each
token given to the model as up to 50 character ids; ULMFiT's AWD-LSTM language model
(Merity et al. 2018) reads a stream of tokens in windows of about 70. Here, per pool (the
pool's documents in the given order):

* every sentence is written as <S> pieces </S> (the vocabulary's ``bos`` / ``eos`` roles, or
  ``cls`` / ``sep`` for a WordPiece vocabulary, whose [CLS] / [SEP] play them);
* the stream is cut into blocks of exactly ``max_seq_length`` pieces (default 20, ELMo's);
  the tail of a pool is DROPPED and counted (``dropped/tail_tokens``, ``dropped/tail``), so
  every written block is full and ``input_mask`` is all ones;
* with ``--characters``, ``char_ids`` holds each piece's ELMo character ids
  (text/char_ids.py, the table garden's ELMo reads a vocabulary's pieces with).

Features (``features.bilm_pretrain_spec``): input_ids, input_mask (+ char_ids). The forward
LM predicts input_ids[t + 1] from positions <= t and the backward LM input_ids[t - 1] from
positions >= t: the model shifts, nothing else is stored. No randomness is used.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterator, Sequence, Tuple

from text import features, flags
from text.char_ids import char_table, sentence_marks
from data_pipelines.objectives import base
from data_pipelines.objectives.gpt2 import cut_blocks


@dataclasses.dataclass(frozen=True)
class BiLMOptions:
    """--max_seq_length is the block size (ELMo's 20 unroll steps by default)."""

    max_seq_length: int = 20
    characters: bool = flags.option(False, "write char_ids: ELMo's character ids of each piece")
    max_characters: int = flags.option(50, "characters per piece in char_ids (ELMo: 50), "
                                           "beginning and end of word included")

    def __post_init__(self):
        if self.max_seq_length < 2:
            raise ValueError(f"max_seq_length must be >= 2 (a token and its neighbour), got "
                             f"{self.max_seq_length}")
        if self.max_characters < 3:
            raise ValueError(f"max_characters must be >= 3 (beginning, one byte, end of word), "
                             f"got {self.max_characters}")


def _create(docs: Sequence[base.Doc], ctx: base.PoolContext) -> Iterator[Tuple[str, Dict[str, list]]]:
    options: BiLMOptions = ctx.options
    start, end = sentence_marks(ctx.vocab)
    stream, first_doc = [], []  # first_doc: (offset in the stream, document index)
    for k, doc in enumerate(docs):
        sentences = [s for s in doc.segments if len(s)]
        if not sentences:
            ctx.count("dropped/empty_document")
            continue
        first_doc.append((len(stream), k))
        for sentence in sentences:
            stream.extend([start, *map(int, sentence), end])
            ctx.count("sentences")
    blocks, tail = cut_blocks(stream, options.max_seq_length)
    ctx.count("dropped/tail_tokens", tail)
    ctx.count("dropped/tail", int(tail > 0))
    table = char_table(ctx.vocab, options.max_characters) if options.characters else None

    def located():
        """(index of the document holding the block's first piece, block) per block."""
        j = 0
        for b, block in enumerate(blocks):
            while j + 1 < len(first_doc) and first_doc[j + 1][0] <= b * options.max_seq_length:
                j += 1
            yield first_doc[j][1], block

    for key, block in base.block_keys(docs, located()):
        ctx.count("real_tokens", len(block))
        out = {"input_ids": block, "input_mask": [1] * len(block)}
        if table is not None:
            out["char_ids"] = table[block].reshape(-1).tolist()
        yield key, out


OBJECTIVE = base.Objective(
    name="bilm",
    recipe="ELMo / ULMFiT (Peters et al. 2018, Howard & Ruder 2018): forward and backward LM "
    "blocks of <S> sentence </S> streams, optionally with ELMo's character ids",
    tokenizer="wordpiece",
    options=BiLMOptions,
    feature_spec=lambda o: features.bilm_pretrain_spec(
        o.max_seq_length, o.max_characters if o.characters else 0),
    create_instances=_create,
    job_defaults={"dupe_factor": 1},  # nothing is drawn: one pass over the corpus
    summary={"tail_drop_rate": base.tail_drop_rate,
             "sentences_per_block_token": ("sentences", "real_tokens")},
)
