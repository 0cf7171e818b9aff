"""BART denoising (docs/objectives.md section 9; Lewis et al. 2020, "BART: Denoising
Sequence-to-Sequence Pre-training", section 2.2, and fairseq's denoising dataset).

A block is whole sentences of one document, ``<s> s1 s2 ... </s>``, of at most
``max_seq_length`` pieces. The target (``labels``) is the clean block; the decoder reads it
shifted right with ``</s>`` as the start token (fairseq's ``prev_output_tokens`` and Hugging
Face's ``decoder_start_token_id`` for BART). The encoder reads the block after
``add_noise``, which applies, in this order, each noise whose flag is non-zero:

1. sentence permutation: ceil(n * permute_sentence_ratio) of the n sentences are chosen and
   shuffled among their own places (1.0: the whole order is shuffled);
2. masking (``mask_ratio`` of the words; ``mask_length``):
   * ``span_poisson`` (text infilling): num_to_mask = ceil(words * ratio) words are split into
     spans with lengths ~ Poisson(poisson_lambda), the last one cut so that the lengths add
     up to num_to_mask; each non-empty span starts at a distinct random word start and covers
     that many whole words; a zero-length span inserts a mask instead;
   * ``word``: num_to_mask whole words, one per span; ``subword``: single pieces (token masking);
   * ``replace_length`` 1: one mask per span (the span's first piece becomes <mask>, the rest
     is deleted); 0: the span is deleted; -1: every piece of the span becomes <mask>.
   A fraction ``mask_random`` of the spans gets random pieces instead of <mask>.
   Spans may overlap, as in fairseq (a span whose start another span covers is swallowed),
   so the realised share of masked words is below the budget (about 0.27 for 0.3 with
   lambda 3); stats.json reports both (``mask_budget_rate``, ``masked_word_rate``);
3. token deletion (``delete_ratio``, the paper's fifth noise, off by default):
   ceil(ratio * pieces) random non-special pieces are removed; it runs after masking so it
   never removes the noise the other steps add;
4. token insertion (``insert_ratio``): ceil(ratio * length) pieces inserted at random inner
   positions, each a random piece with probability ``mask_random``, else <mask>;
5. document rotation: with probability ``rotate_ratio`` the content between <s> and </s> is
   rotated to begin at a uniformly chosen piece.

Defaults are BART-large's published recipe: mask 0.3 span_poisson lambda 3, replace_length 1,
full sentence permutation, mask_random 0.1, no rotation, no insertion. fairseq's *code*
defaults differ (mask 0, rotate 0.5, replace_length 0, no permutation); the flag help says so.

Deliberate differences from fairseq, each for a stated reason:
* sentence boundaries come from the document's segments (``sentence_ends``), not from full
  stops in the stream, and the first piece of every sentence counts as a word start (a
  byte-level BPE sentence start has no leading space, which fairseq would glue to the
  previous word);
* random replacement pieces are drawn uniformly from the non-special pieces (fairseq draws
  from every id but 0, which includes <pad>, </s> and <mask>);
* an inserted piece is random with probability ``mask_random`` (fairseq makes exactly
  ceil(n * mask_random) of n inserted pieces random, so a lone zero-length-span mask is
  always random);
* a noised block longer than ``max_seq_length`` (only possible with insertions) is cut to
  ``max_seq_length - 1`` pieces plus </s> and counted (``truncated_inputs``).

The blocks are built per document (BART's complete-document blocks), so the random stream
is keyed by the document id; ``--dupe_factor`` copies get fresh noise through the dupe index.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from text import features, flags
from data_pipelines.objectives import base
from text import vocab as text_vocab

NAME = "bart"
MASK_LENGTHS = ("span_poisson", "word", "subword")


@dataclasses.dataclass(frozen=True)
class BartOptions:
    """The knobs of BART denoising; defaults are BART-large's published recipe."""

    max_seq_length: int = 512
    permute_sentence_ratio: float = flags.option(
        1.0, "share of a block's sentences shuffled (default %(default)s, BART-large; fairseq's code default 0)")
    mask_ratio: float = flags.option(
        0.3, "share of words masked (default %(default)s, BART-large; fairseq's code default 0)")
    mask_length: str = flags.option(
        "span_poisson", "span_poisson: text infilling with Poisson span lengths; word: whole-word masking; "
        "subword: token masking (default %(default)s)", choices=MASK_LENGTHS)
    poisson_lambda: float = flags.option(3.0, "mean span length in words for span_poisson (default %(default)s)")
    replace_length: int = flags.option(
        1, "1: one <mask> per span; 0: delete the span; -1: one <mask> per piece "
        "(default %(default)s, BART-large; fairseq's code default 0)", choices=(-1, 0, 1))
    mask_random: float = flags.option(
        0.1, "share of masks (and inserted pieces) that are random pieces instead of <mask> (default %(default)s)")
    delete_ratio: float = flags.option(
        0.0, "token deletion: share of non-special pieces removed after masking (default %(default)s; the "
        "paper's fifth noise, not in BART-large's recipe)")
    insert_ratio: float = flags.option(0.0, "token insertion: pieces inserted per piece (default %(default)s)")
    rotate_ratio: float = flags.option(
        0.0, "probability that a block is rotated to start at a random piece (default %(default)s, "
        "BART-large; fairseq's code default 0.5)")

    def __post_init__(self):
        base.check_at_least(self, 3, "max_seq_length", why="<s> piece </s>")
        base.check_shares(self, "permute_sentence_ratio", "mask_ratio", "mask_random", "delete_ratio", "rotate_ratio")
        if self.insert_ratio < 0.0:
            raise ValueError(f"insert_ratio must be >= 0, got {self.insert_ratio}")
        base.check_choice(self, "mask_length", MASK_LENGTHS)
        if self.replace_length not in (-1, 0, 1):
            raise ValueError(f"replace_length must be -1, 0 or 1, got {self.replace_length}")
        if self.mask_length == "span_poisson" and self.poisson_lambda <= 0:
            raise ValueError(f"poisson_lambda must be > 0, got {self.poisson_lambda}")

    @property
    def max_block_pieces(self) -> int:
        return self.max_seq_length - 2


