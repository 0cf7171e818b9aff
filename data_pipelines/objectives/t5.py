"""T5 span corruption (docs/objectives.md section 8; Raffel et al. 2020, "Exploring the Limits of
Transfer Learning with a Unified Text-to-Text Transformer", section 3.1.4 and the C4 recipe).

Plain functions of token ids and an explicit ``numpy.random.Generator``:

* ``random_spans_helper``: the raw chunk length L whose corrupted inputs (non-noise tokens,
  one sentinel per noise span, EOS) fill exactly ``inputs_length`` positions, and the length
  of the targets (one sentinel per span, the noise tokens, EOS) such a chunk gives:
  512 -> (568, 114) and 128 -> (141, 29), T5's published numbers.
* ``noise_span_counts``: for a chunk of L tokens, num_noise = clip(round(density L), 1, L-1)
  and num_spans = max(1, round(num_noise / mean_span_length)) (rounding half to even, as
  T5's ``tf.round``); the helper and the corruption share it, so a full chunk always fills
  ``inputs_length`` exactly.
* ``random_noise_mask``: the noise and non-noise tokens are each cut into num_spans non-empty
  runs uniformly at random (every composition equally likely) and interleaved, non-noise
  first, so a chunk never starts with noise and always ends with it.
* ``corrupt_chunk``: inputs = each non-noise run followed by its sentinel, then EOS;
  targets = each sentinel followed by its noise run, then EOS.

Vocabulary: the sentinels are NOT pieces of the SentencePiece model. As in T5 (32000 pieces
+ 100 extra ids = 32100), the model's vocabulary is the SentencePiece vocabulary followed by
``num_sentinels`` sentinel ids counting down from its end:
``<extra_id_i> = vocab.size + num_sentinels - 1 - i``. The model must therefore be built with
``model_vocab_size = vocab.size + num_sentinels`` (reported in stats.json).

Packing: the documents of a pool are concatenated in the given order, without separator, and
cut into chunks of L raw tokens. The pool's final, shorter chunk is corrupted with its own
length (as T5 does with the tail of a split), counted as ``short_final_chunks``; a final chunk
of a single token cannot hold a noise span and a non-noise span and is dropped, counted as
``dropped/chunk_too_short`` (and its token in ``dropped_tokens/chunk_too_short``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Iterator, List, Sequence, Tuple

import numpy as np

from text import features, flags
from data_pipelines.objectives import base

NAME = "t5"


@dataclasses.dataclass(frozen=True)
class T5Options:
    """The knobs of span corruption; defaults are T5's published recipe."""

    inputs_length: int = flags.option(
        512, "encoder input length incl. EOS; the raw chunk length comes from T5's random_spans_helper "
        "(512 -> 568 raw tokens, targets 114) (default %(default)s). --max_seq_length only sets the job's "
        "length-histogram range for t5")
    noise_density: float = flags.option(0.15, "share of raw tokens corrupted (default %(default)s)")
    mean_noise_span_length: float = flags.option(
        3.0, "mean length of a corrupted span in pieces (default %(default)s)")
    num_sentinels: int = flags.option(
        100, "sentinel ids appended after the SentencePiece vocabulary, <extra_id_i> = vocab_size + "
        "num_sentinels - 1 - i; the model's vocabulary size is vocab_size + num_sentinels (default "
        "%(default)s, as T5)")

    def __post_init__(self):
        if not 0.0 < self.noise_density < 1.0:
            raise ValueError(f"noise_density must be in (0, 1), got {self.noise_density}")
        base.check_at_least(self, 1, "mean_noise_span_length", "num_sentinels")
        # The shortest corruptible chunk (2 tokens) gives 1 kept token + 1 sentinel + EOS.
        base.check_at_least(self, 3, "inputs_length")
        _, _, spans = noise_span_counts(self.raw_length, self.noise_density, self.mean_noise_span_length)
        if spans > self.num_sentinels:
            raise ValueError(
                f"a chunk of {self.raw_length} tokens has {spans} noise spans but only {self.num_sentinels} "
                f"sentinels exist; raise --num_sentinels or lower --inputs_length")

    @property
    def raw_length(self) -> int:
        return _lengths(self.inputs_length, self.noise_density, self.mean_noise_span_length)[0]

    @property
    def targets_length(self) -> int:
        return _lengths(self.inputs_length, self.noise_density, self.mean_noise_span_length)[1]


