"""Question answering, the make_finetune kind "question_answering": SQuAD questions
(text.finetune.question_answering_sources reads them) cut into the windowed features of extractive QA.

Features (one record per window; the make_finetune kind "question_answering"; docs/tasks.md):

    [CLS] question [SEP] context window [SEP] [PAD] ...      layout "bert", segment_ids 0 / 1
    <s> question </s> </s> context window </s> <pad> ...     layout "roberta", segment_ids all 0
    question <sep> context window <sep> <cls> <pad> ...      layout "xlnet", segment_ids 0 / 1 / 2

(the "xlnet" layout is garden.serving.text's: XLNet's A <sep> B <sep> <cls>, padded on the
right; the question stays first as in the other layouts, so answer positions and context
offsets are counted from the same place. Position 0, the null slot of unanswerable questions
and of windows without the answer, is then the question's first piece, not <cls> (which moves
with the window's length); training and decoding both use position 0, so it is learned as the
null slot.)

* the question is cut to its first max_query_length pieces;
* a context longer than max_seq_length - len(question) - specials is cut into windows whose
  starts are doc_stride pieces apart (BERT's run_squad and Model Garden's squad_lib: doc_stride
  is the STEP between window starts, not the overlap of Hugging Face's tokenizers); the last
  window ends at the context's end;
* token_is_max_context: a context piece appears in several windows; it counts in the one where
  min(pieces left of it, pieces right of it) + 0.01 * window length is largest (the first such
  window on a tie), as run_squad's _check_is_max_context;
* start_position / end_position: the first gold answer's character span re-aligned to the
  pieces it overlaps (the first piece ending after answer_start, the last piece starting before
  its end; the tokenizer's character offsets), as positions in
  the window; 0 / 0 ([CLS]) for an unanswerable question and in every window that does not
  hold the whole answer;
* is_impossible is the question's (1 for a v2.0 unanswerable question), the same in all its
  windows;
* context_char_start / context_char_end: each context piece's character span [start, end) in
  the context string (what the served model cuts the answer text with); -1 elsewhere. In the
  TFRecords they are stored plus one (0 elsewhere, see `to_records` / `parse_record`):
  protobuf writes -1 as a 10-byte varint, which made these two features two thirds of every
  record's bytes (8,258 bytes a window at 384 tokens against 2,735 stored plus one) and its
  serialization about half of make_finetune's per-window time;
* unique_id = example_index * WINDOWS_PER_EXAMPLE + window_index.

Tokenization is text.tokenizers' tokenize_with_char_offsets for the contexts (each
distinct context of a batch once) and tokenize (ids only) for the questions, so WordPiece,
SentencePiece and byte-level BPE vocabularies all work; WordPiece runs in pure Python
(text.wordpiece, FastBertTokenizer's ids and spans, tested against it). With
WordPiece the windows, max-context flags and positions equal Model Garden's squad_lib
(tests/data_pipelines/test_squad_features.py), which splits the context at whitespace first
and re-aligns the answer by matching its tokens.

Three forms of the same windows: ``examples_features`` (a dict per window, what garden's QA
task and the serving tests compare with), ``examples_columns`` ([windows, length] int64
matrices) and ``examples_records`` (the serialized TFRecords, what make_finetune writes: put
together from each context's encoded bytes; tests/data_pipelines/test_squad_records.py checks
them byte for byte against the serialized columns). TensorFlow is imported only to parse
records (``feature_spec``, ``parse_record``) and to read tfds, so the Beam job never loads it
(benchmarks/README.md, ``squad_features``).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from text import features
from text.finetune import FinetuneDataError
from text.finetune.base import FinetuneKind
from text.finetune.question_answering_sources import SquadExample, read_examples, read_tfds
from text.finetune.question_answering_windows import Context

# TensorFlow is imported only by feature_spec / parse_record (readers of the records):
# make_finetune's job (read, tokenize, window, serialize) runs without it, which saves each
# process about 4 CPU-seconds of start-up.


NAME = "question_answering"
LAYOUTS = ("bert", "roberta", "xlnet")
# The layout of a tokenizer kind's families unless --layout says otherwise (as
# garden.serving.text.DEFAULT_LAYOUT: RoBERTa is the byte-level BPE encoder).
DEFAULT_LAYOUT = {"wordpiece": "bert", "sentencepiece": "bert", "bpe": "roberta"}
# unique_id = example_index * WINDOWS_PER_EXAMPLE + window_index; an example with more windows
# (a context of ~128k pieces at the defaults) is refused.
WINDOWS_PER_EXAMPLE = 1000
_SPECIALS = {"bert": 3, "roberta": 4, "xlnet": 3}  # [CLS] q [SEP] c [SEP] / <s> q </s></s> c </s>
# Special tokens after the context window: [SEP] / </s> / <sep> <cls>.
_SUFFIX = {"bert": 1, "roberta": 1, "xlnet": 2}


@dataclasses.dataclass(frozen=True)
class SquadOptions:
    """Window geometry (BERT's run_squad defaults) and the special-token layout."""

    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    layout: str = "bert"

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown layout {self.layout!r}; expected one of {LAYOUTS}")
        if self.doc_stride < 1 or self.max_query_length < 1:
            raise ValueError(f"doc_stride and max_query_length must be >= 1, got "
                             f"{self.doc_stride} and {self.max_query_length}")
        room = self.max_seq_length - self.max_query_length - _SPECIALS[self.layout]
        if room < 1:
            raise ValueError(f"max_seq_length={self.max_seq_length} leaves no room for the context "
                             f"after a question of max_query_length={self.max_query_length} pieces and "
                             f"{_SPECIALS[self.layout]} special tokens")


def add_flags(parser) -> None:
    """make_finetune --task=question_answering's own flags."""
    parser.add_argument("--max_seq_length", type=int, default=384,
                        help="pieces per window, special tokens included (default %(default)s)")
    parser.add_argument("--doc_stride", type=int, default=128,
                        help="pieces between the STARTS of two consecutive windows of a long context "
                        "(BERT / Model Garden meaning; not Hugging Face's overlap) (default %(default)s)")
    parser.add_argument("--max_query_length", type=int, default=64,
                        help="a question is cut to this many pieces (default %(default)s)")
    parser.add_argument("--layout", choices=("auto",) + LAYOUTS, default="auto",
                        help="special tokens: bert ([CLS] q [SEP] c [SEP], segment ids), roberta "
                        "(<s> q </s></s> c </s>) or xlnet (q <sep> c <sep> <cls>, segment ids "
                        "0/1/2); auto: roberta for --tokenizer=bpe, else bert "
                        "(default %(default)s)")


def options_from_flags(args: argparse.Namespace) -> SquadOptions:
    layout = args.layout if args.layout != "auto" else DEFAULT_LAYOUT.get(args.tokenizer, "bert")
    return SquadOptions(args.max_seq_length, args.doc_stride, args.max_query_length, layout)


def record_spec(options: SquadOptions) -> features.Spec:
    """feature_spec as text.features' Spec, without TensorFlow (what make_finetune
    serializes with and writes into info.json)."""
    spec = {name: features.Feature("int64", 1) for name in SCALARS}
    spec.update({name: features.Feature("int64", options.max_seq_length) for name in ROWS})
    return spec


def feature_spec(options: SquadOptions):
    """What the window records hold (interface 3 of docs/tasks.md); all int64, as
    {name: tf.io.FixedLenFeature}. Parse records with `parse_record`, which also undoes the
    stored-plus-one character spans."""
    import tensorflow as tf

    spec = {name: tf.io.FixedLenFeature([], tf.int64) for name in SCALARS}
    spec.update({name: tf.io.FixedLenFeature([options.max_seq_length], tf.int64) for name in ROWS})
    return spec


# Row features stored plus one in the TFRecords: -1 ("not a context piece") would be a
# 10-byte varint, 0 is one byte.
STORED_PLUS_ONE = ("context_char_start", "context_char_end")


def to_records(columns: Dict) -> Dict:
    """examples_columns' columns (or one example_features record) as make_finetune writes
    them: STORED_PLUS_ONE shifted."""
    return {k: (np.asarray(v) + 1 if isinstance(v, np.ndarray) else [x + 1 for x in v])
            if k in STORED_PLUS_ONE else v for k, v in columns.items()}


def parse_record(serialized, options: SquadOptions):
    """One serialized window record -> the window's features as examples_features gives them
    (character spans -1 outside the context again, {name: tf.Tensor}); usable in tf.data.map."""
    import tensorflow as tf

    record = tf.io.parse_single_example(serialized, feature_spec(options))
    return {k: v - 1 if k in STORED_PLUS_ONE else v for k, v in record.items()}


SCALARS = ("unique_id", "example_index", "window_index", "start_position", "end_position",
           "is_impossible")
ROWS = ("token_ids", "segment_ids", "padding_mask", "token_is_max_context", "context_char_start",
        "context_char_end")


@dataclasses.dataclass
class _Plan:
    """One example's windows before they are written into the columns."""

    index: int
    prefix: List[int]         # [CLS] question [SEP] (roberta: [SEP] [SEP]; xlnet: question <sep>)
    context: Context
    spans: List[Tuple[int, int]]
    best: np.ndarray          # max-context window of each context piece
    answer: Optional[Tuple[int, int]]
    is_impossible: int


def _plan(example: SquadExample, example_index: int, question, context: Context, specials,
          options: SquadOptions) -> _Plan:
    cls, sep, _ = specials
    question = list(question[:options.max_query_length])
    if options.layout == "xlnet":
        prefix = question + [sep]
    else:
        prefix = [cls] + question + ([sep, sep] if options.layout == "roberta" else [sep])
    spans, best = context.windows(options.max_seq_length - len(prefix) - _SUFFIX[options.layout],
                                  options.doc_stride)
    if len(spans) > WINDOWS_PER_EXAMPLE:
        raise FinetuneDataError(f"question {example.qas_id!r}: its context makes {len(spans)} windows, "
                                f"more than {WINDOWS_PER_EXAMPLE}; raise --doc_stride")
    answer = None
    if example.answers and not example.is_impossible:
        text, start = example.answers[0]
        answer = context.answer(start, start + len(text))
        if answer is None:
            raise FinetuneDataError(f"question {example.qas_id!r}: answer {text!r} at character "
                                    f"{start} covers no piece of the tokenized context")
    return _Plan(example_index, prefix, context, spans, best, answer, int(example.is_impossible))


def _plans(examples: Sequence[SquadExample], tokenizer, options: SquadOptions, first_index: int,
           on_error) -> Tuple[List[_Plan], tuple]:
    """(plans, (cls, sep, pad) ids): all questions and the distinct contexts tokenized in one
    batched call each; an example that cannot be featurized raises or goes to ``on_error``."""
    vocab = tokenizer.vocab
    specials = tuple(vocab.special(r, f"the SQuAD {options.layout!r} layout") for r in ("cls", "sep", "pad"))
    contexts = list(dict.fromkeys(e.context for e in examples))  # each paragraph once, in order
    tokenized = tokenizer.tokenize_with_char_offsets(contexts)
    context_pieces = {c: Context(*pieces) for c, pieces in zip(contexts, tokenized)}
    questions = tokenizer.tokenize([e.question for e in examples])  # ids only
    plans = []
    for k, (example, question) in enumerate(zip(examples, questions)):
        try:
            plans.append(_plan(example, first_index + k, question, context_pieces[example.context],
                               specials, options))
        except FinetuneDataError as e:
            if on_error is None:
                raise
            on_error(first_index + k, e)
    return plans, specials


def _columns(plans: Sequence[_Plan], specials, options: SquadOptions) -> Dict[str, np.ndarray]:
    """The windows of ``plans`` as columns: scalars [N, 1], rows [N, max_seq_length]."""
    cls, sep, pad = specials
    xlnet = options.layout == "xlnet"
    n = sum(len(p.spans) for p in plans)
    t = options.max_seq_length
    cols = {name: np.zeros((n, 1), np.int64) for name in SCALARS}
    cols.update({name: np.zeros((n, t), np.int64) for name in ROWS})
    cols["token_ids"][:] = pad
    cols["context_char_start"][:] = -1
    cols["context_char_end"][:] = -1
    ids, seg, mask, tmc = cols["token_ids"], cols["segment_ids"], cols["padding_mask"], cols["token_is_max_context"]
    cs, ce = cols["context_char_start"], cols["context_char_end"]
    r = 0
    for plan in plans:
        off = len(plan.prefix)
        c_ids, c_starts, c_ends = plan.context.ids, plan.context.starts, plan.context.ends
        for w, (start, length) in enumerate(plan.spans):
            end = off + length
            ids[r, :off] = plan.prefix
            ids[r, off:end] = c_ids[start:start + length]
            ids[r, end] = sep
            mask[r, :end + 1] = 1
            if options.layout != "roberta":
                seg[r, off:end + 1] = 1
            if xlnet:
                ids[r, end + 1], mask[r, end + 1], seg[r, end + 1] = cls, 1, 2
            tmc[r, off:end] = plan.best[start:start + length] == w
            cs[r, off:end] = c_starts[start:start + length]
            ce[r, off:end] = c_ends[start:start + length]
            cols["unique_id"][r] = plan.index * WINDOWS_PER_EXAMPLE + w
            cols["example_index"][r] = plan.index
            cols["window_index"][r] = w
            cols["is_impossible"][r] = plan.is_impossible
            if plan.answer is not None and start <= plan.answer[0] and plan.answer[1] < start + length:
                cols["start_position"][r] = plan.answer[0] - start + off
                cols["end_position"][r] = plan.answer[1] - start + off
            r += 1
    return cols


_HEADERS: Dict[Tuple[str, int], bytes] = {}  # (feature, payload bytes) -> its entry's header


def _piece_bytes(plans: Sequence[_Plan]) -> List[Tuple[bytes, np.ndarray]]:
    """_records' varint bytes and byte offsets (features.varint_pieces) of every context's piece
    ids, stored starts and ends (plus one), every question's prefix and every window's unique
    id, each encoded in one numpy pass; a window slices them by the offsets of its pieces. Sets
    each context's `first` (its first piece's index in the joined ids)."""
    contexts = list({id(p.context): p.context for p in plans}.values())
    pieces = 0
    for ctx in contexts:
        ctx.first, pieces = pieces, pieces + len(ctx.ids)

    def joined(arrays):
        return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)

    prefixes = np.fromiter(itertools.chain.from_iterable(p.prefix for p in plans), np.int64)
    unique_ids = np.fromiter(
        (p.index * WINDOWS_PER_EXAMPLE + w for p in plans for w in range(len(p.spans))), np.int64)
    return [features.varint_pieces(values) for values in (
        joined([c.ids for c in contexts]), joined([c.starts for c in contexts]) + 1,
        joined([c.ends for c in contexts]) + 1, prefixes, unique_ids)]


