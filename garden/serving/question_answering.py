"""Extractive question answering served from raw text: windows, model and n-best decoding in
one graph.

`QuestionAnsweringServing` (a ServingModule for the one exporter) answers a batch of
(question, context) strings with everything inside the SavedModel, so TensorFlow Serving (or
garden.serve) needs no client-side code:

1. tokenize: the question with the fine-tuning tokenizer, cut to max_query_length pieces; the
   context with its CHARACTER spans (text.tokenizers' in-graph
   tokenize_with_char_offsets for WordPiece, SentencePiece and byte-level BPE: the UTF-8 byte
   offsets tensorflow-text gives, turned into characters as make_finetune does), because
   SQuAD's answer_start and a client's string indices count characters;
2. window the context exactly as make_finetune does (text.finetune.question_answering, the
   original run_squad.py): max_tokens_for_doc = max_seq_length - question pieces - 3 (BERT
   layout [CLS] q [SEP] window [SEP]; RoBERTa's <s> q </s></s> window </s> takes 4; XLNet's
   q <sep> window <sep> <cls> 3, segment ids 0 / 1 / 2, right-padded), windows
   start at 0, doc_stride, 2 * doc_stride, ... (doc_stride is the STEP between window starts,
   min(doc_stride, max_tokens_for_doc) when the window is shorter), the last one ends at the
   context's end; a token's max-context window is the first with the highest
   min(left context, right context) + 0.01 * window length;
3. run the model on every window of the batch at once ([windows, max_seq_length]);
4. decode with garden.models.question_answering.decode's rules (top n_best starts x ends per
   window, context tokens only, the start in its max-context window, end >= start, length <=
   max_answer_length; the best start + end logit over the example's windows; v2 null score =
   min over windows of start[CLS] + end[CLS], "" when null - best > the stored null threshold).

Signatures (string inputs [batch]; any other rank, or batches of different sizes, answer
InvalidArgumentError):
    serving_default  question, context -> answer string [B] ("" for no answer), start, end
                     int64 [B] (character span [start, end) in the context; -1, -1 for no
                     answer), score float32 [B] (start + end logit of the answer; the null
                     score for ""), null_score_diff float32 [B] (null - best non-null)
    serving_ids      the backbone's int32 [windows, T] inputs -> start_logits, end_logits
                     (for servers built without tensorflow-text ops; the client windows)

The null threshold (tuned by garden.tasks.question_answering on held-out training data) is a
constant of the graph and is written to the export's metadata; +inf (a v1.1 model) never
answers "" unless no candidate is left.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from text import utf8, vocab_files
from garden.models.question_answering import MAX_ANSWER_LENGTH, N_BEST
from garden.serving.base import PREDICT, ServingModule, strings
from garden.serving.text import TextPacker, checked_text, combine, model_inputs

# Kinds whose in-graph tokenizer gives offsets in the original text (all of them:
# text.tokenizers' modules, tokenize_with_char_offsets).
TEXT_KINDS = ("wordpiece", "sentencepiece", "bpe")


def layout_specials(layout: str) -> Tuple[int, int]:
    """(tokens before the question, special tokens of a window in all) of a text layout."""
    return {"roberta": (1, 4), "xlnet": (0, 3)}.get(layout, (1, 3))


def decode_windows(context: tf.Tensor, windows: Dict[str, tf.Tensor], start_logits: tf.Tensor,
                   end_logits: tf.Tensor, null_threshold: float = math.inf,
                   n_best: int = N_BEST, max_answer_length: int = MAX_ANSWER_LENGTH
                   ) -> Dict[str, tf.Tensor]:
    """garden.models.question_answering.decode's rules, in the graph, on the windows of a
    batch of contexts [B]: windows as QuestionAnsweringServing.windows gives them (window-
    major, an example's windows in order), logits float32 [W, T]. Returns answer, start, end,
    score, null_score_diff [B] (see the module docstring)."""
    batch = tf.size(context)
    example = windows["example_index"]
    k = min(n_best, int(start_logits.shape[1]))
    top_s = tf.math.top_k(start_logits, k=k).indices  # ties: lower index first
    top_e = tf.math.top_k(end_logits, k=k).indices
    take = lambda x, idx: tf.gather(x, idx, batch_dims=1)  # noqa: E731
    cs_s = take(windows["context_char_start"], top_s)
    cs_e = take(windows["context_char_start"], top_e)
    ok = ((cs_s >= 0) & (take(windows["token_is_max_context"], top_s) > 0))[:, :, None]
    ok &= (cs_e >= 0)[:, None, :]
    length = top_e[:, None, :] - top_s[:, :, None] + 1
    ok &= (length >= 1) & (length <= max_answer_length)
    score = take(start_logits, top_s)[:, :, None] + take(end_logits, top_e)[:, None, :]
    score = tf.reshape(tf.where(ok, score, -np.inf), [-1])  # window-major, start, end
    cand_example = tf.repeat(example, k * k)
    valid = score > -np.inf
    # An example without a valid candidate: its segment max is float32's lowest, not
    # -inf (the op's initial value), so "has an answer" is counted, not compared.
    has = tf.math.unsorted_segment_sum(tf.cast(valid, tf.int32), cand_example, batch) > 0
    best = tf.math.unsorted_segment_max(score, cand_example, batch)
    found = (score == tf.gather(best, cand_example)) & valid
    flat_index = tf.range(tf.size(score, out_type=tf.int64))
    first = tf.math.unsorted_segment_min(
        tf.where(found, flat_index, tf.int64.max), cand_example, batch)
    best = tf.where(has, best, -np.inf)
    first = tf.where(has, first, 0)
    w, rest = first // (k * k), first % (k * k)
    s_tok = tf.gather_nd(top_s, tf.stack([w, rest // k], 1))
    e_tok = tf.gather_nd(top_e, tf.stack([w, rest % k], 1))
    c_start = tf.gather_nd(windows["context_char_start"], tf.stack([w, tf.cast(s_tok, tf.int64)], 1))
    c_end = tf.gather_nd(windows["context_char_end"], tf.stack([w, tf.cast(e_tok, tf.int64)], 1))

    null = tf.math.unsorted_segment_min(start_logits[:, 0] + end_logits[:, 0], example, batch)
    diff = null - best
    answer = has & (diff <= null_threshold)
    start = tf.where(answer, c_start, -1)
    end = tf.where(answer, c_end, -1)
    text = tf.strings.substr(context, tf.maximum(start, 0), tf.maximum(end - start, 0),
                             unit="UTF8_CHAR")
    return {"answer": tf.where(answer, text, ""), "start": start, "end": end,
            "score": tf.where(answer, best, null), "null_score_diff": diff}



class QuestionAnsweringServing(ServingModule):
    """Raw (question, context) in, the answer text and its character span out.

    Args:
        model: Keras model, backbone inputs -> {"start_logits", "end_logits"} [B, T]
            (garden.models.question_answering.SpanExtractor).
        packer: the TextPacker of fine-tuning (tokenizer, special ids, layout, max_seq_length).
        vocab_path: the vocabulary file (copied into assets/).
        doc_stride, max_query_length: as make_finetune's flags (the step between window
            starts; the question's piece budget).
        null_threshold: "" when null score - best score > this; None or +inf for v1.1.
        n_best, max_answer_length: decoding (20, 30).
        warmup: a few (question, context) pairs for the warmup requests.
        extra_metadata: what the task adds to metadata() (how the threshold was tuned).
    """

    task = "question_answering"

    def __init__(self, model, packer: TextPacker, vocab_path: str, doc_stride: int = 128,
                 max_query_length: int = 64, null_threshold: Optional[float] = None,
                 n_best: int = N_BEST, max_answer_length: int = MAX_ANSWER_LENGTH,
                 warmup: Optional[Sequence[Tuple[str, str]]] = None,
                 extra_metadata: Optional[dict] = None):
        super().__init__(name="question_answering_serving")
        self._hold("model", model)
        self.packer = packer
        self.doc_stride, self.max_query_length = int(doc_stride), int(max_query_length)
        self.n_best, self.max_answer_length = int(n_best), int(max_answer_length)
        self.null_threshold = (math.inf if null_threshold is None else float(null_threshold))
        before, specials = layout_specials(packer.layout)
        if packer.max_seq_length - self.max_query_length - specials < 1:
            raise ValueError(f"max_seq_length {packer.max_seq_length} leaves no context token "
                             f"after a question of max_query_length {self.max_query_length} "
                             f"and {specials} special tokens")
        if self.doc_stride < 1:
            raise ValueError(f"doc_stride must be >= 1, got {doc_stride}")
        files = (vocab_files.bpe_files(vocab_path) if packer.kind == "bpe" else (vocab_path,))
        self._vocab_path = files[0]
        self.vocab_file = tf.saved_model.Asset(files[0])
        if len(files) > 1:
            self.merges_file = tf.saved_model.Asset(files[1])
        self._warmup = list(warmup or [("What is this?", "This is a warmup request.")])
        self._extra = dict(extra_metadata or {})

    @property
    def text_signature(self) -> bool:
        return self.packer.kind in TEXT_KINDS

    # -- windows --------------------------------------------------------------------------
    def _context_pieces(self, context):
        """Piece ids and character spans of the contexts, ragged [B, (pieces)]."""
        return self.packer.tokenizer.tokenize_with_char_offsets(context)

    def windows(self, question: tf.Tensor, context: tf.Tensor) -> Dict[str, tf.Tensor]:
        """The windows of a batch as make_finetune's records (without the labels):
        example_index, window_index int64 [W]; token_ids / segment_ids / padding_mask int32
        and token_is_max_context, context_char_start, context_char_end int64 [W, T]."""
        T = self.packer.max_seq_length
        before, specials = layout_specials(self.packer.layout)
        question_ids = self.packer.tokenize(question)[:, :self.max_query_length]
        ids, char_start, char_end = self._context_pieces(context)
        n_ctx = ids.row_lengths()
        max_doc = T - question_ids.row_lengths() - specials
        step = tf.minimum(tf.constant(self.doc_stride, tf.int64), max_doc)
        more = tf.maximum(n_ctx - max_doc, 0)
        # ceil(more / step) more windows after the first; an empty context still gets one
        # (it answers "", having no candidate).
        n_win = 1 + (more + step - 1) // step

        example = tf.repeat(tf.range(tf.size(n_ctx, out_type=tf.int64)), n_win)
        window_index = tf.ragged.range(n_win).flat_values
        w_start = window_index * tf.gather(step, example)
        w_len = tf.minimum(tf.gather(n_ctx, example) - w_start, tf.gather(max_doc, example))
        positions = tf.ragged.range(w_start, w_start + w_len)  # context piece of each slot
        flat = positions + tf.expand_dims(tf.gather(ids.row_splits, example), 1)

        # Max context: compare every token of every window with all windows of its example.
        token_window = positions.value_rowids()
        tok_example = tf.gather(example, token_window)
        p = tf.cast(positions.flat_values, tf.float64)
        most = tf.reduce_max(n_win)
        k = tf.range(most, dtype=tf.int64)[tf.newaxis, :]  # [1, K]
        tok_step, tok_n = tf.gather(step, tok_example)[:, None], tf.gather(n_ctx, tok_example)[:, None]
        s_k = k * tok_step
        l_k = tf.minimum(tok_n - s_k, tf.gather(max_doc, tok_example)[:, None])
        s_kf, l_kf = tf.cast(s_k, tf.float64), tf.cast(l_k, tf.float64)
        inside = ((k < tf.gather(n_win, tok_example)[:, None]) & (s_kf <= p[:, None])
                  & (p[:, None] < s_kf + l_kf))
        score = tf.minimum(p[:, None] - s_kf, s_kf + l_kf - 1.0 - p[:, None]) + 0.01 * l_kf
        score = tf.where(inside, score, -np.inf)
        best_score = tf.reduce_max(score, axis=1, keepdims=True)
        first_best = tf.reduce_min(tf.where(score >= best_score, k, most), axis=1)
        is_max = tf.cast(first_best == tf.gather(window_index, token_window), tf.int64)
        is_max = positions.with_flat_values(is_max)

        window_q = tf.gather(question_ids, example)
        pieces = tf.gather(ids.flat_values, flat)
        segments = self._layout([window_q, pieces], self.packer.sep_id)
        layout = self.packer.layout
        token_ids, segment_ids = combine(layout, segments, self.packer.cls_id, self.packer.sep_id)
        token_ids, padding_mask = tf_text.pad_model_inputs(token_ids, T, pad_value=self.packer.pad_id)
        segment_ids, _ = tf_text.pad_model_inputs(segment_ids, T, pad_value=0)
        if self.packer.layout == "roberta":  # one segment, as make_finetune writes it
            segment_ids = tf.zeros_like(segment_ids)

        def per_token(values, fill):
            """A context-slot value in its packed position, `fill` everywhere else."""
            q = tf.ones_like(window_q) * fill
            merged, _ = combine(layout, self._layout([q, values], fill), fill, fill)
            return tf_text.pad_model_inputs(merged, T, pad_value=fill)[0]

        return {"example_index": example, "window_index": window_index,
                "token_ids": tf.cast(token_ids, tf.int32),
                "segment_ids": tf.cast(segment_ids, tf.int32),
                "padding_mask": tf.cast(padding_mask, tf.int32),
                "token_is_max_context": per_token(is_max, 0),
                "context_char_start": per_token(tf.gather(char_start.flat_values, flat), -1),
                "context_char_end": per_token(tf.gather(char_end.flat_values, flat), -1)}

    def _layout(self, segments: List[tf.RaggedTensor], sep) -> List[tf.RaggedTensor]:
        if self.packer.layout != "roberta":
            return segments
        q, c = segments  # RoBERTa: <s> q </s></s> c </s>
        extra = tf.fill([c.nrows(), 1], tf.constant(sep, c.dtype))
        return [q, tf.concat([extra, c], axis=1)]

    def logits(self, inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        inputs = {k: tf.cast(inputs[k], tf.int32) for k in self.packer.input_names}
        out = self.model(model_inputs(self.model, inputs), training=False)
        return {"start_logits": tf.cast(out["start_logits"], tf.float32),
                "end_logits": tf.cast(out["end_logits"], tf.float32)}

    def answer(self, question, context) -> Dict[str, tf.Tensor]:
        # Answers are cut from the context: ill-formed UTF-8 (gRPC sends bytes) is read as its
        # replacement decoding first, so that the answer and its span are of that text.
        question = utf8.valid_utf8(checked_text(question, "question"))
        context = utf8.valid_utf8(checked_text(context, "context"))
        same = tf.debugging.assert_equal(
            tf.size(question), tf.size(context),
            message="question and context must hold the same number of texts (one pair per row)")
        with tf.control_dependencies([same]):
            question, context = tf.identity(question), tf.identity(context)
        windows = self.windows(question, context)
        out = self.logits(windows)
        return decode_windows(context, windows, out["start_logits"], out["end_logits"],
                              self.null_threshold, self.n_best, self.max_answer_length)

    # -- the contract ---------------------------------------------------------------------
    def signatures(self):
        ids_names = self.packer.input_names
        serve_ids = tf.function(lambda *ids: self.logits(dict(zip(ids_names, ids))),
                                input_signature=[tf.TensorSpec([None, None], tf.int32, name=n)
                                                 for n in ids_names])
        out = {"serving_ids": (serve_ids.get_concrete_function(), PREDICT)}
        if self.text_signature:
            serve_text = tf.function(self.answer, input_signature=[
                tf.TensorSpec(None, tf.string, name="question"),
                tf.TensorSpec(None, tf.string, name="context")])
            out["serving_default"] = (serve_text.get_concrete_function(), PREDICT)
        else:
            print(f"[{self.task}] warning: the {self.packer.kind} tokenizer gives no offsets in "
                  f"the graph here; the export has serving_ids only", flush=True)
        return out

    def warmup_requests(self):
        requests = []
        if self.text_signature:
            for q, c in self._warmup:
                requests.append(("serving_default", {"question": strings([q]),
                                                     "context": strings([c])}))
            requests.append(("serving_default",
                             {"question": strings([q for q, _ in self._warmup]),
                              "context": strings([c for _, c in self._warmup])}))
        ids = self.packer.encode_numpy([q for q, _ in self._warmup], [c for _, c in self._warmup])
        requests.append(("serving_ids", ids))
        return requests

    def metadata(self) -> dict:
        p = self.packer
        meta = {"task": self.task, "max_seq_length": p.max_seq_length,
                "doc_stride": self.doc_stride, "max_query_length": self.max_query_length,
                "n_best": self.n_best, "max_answer_length": self.max_answer_length,
                "null_threshold": (None if math.isinf(self.null_threshold)
                                   else self.null_threshold),
                "tokenizer": p.kind, "layout": p.layout, "lower_case": p.lower_case,
                "vocab_file": "assets/" + self._vocab_path.rstrip("/").split("/")[-1],
                "vocab_size": p.vocab_size, "vocab_fingerprint": p.fingerprint,
                "text_signature": self.text_signature,
                "offsets": "characters of the context, [start, end); -1, -1 for no answer"}
        meta.update(self._extra)
        return meta
