"""ERNIE 1.0 pre-training instances: knowledge (unit) masking + NSP (docs/objectives.md section 5;
Sun et al. 2019, "ERNIE: Enhanced Representation through Knowledge Integration").

BERT's layout, pairs, budget and features (``bert.iterate_pairs``, ``bert.make_instance``,
``features.bert_pretrain_spec``), with ERNIE's masking units in place of BERT's words:

* Units: every whole word, plus the multi-word units (phrases, entities) of ``Doc.units``
  (per segment, (start, end) piece spans; ``OBJECTIVE.wants_units`` makes the job supply
  them through ``find_units``: annotated spans via ``units_from_char_spans``, otherwise the
  documented ``heuristic_units``). A unit is widened to the whole words it touches, and units
  that then share a word become one. Units follow their pieces through pair building and
  truncation (a unit cut by truncation keeps its remaining pieces).
* Masking: BERT's budget, min(max_predictions_per_seq, max(1, round(0.15 * len))); units in
  random order, each taken whole while within the budget (a unit larger than the remaining
  budget is skipped, never split). Every piece of a chosen unit then gets BERT's 80/10/10
  independently: per piece, as BERT whole-word masking and as ERNIE 1.0's own batching code
  (which draws a fresh probability for every piece after the unit's first), not one decision
  per unit.
* Unit- vs piece-level: ERNIE 1.0 mixes unit-level masking with basic (character/piece
  level) masking, per input file. Here each instance is unit-level with probability
  --unit_level_fraction (default 1.0: all unit-level) and otherwise masks single pieces as
  BERT without whole-word masking.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from text import flags
from data_pipelines.objectives import base, bert

Span = Tuple[int, int]
# A heuristic unit longer than this many words is more likely a heading in title case than a
# name; it is not emitted.
MAX_HEURISTIC_UNIT_WORDS = 6


@dataclasses.dataclass(frozen=True)
class ErnieOptions(bert.BertOptions):
    """BERT's knobs (whole_word_mask unused: unit-level instances always mask whole words)
    plus the share of unit-level instances."""

    whole_word_mask: bool = flags.fixed(True)
    unit_level_fraction: float = flags.option(
        1.0, "share of instances masked by units (whole words, phrases, entities); the rest mask single "
        "pieces. ERNIE 1.0 mixes the two per input file (default %(default)s)")

    def __post_init__(self):
        super().__post_init__()
        if not 0.0 <= self.unit_level_fraction <= 1.0:
            raise ValueError(f"unit_level_fraction must be in [0, 1], got {self.unit_level_fraction}")


# ---------------------------------------------------------------------------------------------
# Units of one sentence, for the job (Objective.find_units).


def units_from_char_spans(piece_starts: Sequence[int], piece_ends: Sequence[int],
                          char_spans: Sequence[Span]) -> List[Span]:
    """Piece spans (start, end exclusive) covering the given spans of one sentence.

    ``char_spans`` are [start, end) offsets in the same units as the piece offsets (the job
    passes UTF-8 byte offsets for both). A span that does not align with piece boundaries is
    widened to the whole pieces it overlaps; a span that is empty or overlaps no piece is
    dropped; overlapping results (nested entities) are merged, so the result is sorted and
    non-overlapping, as ``Doc.units`` requires.
    """
    starts = np.asarray(piece_starts, dtype=np.int64)
    ends = np.asarray(piece_ends, dtype=np.int64)
    spans: List[Span] = []
    for lo, hi in char_spans:
        if hi <= lo:
            continue
        # A piece is covered when it overlaps [lo, hi); a zero-width piece when it lies inside.
        covered = ((starts < hi) & (ends > lo)) | ((starts == ends) & (starts >= lo) & (starts < hi))
        hits = np.flatnonzero(covered)
        if len(hits):
            spans.append((int(hits[0]), int(hits[-1]) + 1))
    merged: List[Span] = []
    for a, b in sorted(spans):
        if merged and a < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


_WORD = re.compile(r"\S+")


def heuristic_units(text: str, piece_starts: Sequence[int], piece_ends: Sequence[int]) -> List[Span]:
    """Phrase/entity units of a sentence without annotations: runs of 2 to 6 capitalised words.

    The heuristic (for cased text; lower-cased input yields no units): split the sentence at
    whitespace; a word's core is the part from its first to its last letter or digit; a word
    is capitalised when its core starts with an upper-case letter. The sentence's first word
    is never counted (it is capitalised by convention), punctuation before a word or after it
    ends a run ("John Smith, Mary Jones" -> two units), and runs of 2 to 6 such words become
    units ("The United Nations met in New York" -> "United Nations", "New York"). Offsets:
    ``piece_starts``/``piece_ends`` are UTF-8 byte offsets into ``text``.
    """
    # byte_at[k]: the UTF-8 byte offset of character k.
    byte_at = [0]
    for ch in text:
        byte_at.append(byte_at[-1] + len(ch.encode("utf-8")))
    runs: List[List[Span]] = []
    current: List[Span] = []
    first = True
    for m in _WORD.finditer(text):
        word = m.group()
        alnum = [k for k, ch in enumerate(word) if ch.isalnum()]
        if not alnum:
            # A punctuation-only token ("-", "&") breaks a run.
            runs.append(current)
            current = []
            continue
        lo, hi = alnum[0], alnum[-1] + 1
        core_start, core_end = m.start() + lo, m.start() + hi
        capitalised = word[lo].isupper() and not first
        first = False
        if capitalised and lo == 0:
            current.append((core_start, core_end))
        elif capitalised:
            # Leading punctuation ("(United") starts a new run.
            runs.append(current)
            current = [(core_start, core_end)]
        else:
            runs.append(current)
            current = []
            continue
        if hi < len(word):
            # Trailing punctuation ("Smith,") ends the run after this word.
            runs.append(current)
            current = []
    runs.append(current)
    spans = [(byte_at[r[0][0]], byte_at[r[-1][1]]) for r in runs if 2 <= len(r) <= MAX_HEURISTIC_UNIT_WORDS]
    return units_from_char_spans(piece_starts, piece_ends, spans)


def find_units(text: str, piece_starts: Sequence[int], piece_ends: Sequence[int],
               annotated: Optional[Sequence[Span]]) -> List[Span]:
    """The units of one sentence: the annotated spans when the input has them (even an empty
    list), else the heuristic."""
    if annotated is not None:
        return units_from_char_spans(piece_starts, piece_ends, annotated)
    return heuristic_units(text, piece_starts, piece_ends)


# ---------------------------------------------------------------------------------------------
# Masking groups.


def segment_groups(segment: Sequence[int], units: Sequence[Span], is_word_start: np.ndarray,
                   on_bad_unit=None) -> Tuple[List[int], List[bool]]:
    """Per piece, the label of its masking group within the segment, and per label whether
    the group came from a unit spanning two or more words.

    Labels are word numbers: a word keeps its own unless a unit merged it into the first word
    of the unit (widened to whole words). Units out of range are dropped (``on_bad_unit()``).
    """
    word_of: List[int] = []
    word = -1
    for i, t in enumerate(segment):
        # A segment's first piece starts a word even if it is a continuation piece.
        if i == 0 or is_word_start[t]:
            word += 1
        word_of.append(word)
    num_words = word_of[-1] + 1 if word_of else 0
    label = list(range(num_words))
    multiword = [False] * num_words
    for a, b in sorted(units):
        if not (0 <= a < b <= len(segment)):
            if on_bad_unit is not None:
                on_bad_unit()
            continue
        first, last = word_of[a], word_of[b - 1]
        # Units are visited by start: if an earlier one reached word `first`, this one joins it.
        root = label[first]
        for w in range(first, last + 1):
            label[w] = root
        multiword[root] = multiword[root] or last > first
    return [label[w] for w in word_of], multiword


def tag_document(doc: base.Doc, doc_pos: int, is_word_start: np.ndarray, ctx: base.PoolContext) -> List[list]:
    """The document's segments as lists of (piece id, group key); the key is unique per
    (document, segment, group) and tells whether the group is a multi-word unit."""
    units = doc.units
    if units is not None and len(units) != len(doc.segments):
        ctx.count("dropped/units_misaligned")
        units = None
    tagged = []
    for s, seg in enumerate(doc.segments):
        labels, multiword = segment_groups(seg, units[s] if units is not None else (), is_word_start,
                                           lambda: ctx.count("dropped/bad_unit"))
        tagged.append([(int(t), (doc_pos, s, g, multiword[g])) for t, g in zip(seg, labels)])
    return tagged


def pair_groups(keys_a: Sequence, keys_b: Sequence) -> List[List[int]]:
    """Masking groups as positions of ``[CLS] A [SEP] B [SEP]``: runs of equal keys."""
    groups: List[List[int]] = []
    for offset, keys in ((1, keys_a), (len(keys_a) + 2, keys_b)):
        previous = None
        for j, key in enumerate(keys):
            if groups and key == previous:
                groups[-1].append(offset + j)
            else:
                groups.append([offset + j])
            previous = key
    return groups


# ---------------------------------------------------------------------------------------------
# The objective as the Beam job sees it (data_pipelines/objectives/base.py).


def _create(docs: Sequence[base.Doc], ctx: base.PoolContext):
    options: ErnieOptions = ctx.options
    vocab = bert.vocab_from_base(ctx.vocab, "ernie")
    is_word_start = np.asarray(ctx.vocab.is_word_start, dtype=bool)
    tagged: Dict[int, List[list]] = {}

    def tagged_of(j: int) -> List[list]:
        if j not in tagged:
            tagged[j] = tag_document(docs[j], j, is_word_start, ctx)
        return tagged[j]

    def instances_of(pos, doc, rng):
        random_document = bert.pool_random_document(docs, pos, ctx, segments_of=tagged_of)
        pairs = bert.iterate_pairs(tagged_of(pos), rng, random_document, options)
        for a, b, label, _ in pairs:
            ids_a, keys_a = [t for t, _ in a], [k for _, k in a]
            ids_b, keys_b = [t for t, _ in b], [k for _, k in b]
            f = options.unit_level_fraction
            unit_level = f >= 1.0 or (f > 0.0 and rng.random() < f)
            if unit_level:
                groups = pair_groups(keys_a, keys_b)
            else:
                groups = [[p] for p in range(1, len(a) + 1)] + [[p] for p in range(len(a) + 2, len(a) + len(b) + 2)]
            inst = bert.make_instance(ids_a, ids_b, label == 1, rng, vocab, options, groups=groups)
            bert.count_masked_instance(ctx, inst)
            if unit_level:
                ctx.count("unit_level_instances")
                keys = [None, *keys_a, None, *keys_b, None]
                masked = set(inst["masked_lm_positions"])
                chosen = [g for g in groups if g[0] in masked]
                ctx.count("masked_units", len(chosen))
                ctx.count("masked_multiword_units", sum(1 for g in chosen if keys[g[0]][3]))
            yield inst

    return base.document_instances(docs, ctx, instances_of)


OBJECTIVE = base.Objective(
    name="ernie",
    recipe="ERNIE 1.0 (Sun et al. 2019): masked LM over whole words, phrases and entities + NSP, WordPiece",
    tokenizer="wordpiece",
    options=ErnieOptions,
    feature_spec=bert.feature_spec,
    create_instances=_create,
    summary={
        **bert.MASKED_LM_SUMMARY,
        "unit_level_fraction": ("unit_level_instances", "instances"),
        # Of the units masked in unit-level instances, those spanning two or more words.
        "multiword_unit_fraction": ("masked_multiword_units", "masked_units"),
    },
    wants_units=True,
    find_units=find_units,
)