def _records(plans: Sequence[_Plan], specials, options: SquadOptions) -> List[Tuple[int, int, bytes]]:
    """(example index, window index, tf.train.Example bytes) of each window of ``plans``: the
    bytes features.serialize_columns writes for to_records(_columns(plans)) (checked by
    tests/data_pipelines/test_squad_records.py), put together from byte strings instead.

    Why: the columns are [windows, max_seq_length] int64 matrices, mostly padding, that
    _varint_rows then encodes value by value (about 60% of make_finetune's work at SQuAD's
    size). Here each context's piece ids and character spans (stored plus one) are encoded
    once, and a window is its question's bytes, a slice of its context's and runs of 0 / 1
    bytes (the varints of 0 and 1, which the padding, masks, flags and the stored-plus-one
    spans outside the context are).
    """
    cls, sep, pad = specials
    t = options.max_seq_length
    sep_b, pad_b = features.varint(sep), features.varint(pad)
    bert = options.layout == "bert"
    # After the window: sep (bert, roberta) or sep cls (xlnet, its cls in segment 2).
    xlnet = options.layout == "xlnet"
    tail = _SUFFIX[options.layout]
    end_b = sep_b + (features.varint(cls) if xlnet else b"")
    headers = _HEADERS

    def entry(name: str, payload: bytes) -> bytes:
        header = headers.get((name, len(payload)))
        if header is None:
            header = headers[(name, len(payload))] = features.feature_header(name, payload)
        return header + payload

    # Whole entries of the small scalars: positions and window indices are < max_seq_length
    # and < WINDOWS_PER_EXAMPLE.
    small = max(t, WINDOWS_PER_EXAMPLE)
    start_e, end_e, window_e = ([entry(name, features.varint(v)) for v in range(small)]
                                for name in ("start_position", "end_position", "window_index"))
    zeros = b"\x00" * t
    ones = b"\x01" * t
    # Features of max_seq_length one-byte values: always the same header.
    mask_h, segment_h, flags_h = (features.feature_header(name, zeros)
                                  for name in ("padding_mask", "segment_ids", "token_is_max_context"))
    (ids_b, ids_at), (cs_b, cs_at), (ce_b, ce_at), (pre_b, pre_at), (uid_b, uid_at) = \
        _piece_bytes(plans)
    out = []
    q = r = 0
    for plan in plans:
        base = plan.context.first
        prefix = pre_b[pre_at[q]:pre_at[q + len(plan.prefix)]]
        q += len(plan.prefix)
        off = len(plan.prefix)
        index_b = entry("example_index", features.varint(plan.index))
        impossible_b = entry("is_impossible", features.varint(plan.is_impossible))
        single = len(plan.spans) == 1
        for w, (start, length) in enumerate(plan.spans):
            end = off + length
            rest = t - end - tail
            stop = start + length
            if plan.answer is not None and start <= plan.answer[0] and plan.answer[1] < stop:
                first, last = plan.answer[0] - start + off, plan.answer[1] - start + off
            else:
                first = last = 0
            flags = ones[:length] if single else (plan.best[start:stop] == w).astype(np.uint8).tobytes()
            body = b"".join((
                entry("context_char_end", zeros[:off] + ce_b[ce_at[base + start]:ce_at[base + stop]] + zeros[:rest + tail]),
                entry("context_char_start", zeros[:off] + cs_b[cs_at[base + start]:cs_at[base + stop]] + zeros[:rest + tail]),
                end_e[last],
                index_b,
                impossible_b,
                mask_h, ones[:end + tail], zeros[:rest],
                segment_h, (zeros[:off] + ones[:length + 1] + zeros[:rest] if bert else
                            zeros[:off] + ones[:length + 1] + b"\x02" + zeros[:rest] if xlnet
                            else zeros),
                start_e[first],
                entry("token_ids", prefix + ids_b[ids_at[base + start]:ids_at[base + stop]] + end_b + pad_b * rest),
                flags_h, zeros[:off], flags, zeros[:rest + tail],
                entry("unique_id", uid_b[uid_at[r]:uid_at[r + 1]]),
                window_e[w],
            ))
            r += 1
            out.append((plan.index, w, b"\x0a" + features.varint(len(body)) + body))
    return out


