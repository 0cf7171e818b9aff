"""What every pre-training objective gives the Beam job, and what the job gives it back.

An objective is a plain record (``Objective``) of functions; ``data_pipelines.make_pretrain``
knows nothing objective-specific. The job:

1. reads documents and tokenizes them with the objective's tokenizer kind into ``Doc`` records
   (sentences -> lists of piece ids; ERNIE-style objectives also get unit spans);
2. for each dupe pass d (``--dupe_factor``; objectives that mask dynamically default to 1),
   hashes chunks of consecutive documents (1/8 of a pool each) into *pools* of about
   ``--random_document_pool_size`` documents (``sha256(seed, d, chunk id) % num_pools``), so
   that no worker ever needs the whole corpus;
3. calls ``objective.create_instances(docs, ctx)`` once per (dupe pass, pool), with the
   pool's documents sorted by id and a ``PoolContext`` for randomness and counters;
4. keys each instance by ``sha256(seed, dupe, instance key)``, which decides its shard and
   its place in the shard (the fixed-seed shuffle), and writes the features with
   ``features.serialize_example(objective.feature_spec(options), features)``.

Per-document objectives (BERT, ALBERT, SpanBERT, ERNIE, ELECTRA) loop over the pool's
documents; random-next/SOP draw the other document from the pool; packing objectives
(RoBERTa FULL-SENTENCES, GPT-2, T5, XLNet, BART) concatenate the pool's documents in the
given order (the last partial block of a pool is the only loss, and is counted).

Randomness: ``ctx.rng(*key)`` is a numpy Generator seeded from ``sha256(seed, dupe, *key)``;
use the document id (per-document objectives) or the first document id of a block
(packing objectives) as the key, so results do not depend on sharding, retries, the runner
or the number of workers.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from text import features, flags

@dataclasses.dataclass
class Doc:
    """A tokenized document.

    id: stable id ("relative/path:index" or "path:line" for JSONL).
    segments: its sentences as non-empty lists of piece ids.
    units: only for objectives with ``wants_units``: per segment, sorted non-overlapping
      (start, end) piece spans (end exclusive) of multi-word units (phrases, entities).
    """

    id: str
    segments: List[List[int]]
    units: Optional[List[List[Tuple[int, int]]]] = None


class PoolContext:
    """Randomness, counters and shared data for one ``create_instances`` call."""

    def __init__(self, seed: int, dupe: int, vocab: Vocab, options: Any,
                 unigram_counts: Optional[np.ndarray] = None):
        self.seed = seed
        self.dupe = dupe
        self.vocab = vocab
        self.options = options
        # Corpus token counts per id (length vocab.size), for objectives with wants_unigram.
        self.unigram_counts = unigram_counts
        self.stats: Dict[str, int] = {}

    def rng(self, *key) -> np.random.Generator:
        digest = hashlib.sha256("\x1f".join(["rng", str(self.seed), str(self.dupe)] + [str(k) for k in key])
                                .encode("utf-8")).digest()
        return np.random.default_rng(int.from_bytes(digest[:16], "big"))

    def count(self, name: str, n: int = 1) -> None:
        """Adds ``n`` to counter ``name`` (summed over the job into stats.json["counters"])."""
        if n:
            self.stats[name] = self.stats.get(name, 0) + int(n)


@dataclasses.dataclass
class InstanceBatch:
    """Many instances as padded columns, which an objective may yield instead of one
    (key, feature dict) pair per instance: the job serializes columns without building a
    dict per instance (``features.serialize_columns``).

    keys: the instances' keys (unique within the create_instances call).
    columns: feature name -> [N, <= spec length] array, zero beyond the real values.
    lengths: feature name -> [N] number of real values per row.
    """

    keys: List[str]
    columns: Dict[str, np.ndarray]
    lengths: Dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.keys)


# create_instances(docs, ctx) -> iterator of (instance key, {feature name: list of values})
# pairs, or of InstanceBatch objects. A key must be unique within the (dupe, pool) call,
# e.g. f"{doc.id}|{index}".
CreateInstancesFn = Callable[[Sequence[Doc], PoolContext], Iterator[Tuple[str, Dict[str, Sequence]]]]


def document_instances(docs: Sequence[Doc], ctx: PoolContext,
                       instances_of: Callable[[int, Doc, np.random.Generator], Iterable[Dict[str, Sequence]]]
                       ) -> Iterator[Tuple[str, Dict[str, Sequence]]]:
    """For per-document objectives: the instances ``instances_of(pos, doc, rng)`` makes of the
    pool's document at ``pos``, keyed "<document id>|<index>", with the document's own
    Generator ``ctx.rng(doc.id)``. A document without tokens makes none and is counted
    (dropped/empty_document)."""
    for pos, doc in enumerate(docs):
        if not any(len(s) for s in doc.segments):
            ctx.count("dropped/empty_document")
            continue
        rng = ctx.rng(doc.id)
        for index, inst in enumerate(instances_of(pos, doc, rng)):
            yield f"{doc.id}|{index}", inst


def block_keys(docs: Sequence[Doc], blocks: Iterable[Tuple[int, Any]]) -> Iterator[Tuple[str, Any]]:
    """For packing objectives: (index of the document holding a block's first piece, block) ->
    (key, block), the key being that document's id and the block's index among the blocks
    starting there: unique in the pool and independent of how pools are processed."""
    per_doc: Dict[int, int] = {}
    for k, block in blocks:
        n = per_doc.get(k, 0)
        per_doc[k] = n + 1
        yield f"{docs[k].id}|{n}", block


@dataclasses.dataclass(frozen=True)
class Shares:
    """A summary entry for a family of counters ``prefix/k``: the rates ``name/k`` of its members
    over the counter ``denominator``, or over the family's own sum when None (then they add up
    to 1); see ``shares``."""

    prefix: str
    denominator: Optional[str] = None


# An entry of an objective's summary table (stats.json name -> entry):
#   (numerator, denominator): the rate of two counters (``rate``);
#   a counter name: that counter's total;
#   Shares(prefix, denominator): the rates of a family of counters, named name/k;
#   a function of the counters: its value (``tail_drop_rate``).
SummaryEntry = Union[Tuple[str, str], str, Shares, Callable[[Mapping[str, int]], Any]]


@dataclasses.dataclass(frozen=True)
class Objective:
    """One pre-training objective as the Beam job sees it.

    name: the --objective value.
    recipe: one line naming the paper and the recipe (shown in --help).
    tokenizer: the default tokenizer kind: "wordpiece" | "sentencepiece" | "bpe".
    options: the objective's frozen options dataclass. Its ``flags.option`` fields are the
      objective's own flags (help texts give the published default, and the code default where
      docs/objectives.md says they differ); its plain fields are the job's flags of the same
      name (``max_seq_length``), whose defaults it sets; its ``flags.fixed`` fields no flag sets.
      ``__post_init__`` raises ValueError for a bad combination.
    feature_spec: options -> features.Spec of the written tf.train.Examples.
    create_instances: see CreateInstancesFn.
    job_defaults: further overrides of the job's flag defaults that are not options (e.g.
      {"dupe_factor": 40} for ALBERT; SINGLE_PASS_CASED).
    summary: the extra stats.json entries (rates, means) as a table of name -> ``SummaryEntry``,
      evaluated over the counters summed over the job by ``summarize``.
    wants_units: the job attaches unit spans to each Doc (ERNIE).
    wants_unigram: the job counts corpus piece frequencies first (SpanBERT replacements).
    find_units: how the job turns a sentence's annotations (or, without any, a heuristic)
      into unit spans for Doc.units.
    """

    name: str
    recipe: str
    tokenizer: str
    options: type
    feature_spec: Callable[[Any], features.Spec]
    create_instances: CreateInstancesFn
    job_defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    summary: Mapping[str, SummaryEntry] = dataclasses.field(default_factory=dict)
    wants_units: bool = False
    wants_unigram: bool = False
    # With wants_units: (sentence text, piece byte starts, piece byte ends, annotated unit
    # byte spans of the sentence or None) -> piece spans (start, end) of the units.
    find_units: Optional[Callable[[str, Sequence[int], Sequence[int], Optional[Sequence[Tuple[int, int]]]],
                                  List[Tuple[int, int]]]] = None

    def add_flags(self, group) -> None:
        """The objective's own flags (an argparse group)."""
        flags.add_option_flags(group, self.options)

    def make_options(self, args: argparse.Namespace):
        """The options from the parsed flags (common + own); ValueError for a bad combination."""
        return flags.options_from_args(self.options, args)

    @property
    def defaults(self) -> Dict[str, Any]:
        """The objective's defaults of the job's common flags (e.g. {"max_seq_length": 512,
        "dupe_factor": 40} for ALBERT)."""
        return {**flags.job_defaults(self.options), **self.job_defaults}

    def summarize(self, counters: Mapping[str, int]) -> Dict[str, Any]:
        """The summary's entries, in the table's order, over the job's counters."""
        out: Dict[str, Any] = {}
        for name, entry in self.summary.items():
            if isinstance(entry, tuple):
                out[name] = rate(counters, *entry)
            elif isinstance(entry, str):
                out[name] = counters.get(entry, 0)
            elif isinstance(entry, Shares):
                out.update(shares(counters, entry.prefix, name, entry.denominator))
            else:
                out[name] = entry(counters)
        return out


