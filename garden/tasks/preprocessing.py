"""Text -> model inputs for sentence (pair) tasks, identical in tf.data and in the served graph.

`TextEncoder` turns batches of raw strings into the backbone's named inputs
(`token_ids`, `segment_ids`, `padding_mask`, int32 [batch, max_seq_length]) laid out as BERT's
run_classifier.py does (OBJECTIVES.md section 12):

    [CLS] A [SEP]            segment ids 0 ... 0
    [CLS] A [SEP] B [SEP]    segment ids 0 ... 0 1 ... 1, then [PAD] (id looked up in the vocab)

It is a `tf.Module` whose call is plain TensorFlow (no Python-side state), so the same object
runs in `Dataset.map` for fine-tuning and inside the exported SavedModel's signatures.
Tokenization is `data_pipelines.tokenizers.wordpiece_tokenizer` (tensorflow-text's
FastBertTokenizer), the tokenizer the pretraining pipeline used.

Pieces and why (all from tensorflow-text):
- Truncation of a pair: `tf_text.ShrinkLongestTrimmer` fed the segments in the order (B, A).
  BERT's `_truncate_seq_pair` pops the last token of the longer segment, and of B on a tie;
  ShrinkLongestTrimmer shrinks the longest segment and, on a tie, the first one it was given,
  so giving it (B, A) reproduces BERT exactly (A=3, B=3, budget 5 -> A keeps 3, B keeps 2).
  `RoundRobinTrimmer` (and keras-hub's MultiSegmentPacker, which uses it) would give the same
  lengths, but on rank-2 input it runs the `TFText>RoundRobinTrim` kernel that appeared in
  tensorflow-text 2.13; TensorFlow Serving releases that embed tensorflow-text 2.12 cannot load
  it (tensorflow/serving#2267). ShrinkLongestTrimmer is built from core TF ops only.
  Each segment is first cut to the budget: that leaves BERT's result unchanged (a segment never
  keeps more than the budget) and bounds the trimmer's while loop to `budget` steps.
- Packing: `tf_text.combine_segments` ([CLS], [SEP] after each segment, segment ids 0/1) and
  `tf_text.pad_model_inputs` (pad to max_seq_length, padding mask); both are core TF ops.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Union

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from data_pipelines import tokenizers

INPUT_NAMES = ("token_ids", "segment_ids", "padding_mask")


class TextEncoder(tf.Module):
    """Encodes one or two batches of strings into BERT inputs of a fixed length.

    Args:
        vocab: WordPiece vocabulary, a list of tokens or the path of a one-token-per-line file
            (read with `tokenizers.load_vocab`, which checks the reserved tokens).
        lower_case: lower-case, NFD-normalise and strip accents before WordPiece
            (the "uncased" models).
        max_seq_length: length of every output row, special tokens included (>= 3).

    Example:
        encoder = TextEncoder("vocab.txt", lower_case=True, max_seq_length=128)
        inputs = encoder(tf.constant(["a premise"]), tf.constant(["a hypothesis"]))
        logits = classifier(inputs)["logits"]
    """

    def __init__(self, vocab: Union[str, Sequence[str]], lower_case: bool, max_seq_length: int,
                 name: Optional[str] = None):
        super().__init__(name=name)
        if isinstance(vocab, (str, bytes)):
            vocab = tokenizers.load_vocab(vocab)
        vocab = list(vocab)
        if max_seq_length < 3:
            raise ValueError(f"max_seq_length={max_seq_length}: a pair needs room for "
                             f"[CLS] A [SEP] B [SEP], so at least 3")
        missing = [t for t in (tokenizers.CLS, tokenizers.SEP, tokenizers.PAD, tokenizers.UNK)
                   if t not in vocab]
        if missing:
            raise tokenizers.VocabularyError(f"vocabulary lacks {missing}, which the encoder "
                                             f"needs for [CLS] A [SEP] (B [SEP]) and padding")
        self.vocab_size = len(vocab)
        self.lower_case = bool(lower_case)
        self.max_seq_length = int(max_seq_length)
        self.cls_id = vocab.index(tokenizers.CLS)
        self.sep_id = vocab.index(tokenizers.SEP)
        self.pad_id = vocab.index(tokenizers.PAD)
        self.tokenizer = tokenizers.wordpiece_tokenizer(vocab, lower_case=self.lower_case)

    def tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
        """WordPiece ids of a 1-D string tensor, as int64 ragged [batch, (pieces)]."""
        text = tf.convert_to_tensor(text, dtype=tf.string)
        pieces = self.tokenizer.tokenize(text)
        if isinstance(pieces, tf.RaggedTensor) and pieces.ragged_rank > 1:
            pieces = pieces.merge_dims(-2, -1)  # defensive: some tokenizers add a words axis
        return pieces

    def __call__(self, text_a: tf.Tensor, text_b: Optional[tf.Tensor] = None
                 ) -> Dict[str, tf.Tensor]:
        """Returns {token_ids, segment_ids, padding_mask}, each int32 [batch, max_seq_length]."""
        length = self.max_seq_length
        a = self.tokenize(text_a)
        if text_b is None:
            budget = length - 2  # [CLS] A [SEP]
            segments = [a[:, :budget]]
        else:
            budget = length - 3  # [CLS] A [SEP] B [SEP]
            b = self.tokenize(text_b)
            # (B, A): the trimmer breaks ties on the first segment, BERT trims B on a tie.
            b, a = tf_text.ShrinkLongestTrimmer(budget).trim([b[:, :budget], a[:, :budget]])
            segments = [a, b]
        ids, segment_ids = tf_text.combine_segments(
            segments, start_of_sequence_id=self.cls_id, end_of_segment_id=self.sep_id)
        token_ids, padding_mask = tf_text.pad_model_inputs(ids, length, pad_value=self.pad_id)
        segment_ids, _ = tf_text.pad_model_inputs(segment_ids, length, pad_value=0)
        return {
            "token_ids": tf.cast(token_ids, tf.int32),
            "segment_ids": tf.cast(segment_ids, tf.int32),
            "padding_mask": tf.cast(padding_mask, tf.int32),
        }

    def encode_numpy(self, texts_a: Sequence[str], texts_b: Optional[Sequence[str]] = None
                     ) -> Dict[str, np.ndarray]:
        """Eager helper for tests and notebooks: Python strings in, int32 numpy arrays out."""
        if texts_b is not None and len(texts_b) != len(texts_a):
            raise ValueError(f"{len(texts_a)} first texts but {len(texts_b)} second texts")
        text_a = tf.constant(list(texts_a), dtype=tf.string, shape=[len(texts_a)])
        text_b = (None if texts_b is None
                  else tf.constant(list(texts_b), dtype=tf.string, shape=[len(texts_b)]))
        return {k: v.numpy() for k, v in self(text_a, text_b).items()}

