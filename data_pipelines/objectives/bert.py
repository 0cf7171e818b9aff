"""BERT pre-training instances: masked LM + next sentence prediction (docs/objectives.md section 1).

Plain functions of token ids and an explicit ``numpy.random.Generator``, following the
original ``create_pretraining_data.py`` step by step (with numpy draws in place of Python's
``random``):

* ``draw_target_seq_length``: ``max_num_tokens`` (= max_seq_length - 3), or with probability
  ``short_seq_prob`` ``randint(2, max_num_tokens)``; drawn once per document per dupe pass,
  as in the original (it is not redrawn between instances of the same pass).
* ``create_instances_from_document``: accumulate segments (sentences) into a chunk until the
  target is reached or the document ends; A = the first ``a_end = randint(1, len(chunk)-1)``
  segments (1 for a single segment); B = a random continuation from another document when the
  chunk has one segment or with probability 0.5 (the unused segments are put back), otherwise
  the rest of the chunk. Hence slightly more than half of the pairs are "random next".
* ``truncate_seq_pair``: while |A|+|B| > max_num_tokens trim the longer side (B on ties),
  dropping its first or last token with probability 0.5 each.
* ``create_masked_lm_predictions``: num_to_predict = min(max_predictions_per_seq,
  max(1, round(len(tokens) * masked_lm_prob))) (15% of 128 -> 19 predictions); candidate
  groups shuffled and taken while within budget; 80% [MASK], 10% kept, 10% uniform random id
  over the whole vocabulary.

Instances are returned as dicts keyed like ``features.bert_pretrain_spec`` (unpadded;
``features.serialize_example`` pads). ``next_sentence_labels`` is 1 for a random B.

The choice of the random other document is a callable, so that the Beam job can draw it from
a bounded pool of documents (``make_pretrain``) while ``create_instances`` draws from a whole
in-memory corpus like the original.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Collection, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from text import features, flags, vocab_files
from data_pipelines.objectives import base
from text import vocab as text_vocab

Segment = Sequence[int]
Document = Sequence[Segment]
# Given the instance's Generator, returns another document (a list of non-empty segments).
RandomDocumentFn = Callable[[np.random.Generator], Document]


@dataclasses.dataclass(frozen=True)
class BertOptions:
    """The knobs of the BERT objective; defaults are the published recipe."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = flags.option(20, "cap on masked positions per instance (default %(default)s)")
    masked_lm_prob: float = flags.option(
        0.15, "share of tokens to mask, specials included in the count (default %(default)s)")
    short_seq_prob: float = flags.option(
        0.1, "probability that a document's dupe pass targets a random shorter length "
        "randint(2, max_seq_length-3) (default %(default)s)")
    whole_word_mask: bool = flags.option(False, "mask whole words (a word's continuation pieces together)")

    def __post_init__(self):
        # [CLS] A [SEP] B [SEP] with |A|, |B| >= 1 needs 5 positions.
        base.check_at_least(self, 5, "max_seq_length")
        base.check_at_least(self, 1, "max_predictions_per_seq")
        base.check_shares(self, "masked_lm_prob", "short_seq_prob")

    @property
    def max_num_tokens(self) -> int:
        return self.max_seq_length - 3


@dataclasses.dataclass(frozen=True)
class BertVocab:
    """What the objective needs to know about the vocabulary (ids only, no strings at runtime)."""

    cls_id: int
    sep_id: int
    mask_id: int
    vocab_size: int
    # is_continuation[i]: token i is a "##" word piece (used by whole-word masking).
    is_continuation: np.ndarray

    @classmethod
    def from_tokens(cls, tokens: Sequence[str]) -> "BertVocab":
        index = {t: i for i, t in enumerate(tokens)}
        missing = [t for t in (vocab_files.CLS, vocab_files.SEP, vocab_files.MASK) if t not in index]
        if missing:
            raise ValueError(f"vocabulary lacks reserved tokens {missing}")
        return cls(
            cls_id=index[vocab_files.CLS],
            sep_id=index[vocab_files.SEP],
            mask_id=index[vocab_files.MASK],
            vocab_size=len(tokens),
            is_continuation=np.array([t.startswith("##") for t in tokens], dtype=bool),
        )


