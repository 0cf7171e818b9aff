"""SentencePiece models in the graph: tensorflow-text's op with the library's lattice Viterbi
(the 1-best) for unigram models, lower-casing and UTF-8 repair before it, character offsets
after it (text.tokenizers' module docstring says why the 1-best)."""

from __future__ import annotations

import functools
import hashlib

from text.utf8 import lower_in_graph, original_spans, strip_leading_space_in_graph, valid_utf8


def _has_lattice(model: bytes) -> bool:
    """Whether a SentencePiece model decodes by a lattice (unigram) and so has an n-best list:
    the sentencepiece library refuses NBestEncode for the other model types (BPE)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(model)
    try:
        sp.NBestEncodeAsIds("a", 1)
    except RuntimeError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def sentencepiece_module():
    """The SentencePiece tokenizer module class (defined on first use)."""
    import tensorflow as tf
    from tensorflow_text.python.ops import sentencepiece_tokenizer

    spec = [tf.TensorSpec([None], tf.string, name="text")]

    class _SentencePieceResource(tf.saved_model.experimental.TrackableResource):
        """tensorflow-text's model resource, named after the model's sha256."""

        def __init__(self, model: bytes):
            self._model = model
            self._shared_name = "sentencepiece_" + hashlib.sha256(model).hexdigest()
            super().__init__()
            _ = self.resource_handle  # made now, as tensorflow-text's own resource is

        def _create_resource(self):
            return sentencepiece_tokenizer.gen_sentencepiece_tokenizer.sentencepiece_op(
                model=self._model, shared_name=self._shared_name)

    class SentencePieceModule(tf.Module):
        def __init__(self, model: bytes, lower_case: bool):
            import tensorflow_text as tf_text

            super().__init__(name="sentencepiece_tokenizer")
            self.lower_case = lower_case
            # int32: the only integer type of its offsets op; ids are cast to int64 below.
            # return_nbest with nbest_size=1: the op's 1-best list is SentencePiece's lattice
            # Viterbi (Lattice::Viterbi, float scores), the encoder the sentencepiece library
            # defines and ran when ALBERT, XLNet and T5 were pretrained; the op's default Encode
            # is the "optimized" encoder of its bundled 0.1.96, whose candidate scores are
            # doubles and which breaks exact ties differently (see text.tokenizers' module docstring).
            # Only a unigram model has a lattice: a BPE-type SentencePiece model (some released
            # checkpoints) refuses NBestEncode and takes the op's plain Encode, its only one.
            nbest = {"nbest_size": 1, "return_nbest": True} if _has_lattice(model) else {}
            self.tokenizer = tf_text.SentencepieceTokenizer(model=model, out_type=tf.int32, **nbest)
            # The op's model resource is made with an empty shared name, and a loaded SavedModel
            # holding two SentencePiece models ran both with the first one (found by
            # tests/text/test_tokenizer_parity.py): each model gets a name of its own,
            # from its bytes (the same model may share it).
            self.tokenizer._model_resource = _SentencePieceResource(model)

        def prepare(self, text):
            """The text the model's normalizer gets: valid UTF-8, lower-cased when lower_case."""
            text = valid_utf8(text)
            return lower_in_graph(text) if self.lower_case else text

        def ids(self, text):
            """Ids of a string vector, int64 ragged [batch, (pieces)] (the ops)."""
            return tf.cast(self.tokenizer.tokenize(self.prepare(text)), tf.int64)

        @tf.function(input_signature=spec)
        def __call__(self, text):
            return self.ids(text)

        # Eager calls go through the graph too: op by op, the UTF-8 check and the lower-casing
        # around the tokenizer's op cost more than the function call (one short text: 6.2 ms
        # op by op, 1.5 ms as a graph).
        tokenize = __call__

        def tokenize_strings(self, text):
            """The ids of __call__, op by op, for `text` made from Python strings without a NUL
            (TextTokenizer's eager path): valid UTF-8 already, so that tf.strings.lower is
            lower_in_graph and the check is a no-op; two ops cost less than a function call
            (one short text: 0.3 ms)."""
            lowered = tf.strings.lower(text, encoding="utf-8") if self.lower_case else text
            return tf.cast(self.tokenizer.tokenize(lowered), tf.int64)

        def tokenize_with_char_offsets(self, text):
            """(ids, starts, ends) ragged int64, spans in characters of the original text (its
            replacement-decoded text when it is not valid UTF-8) as
            TextTokenizer.tokenize_with_offsets gives them in bytes."""
            text = valid_utf8(text)
            lowered = lower_in_graph(text) if self.lower_case else text
            ids, starts, ends = self.tokenizer.tokenize_with_offsets(lowered)
            starts, ends = tf.cast(starts, tf.int64), tf.cast(ends, tf.int64)
            starts = strip_leading_space_in_graph(lowered, starts, ends)
            return (tf.cast(ids, tf.int64),
                    *original_spans(text, lowered, starts, ends, self.lower_case))

    return SentencePieceModule
