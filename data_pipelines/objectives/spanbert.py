"""SpanBERT pre-training instances: span masking + span boundary objective (docs/objectives.md
section 4; Joshi et al. 2020, "SpanBERT", and its fairseq-based pretraining code).

* Blocks (``make_blocks``): consecutive sentences of one document packed greedily into blocks
  of up to max_seq_length - 2 pieces (510 at 512), laid out ``[CLS] block [SEP]`` with one
  segment and no NSP. A sentence longer than a block is cut into block-sized pieces. With
  --short_seq_prob (0 in the recipe) a block's target length is randint(1, max) instead.
* Spans (``sample_spans``): budget = min(max_predictions_per_seq, ceil(masked_lm_prob *
  len(block))) pieces (15% of 510 -> 77). Until the budget is spent: draw a length of n
  words from a geometric distribution (p = 0.2) truncated to [1, 10] (mean about 3.8 words),
  an anchor uniformly over the block's pieces (redrawn if already masked), snap it to the
  start of its word and mask n whole words from there (the last span is cut at the budget,
  possibly inside a word, as the original). Overlapping and adjacent spans are merged.
* Replacement (``replace_spans``): decided once per merged span (the paper): 80% every piece
  -> [MASK], 10% every piece -> a token drawn from the corpus unigram distribution (special
  tokens excluded), 10% kept. --replacement=per_token decides per piece instead (the code's
  default, ``word_piece``).
* SBO targets (aligned with masked_lm_positions, see ``features.spanbert_pretrain_spec``):
  each masked piece of a span [s, e] gets span_left_positions s - 1, span_right_positions
  e + 1 and span_relative_positions = its offset in the span. sbo_weights is 1.0 only when
  the span touches neither edge of the block (s - 1 and e + 1 are block pieces, not [CLS] or
  [SEP]: the original drops spans at the block's first or last piece from the pair targets)
  and the offset is below 15 (the original's max_pair_targets); offsets of 15 and more are
  written as 14 (with weight 0) so that a 15-row position table can always gather them.

Positions are of the laid-out sequence ([CLS] at 0). Masks are static, drawn here: the
original draws fresh ones every epoch; --dupe_factor (the job's default, 10) writes that many
differently masked copies of every block.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from text import features, flags
from data_pipelines.objectives import base

# The SBO head predicts at most this many pieces of a span (relative-position table rows).
MAX_SBO_TARGETS = 15
REPLACEMENTS = ("per_span", "per_token")


@dataclasses.dataclass(frozen=True)
class SpanBertOptions:
    """The knobs of the SpanBERT objective; defaults are the paper's recipe."""

    max_seq_length: int = 512
    max_predictions_per_seq: int = flags.option(
        80, "cap on masked pieces per block; 80 leaves 15%% of 510 (77) uncapped (default %(default)s)")
    masked_lm_prob: float = flags.option(
        0.15, "budget: ceil(prob * block pieces) masked pieces (default %(default)s)")
    geometric_p: float = flags.option(
        0.2, "span length in words ~ Geometric(p) truncated to [1, max_span_length] "
        "(default %(default)s as the paper; the released code's default is 0.3)")
    max_span_length: int = flags.option(10, "longest span in words (default %(default)s)")
    replacement: str = flags.option(
        "per_span", "decide 80%% [MASK] / 10%% unigram sample / 10%% kept once per span (the paper) "
        "or per piece (the released code's default) (default %(default)s)", choices=REPLACEMENTS)
    short_seq_prob: float = flags.option(
        0.0, "probability that a block targets a random shorter length (default %(default)s)")

    def __post_init__(self):
        base.check_at_least(self, 3, "max_seq_length", why="[CLS] piece [SEP]")
        base.check_at_least(self, 1, "max_predictions_per_seq", "max_span_length")
        base.check_shares(self, "masked_lm_prob", "short_seq_prob")
        if not 0.0 < self.geometric_p <= 1.0:
            raise ValueError(f"geometric_p must be in (0, 1], got {self.geometric_p}")
        base.check_choice(self, "replacement", REPLACEMENTS)

    @property
    def max_block_length(self) -> int:
        return self.max_seq_length - 2


