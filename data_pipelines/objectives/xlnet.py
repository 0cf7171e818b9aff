"""XLNet pre-training instances: permutation language modelling (docs/objectives.md section 7).

Yang et al. 2019, "XLNet: Generalized Autoregressive Pretraining for Language Understanding";
the published recipe (seq_len 512, reuse_len 256, perm_size 256, num_predict 85,
mask_alpha 6, mask_beta 1, SentencePiece 32k, <eod> between documents). What the original
``data_utils.py`` does in two steps -- ``create_tfrecords`` at preprocessing time and
``_local_perm`` in the training input function -- is done here once, so the written records
already hold the permutation mask (one factorization order per instance, drawn from the
instance's own Generator; the original redrew it every epoch).

The stream (``build_stream``)
  The pool's documents (sorted by id) are concatenated into one token stream. Every sentence
  gets a sentence id that flips from sentence to sentence; ``<eod>`` (role "eod") goes
  between documents and, as the original's ``use_eod`` handling does, keeps the id of the
  sentence before it (it ends that document's last sentence, so a cut may follow it but not
  precede it).

An instance (``create_instances_from_stream``), one per stride of ``reuse_len`` tokens
  ``stream[i : i+reuse_len]  A <sep> B <sep> <cls>``, exactly ``max_seq_length`` tokens.
  * The first ``reuse_len`` tokens are the "reuse" half: the plain stream, whose hidden
    states the model caches as Transformer-XL memory for the next instance, which starts
    ``reuse_len`` tokens later (block i+1's reuse half is where block i's A began).
  * A and B fill ``tot_len = max_seq_length - reuse_len - 3`` tokens (``split_a_and_b``, the
    original's ``_split_a_and_b``): A starts right after the reuse half; the sentence
    boundaries strictly within ``tot_len`` tokens are the cut points. With probability 0.5
    (always when there is no cut point) A ends at a random cut point (or at the first
    boundary past ``tot_len``) and B is a random run of whole sentences from anywhere in the
    pool's stream (``label 0``); otherwise A ends at a random cut point and B is the real
    continuation up to the first boundary past ``tot_len`` (``label 1``). The longer of A and
    B is then trimmed at its right end until ``|A| + |B| == tot_len``. Like the original, a
    block that would need a token past the end of the stream ends the pool (its tail is
    counted in ``dropped/tail_tokens``). The original had no use for the label (XLNet dropped
    NSP); it is only counted (``b_random``).
  * seg_id: 0 for the reuse half, A and its <sep>; 1 for B and its <sep>; 2 for <cls> (last).

Prediction targets (``sample_mask``, the original's ``_sample_mask``)
  Drawn separately in the reuse half (goal ``num_predict - num_predict // 2``: 43 of 256) and
  in the rest (goal ``num_predict // 2``: 42 of 256), 85 of 512 in all. Repeatedly: draw n in
  1..5 with p(n) proportional to 1/n (0.438, 0.219, 0.146, 0.109, 0.088), clip it to the
  goal left, take a context of ``ctx = n * mask_alpha // mask_beta`` tokens (6n), skip
  ``l_ctx`` ~ uniform{0..ctx-1} tokens, move to the next word start, mask the span, and
  continue ``ctx - l_ctx`` tokens after it. The span is n *pieces* long by default: the
  original's end search tests the span's first piece instead of the current one, so every
  piece counts as a new "word" -- the known bug, which the released XLNet data have, so
  ``span_unit="piece"`` is the default; ``span_unit="word"`` counts n whole words (pieces
  after the first that do not start a word join the span). A span must end before the end of
  the half (as in the original). The goal is then topped up with single positions drawn
  uniformly among the unmasked ones. Word starts are SentencePiece pieces beginning with
  U+2581, special tokens, pieces beginning with "<" and single ASCII punctuation pieces
  (the original's ``_is_start_piece``).

  One deliberate difference: the original could mask <sep>/<cls> (its input function then
  dropped them as targets and padded, "extra padding due to CLS/SEP introduced after
  prepro"), so some instances carried fewer than 85 targets. Here <sep>/<cls> positions are
  taken out of a span and never drawn as top-ups, so every instance has exactly num_predict
  targets whenever its halves have enough other tokens (counted: ``func_positions_unmasked``).
  <eod> is an ordinary token (it can be a target), as in the original.

Permutation mask (``local_perm_mask``, the original's ``_local_perm`` with
``perm_size = reuse_len`` on each half, then the block assembly of its ``get_dataset``)
  Each half gets its own uniformly random factorization order. Within a half, with
  "context" = non-target, non-functional tokens and "functional" = <sep>/<cls>:
  * context tokens come first in the order: everyone in the half sees them, and they see
    only each other (no target leaks into them);
  * a target sees the context and the targets/functional tokens strictly before it in the
    order, never itself;
  * a functional token sees the context, itself, and targets/functional tokens before it.
  Across halves: the reuse half sees nothing of the second half (its states become memory
  that the next instance's targets attend to), and the second half sees all of the reuse half.
  ``perm_mask[i, j] = 1`` means i cannot attend to j.

  The records do not hold that [seq_len, seq_len] mask but ``perm_rank`` [seq_len], the
  factorization order it is a function of, and the trainer's reader expands it
  (garden/tasks/pretraining/xlnet.py; here ``perm_mask_from_rank``). The two halves' orders and
  the cross-half blocks are one order of the whole sequence with ties:
      reuse-half context                         rank 0
      reuse-half targets and <sep>/<cls>         ranks 1..n0, in the half's drawn order
      second-half context                        rank n0 + 1
      second-half targets and <sep>/<cls>        ranks n0 + 2..n0 + 1 + n1, in its drawn order
  and ``perm_mask[i, j] = perm_rank[i] + 1 - input_q[i] <= perm_rank[j]`` (a target needs a
  strictly earlier rank, everything else sees its own rank too). That gives exactly the mask
  above, which ``reference_perm_mask`` still builds from the drawn orders the original way
  (``local_perm_mask`` per half plus the fixed blocks; tested equal). The ranks are dense
  (at most num_predict + 5 or so, one varint byte each at the published sizes): 512 bytes per
  record instead of the mask's 262,144. The draws are unchanged (same calls on the instance's
  Generator, in the same order), so the expanded masks are those written before the ranks.

Features (``features.xlnet_pretrain_spec``), all [seq_len] or [num_predict] vectors:
  input_k [seq_len] int64: the tokens.
  input_q [seq_len] int64: 1 at target positions (the query stream's inputs), else 0.
  seg_id [seq_len] int64: 0/1/2 as above.
  perm_rank [seq_len] int64: the factorization order above; the reader makes perm_mask.
  target [num_predict] int64: the target tokens (= input_k at their positions, in increasing
    position), 0-padded.
  target_mask [num_predict] float32: 1.0 for a real target, 0.0 for padding.
The reader also makes target_mapping [num_predict, seq_len] (row k one-hot at the k-th target
position, zero rows after the last target) from input_q. input_q is int64 because a packed
int64 list stores a 0/1 value in one byte, a float list in four; target_mask is float32 like
the original input function's weights. make_instance returns numpy arrays and ``_create``
yields them as ``base.InstanceBatch`` columns, so no per-sequence Python list is built.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from text import features, flags
from data_pipelines.objectives import base
from text import vocab as text_vocab

MAX_GRAM = 5
SPAN_UNITS = ("piece", "word")
# The original's _is_start_piece punctuation set (it lists '"' twice and lacks "'", "<" "=" ">",
# though "<" is covered by its startswith("<") test).
_START_PUNCTUATION = frozenset('!"#$%&()*+,-./:;?@[\\]^_`{|}~')


@dataclasses.dataclass(frozen=True)
class XLNetOptions:
    """The knobs of the XLNet objective; defaults are the published recipe."""

    max_seq_length: int = 512
    # None: max_seq_length // 2 (set by __post_init__).
    reuse_len: Optional[int] = flags.option(
        None, "tokens of the reuse half (cached as memory by the model) and the stride between instances "
        "(default max_seq_length / 2: 256 of the published 512)")
    num_predict: int = flags.option(
        85, "targets per instance, num_predict - num_predict//2 in the reuse half and num_predict//2 in the "
        "rest (default %(default)s, of 512 tokens)")
    mask_alpha: int = flags.option(
        6, "context size per span token: a span of n gets n*alpha/beta tokens (default %(default)s)")
    mask_beta: int = flags.option(1, "tokens masked per mask_alpha tokens of context (default %(default)s)")
    span_unit: str = flags.option(
        "piece", "unit of the span length n in 1..5: 'piece' = what the original code and the released XLNet "
        "data do (its word-end test is buggy, so n pieces starting at a word start), 'word' = n whole words "
        "as the paper intends (default %(default)s)", choices=SPAN_UNITS)

    def __post_init__(self):
        if self.reuse_len is None:
            object.__setattr__(self, "reuse_len", self.max_seq_length // 2)
        if not 1 <= self.reuse_len <= self.max_seq_length - 5:
            # reuse half + A <sep> B <sep> <cls> with |A|, |B| >= 1.
            raise ValueError(f"reuse_len must be in [1, max_seq_length - 5 = {self.max_seq_length - 5}], "
                             f"got {self.reuse_len}")
        if self.num_predict < 0:
            raise ValueError(f"num_predict must be >= 0, got {self.num_predict}")
        if self.num_predict_reuse > self.reuse_len or self.num_predict_rest > self.tot_len:
            raise ValueError(f"num_predict {self.num_predict} does not fit: {self.num_predict_reuse} targets in the "
                             f"reuse half of {self.reuse_len} and {self.num_predict_rest} in the "
                             f"{self.tot_len} non-special tokens of the rest")
        if not 1 <= self.mask_beta <= self.mask_alpha:
            raise ValueError(f"need 1 <= mask_beta <= mask_alpha, got alpha={self.mask_alpha} beta={self.mask_beta}")
        base.check_choice(self, "span_unit", SPAN_UNITS)

    @property
    def tot_len(self) -> int:
        """Tokens of A and B together: the rest minus <sep> <sep> <cls>."""
        return self.max_seq_length - self.reuse_len - 3

    @property
    def num_predict_rest(self) -> int:
        return self.num_predict // 2

    @property
    def num_predict_reuse(self) -> int:
        return self.num_predict - self.num_predict // 2


@dataclasses.dataclass(frozen=True)
class XLNetVocab:
    sep_id: int
    cls_id: int
    eod_id: int
    # is_start[id]: the piece starts a word in the sense of the original's _is_start_piece.
    is_start: np.ndarray


def vocab_from_base(vocab: text_vocab.Vocab, objective: str = "xlnet") -> XLNetVocab:
    starts = np.asarray(vocab.is_word_start, dtype=bool).copy()
    starts |= np.array([t.startswith("<") or t in _START_PUNCTUATION for t in vocab.tokens], dtype=bool)
    return XLNetVocab(sep_id=vocab.special("sep", objective), cls_id=vocab.special("cls", objective),
                      eod_id=vocab.special("eod", objective), is_start=starts)


# ---------------------------------------------------------------------------------------------
# The stream and A/B.


def build_stream(documents: Sequence[Sequence[Sequence[int]]], eod_id: int) -> Tuple[np.ndarray, np.ndarray]:
    """(tokens, sentence ids) of the documents concatenated with <eod> between them.

    Sentence ids alternate 0/1 per sentence; <eod> takes the id of the sentence before it.
    Empty sentences and documents without tokens are skipped.
    """
    tokens: List[int] = []
    sent_ids: List[int] = []
    sid = 0
    first = True
    for doc in documents:
        sentences = [list(s) for s in doc if len(s)]
        if not sentences:
            continue
        if not first:
            # Ends the previous document's last sentence (same id), as the original's use_eod.
            tokens.append(eod_id)
            sent_ids.append(sent_ids[-1])
        first = False
        for sentence in sentences:
            tokens.extend(sentence)
            sent_ids.extend([sid] * len(sentence))
            sid ^= 1
    return np.asarray(tokens, dtype=np.int64), np.asarray(sent_ids, dtype=np.int8)


def sentence_boundaries(sent_ids: np.ndarray) -> np.ndarray:
    """Positions b where a new sentence starts (sent_ids[b] != sent_ids[b - 1]), ascending."""
    return np.flatnonzero(sent_ids[1:] != sent_ids[:-1]) + 1


def trim_pair_lengths(a_len: int, b_len: int, tot_len: int) -> Tuple[int, int]:
    """The lengths the original's trimming loop leaves: while a_len + b_len > tot_len, drop the
    last token of the longer side (B on ties). In closed form, so that a B widened over a
    megabyte-long sentence costs no loop."""
    excess = a_len + b_len - tot_len
    if excess <= 0:
        return a_len, b_len
    # First the longer side alone, down to the length of the other ...
    take = min(excess, abs(a_len - b_len))
    if a_len > b_len:
        a_len -= take
    else:
        b_len -= take
    rest = excess - take
    # ... then, from a tie, B, A, B, A, ...
    return a_len - rest // 2, b_len - (rest + 1) // 2


def split_a_and_b(sent_ids: np.ndarray, boundaries: np.ndarray, begin: int, tot_len: int,
                  rng: np.random.Generator) -> Optional[Tuple[int, int, int, int, bool]]:
    """A and B for the block whose A starts at ``begin`` (the original's _split_a_and_b).

    Returns ``(a_begin, a_end, b_begin, b_end, is_next)`` with ``a_end - a_begin + b_end -
    b_begin == tot_len``, or None when the stream is too short (the pool's last block).
    """
    data_len = len(sent_ids)
    if begin + tot_len >= data_len:
        return None
    # Boundaries after begin: those less than tot_len away are cut points; the first one at
    # least tot_len away (or the end of the stream) is where the real continuation stops.
    lo = int(np.searchsorted(boundaries, begin, side="right"))
    hi = int(np.searchsorted(boundaries, begin + tot_len, side="left"))
    cut_points = boundaries[lo:hi]
    end_idx = int(boundaries[hi]) if hi < len(boundaries) else data_len

    a_begin = begin
    if len(cut_points) == 0 or rng.random() < 0.5:
        is_next = False
        a_end = end_idx if len(cut_points) == 0 else int(cut_points[rng.integers(len(cut_points))])
        b_len = max(1, tot_len - (a_end - a_begin))
        # data_len - 1 as the original (it kept one token after B for its LM target).
        b_begin = int(rng.integers(0, data_len - 1 - b_len + 1))
        b_end = b_begin + b_len
        # Widen B to whole sentences: back to the sentence start (or 0), on to the next
        # sentence start (or data_len - 1); the original steps token by token.
        k = int(np.searchsorted(boundaries, b_begin, side="right"))
        b_begin = int(boundaries[k - 1]) if k > 0 else 0
        k = int(np.searchsorted(boundaries, b_end, side="left"))
        b_end = min(int(boundaries[k]) if k < len(boundaries) else data_len - 1, data_len - 1)
    else:
        is_next = True
        a_end = int(cut_points[rng.integers(len(cut_points))])
        b_begin, b_end = a_end, end_idx

    a_len, b_len = trim_pair_lengths(a_end - a_begin, b_end - b_begin, tot_len)
    a_end, b_end = a_begin + a_len, b_begin + b_len
    # The original also needs the token after A and after B (its LM targets).
    if a_end >= data_len or b_end >= data_len:
        return None
    return a_begin, a_end, b_begin, b_end, is_next


# ---------------------------------------------------------------------------------------------
# Targets and the permutation mask.


def span_length_probs(max_gram: int = MAX_GRAM) -> np.ndarray:
    """p(n) proportional to 1/n for n = 1..max_gram."""
    p = 1.0 / np.arange(1, max_gram + 1)
    return p / p.sum()


def sample_mask(is_start: np.ndarray, rng: np.random.Generator, goal: Optional[int], *, mask_alpha: int = 6,
                mask_beta: int = 1, span_unit: str = "piece", max_gram: int = MAX_GRAM,
                forbidden: Optional[np.ndarray] = None) -> Tuple[np.ndarray, List[Tuple[int, int]]]:
    """Targets of one half (the original's _sample_mask, see the module docstring).

    Args:
      is_start: bool per position: the piece starts a word.
      goal: number of targets; None: spans only, no limit and no top-up.
      forbidden: bool per position that must not be a target (<sep>/<cls>).

    Returns:
      (mask, spans): bool per position; the (begin, end) of every span drawn (before
      forbidden positions are taken out).
    """
    seg_len = len(is_start)
    mask = np.zeros(seg_len, dtype=bool)
    probs = span_length_probs(max_gram)
    spans: List[Tuple[int, int]] = []
    num = 0
    cur = 0
    while cur < seg_len:
        if goal is not None and num >= goal:
            break
        n = int(rng.choice(max_gram, p=probs)) + 1
        if goal is not None:
            n = min(n, goal - num)
        ctx_size = (n * mask_alpha) // mask_beta
        l_ctx = int(rng.integers(ctx_size))
        r_ctx = ctx_size - l_ctx
        beg = cur + l_ctx
        while beg < seg_len and not is_start[beg]:
            beg += 1
        if beg >= seg_len:
            break
        if span_unit == "piece":
            end = beg + n
        else:
            # n words: stop at the start of the (n+1)-th word.
            end, words = beg + 1, 1
            while end < seg_len:
                if is_start[end]:
                    words += 1
                    if words > n:
                        break
                end += 1
        # As the original: a span reaching the end of the half ends the sampling.
        if end >= seg_len:
            break
        mask[beg:end] = True
        spans.append((beg, end))
        num += end - beg
        cur = end + r_ctx
    if forbidden is not None:
        mask &= ~forbidden
    if goal is not None:
        missing = goal - int(mask.sum())
        if missing > 0:
            free = ~mask if forbidden is None else ~mask & ~forbidden
            candidates = np.flatnonzero(free)
            picks = rng.choice(candidates, size=min(missing, len(candidates)), replace=False)
            mask[picks] = True
    return mask, spans


def local_perm_mask(is_target: np.ndarray, is_func: np.ndarray, order: np.ndarray) -> np.ndarray:
    """perm_mask of one half (the original's _local_perm): 1 = row cannot attend to column.

    order[i] is position i's rank in the factorization order (a permutation of 0..len-1).
    """
    context = ~is_target & ~is_func
    # Context tokens get the smallest rank (-1): visible to all, seeing only each other.
    rank = np.where(context, -1, order)
    # Targets cannot see themselves; functional tokens and context can.
    self_rank = np.where(is_target, rank, rank + 1)
    return (self_rank[:, None] <= rank[None, :]) & ~context[None, :]


def reference_perm_mask(is_target: np.ndarray, is_func: np.ndarray, order_0: np.ndarray, order_1: np.ndarray,
                        reuse_len: int) -> np.ndarray:
    """The [seq_len, seq_len] int64 perm_mask of a sequence as the original assembles it:
    ``local_perm_mask`` of each half with its order, the second half seeing all of the reuse
    half, the reuse half none of the second (what the records held before ``perm_rank``)."""
    seq_len = len(is_target)
    perm = np.ones((seq_len, seq_len), dtype=np.int64)
    perm[:reuse_len, :reuse_len] = local_perm_mask(is_target[:reuse_len], is_func[:reuse_len], order_0)
    perm[reuse_len:, reuse_len:] = local_perm_mask(is_target[reuse_len:], is_func[reuse_len:], order_1)
    perm[reuse_len:, :reuse_len] = 0
    return perm


def perm_rank_of(is_target: np.ndarray, is_func: np.ndarray, order_0: np.ndarray, order_1: np.ndarray,
                 reuse_len: int) -> np.ndarray:
    """perm_rank [seq_len] int64 (module docstring) of the halves' orders (each a permutation
    of its half's positions' ranks, as local_perm_mask takes them)."""
    rank = np.empty(len(is_target), dtype=np.int64)
    first = 0
    for half, order in ((slice(0, reuse_len), order_0), (slice(reuse_len, None), order_1)):
        ordered = np.flatnonzero(is_target[half] | is_func[half])
        ordered = ordered[np.argsort(order[ordered], kind="stable")]
        ranks = np.full(len(order), first, dtype=np.int64)
        ranks[ordered] = np.arange(first + 1, first + 1 + len(ordered))
        rank[half] = ranks
        first += len(ordered) + 1
    return rank


def perm_mask_from_rank(perm_rank: np.ndarray, input_q: np.ndarray) -> np.ndarray:
    """bool [..., seq_len, seq_len], True where i cannot attend to j, of perm_rank and input_q
    [..., seq_len] (numpy; the trainer's reader does the same in TensorFlow)."""
    rank = np.asarray(perm_rank, dtype=np.int64)
    self_rank = rank + 1 - (np.asarray(input_q) > 0)
    return self_rank[..., :, None] <= rank[..., None, :]


def make_instance(tokens: np.ndarray, reuse_len: int, rng: np.random.Generator, vocab: XLNetVocab,
                  options: XLNetOptions) -> Tuple[Dict[str, np.ndarray], Dict[str, int]]:
    """Targets, factorization order and features (numpy arrays) of one laid-out sequence;
    (features, counts)."""
    is_func = (tokens == vocab.sep_id) | (tokens == vocab.cls_id)
    is_start = vocab.is_start[tokens]
    kw = dict(mask_alpha=options.mask_alpha, mask_beta=options.mask_beta, span_unit=options.span_unit)
    mask_0, spans_0 = sample_mask(is_start[:reuse_len], rng, options.num_predict_reuse,
                                  forbidden=is_func[:reuse_len], **kw)
    mask_1, spans_1 = sample_mask(is_start[reuse_len:], rng, options.num_predict_rest,
                                  forbidden=is_func[reuse_len:], **kw)
    is_target = np.concatenate([mask_0, mask_1])
    # The two orders, drawn as before the ranks were stored (reference_perm_mask's inputs).
    order_0 = rng.permutation(reuse_len)
    order_1 = rng.permutation(len(tokens) - reuse_len)

    positions = np.flatnonzero(is_target)
    feats = {
        "input_k": np.asarray(tokens, dtype=np.int64),
        "input_q": is_target.astype(np.int64),
        "perm_rank": perm_rank_of(is_target, is_func, order_0, order_1, reuse_len),
        "target": np.asarray(tokens[positions], dtype=np.int64),
        "target_mask": np.ones(len(positions), dtype=np.float32),
    }
    spans = spans_0 + spans_1
    counts = {"targets": len(positions), "spans": len(spans), "span_tokens": sum(e - b for b, e in spans),
              "func_positions_unmasked": int(sum(is_func[b:e].sum() for b, e in spans_1)
                                             + sum(is_func[b:e].sum() for b, e in spans_0))}
    # Span lengths in pieces (word spans may be longer than 5 pieces).
    for b, e in spans:
        key = f"span_len/{min(e - b, 10)}"
        counts[key] = counts.get(key, 0) + 1
    return feats, counts


def instance_batch(keys: List[str], rows: Sequence[Dict[str, np.ndarray]], spec: features.Spec) -> base.InstanceBatch:
    """make_instance feature dicts (with seg_id) as zero-padded columns for the Beam job."""
    columns, lengths = {}, {}
    for name, f in spec.items():
        matrix = np.zeros((len(rows), f.length), dtype=np.int64 if f.dtype == "int64" else np.float32)
        counts = np.empty(len(rows), dtype=np.int64)
        for i, row in enumerate(rows):
            values = row[name]
            matrix[i, :len(values)] = values
            counts[i] = len(values)
        columns[name], lengths[name] = matrix, counts
    return base.InstanceBatch(list(keys), columns, lengths)


def create_instances_from_stream(tokens: np.ndarray, sent_ids: np.ndarray, rng_for_block, vocab: XLNetVocab,
                                 options: XLNetOptions) -> Iterator[Tuple[int, Dict[str, np.ndarray], Dict[str, int]]]:
    """Yields ``(block index, features, counts)`` for every block of the stream.

    ``rng_for_block(k)`` gives block k's Generator. The last counts dict (block index -1, no
    features) holds ``tail_tokens``: stream tokens never placed in a reuse half.
    """
    seq_len, reuse_len = options.max_seq_length, options.reuse_len
    boundaries = sentence_boundaries(sent_ids)
    sep, cls = np.array([vocab.sep_id]), np.array([vocab.cls_id])
    i, block = 0, 0
    while i + seq_len <= len(tokens):
        rng = rng_for_block(block)
        split = split_a_and_b(sent_ids, boundaries, i + reuse_len, options.tot_len, rng)
        if split is None:
            break
        a_begin, a_end, b_begin, b_end, is_next = split
        seq = np.concatenate([tokens[i:i + reuse_len], tokens[a_begin:a_end], sep, tokens[b_begin:b_end], sep, cls])
        feats, counts = make_instance(seq, reuse_len, rng, vocab, options)
        a_len, b_len = a_end - a_begin, b_end - b_begin
        seg_id = np.zeros(seq_len, dtype=np.int64)
        seg_id[reuse_len + a_len + 1:] = 1
        seg_id[-1] = 2
        feats["seg_id"] = seg_id
        counts["b_random"] = int(not is_next)
        yield block, feats, counts
        i += reuse_len
        block += 1
    yield -1, {}, {"tail_tokens": len(tokens) - i}


# ---------------------------------------------------------------------------------------------
# The objective as the Beam job sees it (data_pipelines/objectives/base.py).


def _create(docs: Sequence[base.Doc], ctx: base.PoolContext):
    options: XLNetOptions = ctx.options
    vocab = vocab_from_base(ctx.vocab)
    kept = [d for d in docs if any(len(s) for s in d.segments)]
    ctx.count("dropped/empty_document", len(docs) - len(kept))
    if not kept:
        return
    tokens, sent_ids = build_stream([d.segments for d in kept], vocab.eod_id)
    ctx.count("stream_tokens", len(tokens))
    ctx.count("eod_tokens", len(kept) - 1)
    first = kept[0].id
    spec = features.xlnet_pretrain_spec(options.max_seq_length, options.num_predict)
    produced = 0
    keys: List[str] = []
    rows: List[Dict[str, np.ndarray]] = []
    for block, feats, counts in create_instances_from_stream(
            tokens, sent_ids, lambda k: ctx.rng(first, k), vocab, options):
        if block < 0:
            ctx.count("dropped/tail_tokens", counts["tail_tokens"])
            break
        produced += 1
        ctx.count("real_tokens", len(feats["input_k"]))
        for name, n in counts.items():
            ctx.count(name, n)
        keys.append(f"{first}|{block}")
        rows.append(feats)
        if len(rows) == _BATCH:
            yield instance_batch(keys, rows, spec)
            keys, rows = [], []
    if rows:
        yield instance_batch(keys, rows, spec)
    if not produced:
        # The pool's stream is shorter than one sequence (or one block): nothing written.
        ctx.count("dropped/short_pool")


# Instances per InstanceBatch (about 4 KB of columns each at 512 tokens).
_BATCH = 256


OBJECTIVE = base.Objective(
    name="xlnet",
    recipe="XLNet (Yang et al. 2019): permutation LM, 85 span targets of 512, reuse half for memory, SentencePiece",
    tokenizer="sentencepiece",
    options=XLNetOptions,
    feature_spec=lambda o: features.xlnet_pretrain_spec(o.max_seq_length, o.num_predict),
    create_instances=_create,
    job_defaults=base.SINGLE_PASS_CASED,
    summary={
        # 85 of 512 -> 0.166.
        "target_rate": ("targets", "real_tokens"),
        "targets_per_instance": ("targets", "instances"),
        # Slightly above 0.5: a block without a cut point always takes a random B.
        "b_random_fraction": ("b_random", "instances"),
        # Pieces per span: sum 1/n * n / sum 1/n = 5 / 2.283 = 2.19 for piece spans of 1..5.
        "mean_span_length": ("span_tokens", "spans"),
        "span_target_fraction": ("span_tokens", "targets"),
        "tail_token_fraction": ("dropped/tail_tokens", "stream_tokens"),
        "span_len_fraction": base.Shares("span_len", "spans"),
    },
)
