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
* with ``--characters``, ``char_ids`` holds each piece's ELMo character ids (bilm-tf's
  UnicodeCharsVocabulary, AllenNLP's ELMoCharacterMapper): beginning-of-word 258, the
  piece's UTF-8 bytes (at most max_characters - 2), end-of-word 259, padding 260; <S> is
  258 256 259, </S> 258 257 259; every id + 1, so that 0 is "no character". A piece's text
  is the piece without its subword marker (WordPiece "##", SentencePiece U+2581, byte-level
  BPE U+0120; BPE's byte symbols are mapped back to their bytes).

Features (``features.bilm_pretrain_spec``): input_ids, input_mask (+ char_ids). The forward
LM predicts input_ids[t + 1] from positions <= t and the backward LM input_ids[t - 1] from
positions >= t: the model shifts, nothing else is stored. No randomness is used.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Dict, Iterator, Sequence, Tuple

import numpy as np

from data_pipelines import features, flags
from data_pipelines.objectives import base
from data_pipelines.objectives.gpt2 import cut_blocks

BOS_CHAR, EOS_CHAR, BOW_CHAR, EOW_CHAR, PAD_CHAR = 256, 257, 258, 259, 260


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


def sentence_marks(vocab: base.Vocab) -> Tuple[int, int]:
    """(<S>, </S>) ids: the bos / eos roles, else WordPiece's cls / sep."""
    start = vocab.specials.get("bos", vocab.specials.get("cls"))
    end = vocab.specials.get("eos", vocab.specials.get("sep"))
    if start is None or end is None:
        raise base.VocabularyRoleError(
            f"objective bilm needs sentence marks (bos/eos or cls/sep) but vocabulary "
            f"{vocab.name} has {sorted(vocab.specials)}")
    return start, end


def piece_bytes(piece: str, byte_level: bool = False) -> bytes:
    """The text a piece stands for, as UTF-8 bytes, without its subword marker; byte_level:
    the piece is byte-level BPE symbols (U+0120 for a space), mapped back to their bytes."""
    if byte_level:
        from data_pipelines.tokenizers import bytes_to_unicode

        byte_of = {c: b for b, c in bytes_to_unicode().items()}
        if all(c in byte_of for c in piece):
            return bytes(byte_of[c] for c in piece).lstrip(b" ")
        return piece.encode("utf-8")  # a special such as <s>
    if piece.startswith("##"):
        return piece[2:].encode("utf-8")
    return piece.lstrip("\u2581").encode("utf-8")


def word_char_ids(text: bytes, max_characters: int) -> np.ndarray:
    """ELMo's ids of one word (+ 1): BOW, its bytes (cut to fit), EOW, padding."""
    ids = np.full(max_characters, PAD_CHAR, np.int64)
    body = list(text[:max_characters - 2])
    ids[:len(body) + 2] = [BOW_CHAR, *body, EOW_CHAR]
    return ids + 1


@functools.lru_cache(maxsize=4)
def char_table(vocab: base.Vocab, max_characters: int) -> np.ndarray:
    """[vocab size, max_characters] ELMo character ids of every piece (<S>, </S> marked)."""
    start, end = sentence_marks(vocab)
    byte_level = any(t.startswith("\u0120") for t in vocab.tokens)
    table = np.stack([word_char_ids(piece_bytes(t, byte_level), max_characters)
                      for t in vocab.tokens])
    for piece_id, char in ((start, BOS_CHAR), (end, EOS_CHAR)):
        table[piece_id] = word_char_ids(b"", max_characters)
        table[piece_id, 1:3] = [char + 1, EOW_CHAR + 1]
    return table


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
    per_doc: Dict[int, int] = {}
    j = 0
    for b, block in enumerate(blocks):
        while j + 1 < len(first_doc) and first_doc[j + 1][0] <= b * options.max_seq_length:
            j += 1
        k = first_doc[j][1]
        n = per_doc[k] = per_doc.get(k, -1) + 1
        ctx.count("real_tokens", len(block))
        out = {"input_ids": block, "input_mask": [1] * len(block)}
        if table is not None:
            out["char_ids"] = table[block].reshape(-1).tolist()
        yield f"{docs[k].id}|{n}", out


def _summarize(counters) -> dict:
    written = counters.get("real_tokens", 0)
    dropped = counters.get("dropped/tail_tokens", 0)
    return {"tail_drop_rate": dropped / (written + dropped) if written + dropped else 0.0,
            "sentences_per_block_token": base.rate(counters, "sentences", "real_tokens")}


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
    summarize=_summarize,
)
