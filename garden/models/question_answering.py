"""Span extraction (SQuAD v1.1 / v2.0): the head, its loss and the n-best decoding.

The head (BERT, Devlin et al., 2019, section 4.2): a backbone's sequence output -> dense(2) ->
start and end logits [B, T], float32 whatever the dtype policy; any encoder family with a
"sequence_output" (BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT, SpanBERT, ERNIE). The loss is
the mean of the start and end cross-entropies over the window's positions; an unanswerable
question, or an answer outside the window, points both at position 0 ([CLS]).

`decode` turns the logits of an example's windows into its answer with the rules of the
original run_squad.py (write_predictions), on the SQuAD window records of
text.finetune.question_answering (docs/tasks.md):
- candidates: the top n_best (20) start positions x the top n_best end positions of each window
  (ties: the lower position first), kept when both are context tokens (context_char_start
  >= 0), the start is in its max-context window (token_is_max_context), end >= start and
  end - start + 1 <= max_answer_length (30);
- the best candidate has the highest start + end logit over all windows (ties: the first
  window, then the start's and the end's rank);
- its text is context[context_char_start[start]:context_char_end[end]] (characters);
- v2 null score = min over windows of start[0] + end[0] ([CLS]); the answer is "" (start =
  end = -1) when null - best > null_threshold, or when no candidate is left. A v1.1 model has
  null_threshold = +inf.
garden/serving/question_answering.py runs the same rules inside the exported graph (tests compare
the two).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Sequence

import keras
import numpy as np

from garden.layers.embeddings import truncated_normal
from garden.models.backbone import backbone_inputs, input_names
from garden.models.pretrainer import PretrainerConfig

N_BEST = 20
MAX_ANSWER_LENGTH = 30


@keras.saving.register_keras_serializable(package="garden")
class SpanExtractor(PretrainerConfig, keras.Model):
    """A backbone's sequence output -> dense(2) -> start and end logits.

    Inputs (dict, int32 [B, T]): the backbone's own inputs (token_ids, padding_mask, and
        segment_ids for the families that have them).
    Outputs (dict): start_logits, end_logits float32 [B, T] (no softmax, no masking: the
        decoder keeps only context tokens, as the original does).

    Args:
        backbone: a backbone with dict inputs and a "sequence_output" output.
        **kwargs: name, trainable.

    Example:
        qa = SpanExtractor(untrained_bert_backbone("bert_tiny", vocab_size=1000))
        out = qa({"token_ids": ids, "segment_ids": seg, "padding_mask": mask})
        loss = span_loss(out["start_logits"], out["end_logits"], starts, ends)
    """

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        # float32 whatever the policy: the logits feed two softmax cross-entropies.
        span_dense = keras.layers.Dense(2, kernel_initializer=truncated_normal(0.02),
                                        dtype="float32", name="span_dense")

        # === Functional graph ===
        inputs = backbone_inputs(input_names(backbone))
        logits = span_dense(backbone(inputs)["sequence_output"])
        outputs = {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        # === Config === (get_config: PretrainerConfig, the backbone)
        self.backbone = backbone
        self.span_dense = span_dense


def span_loss(start_logits, end_logits, start_positions, end_positions):
    """Mean of the start and end sparse cross-entropies (a scalar tensor)."""
    import tensorflow as tf

    def ce(labels, logits):
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(labels, tf.int64), logits=tf.cast(logits, tf.float32)))

    return 0.5 * (ce(start_positions, start_logits) + ce(end_positions, end_logits))


# ------------------------------------------------------------------------------------------
# Decoding (NumPy; garden/serving/question_answering.py is the in-graph twin)


@dataclasses.dataclass
class Answer:
    """The decoded answer of one example.

    text: the answer ("" for no answer); start, end: its character span [start, end) in the
    context (-1, -1 for no answer); score: start + end logit of the best non-null candidate
    (-inf when there is none); null_score: min over windows of start[0] + end[0];
    null_diff = null_score - score (the na_prob the official threshold sweep takes).
    best_text / best_start / best_end: the best non-null candidate whatever the threshold.
    """

    text: str
    start: int
    end: int
    score: float
    null_score: float
    null_diff: float
    best_text: str
    best_start: int
    best_end: int


def _top(logits: np.ndarray, k: int) -> np.ndarray:
    """The k highest positions, ties broken towards the lower position (run_squad's sort)."""
    return np.argsort(-logits, kind="stable")[:k]


def decode(context: str, windows: Sequence[Dict[str, np.ndarray]],
           null_threshold: float = math.inf, n_best: int = N_BEST,
           max_answer_length: int = MAX_ANSWER_LENGTH) -> Answer:
    """The answer of one example from its windows, in window order.

    Each window: start_logits, end_logits float [T], token_is_max_context, context_char_start,
    context_char_end int [T] (the record fields of text.finetune.question_answering).
    """
    best = None  # (score, start char, end char)
    null_score = math.inf
    for w in windows:
        start_logits = np.asarray(w["start_logits"], np.float32)
        end_logits = np.asarray(w["end_logits"], np.float32)
        char_start = np.asarray(w["context_char_start"])
        char_end = np.asarray(w["context_char_end"])
        max_context = np.asarray(w["token_is_max_context"])
        null_score = min(null_score, float(start_logits[0] + end_logits[0]))
        for s in _top(start_logits, n_best):
            if char_start[s] < 0 or not max_context[s]:
                continue
            for e in _top(end_logits, n_best):
                if char_start[e] < 0 or e < s or e - s + 1 > max_answer_length:
                    continue
                # float32 sum, as the graph computes it.
                score = float(start_logits[s] + end_logits[e])
                if best is None or score > best[0]:
                    best = (score, int(char_start[s]), int(char_end[e]))
    if best is None:
        return Answer("", -1, -1, -math.inf, null_score, math.inf, "", -1, -1)
    score, start, end = best
    text = context[start:end]
    null_diff = null_score - score
    if null_diff > null_threshold:
        return Answer("", -1, -1, score, null_score, null_diff, text, start, end)
    return Answer(text, start, end, score, null_score, null_diff, text, start, end)


def decode_all(contexts: Sequence[str], records: Sequence[Dict[str, np.ndarray]],
               **kwargs) -> List[Answer]:
    """decode() of every example: records (windows with example_index and the logits) in any
    order; contexts[i] is example i's context. An example without windows answers ""."""
    by_example: Dict[int, list] = {}
    for r in records:
        by_example.setdefault(int(r["example_index"]), []).append(r)
    out = []
    for i, context in enumerate(contexts):
        windows = sorted(by_example.get(i, []), key=lambda r: int(r["window_index"]))
        out.append(decode(context, windows, **kwargs))
    return out