def noise_span_counts(length: int, noise_density: float, mean_noise_span_length: float) -> Tuple[int, int, int]:
    """(num_noise, num_nonnoise, num_spans) for a chunk of ``length`` >= 2 tokens.

    num_noise = clip(round(density * L), 1, L - 1): at least one token of each kind, so both
    partitions below are non-empty. num_spans = max(1, round(num_noise / mean)), capped at
    num_nonnoise so that every non-noise run is non-empty too (the cap never binds for the
    default density: 0.85 L non-noise tokens against 0.05 L spans).
    """
    if length < 2:
        raise ValueError(f"a chunk needs at least 2 tokens to be corrupted, got {length}")
    num_noise = min(max(int(np.round(length * noise_density)), 1), length - 1)
    num_nonnoise = length - num_noise
    num_spans = min(max(1, int(np.round(num_noise / mean_noise_span_length))), num_nonnoise)
    return num_noise, num_nonnoise, num_spans


def corrupted_lengths(length: int, noise_density: float, mean_noise_span_length: float,
                      extra_tokens_per_span_inputs: int = 1, extra_tokens_per_span_targets: int = 1) -> Tuple[int, int]:
    """(inputs length, targets length) of a corrupted chunk of ``length`` raw tokens, EOS included."""
    num_noise, num_nonnoise, num_spans = noise_span_counts(length, noise_density, mean_noise_span_length)
    return (num_nonnoise + num_spans * extra_tokens_per_span_inputs + 1,
            num_noise + num_spans * extra_tokens_per_span_targets + 1)


def random_spans_helper(inputs_length: int, noise_density: float, mean_noise_span_length: float,
                        extra_tokens_per_span_inputs: int = 1, extra_tokens_per_span_targets: int = 1
                        ) -> Tuple[int, int]:
    """(raw_length, targets_length): the longest raw chunk whose corrupted inputs (EOS
    included) fit in ``inputs_length``, and the targets length (EOS included) it gives.

    The inputs length grows by 0 or 1 per extra raw token (a token is either kept, +1, or
    noise, +0 or +1 when it opens a new span), so the longest fitting chunk fills
    ``inputs_length`` exactly. 512 -> (568, 114): 568 tokens = 85 noise in 28 spans +
    483 kept; inputs 483 + 28 + 1 = 512, targets 85 + 28 + 1 = 114.
    """
    def inputs_of(n):
        return corrupted_lengths(n, noise_density, mean_noise_span_length,
                                 extra_tokens_per_span_inputs, extra_tokens_per_span_targets)[0]

    if inputs_of(2) > inputs_length:
        raise ValueError(f"inputs_length {inputs_length} cannot hold even a 2-token corrupted chunk")
    length = 2
    while inputs_of(length + 1) <= inputs_length:
        length += 1
    return length, corrupted_lengths(length, noise_density, mean_noise_span_length,
                                     extra_tokens_per_span_inputs, extra_tokens_per_span_targets)[1]


@functools.lru_cache(maxsize=64)
def _lengths(inputs_length, noise_density, mean_noise_span_length):
    return random_spans_helper(inputs_length, noise_density, mean_noise_span_length)


def random_segmentation(num_items: int, num_segments: int, rng: np.random.Generator) -> np.ndarray:
    """Lengths of ``num_segments`` non-empty runs covering ``num_items``, uniformly over all
    such compositions: the cut points are a uniform (num_segments-1)-subset of the
    num_items-1 gaps between items."""
    if not 1 <= num_segments <= num_items:
        raise ValueError(f"cannot cut {num_items} items into {num_segments} non-empty runs")
    cuts = np.sort(rng.choice(num_items - 1, size=num_segments - 1, replace=False)) + 1
    return np.diff(np.concatenate([[0], cuts, [num_items]])).astype(np.int64)


def random_noise_mask(length: int, rng: np.random.Generator, noise_density: float = 0.15,
                      mean_noise_span_length: float = 3.0) -> np.ndarray:
    """Boolean noise mask of a chunk: num_spans non-noise runs and num_spans noise runs,
    interleaved non-noise first (T5's ``random_spans_noise_mask``)."""
    num_noise, num_nonnoise, num_spans = noise_span_counts(length, noise_density, mean_noise_span_length)
    noise_runs = random_segmentation(num_noise, num_spans, rng)
    keep_runs = random_segmentation(num_nonnoise, num_spans, rng)
    runs = np.stack([keep_runs, noise_runs], axis=1).reshape(-1)
    is_noise = np.tile([False, True], num_spans)
    return np.repeat(is_noise, runs)


