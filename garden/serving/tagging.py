"""Token tagging (CoNLL-2003 NER) served from raw sentences: word-level entities out.

Everything runs in the graph, as text/finetune/tagging.py does in Python for training
(the ids are tested equal):
  1. words: split at runs of Unicode whitespace, the characters Python's str.split() splits
     at (tensorflow-text's RegexSplitWithOffsets, an op of every TF Serving release since
     2.12; its WhitespaceTokenizer's op is newer), with byte offsets;
  2. pieces of each word with the training tokenizer (byte-level BPE: a space before every
     word but the first); a word without pieces gets the unknown token; a word keeps at most
     max_seq_length - 2 pieces;
  3. long sentences: words dealt greedily into non-overlapping rows of at most
     max_seq_length - 2 pieces (tf.scan: a word opens a new row when it does not fit), each
     row packed as [CLS] pieces [SEP];
  4. the tagger's label on each word's first sub-token (argmax);
  5. entities decoded from the word tags with conlleval's rules (the metric's lenient mode:
     an entity starts at B-X, or at I-X after O or another type, and continues over I-X), so
     IOB1 and IOB2 models decode alike.

Signatures (TF Serving's row format needs every output to share the batch dimension, so the
ragged answers are padded, with a count per sentence):
  serving_default  predict  sentences string [B] ->
        num_entities int32 [B]; entity_type string [B, E]; entity_text string [B, E]
        (the span of the input, inner whitespace as written); entity_start / entity_end
        int64 [B, E] (character offsets [start, end) in the sentence, Unicode characters,
        not bytes); padding: "" and -1 beyond num_entities.
        num_words int32 [B]; words string [B, W]; word_tags string [B, W] (padding "").
  serving_ids      predict  token_ids / segment_ids / padding_mask int32 [B, T] ->
        logits float32 [B, T, L], label_id int64 [B, T], tag string [B, T]
        (per sub-token; the first sub-token of each word carries its tag).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from text import utf8, vocab_files
from text.tag_schemes import tag_type
from garden.serving.base import PREDICT, ServingModule, strings
from garden.serving.text import TextPacker, checked_text, model_inputs


# Python's str.split() whitespace: RE2's \\s ([\\t\\n\\f\\r ]), \\v, the separators U+001C..1F,
# NEL, and the Unicode separator categories (NBSP, U+2000..200A, U+2028, U+3000, ...).
WHITESPACE = r"[\s\x0b\x1c-\x1f\x85\p{Z}]+"


class TaggingServing(ServingModule):
    """Raw sentences in, word-level entities out (see the module docstring).

    Args:
        model: Keras model, backbone inputs -> {"logits": [B, T, L]} (TokenTagger).
        packer: the TextPacker of the fine-tuning vocabulary (its tokenizer, special ids and
            input names are used; its max_seq_length is the row length).
        unk_id: the unknown token's id (given to words without pieces).
        vocab_path: the vocabulary file (copied into assets/).
        label_names: tags in logit order, "O" first.
        scheme: the tags' scheme ("iob1" / "iob2"), recorded in the metadata.
        warmup_sentences: a few sentences for the warmup requests.
    """

    task = "tagging"

    def __init__(self, model, packer: TextPacker, unk_id: int, vocab_path: str,
                 label_names: Sequence[str], scheme: str = "iob1",
                 warmup_sentences: Optional[Sequence[str]] = None):
        super().__init__(name="tagger_serving")
        self._hold("model", model)
        self.packer = packer
        self.unk_id = int(unk_id)
        self._label_names = [str(n) for n in label_names]
        width = model.output["logits"].shape[-1]
        if width is not None and width != len(self._label_names):
            raise ValueError(f"the model has {width} logits but {len(self._label_names)} "
                             f"label_names were given: {self._label_names}")
        self.scheme = scheme
        types = []
        for name in self._label_names:
            t = tag_type(name)
            if t is not None and t not in types:
                types.append(t)
        self._types = types
        # Per label: its type's index + 1 (0 for O), and whether it is a B- tag.
        self._label_type = [0 if tag_type(n) is None else types.index(tag_type(n)) + 1
                            for n in self._label_names]
        self._label_begins = [n.startswith("B-") for n in self._label_names]
        files = (vocab_files.bpe_files(vocab_path) if packer.kind == "bpe" else (vocab_path,))
        self._vocab_path = files[0]
        self.vocab_file = tf.saved_model.Asset(files[0])
        if len(files) > 1:
            self.merges_file = tf.saved_model.Asset(files[1])
        self._warmup = list(warmup_sentences or ["A warmup sentence .", "Another one"])

    # -- the computation ----------------------------------------------------------------
    def predict_ids(self, inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        inputs = {k: tf.cast(inputs[k], tf.int32) for k in self.packer.input_names}
        logits = tf.cast(self.model(model_inputs(self.model, inputs), training=False)["logits"],
                         tf.float32)
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int64)
        return {"logits": logits, "label_id": label_id,
                "tag": tf.gather(tf.constant(self._label_names), label_id)}

    def encode_words(self, words: tf.RaggedTensor):
        """Model rows of a [B, (W)] batch of words: (inputs dict int32 [R, T], row of each
        flat word [NW], position of each word's first sub-token in its row [NW])."""
        budget = self.packer.max_seq_length - 2
        flat = words.flat_values
        position = tf.range(tf.size(flat, out_type=tf.int64)) - tf.gather(
            words.row_starts(), words.value_rowids())
        first = tf.equal(position, 0)
        if self.packer.kind == "bpe":  # a word start inside a sentence carries its space
            flat = tf.where(first, flat, tf.strings.join([" ", flat]))
        pieces = self.packer.tokenize(flat)  # [NW, (p)]
        empty = tf.cast(tf.equal(pieces.row_lengths(), 0), tf.int64)
        unk = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(empty)], tf.constant(self.unk_id, pieces.dtype)), empty)
        pieces = tf.concat([pieces, unk], axis=1)[:, :budget]
        lengths = pieces.row_lengths()

        def deal(state, x):  # greedy rows, as text.finetune.tagging.split_pieces
            row, fill = state
            n, is_first = x
            new = tf.logical_or(is_first, tf.logical_and(fill > 0, fill + n > budget))
            return (row + tf.cast(new, tf.int64), tf.where(new, n, fill + n))

        rows, _ = tf.scan(deal, (lengths, first),
                          initializer=(tf.constant(-1, tf.int64), tf.constant(0, tf.int64)))
        num_rows = tf.reduce_max(tf.concat([rows, [-1]], 0)) + 1
        words_of_rows = tf.RaggedTensor.from_value_rowids(pieces, rows, nrows=num_rows)
        row_pieces = words_of_rows.merge_dims(1, 2)
        before = tf.cumsum(lengths, exclusive=True)
        first_word_of_row = words_of_rows.row_starts()
        offset = before - tf.gather(before, tf.gather(first_word_of_row, rows))
        ids, segments = tf_text.combine_segments(
            [row_pieces], start_of_sequence_id=self.packer.cls_id,
            end_of_segment_id=self.packer.sep_id)
        length = self.packer.max_seq_length
        token_ids, mask = tf_text.pad_model_inputs(ids, length, pad_value=self.packer.pad_id)
        inputs = {"token_ids": tf.cast(token_ids, tf.int32),
                  "padding_mask": tf.cast(mask, tf.int32),
                  "segment_ids": tf.zeros_like(token_ids, tf.int32)}
        inputs = {k: inputs[k] for k in self.packer.input_names}
        return inputs, rows, offset + 1

    def tag_text(self, sentences) -> Dict[str, tf.Tensor]:
        # Words and entities are cut from the text: ill-formed UTF-8 (gRPC sends bytes) is read
        # as its replacement decoding first, so that they are of that text.
        text = utf8.valid_utf8(checked_text(sentences, "sentences"))
        words, starts, ends = tf_text.regex_split_with_offsets(text, WHITESPACE)
        inputs, rows, positions = self.encode_words(words)
        logits = tf.cast(self.model(model_inputs(self.model, inputs), training=False)["logits"],
                         tf.float32)
        word_logits = tf.gather_nd(logits, tf.stack([rows, positions], axis=1))
        label = tf.argmax(word_logits, axis=-1, output_type=tf.int64)  # [NW]
        out = self._entities(text, words, starts.flat_values, ends.flat_values, label)
        tags = words.with_flat_values(tf.gather(tf.constant(self._label_names), label))
        out.update(num_words=tf.cast(words.row_lengths(), tf.int32),
                   words=words.to_tensor(default_value=""),
                   word_tags=tags.to_tensor(default_value=""))
        return out

    def _entities(self, text, words, starts, ends, label):
        """conlleval's chunks of the word tags, as padded [B, E] tensors."""
        nw = tf.size(label, out_type=tf.int64)
        sentence = words.value_rowids()
        first = tf.equal(tf.range(nw) - tf.gather(words.row_starts(), sentence), 0)
        kind = tf.gather(tf.constant(self._label_type, tf.int64), label)
        begins = tf.gather(tf.constant(self._label_begins), label)
        previous = tf.where(first, tf.zeros_like(kind), tf.concat([[0], kind[:-1]], 0))
        inside = kind > 0
        start = inside & (begins | tf.not_equal(kind, previous))
        entity = tf.cumsum(tf.cast(start, tf.int64)) - 1
        num = tf.reduce_sum(tf.cast(start, tf.int64))
        start_word = tf.boolean_mask(tf.range(nw), start)
        end_word = tf.math.unsorted_segment_max(
            tf.boolean_mask(tf.range(nw), inside), tf.boolean_mask(entity, inside), num)
        row = tf.gather(sentence, start_word)
        byte_start, byte_end = tf.gather(starts, start_word), tf.gather(ends, end_word)
        source = tf.gather(text, row)
        entity_text = tf.strings.substr(source, byte_start, byte_end - byte_start)
        char_start = tf.cast(tf.strings.length(tf.strings.substr(source, tf.zeros_like(byte_start), byte_start),
                                               unit="UTF8_CHAR"), tf.int64)
        char_end = char_start + tf.cast(tf.strings.length(entity_text, unit="UTF8_CHAR"),
                                        tf.int64)
        type_names = tf.constant([""] + self._types)
        entity_type = tf.gather(type_names, tf.gather(kind, start_word))
        batch = tf.shape(text, out_type=tf.int64)[0]

        def per_sentence(values, default):
            return tf.RaggedTensor.from_value_rowids(values, row, nrows=batch).to_tensor(
                default_value=default)

        counts = tf.math.bincount(tf.cast(row, tf.int32), minlength=tf.cast(batch, tf.int32),
                                  maxlength=tf.cast(batch, tf.int32))
        return {"num_entities": counts, "entity_type": per_sentence(entity_type, ""),
                "entity_text": per_sentence(entity_text, ""),
                "entity_start": per_sentence(char_start, tf.constant(-1, tf.int64)),
                "entity_end": per_sentence(char_end, tf.constant(-1, tf.int64))}

    # -- the contract ---------------------------------------------------------------------
    def signatures(self):
        serve_text = tf.function(self.tag_text,
                                 input_signature=[tf.TensorSpec(None, tf.string, name="sentences")])
        ids_names = self.packer.input_names
        serve_ids = tf.function(lambda *ids: self.predict_ids(dict(zip(ids_names, ids))),
                                input_signature=[tf.TensorSpec([None, None], tf.int32, name=n)
                                                 for n in ids_names])
        return {"serving_default": (serve_text.get_concrete_function(), PREDICT),
                "serving_ids": (serve_ids.get_concrete_function(), PREDICT)}

    def warmup_requests(self):
        """Each sentence alone, all as one batch, and that batch's first rows as ids."""
        requests = [("serving_default", {"sentences": strings([s])}) for s in self._warmup]
        requests.append(("serving_default", {"sentences": strings(self._warmup)}))
        words = tf.ragged.constant([s.split() for s in self._warmup], dtype=tf.string)
        inputs, _, _ = self.encode_words(words)
        requests.append(("serving_ids", {k: v.numpy() for k, v in inputs.items()}))
        return requests

    def metadata(self) -> dict:
        p = self.packer
        return {"task": self.task, "label_names": list(self._label_names),
                "entity_types": list(self._types), "scheme": self.scheme,
                "decoding": "conlleval (lenient): an entity starts at B-X or at I-X after O "
                            "or another type",
                "offsets": "characters (Unicode code points), [start, end)",
                "max_seq_length": p.max_seq_length, "tokenizer": p.kind, "layout": p.layout,
                "lower_case": p.lower_case,
                "vocab_file": "assets/" + self._vocab_path.rstrip("/").split("/")[-1],
                "vocab_size": p.vocab_size, "vocab_fingerprint": p.fingerprint}


def entities_of(outputs: Dict[str, np.ndarray]) -> List[List[tuple]]:
    """(type, text, start, end) per entity per sentence, from serving_default's outputs (as
    numpy or lists; strings as bytes or str)."""
    def s(x):
        return x.decode("utf-8") if isinstance(x, bytes) else str(x)

    out = []
    for k, n in enumerate(np.asarray(outputs["num_entities"]).tolist()):
        out.append([(s(outputs["entity_type"][k][j]), s(outputs["entity_text"][k][j]),
                     int(outputs["entity_start"][k][j]), int(outputs["entity_end"][k][j]))
                    for j in range(n)])
    return out