def span_length_probabilities(p: float, max_span_length: int) -> np.ndarray:
    """P(n words) = p (1-p)^(n-1) for n = 1..max_span_length, renormalised (truncation)."""
    n = np.arange(1, max_span_length + 1)
    w = p * (1.0 - p) ** (n - 1)
    return w / w.sum()


def make_blocks(segments: Sequence[Sequence[int]], rng: np.random.Generator, max_block_length: int,
                short_seq_prob: float = 0.0) -> List[List[int]]:
    """Greedy packing of consecutive segments into blocks of at most ``max_block_length``."""
    def target():
        if short_seq_prob > 0 and rng.random() < short_seq_prob:
            return int(rng.integers(1, max_block_length + 1))
        return max_block_length

    blocks: List[List[int]] = []
    current: List[int] = []
    limit = target()
    for seg in segments:
        seg = list(seg)
        if not seg:
            continue
        if current and len(current) + len(seg) > limit:
            blocks.append(current)
            current, limit = [], target()
        # A sentence longer than the block: full blocks of it, the rest starts the next one.
        while len(seg) > limit:
            blocks.append(seg[:limit])
            seg = seg[limit:]
            limit = target()
        current.extend(seg)
    if current:
        blocks.append(current)
    return blocks


def sample_spans(is_word_start: Sequence[bool], rng: np.random.Generator, budget: int,
                 length_probabilities: np.ndarray) -> Tuple[List[Tuple[int, int]], List[Tuple[int, int, int]]]:
    """SpanBERT's span sampler over one block.

    Args:
      is_word_start: per block piece, whether it starts a word (the first piece always does).
      budget: pieces to mask (at most the block length).
      length_probabilities: P(n words) for n = 1, 2, ...

    Returns:
      ``(merged, sampled)``: the merged spans, sorted, as inclusive (start, end) block
      positions; and every sampled span in the order drawn, before merging, as (start, end,
      number of words drawn); its extent may fall short of the draw at the budget or at the
      block's end.
    """
    length = len(is_word_start)
    budget = min(budget, length)
    # word_begin[w] / word_end[w]: piece range of word w; word_of[i]: the word of piece i.
    starts = [i for i in range(length) if i == 0 or is_word_start[i]]
    word_end = starts[1:] + [length]
    word_of = np.zeros(length, dtype=np.int64)
    for w, (b, e) in enumerate(zip(starts, word_end)):
        word_of[b:e] = w
    cdf = np.cumsum(length_probabilities)
    masked = np.zeros(length, dtype=bool)
    count = 0
    sampled: List[Tuple[int, int, int]] = []
    while count < budget:
        n = min(int(np.searchsorted(cdf, rng.random(), side="right")) + 1, len(cdf))
        anchor = int(rng.integers(0, length))
        if masked[anchor]:
            continue
        w = int(word_of[anchor])
        first = starts[w]
        last = first
        words = 0
        while words < n and w < len(starts) and count < budget:
            for i in range(starts[w], word_end[w]):
                if count >= budget:
                    break
                if not masked[i]:
                    masked[i] = True
                    count += 1
                last = i
            w += 1
            words += 1
        sampled.append((first, last, n))
    return merge_spans([(a, b) for a, b, _ in sampled]), sampled