@dataclasses.dataclass(frozen=True, eq=False)
class BartVocab:
    """What the noise needs from the vocabulary, ids only."""

    bos_id: int
    eos_id: int
    mask_id: int
    is_word_start: np.ndarray  # bool per id
    is_special: np.ndarray  # bool per id
    random_ids: np.ndarray  # the ids a random replacement is drawn from (non-special)

    @classmethod
    def from_base(cls, vocab: text_vocab.Vocab) -> "BartVocab":
        is_special = np.zeros(vocab.size, dtype=bool)
        is_special[sorted(vocab.special_ids)] = True
        return cls(bos_id=vocab.special("bos", NAME), eos_id=vocab.special("eos", NAME),
                   mask_id=vocab.special("mask", NAME),
                   is_word_start=np.asarray(vocab.is_word_start, dtype=bool), is_special=is_special,
                   random_ids=np.flatnonzero(~is_special).astype(np.int64))


_VOCABS: Dict[int, Tuple[text_vocab.Vocab, BartVocab]] = {}


def as_bart_vocab(vocab) -> BartVocab:
    """A BartVocab for a text_vocab.Vocab (built once per vocabulary object) or a BartVocab."""
    if isinstance(vocab, BartVocab):
        return vocab
    cached = _VOCABS.get(id(vocab))
    if cached is None or cached[0] is not vocab:
        cached = (vocab, BartVocab.from_base(vocab))
        _VOCABS[id(vocab)] = cached
    return cached[1]


def _random_pieces(n: int, rng: np.random.Generator, vocab: BartVocab) -> np.ndarray:
    return vocab.random_ids[rng.integers(0, len(vocab.random_ids), size=n)]


