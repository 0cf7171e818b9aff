"""RoBERTa pre-training blocks: packed, UNMASKED, one segment, no NSP (docs/objectives.md 3).

Liu et al. 2019 ("RoBERTa", section 4.2) compare input formats; the released recipe is
FULL-SENTENCES: "each input is packed with full sentences sampled contiguously from one or
more documents, such that the total length is at most 512 tokens. Inputs may cross document
boundaries. When we reach the end of one document, we begin sampling sentences from the next
document and add an extra separator token between documents." DOC-SENTENCES is the same but
never crosses a document boundary.

How a block is laid out (the fairseq recipe: text binarised one sentence per line, each line
followed by ``</s>``, the blank line between documents becoming a lone ``</s>``; packed by
``TokenBlockDataset(break_mode="complete"|"complete_doc", block_size=tokens_per_sample - 1)``;
``<s>`` prepended by ``PrependTokenDataset``):

* every sentence is a *unit* ``sentence + [</s>]`` (eos ends each sentence, so a block ends
  with ``</s>`` unless it was cut inside an over-long sentence or is a document's tail cut by
  a split, see below);
* FULL-SENTENCES: the pool's documents in the given order, with one extra unit ``[</s>]``
  between consecutive documents (the "extra separator": a document boundary reads
  ``... </s> </s> ...``); DOC-SENTENCES: each document packed on its own, no separator unit;
* units are packed greedily into blocks of at most ``block_size = max_seq_length - 1`` pieces:
  a unit that does not fit in the current block closes it; a unit longer than a whole block
  (only a sentence can be) is split into ``block_size`` pieces, the remainder starting the
  next block (counted as ``sentences_split``);
* ``<s>`` is prepended, so an instance has at most ``max_seq_length`` tokens.

The last, partial block of a pool (FULL-SENTENCES) or of each document (DOC-SENTENCES) is
written too, shorter and zero-padded by ``features.serialize_example`` (``input_mask`` says
where the real tokens end): nothing of the input is dropped. Counted: ``blocks``,
``partial_blocks`` (blocks shorter than max_seq_length: the last one, and those that whole-
sentence packing left room in), ``real_tokens`` (``<s>`` and ``</s>`` included), ``positions``
(blocks * max_seq_length; fill rate = real_tokens / positions), ``document_separators``,
``sentences_split``, ``dropped/empty_document`` (a document without pieces: nothing to pack).

Masking is dynamic (a fresh mask every time a block is read), so it is not done here:
``text.dynamic`` masks in the tf.data input pipeline. dupe_factor defaults to 1.
No randomness is used offline: packing is a deterministic function of the pool.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterator, List, Sequence, Tuple

from text import features, flags
from data_pipelines.objectives import base

FULL_SENTENCES = "full_sentences"
DOC_SENTENCES = "doc_sentences"
PACKING = (FULL_SENTENCES, DOC_SENTENCES)


@dataclasses.dataclass(frozen=True)
class RobertaOptions:
    """The knobs of the RoBERTa data; defaults are the paper's main setting."""

    max_seq_length: int = 512
    packing: str = flags.option(
        FULL_SENTENCES, "full_sentences: pack whole sentences across document boundaries of a pool, an "
        "extra </s> between documents (the paper's main setting); doc_sentences: never cross a "
        "document boundary (default %(default)s)", choices=PACKING)

    def __post_init__(self):
        # <s> plus at least one piece.
        if self.max_seq_length < 2:
            raise ValueError(f"max_seq_length must be >= 2, got {self.max_seq_length}")
        base.check_choice(self, "packing", PACKING)

    @property
    def block_size(self) -> int:
        """fairseq's tokens_per_sample - 1: room for the pieces after <s>."""
        return self.max_seq_length - 1


# A unit of packing: (index of the document it belongs to, its pieces).
Unit = Tuple[int, Sequence[int]]


