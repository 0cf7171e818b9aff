"""Entity-level precision, recall and F1 of token tagging (CoNLL-2003 NER) with seqeval.

Scored per sentence: `gold` and `pred` are lists of sentences (lists of tags), and seqeval's
entity extraction closes every entity at a sentence's end, so an entity never runs from one
sentence into the next (Model Garden flattens a batch into one sequence, where an I-PER ending
one sentence and an I-PER starting the next become one entity). Words of long sentences that
were cut into pieces for the model are rejoined before scoring (garden.tasks.tagging), so
every word is scored.

Two modes, and the result says which (`mode`, `scheme`):
  "lenient" (default) seqeval's default mode, the conlleval script's rules: an entity starts
             at B-X, or at I-X after O or another type; tags are first converted IOB1 -> IOB2
             (which does not change what conlleval counts).
  "strict"   seqeval's mode="strict" with scheme=IOB2 after that conversion: an entity must
             start with B-X and continue with I-X of its type; an ill-formed predicted span
             (e.g. I-X after O in IOB2 data) is not an entity.
Scores are micro-averaged over entities, on the 0..1 scale, with per-type F1 next to them.
"""

from __future__ import annotations

from typing import Dict, List, Sequence

from text.tag_schemes import iob1_to_iob2

MODES = ("lenient", "strict")


def entity_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]],
                  scheme: str = "iob1", mode: str = "lenient") -> Dict:
    """{"f1", "precision", "recall", "per_type_f1", "entities", "mode", "scheme"}.

    gold, pred: one list of tags per sentence, of equal lengths; scheme: the tags' scheme
    ("iob1" as CoNLL-2003 is distributed, or "iob2").
    """
    from seqeval import metrics
    from seqeval.scheme import IOB2

    if mode not in MODES:
        raise ValueError(f"unknown tagging metric mode {mode!r}; expected one of {MODES}")
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
    for k, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise ValueError(f"sentence {k}: {len(g)} gold tags but {len(p)} predicted")
    # Lists of lists, never one flattened list: seqeval closes entities at sentence ends.
    gold2: List[List[str]] = [iob1_to_iob2(list(s)) for s in gold]
    pred2: List[List[str]] = [iob1_to_iob2(list(s)) for s in pred]
    kwargs = dict(mode="strict", scheme=IOB2) if mode == "strict" else {}
    report = metrics.classification_report(gold2, pred2, output_dict=True, zero_division=0,
                                           **kwargs)
    types = {k: float(v["f1-score"]) for k, v in report.items() if not k.endswith(" avg")}
    return {
        "f1": float(metrics.f1_score(gold2, pred2, zero_division=0, **kwargs)),
        "precision": float(metrics.precision_score(gold2, pred2, zero_division=0, **kwargs)),
        "recall": float(metrics.recall_score(gold2, pred2, zero_division=0, **kwargs)),
        "per_type_f1": types,
        "entities": int(sum(v["support"] for k, v in report.items() if not k.endswith(" avg"))),
        "mode": "strict IOB2" if mode == "strict" else "lenient (conlleval)",
        "scheme": f"{scheme} tags, scored as IOB2",
    }