def permute_sentences(tokens: np.ndarray, sentence_ends: Sequence[int], ratio: float,
                      rng: np.random.Generator) -> Tuple[np.ndarray, List[int]]:
    """Shuffles ceil(n * ratio) of the n sentences among their own places.

    tokens: <s> ... </s>; sentence_ends: exclusive end of each sentence in ``tokens``, the
    last one ``len(tokens) - 1``. Returns the tokens and the new sentence ends.
    """
    starts = [1] + list(sentence_ends[:-1])
    n = len(sentence_ends)
    num_to_permute = math.ceil(n * ratio)
    order = np.arange(n)
    chosen = rng.permutation(n)[:num_to_permute]
    order[chosen] = chosen[rng.permutation(num_to_permute)]
    pieces = [tokens[starts[i]:sentence_ends[i]] for i in order]
    out = np.concatenate([tokens[:1], *pieces, tokens[-1:]])
    new_ends = (1 + np.cumsum([len(p) for p in pieces])).tolist()
    return out, new_ends


def word_starts(tokens: np.ndarray, sentence_ends: Sequence[int], vocab: BartVocab, mask_length: str) -> np.ndarray:
    """Bool per position: where a maskable unit begins. <s> and </s> never; with ``subword``
    every other piece; otherwise word-start pieces and the first piece of every sentence."""
    if mask_length == "subword":
        starts = np.ones(len(tokens), dtype=bool)
    else:
        starts = vocab.is_word_start[tokens].copy()
        starts[[1] + [e for e in sentence_ends[:-1]]] = True
    starts[vocab.is_special[tokens]] = False
    starts[0] = starts[-1] = False
    return starts


def sample_span_lengths(num_to_mask: int, rng: np.random.Generator, poisson_lambda: float
                        ) -> Tuple[np.ndarray, np.ndarray]:
    """(draws, lengths): Poisson(lambda) draws until they add up to num_to_mask, and the span
    lengths they give: the draws up to the first one that reaches num_to_mask, that one cut
    so the lengths sum to num_to_mask exactly (zeros kept: they become inserted masks)."""
    draws = rng.poisson(poisson_lambda, size=num_to_mask)
    while draws.sum() < num_to_mask:
        draws = np.concatenate([draws, rng.poisson(poisson_lambda, size=num_to_mask)])
    cumulative = np.cumsum(draws)
    last = int(np.searchsorted(cumulative, num_to_mask))  # first index with cumulative >= budget
    lengths = draws[:last + 1].copy()
    lengths[last] = num_to_mask - (cumulative[last - 1] if last else 0)
    return draws, lengths