def randbelow(rng: np.random.Generator, n: int) -> int:
    """A uniform integer in [0, n) from one float draw: ``int(rng.random() * n)``. The same
    distribution as ``rng.integers(0, n)`` up to float rounding (n << 2**53), at a fifth of its
    cost (Generator.integers spends ~2 us in argument handling per scalar call)."""
    return int(rng.random() * n)


def draw_target_seq_length(rng: np.random.Generator, max_num_tokens: int, short_seq_prob: float) -> int:
    """max_num_tokens, or with prob short_seq_prob a uniform length in [2, max_num_tokens]."""
    if rng.random() < short_seq_prob:
        return 2 + randbelow(rng, max_num_tokens - 1)
    return max_num_tokens


def truncate_seq_pair(tokens_a: List[int], tokens_b: List[int], max_num_tokens: int,
                      rng: np.random.Generator) -> None:
    """Trims A and B in place to at most max_num_tokens together.

    Each step trims the longer side (B on ties) at its front or back with prob 0.5. One
    coin per removed token, drawn in one call. Which side each step trims does not depend on
    the coins: first the longer side until both are level, then B, A, B, A, ... So the steps
    are counted instead of replayed (a 1 MB line costs no Python loop over its tokens).
    """
    len_a, len_b = len(tokens_a), len(tokens_b)
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return
    front = (rng.random(excess) < 0.5).tolist()
    level = min(abs(len_a - len_b), excess)  # steps on the longer side before both are level
    first_side = front[:level]
    a_steps = front[level + 1::2]  # then B at level, level + 2, ...; A at level + 1, ...
    b_steps = front[level::2]
    if len_a > len_b:
        a_steps = first_side + a_steps
    else:
        b_steps = first_side + b_steps
    a_front, b_front = sum(a_steps), sum(b_steps)
    tokens_a[:] = tokens_a[a_front:len_a - (len(a_steps) - a_front)]
    tokens_b[:] = tokens_b[b_front:len_b - (len(b_steps) - b_front)]


def candidate_groups(tokens: Sequence[int], special: Collection[int], is_continuation: np.ndarray,
                     whole_word_mask: bool) -> List[List[int]]:
    """Masking candidates in order: one group per non-special position, or with whole-word
    masking one group per word (a continuation piece joins the word before it, unless that
    word ended at a special token)."""
    groups: List[List[int]] = []
    for i, t in enumerate(tokens):
        if i in special:
            continue
        if whole_word_mask and groups and is_continuation[t] and groups[-1][-1] == i - 1:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def replace_token(token: int, rng: np.random.Generator, vocab: BertVocab) -> int:
    """BERT's 80/10/10: [MASK] with prob 0.8, else the original or a random id, 0.5 each.

    The random id is uniform over the whole vocabulary, special tokens included, as the
    original (``vocab_words[rng.randint(0, len(vocab_words) - 1)]``).
    """
    if rng.random() < 0.8:
        return vocab.mask_id
    if rng.random() < 0.5:
        return int(token)
    return int(rng.integers(0, vocab.vocab_size))


def masked_lm_budget(num_tokens: int, masked_lm_prob: float, max_predictions_per_seq: int) -> int:
    """min(max_predictions_per_seq, max(1, round(num_tokens * masked_lm_prob))): 15% of 128 -> 19."""
    return min(max_predictions_per_seq, max(1, int(round(num_tokens * masked_lm_prob))))


