"""ELECTRA pre-training sequences: unmasked WordPiece (docs/objectives.md section 6).

Clark et al. 2020 ("ELECTRA") build their data with ``build_pretraining_dataset.py``, whose
``ExampleBuilder`` reads sentences (lines) one by one and, in our words:

* accumulates sentences until their total length reaches ``target_length`` or the document
  ends (a blank line; a document's remainder always becomes an example);
* splits the accumulated sentences into two segments: with probability 0.1 the first segment
  takes everything (a single-segment example, "as in classification tasks"); otherwise the
  first segment targets ``(target_length - 3) // 2`` tokens. Sentence by sentence, a
  sentence joins the first segment if (1) the first segment is empty, or (2) it keeps the
  first segment strictly under that target, or (3) the second segment is still empty, the
  first is still under target, and a coin (p = 0.5) says so; otherwise it joins the second;
* truncates at the end only: ``A = A[:L - 2]``, ``B = B[:max(0, L - |A| - 3)]``
  (L = max_seq_length) - the accumulated length counts no [CLS]/[SEP], so chunks routinely
  overshoot by a sentence and lose its end;
* after each example draws the next ``target_length``: with probability 0.05 uniform in
  [5, L], otherwise L;
* lays out ``[CLS] A [SEP]`` (segment 0) and, if B is not empty, ``B [SEP]`` (segment 1).

So about 10% of the examples are single-segment by the draw, plus those whose chunk put all its
sentences into A (one-sentence chunks, or B truncated away). The original keeps one builder over
the whole stream, so the target drawn after a document's last example is used by the next
document; here documents are independent (randomness keyed by document id, so the output
does not depend on how the corpus is split over workers), and each document starts from a
fresh draw of the same rule, which gives the same distribution.

Nothing is masked here: ELECTRA masks in the graph (garden/models/electra/pretrainer.py).
Counted: ``real_tokens``, ``single_segment`` (instances without B), ``single_segment_draws``,
``random_length_targets``, ``truncated_tokens``.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterator, List, Sequence, Tuple

import numpy as np

from text import features, flags
from data_pipelines.objectives import base


@dataclasses.dataclass(frozen=True)
class ElectraOptions:
    """Defaults are the original build_pretraining_dataset.py's."""

    max_seq_length: int = 128
    single_segment_prob: float = flags.option(
        0.1, "probability that an example puts all its sentences in one segment "
        "(default %(default)s, as build_pretraining_dataset.py)")
    random_length_prob: float = flags.option(
        0.05, "probability that an example targets a random length randint(5, max_seq_length) "
        "instead of max_seq_length (default %(default)s, as build_pretraining_dataset.py)")

    def __post_init__(self):
        # The random target is randint(5, max_seq_length).
        base.check_at_least(self, 5, "max_seq_length")
        base.check_shares(self, "single_segment_prob", "random_length_prob")


def draw_target_length(rng: np.random.Generator, max_seq_length: int, random_length_prob: float
                       ) -> Tuple[int, bool]:
    """``(target, drawn at random)``: max_seq_length, or with prob random_length_prob a uniform
    length in [5, max_seq_length]."""
    if rng.random() < random_length_prob:
        return int(rng.integers(5, max_seq_length + 1)), True
    return max_seq_length, False


def split_segments(sentences: Sequence[Sequence[int]], target_length: int, rng: np.random.Generator,
                   single_segment_prob: float) -> Tuple[List[int], List[int], bool]:
    """``(A, B, single-segment draw)`` of one chunk, before truncation (see module docstring)."""
    single = bool(rng.random() < single_segment_prob)
    # -3: [CLS] and two [SEP] are not in the accumulated length yet.
    first_target = float("inf") if single else (target_length - 3) // 2
    first: List[int] = []
    second: List[int] = []
    for sentence in sentences:
        # The coin is only thrown when (1) and (2) fail and B is empty and A under target,
        # as the original's short-circuit `or` does.
        if (not first or len(first) + len(sentence) < first_target
                or (not second and len(first) < first_target and rng.random() < 0.5)):
            first.extend(sentence)
        else:
            second.extend(sentence)
    return first, second, single


