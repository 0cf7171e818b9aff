"""Classification metrics: GLUE's official ones (and SWAG's accuracy), through scikit-learn and
scipy.

    cola              Matthews correlation (sklearn.metrics.matthews_corrcoef), and accuracy
    mrpc, qqp         F1 of the positive class "1" (sklearn f1_score, pos_label) and accuracy
    stsb              Pearson and Spearman correlations (scipy.stats), reported separately
                      (Model Garden averages them into one number)
    mnli              accuracy on the matched and on the mismatched dev set (`mnli_metrics`)
    sst2, qnli, rte, wnli, swag   accuracy

`glue_metrics(task, predictions, labels, label_names)`: predictions and labels are class ids
in the order of `label_names` (STS-B: float scores); the positive class of F1 is looked up by
name ("1"), so a model with another class order is scored correctly. Values are fractions
(the GLUE leaderboard shows them x100).
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np
from scipy import stats
from sklearn import metrics

POSITIVE_LABEL = "1"  # MRPC: equivalent, QQP: duplicate
F1_TASKS = ("mrpc", "qqp")


def accuracy(predictions, labels) -> float:
    return float(metrics.accuracy_score(np.asarray(labels), np.asarray(predictions)))


def glue_metrics(task: str, predictions, labels,
                 label_names: Optional[Sequence[str]] = None) -> Dict[str, float]:
    """The official scores of one GLUE evaluation set ({"accuracy", "f1", "mcc", "pearson",
    "spearman"} as the task has them)."""
    task = task.lower().replace("-", "")
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    if predictions.shape != labels.shape or not len(labels):
        raise ValueError(f"{task}: {predictions.shape} predictions for {labels.shape} labels")
    if task == "stsb":
        predictions, labels = predictions.astype(np.float64), labels.astype(np.float64)
        return {"pearson": float(stats.pearsonr(predictions, labels)[0]),
                "spearman": float(stats.spearmanr(predictions, labels)[0])}
    out = {"accuracy": accuracy(predictions, labels)}
    if task == "cola":
        out["mcc"] = float(metrics.matthews_corrcoef(labels, predictions))
    elif task in F1_TASKS:
        names = list(label_names) if label_names is not None else ["0", "1"]
        if POSITIVE_LABEL not in names:
            raise ValueError(f"{task}: label_names {names} lack the positive class "
                             f"{POSITIVE_LABEL!r}")
        out["f1"] = float(metrics.f1_score(labels, predictions,
                                           pos_label=names.index(POSITIVE_LABEL),
                                           average="binary"))
    return out


def mnli_metrics(predictions_matched, labels_matched, predictions_mismatched,
                 labels_mismatched) -> Dict[str, float]:
    """MNLI's two numbers: accuracy on dev_matched and on dev_mismatched."""
    return {"accuracy_matched": accuracy(predictions_matched, labels_matched),
            "accuracy_mismatched": accuracy(predictions_mismatched, labels_mismatched)}


def swag_accuracy(predictions, labels) -> Dict[str, float]:
    """SWAG: the fraction of examples whose chosen ending is the gold one."""
    return {"accuracy": accuracy(predictions, labels)}