# The job defaults of objectives that make one pass over the corpus (their masks are drawn in
# the input pipeline, or there are none) over a cased vocabulary (byte-level BPE, SentencePiece).
SINGLE_PASS_CASED = {"dupe_factor": 1, "do_lower_case": False}


def check_shares(options, *names: str) -> None:
    """For an options record's ``__post_init__``: ValueError naming the first of the fields
    ``names`` (probabilities, shares) outside [0, 1]."""
    for name in names:
        value = getattr(options, name)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")


def check_at_least(options, minimum, *names: str, why: str = "") -> None:
    """For an options record's ``__post_init__``: ValueError naming the first of the fields
    ``names`` (counts, lengths) below ``minimum``, with ``why`` that minimum ("<s> piece </s>")."""
    for name in names:
        value = getattr(options, name)
        if value < minimum:
            raise ValueError(f"{name} must be >= {minimum}{f' ({why})' if why else ''}, got {value}")


def check_choice(options, name: str, choices: Sequence[str]) -> None:
    """For an options record's ``__post_init__``: ValueError unless the field ``name`` is one of
    ``choices``."""
    value = getattr(options, name)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def rate(counters: Mapping[str, int], numerator: str, denominator: str) -> float:
    """For an objective's summary: counter ``numerator`` over counter ``denominator``
    (0.0 where the denominator never counted)."""
    d = counters.get(denominator, 0)
    return counters.get(numerator, 0) / d if d else 0.0


def shares(counters: Mapping[str, int], prefix: str, name: str,
           denominator: Optional[str] = None) -> Dict[str, float]:
    """``{name/k: counters[prefix/k] / total}`` for every counter ``prefix/k`` (in sorted order):
    total is the counter ``denominator``, or the family's own sum when None (then the shares
    add up to 1), e.g. ``shares(c, "ngram", "ngram_fraction")`` gives ngram_fraction/1, ..."""
    family = {key.split("/", 1)[1]: n for key, n in sorted(counters.items())
              if key.startswith(prefix + "/")}
    total = sum(family.values()) if denominator is None else counters.get(denominator, 0)
    return {f"{name}/{k}": n / total if total else 0.0 for k, n in family.items()}


def tail_drop_rate(counters: Mapping[str, int]) -> float:
    """The share of the pieces a block-packing objective lost in the pools' last, partial
    blocks: dropped/tail_tokens over those and the written real_tokens."""
    written, dropped = counters.get("real_tokens", 0), counters.get("dropped/tail_tokens", 0)
    return dropped / (written + dropped) if written + dropped else 0.0