def create_masked_lm_predictions(
    tokens: Sequence[int],
    rng: np.random.Generator,
    vocab: BertVocab,
    *,
    masked_lm_prob: float,
    max_predictions_per_seq: int,
    whole_word_mask: bool,
    special_positions: Optional[Sequence[int]] = None,
    groups: Optional[Sequence[Sequence[int]]] = None,
):
    """Static masking of one sequence.

    Args:
      tokens: the ids of ``[CLS] A [SEP] B [SEP]``.
      special_positions: positions never masked; defaults to those holding [CLS] or [SEP].
      groups: the candidate groups (lists of positions masked together), overriding the ones
        ``candidate_groups`` would build (ERNIE passes its phrase/entity units here).

    Returns:
      ``(output_tokens, masked_lm_positions, masked_lm_ids)``: positions are sorted and
      ``masked_lm_ids`` holds the original ids at those positions.
    """
    num_to_predict = masked_lm_budget(len(tokens), masked_lm_prob, max_predictions_per_seq)
    if groups is None:
        if special_positions is None:
            special = {i for i, t in enumerate(tokens) if t in (vocab.cls_id, vocab.sep_id)}
        else:
            special = set(special_positions)
        if not whole_word_mask:
            return _mask_positions(tokens, special, num_to_predict, rng, vocab)
        groups = candidate_groups(tokens, special, vocab.is_continuation, whole_word_mask)

    order = rng.permutation(len(groups))
    output = list(tokens)
    chosen: List[int] = []
    covered = set()
    for g in order:
        group = groups[g]
        if len(chosen) >= num_to_predict:
            break
        # As the original: a group that would overshoot the budget is skipped, not split.
        if len(chosen) + len(group) > num_to_predict:
            continue
        if any(i in covered for i in group):
            continue
        for i in group:
            covered.add(i)
            output[i] = replace_token(tokens[i], rng, vocab)
            chosen.append(i)
    chosen.sort()
    return output, chosen, [int(tokens[i]) for i in chosen]


def _mask_positions(tokens: Sequence[int], special: Collection[int], num_to_predict: int,
                    rng: np.random.Generator, vocab: BertVocab):
    """create_masked_lm_predictions for one-position groups: ``mask_sequences`` of one row."""
    (output,), (chosen,), (labels,) = mask_sequences([tokens], [tuple(special)], rng, vocab,
                                                     budgets=[num_to_predict])
    return output, chosen, labels


def mask_sequences(sequences: Sequence[Sequence[int]], special_positions: Sequence[Collection[int]],
                   rng: np.random.Generator, vocab: BertVocab, *, masked_lm_prob: float = 0.15,
                   max_predictions_per_seq: int = 20, budgets: Optional[Sequence[int]] = None):
    """Static masking of many sequences at once, with one-position candidate groups (no
    whole-word masking); see ``mask_matrix``.

    Returns ``(outputs, positions, labels)``: per sequence, the masked ids, the sorted masked
    positions and the original ids there (lists of ints).
    """
    n = len(sequences)
    if n == 0:
        return [], [], []
    lengths = np.fromiter((len(s) for s in sequences), np.int64, n)
    tokens = np.zeros((n, int(lengths.max())), np.int64)
    tokens[np.arange(tokens.shape[1]) < lengths[:, None]] = np.fromiter(
        itertools.chain.from_iterable(sequences), np.int64, int(lengths.sum()))
    special_rows = [i for i, sp in enumerate(special_positions) for _ in sp]
    special_cols = [p for sp in special_positions for p in sp]
    if budgets is None:
        budgets = [masked_lm_budget(int(m), masked_lm_prob, max_predictions_per_seq) for m in lengths.tolist()]
    output, rows, positions, labels = mask_matrix(tokens, lengths, (special_rows, special_cols),
                                                  np.asarray(budgets, np.int64), rng, vocab)
    ends = np.cumsum(np.bincount(rows, minlength=n)).tolist()
    starts = [0] + ends[:-1]
    positions, labels = positions.tolist(), labels.tolist()
    outputs = [row[:m] for row, m in zip(output.tolist(), lengths.tolist())]
    return (outputs, [positions[a:b] for a, b in zip(starts, ends)], [labels[a:b] for a, b in zip(starts, ends)])


