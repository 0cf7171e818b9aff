"""ROUGE-1, ROUGE-2 and ROUGE-L F-measures (Lin 2004) through Google's `rouge-score` library
(pinned in pyproject.toml), the implementation T5 and most summarisation papers report.

Tokenizer and stemmer: rouge-score's default tokenizer, which lower-cases, replaces every
character outside [a-z0-9] with a space and splits (so punctuation and non-ASCII letters never
count, "Foo-bar." -> ["foo", "bar"]); no stemming unless `use_stemmer=True` (Porter stemmer on
tokens longer than 3 characters, as the original ROUGE-1.5.5 `-m`). ROUGE-L is the sentence-level
LCS ("rougeL"), not the summary-level "rougeLsum" with its newline splitting.

Scores are per example F-measures (precision and recall are in `per_example`'s Score tuples)
and the corpus score is their plain mean, x1 (fractions, not percentages), as rouge-score's
BootstrapAggregator's mid point would be without resampling. An empty prediction or reference
scores 0 (rouge-score's convention).
"""

from __future__ import annotations

import collections
import re
import statistics
from typing import Dict, List, Sequence

import numpy as np

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
_WORD = re.compile(r"\S+")


def per_example(predictions: Sequence[str], references: Sequence[str],
                use_stemmer: bool = False) -> List[Dict[str, float]]:
    """[{"rouge1", "rouge2", "rougeL"}: F-measure] for each (prediction, reference) pair."""
    from rouge_score import rouge_scorer

    predictions, references = list(predictions), list(references)
    if len(predictions) != len(references):
        raise ValueError(f"ROUGE needs one prediction per reference; got {len(predictions)} "
                         f"predictions and {len(references)} references")
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)
    out = []
    for i, (prediction, reference) in enumerate(zip(predictions, references)):
        if not isinstance(prediction, str) or not isinstance(reference, str):
            raise TypeError(f"ROUGE example {i}: prediction and reference must be strings, got "
                            f"{type(prediction).__name__} and {type(reference).__name__}")
        # rouge-score's argument order is (target, prediction).
        scores = scorer.score(reference, prediction)
        out.append({k: float(scores[k].fmeasure) for k in ROUGE_TYPES})
    return out


def corpus_rouge(predictions: Sequence[str], references: Sequence[str],
                 use_stemmer: bool = False) -> Dict[str, float]:
    """Mean ROUGE-1/2/L F over the pairs, and each mean's standard error (`<type>_se`: the
    sample standard deviation over sqrt(n), for margins in standard errors); {} scores 0."""
    rows = per_example(predictions, references, use_stemmer)
    out: Dict[str, float] = {}
    for k in ROUGE_TYPES:
        values = np.array([r[k] for r in rows], np.float64)
        out[k] = float(values.mean()) if len(values) else 0.0
        out[f"{k}_se"] = (float(values.std(ddof=1) / np.sqrt(len(values)))
                          if len(values) > 1 else 0.0)
    return out


def trivial_baselines(train_targets: Sequence[str], sources: Sequence[str],
                      references: Sequence[str]) -> Dict[str, object]:
    """corpus_rouge of the trivial predictions for (sources -> references), N = the median
    whitespace word count of the train targets:
        lead      the source's first N words (a summariser's lead-N rule);
        constant  the N most frequent (lower-cased) train target words, in frequency order;
        empty     "" (0 by definition);
        tail      the source's last N words (on the seq2seq sample task, whose target ends the
                  source, the extractive rule that solves it: a reference, not a baseline).
    Also "words" (N) and "constant_prediction"."""
    n = int(statistics.median(len(_WORD.findall(t)) for t in train_targets)) if len(
        train_targets) else 0
    counts = collections.Counter(w for t in train_targets for w in _WORD.findall(t.lower()))
    constant = " ".join(w for w, _ in counts.most_common(n))
    predictions = {
        "lead": [" ".join(_WORD.findall(s)[:n]) for s in sources],
        "constant": [constant] * len(sources),
        "empty": [""] * len(sources),
        "tail": [" ".join(_WORD.findall(s)[-n:]) if n else "" for s in sources],
    }
    out: Dict[str, object] = {name: corpus_rouge(p, references) for name, p in predictions.items()}
    out["words"] = n
    out["constant_prediction"] = constant
    return out