def document_units(documents: Sequence[Sequence[Sequence[int]]], eos_id: int, *,
                   cross_documents: bool) -> List[Unit]:
    """Sentences as units ``sentence + [</s>]``; with ``cross_documents`` an extra ``[</s>]``
    unit between consecutive non-empty documents (it belongs to the document it precedes).
    Empty sentences and documents are skipped."""
    units: List[Unit] = []
    previous = False
    for k, doc in enumerate(documents):
        sentences = [list(s) for s in doc if len(s)]
        if not sentences:
            continue
        if cross_documents and previous:
            units.append((k, [eos_id]))
        units.extend((k, s + [eos_id]) for s in sentences)
        previous = True
    return units


def pack_units(units: Sequence[Unit], block_size: int) -> List[Tuple[int, List[int]]]:
    """Greedy packing of whole units into blocks of at most ``block_size`` pieces.

    Returns ``[(index of the document the block's first piece belongs to, pieces)]``. The
    concatenation of the blocks is the concatenation of the units, in order (nothing dropped).
    """
    blocks: List[Tuple[int, List[int]]] = []
    current: List[int] = []
    owner = -1
    for doc_index, unit in units:
        unit = list(unit)
        if current and len(current) + len(unit) > block_size:
            blocks.append((owner, current))
            current = []
        # Only reached with an empty block: a unit longer than a block is cut into full blocks.
        while len(unit) > block_size:
            blocks.append((doc_index, unit[:block_size]))
            unit = unit[block_size:]
        if not current:
            owner = doc_index
        current.extend(unit)
    if current:
        blocks.append((owner, current))
    return blocks


def make_blocks(documents: Sequence[Sequence[Sequence[int]]], bos_id: int, eos_id: int,
                options: RobertaOptions = RobertaOptions()) -> List[Tuple[int, List[int]]]:
    """The pool's documents -> ``[(first document index, <s> + block)]`` (see module docstring)."""
    if options.packing == FULL_SENTENCES:
        packed = pack_units(document_units(documents, eos_id, cross_documents=True), options.block_size)
    else:
        packed = [(k, block) for k, doc in enumerate(documents)
                  for _, block in pack_units(document_units([doc], eos_id, cross_documents=False),
                                             options.block_size)]
    return [(k, [bos_id] + block) for k, block in packed]


# ---------------------------------------------------------------------------------------------
# The objective as the Beam job sees it (data_pipelines/objectives/base.py).


def _create(docs: Sequence[base.Doc], ctx: base.PoolContext) -> Iterator[Tuple[str, Dict[str, list]]]:
    options: RobertaOptions = ctx.options
    bos_id = ctx.vocab.special("bos", "roberta")
    eos_id = ctx.vocab.special("eos", "roberta")
    segments = [d.segments for d in docs]
    for d in docs:
        if not any(len(s) for s in d.segments):
            ctx.count("dropped/empty_document")
        ctx.count("sentences_split", sum(1 for s in d.segments if len(s) + 1 > options.block_size))
    if options.packing == FULL_SENTENCES:
        ctx.count("document_separators", max(0, sum(1 for s in segments if any(len(x) for x in s)) - 1))
    for key, ids in base.block_keys(docs, make_blocks(segments, bos_id, eos_id, options)):
        ctx.count("blocks")
        ctx.count("real_tokens", len(ids))
        ctx.count("positions", options.max_seq_length)
        ctx.count("partial_blocks", int(len(ids) < options.max_seq_length))
        yield key, {"input_ids": ids, "input_mask": [1] * len(ids)}


OBJECTIVE = base.Objective(
    name="roberta",
    recipe="RoBERTa (Liu et al. 2019): unmasked FULL-SENTENCES blocks of byte-level BPE, no NSP; "
    "masks drawn afresh in the input pipeline (text.dynamic)",
    tokenizer="bpe",
    options=RobertaOptions,
    feature_spec=lambda o: features.roberta_pretrain_spec(o.max_seq_length),
    create_instances=_create,
    job_defaults=base.SINGLE_PASS_CASED,
    summary={
        # Share of the written positions holding real tokens (1 - padding share).
        "fill_rate": ("real_tokens", "positions"),
        "mean_block_length": ("real_tokens", "blocks"),
        "partial_block_fraction": ("partial_blocks", "blocks"),
    },
)