def mask_spans(tokens: np.ndarray, starts: np.ndarray, rng: np.random.Generator, vocab: BartVocab,
               options: BartOptions, record: Optional[dict] = None) -> Tuple[np.ndarray, int]:
    """Masking step (text infilling / word / token masking); returns (tokens, number of
    masks still to insert for zero-length spans)."""
    candidates = np.flatnonzero(starts)
    num_to_mask = math.ceil(len(candidates) * options.mask_ratio)
    if record is not None:
        record.update(words=len(candidates), num_to_mask=num_to_mask, span_lengths=[], poisson_draws=[],
                      spans=[], masked_tokens=0, masked_words=0)
    if num_to_mask == 0:
        return tokens, 0
    if options.mask_length == "span_poisson":
        draws, lengths = sample_span_lengths(num_to_mask, rng, options.poisson_lambda)
        if record is not None:
            record.update(poisson_draws=draws.tolist(), span_lengths=lengths.tolist())
    else:
        lengths = np.ones(num_to_mask, dtype=np.int64)
        if record is not None:
            record["span_lengths"] = lengths.tolist()
    num_inserts = int((lengths == 0).sum())
    lengths = lengths[lengths > 0]
    span_starts = candidates[rng.permutation(len(candidates))[:len(lengths)]]
    use_random = rng.random(len(lengths)) < options.mask_random

    # A span covers its start's word and lengths-1 further words: it runs up to (not
    # including) the (length+1)-th word start after it, and never past </s>.
    boundary = starts.copy()
    boundary[-1] = True
    boundary_positions = np.flatnonzero(boundary)
    n = len(tokens)
    is_first = np.zeros(n, dtype=bool)
    is_rest = np.zeros(n, dtype=bool)
    first_random = np.zeros(n, dtype=bool)
    covered_random = np.zeros(n, dtype=bool)
    spans = []
    for start, length, rand in zip(span_starts, lengths, use_random):
        k = int(np.searchsorted(boundary_positions, start))  # boundary_positions[k] == start
        end = int(boundary_positions[min(k + int(length), len(boundary_positions) - 1)])
        spans.append((int(start), end))
        is_first[start] = True
        first_random[start] = rand
        is_rest[start + 1:end] = True
        if rand:
            covered_random[start:end] = True
    # Overlaps as in fairseq: a start inside another span is swallowed by it.
    is_first &= ~is_rest
    covered = is_first | is_rest
    if record is not None:
        record.update(spans=spans, masked_tokens=int(covered.sum()), masked_words=int((covered & starts).sum()),
                      replaced_spans=int(is_first.sum()))
    out = tokens.copy()
    if options.replace_length == 1:
        out[is_first] = vocab.mask_id
        swap = is_first & first_random
        out[swap] = _random_pieces(int(swap.sum()), rng, vocab)
        out = out[~is_rest]
    elif options.replace_length == 0:
        out = out[~covered]
    else:
        out[covered] = vocab.mask_id
        swap = covered & covered_random
        out[swap] = _random_pieces(int(swap.sum()), rng, vocab)
    return out, num_inserts


def insert_tokens(tokens: np.ndarray, num: int, rng: np.random.Generator, vocab: BartVocab,
                  random_ratio: float) -> np.ndarray:
    """Inserts ``num`` pieces at random positions strictly between <s> and </s>; each is a
    random piece with probability ``random_ratio``, else <mask>. (fairseq makes the first
    ceil(num * random_ratio) random, which turns every lone inserted mask of a zero-length
    span into a random piece; a coin per piece keeps the share at random_ratio.)"""
    if num <= 0:
        return tokens
    total = len(tokens) + num
    positions = rng.permutation(total - 2)[:num] + 1
    is_new = np.zeros(total, dtype=bool)
    is_new[positions] = True
    out = np.empty(total, dtype=tokens.dtype)
    use_random = rng.random(num) < random_ratio
    out[positions] = vocab.mask_id
    out[positions[use_random]] = _random_pieces(int(use_random.sum()), rng, vocab)
    out[~is_new] = tokens
    return out


def delete_tokens(tokens: np.ndarray, ratio: float, rng: np.random.Generator, vocab: BartVocab) -> np.ndarray:
    """Removes ceil(ratio * candidates) random non-special pieces (the paper's token deletion)."""
    candidates = np.flatnonzero(~vocab.is_special[tokens])
    num = math.ceil(len(candidates) * ratio)
    if num == 0:
        return tokens
    keep = np.ones(len(tokens), dtype=bool)
    keep[rng.choice(candidates, size=num, replace=False)] = False
    return tokens[keep]


