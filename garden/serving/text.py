"""Raw text -> a backbone's named inputs, in tf.data and inside exported signatures alike.

`TextPacker` tokenizes with the very module the Beam job's tokenizer runs
(`text.tokenizers.load_tokenizer(kind, path).in_graph()`: WordPiece through
BERT's rules in core ops and tensorflow-text's FastWordpieceTokenizer, SentencePiece through tf_text.SentencepieceTokenizer,
byte-level BPE through GPT-2's pre-tokenizer and merges in core ops), then packs one or two
segments in the family's layout (docs/objectives.md section 12):

    "bert"     [CLS] A [SEP] (B [SEP])         segment_ids 0 .. 0 (1 .. 1); padded with [PAD]
               (BERT, ALBERT with its SentencePiece [CLS]/[SEP]/<pad>, ELECTRA, SpanBERT, ...)
    "roberta"  <s> A </s> (</s> B </s>)         no segment_ids; padded with <pad>, whose id
               RoBERTa's positions are offset by (garden.models.roberta.backbone)
    "xlnet"    A <sep> (B <sep>) <cls>          segment_ids 0 .. 0 (1 .. 1) 2; padded on the
               RIGHT with <pad> (segment 0): XLNet's packing (Yang et al. 2019, the xlnet
               repo's classifier_utils; Hugging Face's XLNetTokenizer
               build_inputs_with_special_tokens / create_token_type_ids_from_sequences)
    "gpt2"     A (<|endoftext|> B)              no segment_ids, no start token; padded on the
               right with <|endoftext|> (the vocabulary's <pad> when it has one): OpenAI's
               GPT-2 vocabulary has no <s>, </s> nor <pad>. Hugging Face's
               GPT2ForSequenceClassification with pad_token_id = eos_token_id classifies the
               last non-pad token, which the padding_mask marks here

XLNet's own code and Hugging Face's tokenizer pad on the LEFT, so that <cls> sits at the last
position; the garden keeps right padding for "xlnet" too, and XLNetBackbone's pooled_output is
the last REAL position instead (the <cls>). XLNet has only relative positions (and relative
segments), and padding keys are blocked for every query, so the real tokens' states are the
same either way; right padding keeps one packing path for every layout: tf_text's
pad_model_inputs here and in the QA windows (garden.serving.question_answering), numpy row writes in
text.finetune.question_answering, and the same answer positions / context offsets at the front
of a window. (Hugging Face pads token_type_ids with 3, pad_token_type_id; padding is never
attended to, so the garden pads them with 0 as in the other layouts.)

Truncation of a pair is BERT's `_truncate_seq_pair` (pop from the longer, from B on a tie):
`tf_text.ShrinkLongestTrimmer` fed the segments in the order (B, A) shrinks the longest and,
on a tie, the first one it was given, which reproduces it (A=3, B=3, budget 5 -> A 3, B 2).
RoundRobinTrimmer (and keras-hub's MultiSegmentPacker) would give the same lengths but emits
the `TFText>RoundRobinTrim` kernel of tensorflow-text 2.13, which TF Serving releases linking
tensorflow-text 2.12 cannot load (tensorflow/serving#2267); ShrinkLongestTrimmer is core TF
ops. Each segment is first cut to the budget, which leaves the result unchanged and bounds the
trimmer's loop. Budgets: "bert" and "xlnet" L-2 (one text) or L-3 (pair); "roberta" L-2 or L-4, as
Hugging Face's RoBERTa tokenizer counts its four specials of a pair; "gpt2" L or L-1.

`checked_text(x, name)` is the guard every text signature applies first: tensorflow-text's
FastBertTokenizer segfaulted the process on a rank-0 string (issue 13), and a [2, 3] batch
would silently be read as 2 texts; both answer InvalidArgumentError instead.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from text import tokenizers, vocab_files

LAYOUTS = ("bert", "roberta", "xlnet", "gpt2")
# (specials of one text, specials of a pair) per layout.
SPECIALS = {"bert": (2, 3), "roberta": (2, 4), "xlnet": (2, 3), "gpt2": (0, 1)}
# Layouts without a segment input.
NO_SEGMENTS = ("roberta", "gpt2")
# The layout a tokenizer kind's families use unless told otherwise (RoBERTa is the encoder of
# the byte-level BPE kind; GPT-2 and BART, when they classify, pack like it).
DEFAULT_LAYOUT = {"wordpiece": "bert", "sentencepiece": "bert", "bpe": "roberta"}


def checked_text(text: tf.Tensor, name: str) -> tf.Tensor:
    """`text` as a string vector [batch], or InvalidArgumentError naming the input.

    The check runs in the graph on every call: signatures take a string tensor of any shape
    (a TensorSpec of shape [None] is not enforced by a loaded signature nor by TF Serving), so
    the rank is only known at run time.
    """
    text = tf.convert_to_tensor(text, tf.string)
    rank_ok = tf.debugging.assert_rank(
        text, 1, message=f"{name} must be a batch of strings, shape [batch] (rank 1): send a "
                         f"list, e.g. {{\"{name}\": [\"a text\"]}}, not a single string or a "
                         f"nested list")
    with tf.control_dependencies([rank_ok]):
        # A reshape, not tf.ensure_shape: it gives the static shape [None] and runs only after
        # the check (EnsureShape could fail first with a message that names no input).
        return tf.reshape(text, [-1])


def checked_pair(text_a: tf.Tensor, text_b: Optional[tf.Tensor]):
    """checked_text of both inputs, and text_b as long as text_a."""
    text_a = checked_text(text_a, "text_a")
    if text_b is None:
        return text_a, None
    text_b = checked_text(text_b, "text_b")
    same = tf.debugging.assert_equal(
        tf.size(text_a), tf.size(text_b),
        message="text_a and text_b must hold the same number of texts (one pair per row)")
    with tf.control_dependencies([same]):
        return tf.identity(text_a), tf.identity(text_b)


def combine(layout: str, segments, cls_id, sep_id):
    """(ids, segment_ids), ragged [batch, (tokens)], of one or two segments with a layout's
    special tokens: tf_text.combine_segments' [CLS] A [SEP] (B [SEP]) with segment ids 0 (1)
    for "bert" and "roberta" (RoBERTa's second </s> is part of B, see TextPacker._segments);
    A <sep> (B <sep>) <cls> with segment ids 0 (1) 2 for "xlnet"; A (<|endoftext|> B) with
    segment ids 0 for "gpt2" (sep_id is <|endoftext|>, cls_id unused)."""
    if layout == "gpt2":
        ids = segments[0]
        if len(segments) == 2:
            eod = tf.fill([ids.nrows(), 1], tf.constant(sep_id, ids.dtype))
            ids = tf.concat([ids, eod, segments[1]], axis=1)
        return ids, tf.zeros_like(ids, dtype=tf.int64)
    if layout != "xlnet":
        return tf_text.combine_segments(segments, start_of_sequence_id=cls_id,
                                        end_of_segment_id=sep_id)
    ids, types = [], []
    for k, segment in enumerate(segments):
        sep = tf.fill([segment.nrows(), 1], tf.constant(sep_id, segment.dtype))
        piece = tf.concat([segment, sep], axis=1)
        ids.append(piece)
        types.append(tf.ones_like(piece, dtype=tf.int64) * k)
    rows = segments[0].nrows()
    ids.append(tf.fill([rows, 1], tf.constant(cls_id, segments[0].dtype)))
    types.append(tf.fill([rows, 1], tf.constant(2, tf.int64)))
    return tf.concat(ids, axis=1), tf.concat(types, axis=1)


def model_inputs(model, inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """The entries of `inputs` that `model` takes. A layout can pack more than a family reads
    (the "bert" layout's segment_ids for DistilBERT or the LSTMs); given a dict with extra keys,
    a Keras functional model matches its inputs by position, not by name, and silently reads
    the wrong tensors (segment ids as token ids), so callers pass only the model's own."""
    try:
        names = model.input
    except (AttributeError, ValueError):  # a subclassed model: it reads its inputs by name
        return inputs
    return {k: inputs[k] for k in names} if isinstance(names, dict) else inputs


class TextPacker(tf.Module):
    """Encodes one or two batches of strings into a backbone's inputs of a fixed length.

    Args:
        tokenizer: a `text.tokenizers.TextTokenizer` (load_tokenizer(kind, path,
            lower_case=...)), the one the pretraining data was made with.
        max_seq_length: length of every output row, special tokens included.
        layout: "bert", "roberta", "xlnet" or "gpt2" (see the module docstring); default by
            tokenizer kind ("xlnet" and "gpt2" are never defaults: bind them, or take a
            converted directory's).

    Outputs of __call__: token_ids, padding_mask (and segment_ids for "bert" and "xlnet"), int32
    [batch, max_seq_length].

    Example:
        packer = TextPacker(tokenizers.load_tokenizer("wordpiece", "vocab.txt"), 128)
        inputs = packer(tf.constant(["a premise"]), tf.constant(["a hypothesis"]))
        logits = classifier(inputs)["logits"]
    """

    def __init__(self, tokenizer, max_seq_length: int, layout: Optional[str] = None,
                 name: Optional[str] = None):
        super().__init__(name=name)
        layout = layout or DEFAULT_LAYOUT[tokenizer.kind]
        if layout not in LAYOUTS:
            raise ValueError(f"unknown text layout {layout!r}; expected one of {LAYOUTS}")
        if max_seq_length < SPECIALS[layout][1] + 2:
            raise ValueError(f"max_seq_length={max_seq_length} leaves no room for a pair's "
                             f"special tokens in the {layout!r} layout")
        vocab = tokenizer.vocab
        self.kind, self.layout = tokenizer.kind, layout
        self.max_seq_length = int(max_seq_length)
        self.vocab_size = vocab.size
        self.lower_case, self.fingerprint = bool(tokenizer.lower_case), tokenizer.fingerprint
        self.vocab_path = tokenizer.path  # the file the tokens come from (analyses read them)
        role = lambda r: vocab.special(r, f"the {layout!r} text layout")  # noqa: E731
        if layout == "gpt2":
            eod = role("eod")
            self.cls_id, self.sep_id, self.pad_id = None, eod, vocab.specials.get("pad", eod)
        else:
            self.cls_id, self.sep_id, self.pad_id = role("cls"), role("sep"), role("pad")
        # Kept as an attribute so that its resources (tables, models) are saved with an export.
        self.tokenizer = tokenizer.in_graph()

    @property
    def input_names(self) -> tuple:
        if self.layout in NO_SEGMENTS:
            return ("token_ids", "padding_mask")
        return ("token_ids", "segment_ids", "padding_mask")

    def tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
        """Piece ids of a string vector, int64 ragged [batch, (pieces)]."""
        pieces = self.tokenizer(text)
        return pieces

    def _segments(self, text_a, text_b):
        specials_a, specials_pair = SPECIALS[self.layout]
        a = self.tokenize(text_a)
        if text_b is None:
            return [a[:, :self.max_seq_length - specials_a]]
        budget = self.max_seq_length - specials_pair
        b = self.tokenize(text_b)
        # (B, A): the trimmer breaks ties on the first segment, BERT trims B on a tie.
        b, a = tf_text.ShrinkLongestTrimmer(budget).trim([b[:, :budget], a[:, :budget]])
        if self.layout == "roberta":
            # combine_segments writes <s> A </s> B </s>; RoBERTa's pair has </s></s> between.
            sep = tf.fill([b.nrows(), 1], tf.constant(self.sep_id, b.dtype))
            b = tf.concat([sep, b], axis=1)
        return [a, b]

    def __call__(self, text_a: tf.Tensor, text_b: Optional[tf.Tensor] = None
                 ) -> Dict[str, tf.Tensor]:
        ids, segment_ids = combine(self.layout, self._segments(text_a, text_b), self.cls_id,
                                   self.sep_id)
        length = self.max_seq_length
        token_ids, padding_mask = tf_text.pad_model_inputs(ids, length, pad_value=self.pad_id)
        out = {"token_ids": tf.cast(token_ids, tf.int32),
               "padding_mask": tf.cast(padding_mask, tf.int32)}
        if self.layout not in NO_SEGMENTS:
            segment_ids, _ = tf_text.pad_model_inputs(segment_ids, length, pad_value=0)
            out["segment_ids"] = tf.cast(segment_ids, tf.int32)
        return out

    def encode_numpy(self, texts_a: Sequence[str], texts_b: Optional[Sequence[str]] = None
                     ) -> Dict[str, np.ndarray]:
        """Eager helper for tests, warmup requests and notebooks: int32 numpy arrays out."""
        if texts_b is not None and len(texts_b) != len(texts_a):
            raise ValueError(f"{len(texts_a)} first texts but {len(texts_b)} second texts")
        text_a = tf.constant(list(texts_a), dtype=tf.string, shape=[len(texts_a)])
        text_b = (None if texts_b is None
                  else tf.constant(list(texts_b), dtype=tf.string, shape=[len(texts_b)]))
        return {k: v.numpy() for k, v in self(text_a, text_b).items()}


def load_packer(vocab: str, max_seq_length: int, *, kind: Optional[str] = None,
                lower_case: bool = True, layout: Optional[str] = None) -> TextPacker:
    """A TextPacker of the vocabulary at `vocab` (kind from its name when not given)."""
    kind = kind or vocab_files.detect_kind(vocab)
    return TextPacker(tokenizers.load_tokenizer(kind, vocab, lower_case=lower_case),
                      max_seq_length, layout)