def examples_records(examples: Sequence[SquadExample], tokenizer, options: SquadOptions,
                     first_index: int = 0,
                     on_error: Optional[Callable[[int, FinetuneDataError], None]] = None
                     ) -> List[Tuple[int, int, bytes]]:
    """The window records of ``examples`` as make_finetune writes them: (example index,
    window index, serialized tf.train.Example) in example then window order; the bytes of
    features.serialize_columns(record_spec(options), to_records(examples_columns(...))),
    made without the columns (see _records). Errors as examples_columns."""
    plans, specials = _plans(examples, tokenizer, options, first_index, on_error)
    return _records(plans, specials, options)


def examples_columns(examples: Sequence[SquadExample], tokenizer, options: SquadOptions,
                     first_index: int = 0,
                     on_error: Optional[Callable[[int, FinetuneDataError], None]] = None
                     ) -> Dict[str, np.ndarray]:
    """The window records of ``examples`` (example_index = first_index + position) as columns
    (scalars [N, 1], rows [N, max_seq_length], int64; rows in example then window order), with
    all questions and the distinct contexts tokenized in one batched call each. What
    make_finetune writes (through text.features.serialize_columns).

    An example that cannot be featurized (an answer that covers no piece, too many windows)
    raises FinetuneDataError, or, with ``on_error``, is reported there and gets no records.
    """
    plans, specials = _plans(examples, tokenizer, options, first_index, on_error)
    return _columns(plans, specials, options)


def examples_features(examples: Sequence[SquadExample], tokenizer, options: SquadOptions,
                      first_index: int = 0,
                      on_error: Optional[Callable[[int, FinetuneDataError], None]] = None
                      ) -> List[List[dict]]:
    """examples_columns as one list of record dicts (name -> int | list of int) per example
    (an example reported to ``on_error`` gets [])."""
    cols = examples_columns(examples, tokenizer, options, first_index, on_error)
    lists = {name: (cols[name][:, 0] if name in SCALARS else cols[name]).tolist() for name in cols}
    out: List[List[dict]] = [[] for _ in examples]
    for r, index in enumerate(lists["example_index"]):
        out[index - first_index].append({name: lists[name][r] for name in cols})
    return out


def example_features(example: SquadExample, tokenizer, options: SquadOptions,
                     example_index: int = 0) -> List[dict]:
    """The window records of one example (see the module docstring); ``tokenizer`` from
    text.tokenizers.load_tokenizer."""
    return examples_features([example], tokenizer, options, example_index)[0]


KIND = FinetuneKind(name=NAME, add_flags=add_flags, make_options=options_from_flags,
                    read_examples=read_examples, record_spec=record_spec, records=examples_records,
                    read_tfds=read_tfds)