def truncate_segments(first: Sequence[int], second: Sequence[int], max_seq_length: int
                      ) -> Tuple[List[int], List[int]]:
    """A to L-2 pieces, then B to what is left after [CLS] A [SEP] ... [SEP] (the ends go)."""
    first = list(first[:max_seq_length - 2])
    second = list(second[:max(0, max_seq_length - len(first) - 3)])
    return first, second


def make_example(first: Sequence[int], second: Sequence[int], cls_id: int, sep_id: int) -> Dict[str, list]:
    """[CLS] A [SEP] (segment 0) and, if B is not empty, B [SEP] (segment 1)."""
    input_ids = [cls_id, *first, sep_id]
    segment_ids = [0] * len(input_ids)
    if second:
        input_ids += [*second, sep_id]
        segment_ids += [1] * (len(second) + 1)
    return {"input_ids": input_ids, "input_mask": [1] * len(input_ids), "segment_ids": segment_ids}


def create_instances_from_document(document: Sequence[Sequence[int]], rng: np.random.Generator,
                                   cls_id: int, sep_id: int, options: ElectraOptions = ElectraOptions()
                                   ) -> List[Tuple[Dict[str, list], Dict[str, int]]]:
    """One document -> ``[(feature dict, facts)]``; facts: single_segment_draw (0/1),
    random_length_target (0/1, the target this example was built to), truncated_tokens."""
    sentences = [list(s) for s in document if len(s)]
    out = []
    target, random_target = draw_target_length(rng, options.max_seq_length, options.random_length_prob)
    chunk: List[List[int]] = []
    length = 0
    for i, sentence in enumerate(sentences):
        chunk.append(sentence)
        length += len(sentence)
        if length >= target or i == len(sentences) - 1:
            first, second, single = split_segments(chunk, target, rng, options.single_segment_prob)
            a, b = truncate_segments(first, second, options.max_seq_length)
            example = make_example(a, b, cls_id, sep_id)
            facts = {"single_segment_draw": int(single),
                     "random_length_target": int(random_target),
                     "truncated_tokens": len(first) + len(second) - len(a) - len(b)}
            out.append((example, facts))
            chunk, length = [], 0
            if i < len(sentences) - 1:
                target, random_target = draw_target_length(rng, options.max_seq_length, options.random_length_prob)
    return out


# ---------------------------------------------------------------------------------------------
# The objective as the Beam job sees it (data_pipelines/objectives/base.py).


def _create(docs: Sequence[base.Doc], ctx: base.PoolContext) -> Iterator[Tuple[str, Dict[str, list]]]:
    options: ElectraOptions = ctx.options
    cls_id = ctx.vocab.special("cls", "electra")
    sep_id = ctx.vocab.special("sep", "electra")

    def instances_of(pos, doc, rng):
        for inst, facts in create_instances_from_document(doc.segments, rng, cls_id, sep_id, options):
            ctx.count("real_tokens", len(inst["input_ids"]))
            ctx.count("single_segment", int(not any(inst["segment_ids"])))
            ctx.count("single_segment_draws", facts["single_segment_draw"])
            ctx.count("random_length_targets", facts["random_length_target"])
            ctx.count("truncated_tokens", facts["truncated_tokens"])
            yield inst

    return base.document_instances(docs, ctx, instances_of)


OBJECTIVE = base.Objective(
    name="electra",
    recipe="ELECTRA (Clark et al. 2020): unmasked WordPiece sequences as build_pretraining_dataset.py "
    "(masking happens in the model)",
    tokenizer="wordpiece",
    options=ElectraOptions,
    feature_spec=lambda o: features.electra_pretrain_spec(o.max_seq_length),
    create_instances=_create,
    job_defaults={"dupe_factor": 1},
    summary={
        # ~0.1 by the draw (single_segment_prob) ...
        "single_segment_draw_fraction": ("single_segment_draws", "instances"),
        # ... plus one-sentence chunks and B truncated away.
        "single_segment_fraction": ("single_segment", "instances"),
        "random_length_fraction": ("random_length_targets", "instances"),
        "mean_length": ("real_tokens", "instances"),
    },
)