def rotate(tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Rotates the content between <s> and </s> to begin at a uniformly chosen piece."""
    content = tokens[1:-1]
    if len(content) < 2:
        return tokens
    offset = int(rng.integers(0, len(content)))
    return np.concatenate([tokens[:1], np.roll(content, -offset), tokens[-1:]])


def add_noise(tokens: Sequence[int], sentence_ends: Sequence[int], rng: np.random.Generator, vocab,
              options: BartOptions, record: Optional[dict] = None) -> np.ndarray:
    """The noised encoder input of one clean block (see the module docstring for the steps).

    Args:
      tokens: ``<s> sentence ... sentence </s>`` piece ids.
      sentence_ends: exclusive end position in ``tokens`` of each sentence; the last is
        ``len(tokens) - 1``.
      vocab: a text_vocab.Vocab (or BartVocab) with bos, eos and mask roles.
      record: if a dict, filled with what the masking step did (``words``, ``num_to_mask``,
        ``poisson_draws``, ``span_lengths``, ``spans`` as (start, end) positions in the
        sequence the masking saw, ``masked_tokens``, ``masked_words``, ``replaced_spans`` (spans left after overlaps),
        ``inserted_masks``) and ``permuted``, ``deleted``, ``inserted``, ``rotated``.

    Returns: int64 ids, ``<s> ... </s>``. Usable from tf.data through ``tf.numpy_function``.
    """
    vocab = as_bart_vocab(vocab)
    tokens = np.asarray(tokens, dtype=np.int64)
    ends = [int(e) for e in sentence_ends]
    if len(tokens) < 2 or tokens[0] != vocab.bos_id or tokens[-1] != vocab.eos_id:
        raise ValueError("a BART block must be <s> ... </s>")
    if not ends or ends[-1] != len(tokens) - 1 or any(b <= a for a, b in zip([1] + ends[:-1], ends)):
        raise ValueError(f"sentence_ends {ends} must increase from 1 to len(tokens)-1={len(tokens) - 1}")
    if record is None:
        rec = None
    else:
        rec = record
        rec.update(permuted=0, deleted=0, inserted=0, rotated=False, inserted_masks=0)
    if options.permute_sentence_ratio > 0:
        before = tokens
        tokens, ends = permute_sentences(tokens, ends, options.permute_sentence_ratio, rng)
        if rec is not None:
            rec["permuted"] = math.ceil(len(ends) * options.permute_sentence_ratio)
            rec["order_changed"] = not np.array_equal(before, tokens)
    if options.mask_ratio > 0:
        starts = word_starts(tokens, ends, vocab, options.mask_length)
        tokens, num_inserts = mask_spans(tokens, starts, rng, vocab, options, rec)
        # A zero-length span is a mask inserted where nothing was removed.
        tokens = insert_tokens(tokens, num_inserts, rng, vocab, options.mask_random)
        if rec is not None:
            rec["inserted_masks"] = num_inserts
    if options.delete_ratio > 0:
        before = len(tokens)
        tokens = delete_tokens(tokens, options.delete_ratio, rng, vocab)
        if rec is not None:
            rec["deleted"] = before - len(tokens)
    if options.insert_ratio > 0:
        num = math.ceil(len(tokens) * options.insert_ratio)
        tokens = insert_tokens(tokens, num, rng, vocab, options.mask_random)
        if rec is not None:
            rec["inserted"] = num
    if options.rotate_ratio > 0 and rng.random() < options.rotate_ratio:
        tokens = rotate(tokens, rng)
        if rec is not None:
            rec["rotated"] = True
    return tokens


def make_blocks(segments: Sequence[Sequence[int]], max_pieces: int) -> Tuple[List[List[List[int]]], int]:
    """Greedy blocks of whole sentences of at most ``max_pieces`` pieces; a longer sentence is
    cut into max_pieces-sized sentences first. Returns (blocks as lists of sentences, number
    of sentences that were cut)."""
    sentences, cut = [], 0
    for s in segments:
        s = [int(t) for t in s]
        if not s:
            continue
        if len(s) > max_pieces:
            cut += 1
            sentences.extend(s[i:i + max_pieces] for i in range(0, len(s), max_pieces))
        else:
            sentences.append(s)
    blocks, block, size = [], [], 0
    for s in sentences:
        if block and size + len(s) > max_pieces:
            blocks.append(block)
            block, size = [], 0
        block.append(s)
        size += len(s)
    if block:
        blocks.append(block)
    return blocks, cut


def make_instance(block: Sequence[Sequence[int]], rng: np.random.Generator, vocab: BartVocab,
                  options: BartOptions, record: Optional[dict] = None) -> Tuple[Dict[str, list], bool]:
    """(feature dict, whether the noised input had to be truncated) of one block."""
    clean = [vocab.bos_id] + [t for s in block for t in s] + [vocab.eos_id]
    ends = (1 + np.cumsum([len(s) for s in block])).tolist()
    noised = add_noise(clean, ends, rng, vocab, options, record).tolist()
    truncated = len(noised) > options.max_seq_length
    if truncated:
        noised = noised[:options.max_seq_length - 1] + [vocab.eos_id]
    return {
        "input_ids": noised,
        "input_mask": [1] * len(noised),
        "labels": clean,
        # fairseq BART: prev_output_tokens = the target with its </s> moved to the front.
        "decoder_input_ids": [vocab.eos_id] + clean[:-1],
        "decoder_input_mask": [1] * len(clean),
    }, truncated


# ---------------------------------------------------------------------------------------------
# The objective as the Beam job sees it (data_pipelines/objectives/base.py).


def _create(docs: Sequence[base.Doc], ctx: base.PoolContext):
    options: BartOptions = ctx.options
    vocab = as_bart_vocab(ctx.vocab)

    def instances_of(pos, doc, rng):
        blocks, cut = make_blocks(doc.segments, options.max_block_pieces)
        ctx.count("split_long_sentences", cut)
        for block in blocks:
            record: dict = {}
            inst, truncated = make_instance(block, rng, vocab, options, record)
            ctx.count("blocks")
            ctx.count("truncated_inputs", int(truncated))
            ctx.count("real_tokens", len(inst["input_ids"]))
            ctx.count("label_tokens", len(inst["labels"]))
            ctx.count("sentences", len(block))
            ctx.count("permuted_sentences", record.get("permuted", 0))
            ctx.count("words", record.get("words", 0))
            ctx.count("mask_budget_words", record.get("num_to_mask", 0))
            ctx.count("masked_words", record.get("masked_words", 0))
            ctx.count("masked_tokens", record.get("masked_tokens", 0))
            ctx.count("mask_spans", len(record.get("span_lengths", ())))
            ctx.count("mask_span_words", sum(record.get("span_lengths", ())))
            ctx.count("inserted_masks", record.get("inserted_masks", 0))
            ctx.count("deleted_tokens", record.get("deleted", 0))
            ctx.count("inserted_tokens", record.get("inserted", 0))
            ctx.count("rotated_blocks", int(record.get("rotated", False)))
            yield inst

    return base.document_instances(docs, ctx, instances_of)


OBJECTIVE = base.Objective(
    name=NAME,
    recipe="BART (Lewis et al. 2020): denoising seq2seq, sentence permutation + Poisson text infilling, byte-level BPE",
    tokenizer="bpe",
    options=BartOptions,
    feature_spec=lambda o: features.bart_pretrain_spec(o.max_seq_length),
    create_instances=_create,
    job_defaults=base.SINGLE_PASS_CASED,
    summary={
        # ceil(0.3 * words) per block: slightly above 0.3 from the ceiling.
        "mask_budget_rate": ("mask_budget_words", "words"),
        # The words actually hidden: below the budget where spans overlapped.
        "masked_word_rate": ("masked_words", "words"),
        # Mean span length in words, zero-length spans included (~lambda, the last span of a
        # block cut to the budget).
        "mean_mask_span_length": ("mask_span_words", "mask_spans"),
        "permuted_sentence_rate": ("permuted_sentences", "sentences"),
        "deleted_token_rate": ("deleted_tokens", "label_tokens"),
        "inserted_token_rate": ("inserted_tokens", "label_tokens"),
        "rotated_block_rate": ("rotated_blocks", "blocks"),
        "truncated_inputs": "truncated_inputs",
        "split_long_sentences": "split_long_sentences",
    },
)