def mask_matrix(tokens: np.ndarray, lengths: np.ndarray, special: Tuple[Sequence[int], Sequence[int]],
                budgets: np.ndarray, rng: np.random.Generator, vocab: BertVocab):
    """The masking of ``mask_sequences`` on an [N, W] matrix of ids (row i real up to
    lengths[i]); ``special``: (rows, columns) of positions never masked.

    Per row: min(budget, candidates) positions drawn uniformly without replacement among the
    real, non-special positions (random keys, the smallest win: what the original's loop over
    shuffled one-position groups takes), then 80% [MASK], 10% kept, 10% a uniform random id
    over the whole vocabulary, each drawn independently.

    Returns ``(output, rows, positions, labels)``: the masked [N, W] ids, and per masked
    position (row-major, so each row's positions ascend) its row, column and original id.
    """
    n, width = tokens.shape
    cols = np.arange(width)
    allowed = cols < lengths[:, None]
    allowed[special] = False
    k = np.minimum(budgets, allowed.sum(axis=1))
    keys = rng.random((n, width))
    keys[~allowed] = 2.0  # never among the first k
    # The k smallest keys of each row: partition off the max(k) smallest, then sort only those.
    top = int(k.max()) if n else 0
    if 0 < top < width:
        part = np.argpartition(keys, top - 1, axis=1)[:, :top]
        order = np.take_along_axis(part, np.argsort(np.take_along_axis(keys, part, axis=1), axis=1), axis=1)
    else:
        order = np.argsort(keys, axis=1)
    take = np.arange(order.shape[1]) < k[:, None]
    chosen = np.zeros((n, width), bool)
    chosen[np.nonzero(take)[0], order[take]] = True
    rows, positions = np.nonzero(chosen)
    labels = tokens[rows, positions]
    replace = rng.random(len(rows))
    keep = rng.random(len(rows))
    random_ids = rng.integers(0, vocab.vocab_size, len(rows))
    output = tokens.copy()
    output[rows, positions] = np.where(replace < 0.8, vocab.mask_id, np.where(keep < 0.5, labels, random_ids))
    return output, rows, positions, labels


def layout_pair(tokens_a: Sequence[int], tokens_b: Sequence[int], vocab: BertVocab,
                max_seq_length: int):
    """``[CLS] A [SEP] B [SEP]`` -> (tokens, segment_ids, special positions).

    A occupies positions 1..|A|, B positions |A|+2..|A|+|B|+1.
    """
    tokens = [vocab.cls_id, *tokens_a, vocab.sep_id, *tokens_b, vocab.sep_id]
    if len(tokens) > max_seq_length:
        raise ValueError(f"instance of {len(tokens)} tokens exceeds max_seq_length {max_seq_length}")
    segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
    return tokens, segment_ids, (0, len(tokens_a) + 1, len(tokens) - 1)


def make_instance(tokens_a: Sequence[int], tokens_b: Sequence[int], is_random_next: bool,
                  rng: np.random.Generator, vocab: BertVocab, options: BertOptions,
                  groups: Optional[Sequence[Sequence[int]]] = None) -> Dict[str, list]:
    """Lays out ``[CLS] A [SEP] B [SEP]``, masks it and returns the feature dict (unpadded).

    ``groups``: optional masking candidate groups as positions of the laid-out sequence (see
    ``layout_pair``); by default the (whole-)word groups of ``candidate_groups``.
    """
    tokens, segment_ids, specials = layout_pair(tokens_a, tokens_b, vocab, options.max_seq_length)
    output, positions, labels = create_masked_lm_predictions(
        tokens, rng, vocab,
        masked_lm_prob=options.masked_lm_prob,
        max_predictions_per_seq=options.max_predictions_per_seq,
        whole_word_mask=options.whole_word_mask,
        special_positions=specials,
        groups=groups,
    )
    return _features(output, segment_ids, positions, labels, is_random_next)


def _features(output, segment_ids, positions, labels, is_random_next: bool) -> Dict[str, list]:
    return {
        "input_ids": list(output),
        "input_mask": [1] * len(output),
        "segment_ids": segment_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": labels,
        "masked_lm_weights": [1.0] * len(positions),
        "next_sentence_labels": [1 if is_random_next else 0],
    }