def corrupt_chunk(tokens: Sequence[int], noise_mask: np.ndarray, *, eos_id: int, vocab_size: int,
                  num_sentinels: int) -> Tuple[List[int], List[int]]:
    """(inputs, targets) of one chunk given its noise mask.

    inputs: the chunk with each noise run replaced by its sentinel, then EOS;
    targets: each sentinel followed by the noise run it stands for, then EOS.
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    noise_mask = np.asarray(noise_mask, dtype=bool)
    # A noise run starts where noise follows non-noise (or the chunk start).
    starts = noise_mask & ~np.concatenate([[False], noise_mask[:-1]])
    span_index = np.cumsum(starts) - 1
    if starts.sum() > num_sentinels:
        raise ValueError(f"{int(starts.sum())} noise spans but only {num_sentinels} sentinels")
    sentinels = vocab_size + num_sentinels - 1 - span_index
    inputs = np.where(starts, sentinels, tokens)[~noise_mask | starts]
    # In the targets the roles swap: the noise tokens, each run preceded by its sentinel.
    noise_positions = np.flatnonzero(noise_mask)
    targets = np.insert(tokens[noise_positions], np.flatnonzero(starts[noise_positions]), sentinels[starts])
    return [int(t) for t in inputs] + [eos_id], [int(t) for t in targets] + [eos_id]


def split_into_chunks(docs: Sequence[base.Doc], length: int) -> Iterator[Tuple[str, List[int]]]:
    """(id of the document the chunk starts in, chunk tokens): the documents' pieces
    concatenated in order without separator and cut every ``length`` tokens; the last chunk
    may be shorter."""
    buffer: List[int] = []
    first_id = None
    for doc in docs:
        for segment in doc.segments:
            pos = 0
            while pos < len(segment):
                if not buffer:
                    first_id = doc.id
                take = min(length - len(buffer), len(segment) - pos)
                buffer.extend(int(t) for t in segment[pos:pos + take])
                pos += take
                if len(buffer) == length:
                    yield first_id, buffer
                    buffer = []
    if buffer:
        yield first_id, buffer


# ---------------------------------------------------------------------------------------------
# The objective as the Beam job sees it (data_pipelines/objectives/base.py).


def _feature_spec(options: T5Options) -> features.Spec:
    return features.t5_pretrain_spec(options.inputs_length, options.targets_length)


def _create(docs: Sequence[base.Doc], ctx: base.PoolContext):
    options: T5Options = ctx.options
    vocab = ctx.vocab
    eos_id = vocab.special("eos", NAME)
    ctx.count("t5_pools")
    ctx.count("t5_model_vocab_size_sum", vocab.size + options.num_sentinels)
    raw_length = options.raw_length
    for index, (first_id, chunk) in enumerate(split_into_chunks(docs, raw_length)):
        if len(chunk) < 2:
            ctx.count("dropped/chunk_too_short")
            ctx.count("dropped_tokens/chunk_too_short", len(chunk))
            continue
        if len(chunk) < raw_length:
            ctx.count("short_final_chunks")
        # Key: the first document of the chunk and the chunk's index in the pool (unique and
        # independent of how the corpus is spread over workers).
        rng = ctx.rng(first_id, index)
        mask = random_noise_mask(len(chunk), rng, options.noise_density, options.mean_noise_span_length)
        inputs, targets = corrupt_chunk(chunk, mask, eos_id=eos_id, vocab_size=vocab.size,
                                        num_sentinels=options.num_sentinels)
        num_noise, _, num_spans = noise_span_counts(len(chunk), options.noise_density,
                                                    options.mean_noise_span_length)
        ctx.count("raw_tokens", len(chunk))
        ctx.count("noise_tokens", num_noise)
        ctx.count("noise_spans", num_spans)
        ctx.count("real_tokens", len(inputs))
        ctx.count("target_tokens", len(targets))
        yield f"{first_id}|{index}", {"inputs": inputs, "targets": targets}


def _model_vocab_size(counters) -> int:
    """SentencePiece pieces + sentinels: the embedding size the model must be built with (the
    same in every pool)."""
    pools = counters.get("t5_pools", 0)
    return counters.get("t5_model_vocab_size_sum", 0) // pools if pools else 0


OBJECTIVE = base.Objective(
    name=NAME,
    recipe="T5 (Raffel et al. 2020): span corruption, 15% noise in spans of mean 3, sentinels, SentencePiece",
    tokenizer="sentencepiece",
    options=T5Options,
    feature_spec=_feature_spec,
    create_instances=_create,
    job_defaults={"max_seq_length": 512, **base.SINGLE_PASS_CASED},
    summary={
        # Exactly the recipe's up to rounding: 85 / 568 = 0.1496 for full 512-input chunks.
        "noise_density": ("noise_tokens", "raw_tokens"),
        "mean_noise_span_length": ("noise_tokens", "noise_spans"),
        "model_vocab_size": _model_vocab_size,
        "short_final_chunks": "short_final_chunks",
        "dropped_chunks": "dropped/chunk_too_short",
    },
)
