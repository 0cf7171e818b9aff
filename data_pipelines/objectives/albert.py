"""ALBERT pre-training instances: n-gram masked LM + sentence-order prediction (docs/objectives.md
section 2; Lan et al. 2020, "ALBERT", and its create_pretraining_data.py).

As BERT (``bert.iterate_pairs``, ``bert.truncate_seq_pair``, ``bert.layout_pair``), with:

* Sentence-order prediction (SOP) instead of NSP: a chunk of two or more segments is split at
  ``a_end`` as in BERT, then with prob 0.5 A and B are swapped (label 1), else kept in order
  (label 0). A single-segment chunk cannot be split, so, as the original, it takes B from a
  random other document of the pool (label 1). The feature keeps BERT's name,
  ``next_sentence_labels``.
* N-gram masking (``select_ngrams``): every masking candidate (a whole word by default; a
  single piece with --no-whole_word_mask) is visited once in random order as the anchor of an
  n-gram of n consecutive candidates, n in {1..ngram} drawn with p proportional to 1/n
  (ngram 3: 6/11, 3/11, 2/11); an n-gram that would overshoot the budget falls back to
  shorter n, one that still does is skipped, and so is one touching an already chosen
  candidate. As the original, an n-gram may run across [SEP] and is cut short at the end of
  the sequence. The budget is BERT's: min(max_predictions_per_seq, max(1, round(0.15 *
  len))). Every chosen piece then gets BERT's 80/10/10 independently.
* ``token_boundary``: 1 for word-start pieces and special tokens (``Vocab.is_word_start``) of
  the unmasked sequence, 0 for continuation pieces.

Defaults are the published recipe: max_seq_length 512, dupe_factor 40, whole-word masking,
ngram 3 and max_predictions_per_seq 20 (the value ALBERT's README passes at length 512, so
only 20 of 512 pieces, about 4%, are predicted, not 15%).
"""

from __future__ import annotations

import dataclasses
from typing import List, Sequence, Tuple

import numpy as np

from text import features, flags
from data_pipelines.objectives import base, bert


@dataclasses.dataclass(frozen=True)
class AlbertOptions(bert.BertOptions):
    """BERT's knobs with ALBERT's recipe defaults, plus the maximum n-gram length."""

    max_seq_length: int = 512
    max_predictions_per_seq: int = flags.option(
        20, "cap on masked positions per instance (default %(default)s, as ALBERT's README at length 512: "
        "about 4%% of the pieces, not 15%%; use 77-80 for a full 15%%)")
    masked_lm_prob: float = flags.option(
        0.15, "share of tokens to mask, specials included in the count, before the cap (default %(default)s)")
    whole_word_mask: bool = flags.option(
        True, "n-grams of whole words (a word's continuation pieces together); off: n-grams of pieces")
    ngram: int = flags.option(
        3, "longest masked n-gram; n in 1..ngram with p proportional to 1/n (default %(default)s)")

    def __post_init__(self):
        super().__post_init__()
        if self.ngram < 1:
            raise ValueError(f"ngram must be >= 1, got {self.ngram}")


def ngram_probabilities(max_ngram: int) -> np.ndarray:
    """p(n) proportional to 1/n for n = 1..max_ngram (3 -> 6/11, 3/11, 2/11)."""
    p = 1.0 / np.arange(1, max_ngram + 1)
    return p / p.sum()


def select_ngrams(group_sizes: Sequence[int], rng: np.random.Generator, num_to_predict: int,
                  max_ngram: int) -> List[Tuple[int, int]]:
    """Chooses n-grams of consecutive candidate groups, ALBERT style.

    Args:
      group_sizes: pieces in each candidate group (word), in sequence order.
      num_to_predict: the budget in pieces.
      max_ngram: the largest n.

    Returns:
      The chosen n-grams in the order they were accepted, as (first group, number of groups);
      they never overlap and their pieces add up to at most ``num_to_predict``.
    """
    num_groups = len(group_sizes)
    # prefix[k] = pieces in groups [0, k): an n-gram's size is a difference of two entries.
    prefix = np.concatenate([[0], np.cumsum(group_sizes, dtype=np.int64)]) if num_groups else np.zeros(1, np.int64)
    cdf = np.cumsum(ngram_probabilities(max_ngram))
    order = rng.permutation(num_groups)
    # One n per anchor, drawn up front (the original draws one per visited anchor too).
    drawn = np.minimum(np.searchsorted(cdf, rng.random(num_groups), side="right") + 1, max_ngram)
    covered = np.zeros(num_groups, dtype=bool)
    chosen: List[Tuple[int, int]] = []
    count = 0
    for anchor, n in zip(order, drawn):
        if count >= num_to_predict:
            break
        anchor = int(anchor)
        # Cut short at the end of the sequence, as the original's cand_indexes[idx:idx + n].
        n = min(int(n), num_groups - anchor)
        # Over budget: fall back to shorter n-grams; skip the anchor if even a unigram is.
        while n > 1 and count + prefix[anchor + n] - prefix[anchor] > num_to_predict:
            n -= 1
        size = int(prefix[anchor + n] - prefix[anchor])
        if count + size > num_to_predict:
            continue
        if covered[anchor:anchor + n].any():
            continue
        covered[anchor:anchor + n] = True
        chosen.append((anchor, n))
        count += size
    return chosen