def make_batch(keys: Sequence[str], pairs: Sequence[Tuple[Sequence[int], Sequence[int], int, bool]],
               rng: np.random.Generator, vocab: BertVocab, options: BertOptions) -> base.InstanceBatch:
    """``make_instances`` as columns (base.InstanceBatch), for one-position masking: the same
    layout, the same ``mask_matrix`` draws in the same order, without a dict per instance."""
    n = len(pairs)
    len_a = np.fromiter((len(a) for a, _, _, _ in pairs), np.int64, n)
    len_b = np.fromiter((len(b) for _, b, _, _ in pairs), np.int64, n)
    lengths = len_a + len_b + 3
    if n and lengths.max() > options.max_seq_length:
        raise ValueError(f"instance of {int(lengths.max())} tokens exceeds max_seq_length {options.max_seq_length}")
    cls, sep = (vocab.cls_id,), (vocab.sep_id,)
    flat = np.fromiter(itertools.chain.from_iterable(
        piece for a, b, _, _ in pairs for piece in (cls, a, sep, b, sep)), np.int64, int(lengths.sum()))
    # As wide as the longest row (serialize_columns pads): mask_matrix then draws exactly what
    # mask_sequences draws for the same pairs.
    cols = np.arange(int(lengths.max()) if n else 0)
    real = cols < lengths[:, None]
    tokens = np.zeros((n, len(cols)), np.int64)
    tokens[real] = flat
    rows = np.repeat(np.arange(n), 3)
    specials = np.stack([np.zeros(n, np.int64), len_a + 1, lengths - 1], axis=1).ravel()
    budgets = np.minimum(options.max_predictions_per_seq,
                         np.maximum(1, np.round(lengths * options.masked_lm_prob).astype(np.int64)))
    output, mrows, positions, labels = mask_matrix(tokens, lengths, (rows, specials), budgets, rng, vocab)
    counts = np.bincount(mrows, minlength=n)
    slot = np.arange(len(mrows)) - np.repeat(np.cumsum(counts) - counts, counts)
    p = options.max_predictions_per_seq
    lm_positions, lm_ids, lm_weights = (np.zeros((n, p), np.int64), np.zeros((n, p), np.int64),
                                        np.zeros((n, p), np.float32))
    lm_positions[mrows, slot] = positions
    lm_ids[mrows, slot] = labels
    lm_weights[mrows, slot] = 1.0
    nsp = np.fromiter((label for _, _, label, _ in pairs), np.int64, n)[:, None]
    columns = {
        "input_ids": output, "input_mask": real.astype(np.int64),
        "segment_ids": (real & (cols > (len_a + 1)[:, None])).astype(np.int64),
        "masked_lm_positions": lm_positions, "masked_lm_ids": lm_ids, "masked_lm_weights": lm_weights,
        "next_sentence_labels": nsp,
    }
    seq = {name: lengths for name in ("input_ids", "input_mask", "segment_ids")}
    lm = {name: counts for name in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")}
    return base.InstanceBatch(list(keys), columns, {**seq, **lm, "next_sentence_labels": np.ones(n, np.int64)})


def make_instances(pairs: Sequence[Tuple[Sequence[int], Sequence[int], int, bool]], rng: np.random.Generator,
                   vocab: BertVocab, options: BertOptions) -> List[Dict[str, list]]:
    """``make_instance`` of many (A, B, label, random_b) pairs; without whole-word masking the
    masks of all of them are drawn in one ``mask_sequences`` call (same distribution, about
    10x cheaper per instance than one call each)."""
    if options.whole_word_mask:
        return [make_instance(a, b, label == 1, rng, vocab, options) for a, b, label, _ in pairs]
    layouts = [layout_pair(a, b, vocab, options.max_seq_length) for a, b, _, _ in pairs]
    outputs, positions, labels = mask_sequences(
        [tokens for tokens, _, _ in layouts], [specials for _, _, specials in layouts], rng, vocab,
        masked_lm_prob=options.masked_lm_prob, max_predictions_per_seq=options.max_predictions_per_seq)
    return [_features(out, segment_ids, pos, lab, label == 1)
            for out, (_, segment_ids, _), pos, lab, (_, _, label, _) in zip(outputs, layouts, positions, labels, pairs)]


def iterate_pairs(
    document: Document,
    rng: np.random.Generator,
    random_document: RandomDocumentFn,
    options: BertOptions,
    *,
    sentence_order: bool = False,
) -> Iterator[Tuple[list, list, int, bool]]:
    """The (A, B, label, random_b) pairs of one dupe pass over one document, truncated to fit.

    BERT (``sentence_order=False``): label 1 when B is a random continuation from another
    document (always for a single-segment chunk, else with prob 0.5), 0 when B is the rest of
    the chunk. ALBERT's sentence-order prediction (``sentence_order=True``): a single-segment
    chunk still takes a random B (label 1); otherwise with prob 0.5 A and B are swapped
    (label 1), else kept in order (label 0), as ALBERT's create_pretraining_data.py.
    ``random_b``: B was drawn from another document (for BERT, the same as label 1).

    The pair building only slices and concatenates segments, so their elements may be any
    values (ERNIE passes (id, unit) pairs to follow its units through truncation). This is a
    generator: the caller's draws for pair k (masking) happen before pair k+1 is built.
    """
    document = [s if isinstance(s, list) else list(s) for s in document if len(s)]  # read only below
    max_num_tokens = options.max_num_tokens
    target_seq_length = draw_target_seq_length(rng, max_num_tokens, options.short_seq_prob)

    chunk: List[list] = []
    chunk_length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        chunk_length += len(document[i])
        if i == len(document) - 1 or chunk_length >= target_seq_length:
            a_end = 1 if len(chunk) < 2 else 1 + randbelow(rng, len(chunk) - 1)
            tokens_a = list(itertools.chain.from_iterable(chunk[:a_end]))
            tokens_b: list = []
            random_b = len(chunk) == 1 or (not sentence_order and rng.random() < 0.5)
            if random_b:
                label = 1
                target_b_length = target_seq_length - len(tokens_a)
                other = random_document(rng)
                if not isinstance(other, list):
                    other = list(other)
                if not all(map(len, other)):
                    other = [s for s in other if len(s)]
                if not other:
                    raise ValueError("random_document returned a document without tokens")
                start = randbelow(rng, len(other))
                for seg in other[start:]:
                    tokens_b.extend(seg)
                    if len(tokens_b) >= target_b_length:
                        break
                # The segments of the chunk after A were not used: put them back.
                i -= len(chunk) - a_end
            elif sentence_order and rng.random() < 0.5:
                label = 1
                tokens_b = list(itertools.chain.from_iterable(chunk[a_end:]))
                tokens_a, tokens_b = tokens_b, tokens_a
            else:
                label = 0
                tokens_b = list(itertools.chain.from_iterable(chunk[a_end:]))
            truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
            yield tokens_a, tokens_b, label, random_b
            chunk = []
            chunk_length = 0
        i += 1


def create_instances_from_document(
    document: Document,
    rng: np.random.Generator,
    random_document: RandomDocumentFn,
    vocab: BertVocab,
    options: BertOptions = BertOptions(),
) -> List[Dict[str, list]]:
    """One dupe pass over one document: a list of feature dicts (see module docstring).

    Empty segments are ignored. ``random_document(rng)`` must return a document other than
    this one (it may return this one when no other exists; B is still non-empty).
    """
    # The pairs first, then their masks in one batch (rng draws in that order).
    return make_instances(list(iterate_pairs(document, rng, random_document, options)), rng, vocab, options)


def create_instances(documents: Sequence[Document], rng: np.random.Generator, vocab: BertVocab,
                     options: BertOptions = BertOptions(), dupe_factor: int = 1) -> List[Dict[str, list]]:
    """In-memory reference driver (small corpora, tests, benchmarks): every document, every
    dupe pass, random-next documents drawn uniformly from the whole corpus (never the same
    document unless it is the only one). The Beam job draws from bounded pools instead.
    """
    documents = [d for d in ([list(s) for s in doc if len(s)] for doc in documents) if d]
    instances = []
    for _ in range(dupe_factor):
        for index, doc in enumerate(documents):
            def other(r, index=index):
                if len(documents) == 1:
                    return documents[0]
                j = int(r.integers(0, len(documents) - 1))
                return documents[j + 1 if j >= index else j]
            instances.extend(create_instances_from_document(doc, rng, other, vocab, options))
    return instances


# ---------------------------------------------------------------------------------------------
# The objective as the Beam job sees it (data_pipelines/objectives/base.py).


def vocab_from_base(vocab: text_vocab.Vocab, objective: str = "bert") -> BertVocab:
    return BertVocab(cls_id=vocab.special("cls", objective), sep_id=vocab.special("sep", objective),
                     mask_id=vocab.special("mask", objective), vocab_size=vocab.size,
                     is_continuation=~np.asarray(vocab.is_word_start, dtype=bool))


def pool_random_document(docs: Sequence[base.Doc], pos: int, ctx: base.PoolContext,
                         segments_of: Optional[Callable[[int], Document]] = None) -> RandomDocumentFn:
    """B of a random-next pair: a uniformly drawn other document of the pool (the pool is a
    hash-random sample of the corpus, so this is a uniformly random other document).

    ``segments_of(j)``: the segments to return for document j of the pool (default
    ``docs[j].segments``; ERNIE returns them tagged with their units)."""
    if segments_of is None:
        segments_of = lambda j: docs[j].segments  # noqa: E731

    def has_tokens(j):
        return any(map(len, docs[j].segments))

    def random_document(rng):
        # Documents without tokens (which the Beam job never makes, but callers may pass) are
        # rejected and redrawn: B is uniform over the other documents that have tokens.
        for _ in range(4 * len(docs) if len(docs) > 1 else 0):
            j = randbelow(rng, len(docs) - 1)
            j = j + 1 if j >= pos else j
            if has_tokens(j):
                return segments_of(j)
        ctx.count("random_next_same_document")
        return segments_of(pos)
    return random_document


def count_masked_instance(ctx: base.PoolContext, inst: Dict[str, list]) -> None:
    ctx.count("real_tokens", len(inst["input_ids"]))
    ctx.count("masked_tokens", len(inst["masked_lm_positions"]))
    ctx.count("nsp_random", inst["next_sentence_labels"][0])


def _create(docs: Sequence[base.Doc], ctx: base.PoolContext):
    """The pool's pairs, document by document (each with its own Generator), then the masks of
    all of them in one batch, drawn from a Generator keyed by the pool's first document."""
    vocab = vocab_from_base(ctx.vocab)
    keys, pairs = [], []
    for pos, doc in enumerate(docs):
        rng = ctx.rng(doc.id)
        for index, pair in enumerate(iterate_pairs(doc.segments, rng, pool_random_document(docs, pos, ctx),
                                                   ctx.options)):
            keys.append(f"{doc.id}|{index}")
            pairs.append(pair)
    if not pairs:
        return
    rng = ctx.rng("masks", docs[0].id)
    if ctx.options.whole_word_mask:
        for key, inst in zip(keys, make_instances(pairs, rng, vocab, ctx.options)):
            count_masked_instance(ctx, inst)
            yield key, inst
        return
    batch = make_batch(keys, pairs, rng, vocab, ctx.options)
    ctx.count("real_tokens", int(batch.lengths["input_ids"].sum()))
    ctx.count("masked_tokens", int(batch.lengths["masked_lm_ids"].sum()))
    ctx.count("nsp_random", int(batch.columns["next_sentence_labels"].sum()))
    yield batch


def feature_spec(options: BertOptions) -> features.Spec:
    """The features of a masked LM + NSP objective: BERT's, and ERNIE's (which masks other units)."""
    return features.bert_pretrain_spec(options.max_seq_length, options.max_predictions_per_seq)


# The summary of a masked LM + NSP objective (BERT's, extended by ERNIE's).
MASKED_LM_SUMMARY = {
    # masked / real tokens (specials included): ~0.15 up to rounding and the max_pred cap.
    "masked_token_rate": ("masked_tokens", "real_tokens"),
    "nsp_random_fraction": ("nsp_random", "instances"),
    "random_next_same_document": "random_next_same_document",
}


OBJECTIVE = base.Objective(
    name="bert",
    recipe="BERT (Devlin et al. 2019): masked LM + next sentence prediction, static masks, WordPiece",
    tokenizer="wordpiece",
    options=BertOptions,
    feature_spec=feature_spec,
    create_instances=_create,
    summary=MASKED_LM_SUMMARY,
)