def merge_spans(spans: Sequence[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """Sorted union of inclusive spans; overlapping and adjacent ones become one span."""
    merged: List[Tuple[int, int]] = []
    for s, e in sorted(spans):
        if merged and s <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


class UnigramSampler:
    """Draws replacement tokens from the corpus unigram distribution, specials excluded.

    Without counts (or with no non-special count) it draws uniformly over the non-special ids
    and says so through ``fallback`` (the job counts ``unigram_fallback``).
    """

    def __init__(self, counts: Optional[np.ndarray], vocab_size: int, special_ids):
        allowed = np.ones(vocab_size, dtype=bool)
        allowed[[i for i in special_ids if 0 <= i < vocab_size]] = False
        weights = None
        if counts is not None:
            c = np.zeros(vocab_size, dtype=np.float64)
            c[:min(len(counts), vocab_size)] = np.asarray(counts, dtype=np.float64)[:vocab_size]
            c[~allowed] = 0.0
            if c.sum() > 0:
                weights = c
        self.fallback = weights is None
        if weights is None:
            weights = allowed.astype(np.float64)
        self._ids = np.flatnonzero(weights > 0)
        self._cdf = np.cumsum(weights[self._ids])
        self._cdf /= self._cdf[-1]

    def sample(self, rng: np.random.Generator, n: int) -> List[int]:
        idx = np.minimum(np.searchsorted(self._cdf, rng.random(n), side="right"), len(self._ids) - 1)
        return [int(t) for t in self._ids[idx]]


def replace_spans(tokens: List[int], spans: Sequence[Tuple[int, int]], rng: np.random.Generator,
                  mask_id: int, sampler: UnigramSampler, per_span: bool) -> Tuple[List[str], int]:
    """Applies 80% [MASK] / 10% unigram sample / 10% kept to the spans of ``tokens`` in place.

    Returns the fate of each span ("mask", "random", "keep"; per_token: "mixed" unless all
    pieces agree) and the number of sampled replacement pieces, for statistics.
    """
    fates = []
    sampled = 0
    for s, e in spans:
        draws = [rng.random()] * (e - s + 1) if per_span else list(rng.random(e - s + 1))
        kinds = ["mask" if u < 0.8 else "random" if u < 0.9 else "keep" for u in draws]
        randoms = [i for i, k in zip(range(s, e + 1), kinds) if k == "random"]
        replacement = dict(zip(randoms, sampler.sample(rng, len(randoms)))) if randoms else {}
        sampled += len(randoms)
        for i, k in zip(range(s, e + 1), kinds):
            if k == "mask":
                tokens[i] = mask_id
            elif k == "random":
                tokens[i] = replacement[i]
        fates.append(kinds[0] if len(set(kinds)) == 1 else "mixed")
    return fates, sampled


def span_targets(block: Sequence[int], spans: Sequence[Tuple[int, int]]) -> Dict[str, list]:
    """MLM + SBO targets of ``[CLS] block [SEP]`` for the given merged block spans.

    One entry per masked piece, in position order (spans sorted): the piece's position
    (block position + 1), its original id, the span's boundary positions (start - 1, end + 1
    in the laid-out sequence), its offset in the span (clipped to MAX_SBO_TARGETS - 1) and its
    SBO weight (1.0 for a span touching neither block edge and an offset < MAX_SBO_TARGETS).
    """
    out = {name: [] for name in ("masked_lm_positions", "masked_lm_ids", "span_left_positions",
                                 "span_right_positions", "span_relative_positions", "sbo_weights")}
    for s, e in spans:
        interior = s > 0 and e < len(block) - 1
        for offset, k in enumerate(range(s, e + 1)):
            out["masked_lm_positions"].append(k + 1)
            out["masked_lm_ids"].append(int(block[k]))
            out["span_left_positions"].append(s)        # (s + 1) - 1
            out["span_right_positions"].append(e + 2)   # (e + 1) + 1
            out["span_relative_positions"].append(min(offset, MAX_SBO_TARGETS - 1))
            out["sbo_weights"].append(1.0 if interior and offset < MAX_SBO_TARGETS else 0.0)
    out["masked_lm_weights"] = [1.0] * len(out["masked_lm_positions"])
    return out


def make_instance(block: Sequence[int], rng: np.random.Generator, *, cls_id: int, sep_id: int, mask_id: int,
                  is_word_start: np.ndarray, sampler: UnigramSampler, options: SpanBertOptions,
                  length_probabilities: np.ndarray):
    """``[CLS] block [SEP]`` with span masking: (feature dict, merged block spans, span fates,
    sampled spans, number of unigram-sampled pieces)."""
    block = [int(t) for t in block]
    budget = min(options.max_predictions_per_seq, math.ceil(options.masked_lm_prob * len(block)))
    spans, sampled = sample_spans(is_word_start[block], rng, budget, length_probabilities)
    masked_block = list(block)
    fates, replaced = replace_spans(masked_block, spans, rng, mask_id, sampler, options.replacement == "per_span")
    input_ids = [cls_id, *masked_block, sep_id]
    return {
        "input_ids": input_ids,
        "input_mask": [1] * len(input_ids),
        "segment_ids": [0] * len(input_ids),
        **span_targets(block, spans),
    }, spans, fates, sampled, replaced


# ---------------------------------------------------------------------------------------------
# The objective as the Beam job sees it (data_pipelines/objectives/base.py).


def _create(docs: Sequence[base.Doc], ctx: base.PoolContext):
    options: SpanBertOptions = ctx.options
    vocab = ctx.vocab
    cls_id, sep_id, mask_id = (vocab.special(r, "spanbert") for r in ("cls", "sep", "mask"))
    is_word_start = np.asarray(vocab.is_word_start, dtype=bool)
    sampler = UnigramSampler(ctx.unigram_counts, vocab.size, vocab.special_ids)
    probabilities = span_length_probabilities(options.geometric_p, options.max_span_length)

    def instances_of(pos, doc, rng):
        for block in make_blocks(doc.segments, rng, options.max_block_length, options.short_seq_prob):
            inst, spans, fates, sampled, replaced = make_instance(
                block, rng, cls_id=cls_id, sep_id=sep_id, mask_id=mask_id, is_word_start=is_word_start,
                sampler=sampler, options=options, length_probabilities=probabilities)
            ctx.count("real_tokens", len(inst["input_ids"]))
            ctx.count("block_tokens", len(block))
            ctx.count("masked_tokens", len(inst["masked_lm_positions"]))
            ctx.count("sbo_targets", int(sum(inst["sbo_weights"])))
            ctx.count("spans", len(spans))
            ctx.count("sampled_spans", len(sampled))
            ctx.count("sampled_span_words", sum(n for _, _, n in sampled))
            for fate in fates:
                ctx.count(f"span_fate/{fate}")
            ctx.count("unigram_replaced_tokens", replaced)
            if sampler.fallback:
                # Replacements drawn uniformly because the job supplied no unigram counts.
                ctx.count("unigram_fallback", replaced)
            yield inst

    return base.document_instances(docs, ctx, instances_of)


OBJECTIVE = base.Objective(
    name="spanbert",
    recipe="SpanBERT (Joshi et al. 2020): geometric whole-word span masking + span boundary objective, no NSP",
    tokenizer="wordpiece",
    options=SpanBertOptions,
    feature_spec=lambda o: features.spanbert_pretrain_spec(o.max_seq_length, o.max_predictions_per_seq),
    create_instances=_create,
    summary={
        # masked / block pieces: ~0.15 (ceil, and the last span cut at the budget).
        "masked_block_rate": ("masked_tokens", "block_tokens"),
        "masked_token_rate": ("masked_tokens", "real_tokens"),
        # Drawn span lengths in words: the truncated geometric's mean (3.8 at p=0.2, max 10).
        "sampled_span_words_mean": ("sampled_span_words", "sampled_spans"),
        "merged_span_pieces_mean": ("masked_tokens", "spans"),
        "sbo_target_fraction": ("sbo_targets", "masked_tokens"),
        "unigram_fallback": "unigram_fallback",
        # The share of the spans of each fate (mask, random, keep, mixed).
        "span_fate_fraction": base.Shares("span_fate", "spans"),
    },
    wants_unigram=True,
)