def create_ngram_masked_lm_predictions(tokens: Sequence[int], special_positions: Sequence[int],
                                       rng: np.random.Generator, vocab: bert.BertVocab,
                                       options: AlbertOptions):
    """N-gram masking of one laid-out sequence.

    Returns ``(output_tokens, masked_lm_positions, masked_lm_ids, ngram_lengths)``; positions
    are sorted; ``ngram_lengths`` gives the n (in candidate groups) of each chosen n-gram.
    """
    groups = bert.candidate_groups(tokens, set(special_positions), vocab.is_continuation, options.whole_word_mask)
    num_to_predict = bert.masked_lm_budget(len(tokens), options.masked_lm_prob, options.max_predictions_per_seq)
    chosen = select_ngrams([len(g) for g in groups], rng, num_to_predict, options.ngram)
    output = list(tokens)
    positions: List[int] = []
    for first, n in chosen:
        for group in groups[first:first + n]:
            for i in group:
                output[i] = bert.replace_token(tokens[i], rng, vocab)
                positions.append(i)
    positions.sort()
    return output, positions, [int(tokens[i]) for i in positions], [n for _, n in chosen]


def make_instance(tokens_a: Sequence[int], tokens_b: Sequence[int], label: int, rng: np.random.Generator,
                  vocab: bert.BertVocab, is_word_start: np.ndarray, options: AlbertOptions):
    """``[CLS] A [SEP] B [SEP]`` masked with n-grams: (feature dict, n-gram lengths)."""
    tokens, segment_ids, specials = bert.layout_pair(tokens_a, tokens_b, vocab, options.max_seq_length)
    output, positions, labels, ngrams = create_ngram_masked_lm_predictions(tokens, specials, rng, vocab, options)
    boundary = [int(is_word_start[t]) for t in tokens]
    for i in specials:
        boundary[i] = 1
    return {
        "input_ids": [int(t) for t in output],
        "input_mask": [1] * len(output),
        "segment_ids": segment_ids,
        "token_boundary": boundary,
        "masked_lm_positions": positions,
        "masked_lm_ids": labels,
        "masked_lm_weights": [1.0] * len(positions),
        "next_sentence_labels": [int(label)],
    }, ngrams


def create_instances_from_document(document: bert.Document, rng: np.random.Generator,
                                   random_document: bert.RandomDocumentFn, vocab: bert.BertVocab,
                                   is_word_start: np.ndarray, options: AlbertOptions = AlbertOptions()):
    """One dupe pass over one document: a list of (feature dict, n-gram lengths)."""
    return [make_instance(a, b, label, rng, vocab, is_word_start, options)
            for a, b, label, _ in bert.iterate_pairs(document, rng, random_document, options, sentence_order=True)]


# ---------------------------------------------------------------------------------------------
# The objective as the Beam job sees it (data_pipelines/objectives/base.py).


def _create(docs: Sequence[base.Doc], ctx: base.PoolContext):
    vocab = bert.vocab_from_base(ctx.vocab, "albert")
    options = ctx.options

    def instances_of(pos, doc, rng):
        segments = [s for s in doc.segments if len(s)]
        pairs = bert.iterate_pairs(segments, rng, bert.pool_random_document(docs, pos, ctx), options,
                                   sentence_order=True)
        for a, b, label, random_b in pairs:
            inst, ngrams = make_instance(a, b, label, rng, vocab, ctx.vocab.is_word_start, options)
            ctx.count("real_tokens", len(inst["input_ids"]))
            ctx.count("masked_tokens", len(inst["masked_lm_positions"]))
            ctx.count("sop_label_1", label)
            # B from another document: only for single-segment chunks (short documents).
            ctx.count("sop_random_b", random_b)
            for n in ngrams:
                ctx.count(f"ngram/{n}")
            yield inst

    return base.document_instances(docs, ctx, instances_of)


OBJECTIVE = base.Objective(
    name="albert",
    recipe="ALBERT (Lan et al. 2020): n-gram masked LM (n<=3 words) + sentence-order prediction, SentencePiece",
    tokenizer="sentencepiece",
    options=AlbertOptions,
    feature_spec=lambda o: features.albert_pretrain_spec(o.max_seq_length, o.max_predictions_per_seq),
    create_instances=_create,
    job_defaults={"dupe_factor": 40},
    summary={
        # masked / real tokens: at 512 pieces with the cap of 20, about 0.04.
        "masked_token_rate": ("masked_tokens", "real_tokens"),
        # Swapped (or random-B for single-segment chunks) / instances: slightly over 0.5.
        "sop_label_1_fraction": ("sop_label_1", "instances"),
        "sop_random_b_fraction": ("sop_random_b", "instances"),
        "random_next_same_document": "random_next_same_document",
        # Accepted n-grams by n; below 6/11, 3/11, 2/11 for long n, which overlap and
        # overshoot the budget more often.
        "ngram_fraction": base.Shares("ngram"),
    },
)
