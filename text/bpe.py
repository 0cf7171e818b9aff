"""GPT-2's byte-level BPE (Radford et al. 2019) in core TF ops: the byte-to-symbol map, the
pre-tokenizer's character classes and the merge loop (text.tokenizers' module docstring says
why not keras-hub's BytePairTokenizer)."""

from __future__ import annotations

import functools
from typing import Dict, List, Tuple

import numpy as np

from text.utf8 import lower_in_graph, original_spans, strip_leading_space_in_graph, valid_utf8


def bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters (its encoder.py
    ``bytes_to_unicode``): printable Latin-1 bytes map to themselves, the others to U+0100..."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


# GPT-2's pre-tokenizer (its encoder.py) splits text with the Python `regex` pattern
#   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
# (Hugging Face's ByteLevel pre-tokenizer runs the same pattern). Its characters fall into four
# classes; \s is Unicode's White_Space set in both engines (not the \x1c-\x1f that str.isspace
# adds).
_LETTER, _NUMBER, _OTHER, _SPACE = 0, 1, 2, 3
_WHITE_SPACE = frozenset([0x9, 0xA, 0xB, 0xC, 0xD, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                          0x2028, 0x2029, 0x202F, 0x205F, 0x3000])


@functools.lru_cache(maxsize=None)
def gpt2_char_classes() -> Tuple[np.ndarray, np.ndarray]:
    """(starts, classes): the class of every code point (_LETTER \\p{L}, _NUMBER \\p{N}, _SPACE
    \\s, _OTHER) as sorted ranges, range k being [starts[k], starts[k + 1]). Letters and numbers
    are the general categories L* and N* of Python's Unicode database (unicodedata 14.0 on
    Python 3.11): equal to Hugging Face's classes on every code point assigned in that version;
    the 9,392 code points assigned later are _OTHER here (onig, Hugging Face's engine, reads
    them as letters or numbers). An export keeps the table it was made with."""
    import unicodedata

    classes = np.full(0x110000, _OTHER, np.int8)
    # Planes 4 to 13 hold no character and 14 to 16 no letter or number (tags, selectors,
    # private use): only planes 0 to 3 are looked up.
    for cp in range(0x40000):
        kind = unicodedata.category(chr(cp))[0]
        if kind == "L":
            classes[cp] = _LETTER
        elif kind == "N":
            classes[cp] = _NUMBER
    classes[list(_WHITE_SPACE)] = _SPACE
    starts = np.concatenate([[0], np.flatnonzero(np.diff(classes)) + 1]).astype(np.int32)
    return starts, classes[starts].astype(np.int32)


@functools.lru_cache(maxsize=None)
def bytepair_module():
    """The byte-level BPE tokenizer module class (defined on first use)."""
    import tensorflow as tf

    spec = [tf.TensorSpec([None], tf.string, name="text")]

    def shift(x, k, fill, within):
        """x[i - k] (k > 0) or x[i + |k|] (k < 0) where `within` says that index is in i's row,
        else `fill`."""
        n = tf.size(x)
        if k > 0:
            moved = tf.pad(x, [[k, 0]], constant_values=fill)[:n]
        else:
            moved = tf.pad(x, [[0, -k]], constant_values=fill)[-k:]
        return tf.where(within, moved, tf.cast(fill, x.dtype))

    class BytePairModule(tf.Module):
        """GPT-2's byte-level BPE in core TF ops: the pre-tokenizer's regex as rules over the
        characters' classes (no regex op: RE2 has no lookahead, and tensorflow-text's
        regex_split cuts a string at a NUL), the bytes of each word mapped to their symbols,
        then Hugging Face's merge order (the lowest-ranked pair first, the leftmost of equal
        pairs) on the batch's distinct words in a while loop."""

        def __init__(self, vocabulary: Dict[str, int], merges: List[str], lower_case: bool):
            super().__init__(name="bpe_tokenizer")
            self.lower_case = lower_case
            size = max(vocabulary.values()) + 1
            self.size = size
            symbol = bytes_to_unicode()
            self.byte_ids = tf.constant([vocabulary[symbol[b]] for b in range(256)], tf.int64)
            # (left id, right id) -> rank * size + merged id; a later duplicate of a merge wins,
            # as in GPT-2's dict of ranks and Hugging Face's map.
            table = {}
            for rank, merge in enumerate(merges):
                left, right = merge.split(" ")
                table[vocabulary[left] * size + vocabulary[right]] = rank * size + vocabulary[left + right]
            self.merges = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(tf.constant(list(table), tf.int64),
                                                    tf.constant(list(table.values()), tf.int64)),
                default_value=-1)
            starts, classes = gpt2_char_classes()
            self.class_starts = tf.constant(starts)
            self.class_codes = tf.constant(classes)
            # Each piece's length in bytes of the text (byte-level pieces are the text's
            # bytes), for offsets in the graph; 0 for a token that is not bytes.
            byte_of = {c: b for b, c in symbol.items()}
            lengths = np.zeros(size, np.int64)
            for token, i in vocabulary.items():
                if all(c in byte_of for c in token):
                    lengths[i] = len(token)
            self.piece_lengths = tf.constant(lengths)

        def prepare(self, text):
            """The text the pre-tokenizer gets: valid UTF-8, lower-cased when lower_case."""
            text = valid_utf8(text)
            return lower_in_graph(text) if self.lower_case else text

        def words(self, text):
            """(words, rows): the pre-tokenizer's words of valid UTF-8 `text`, flat, and the row
            of each. A word starts at a row's first character and wherever the regex's next
            match starts: at a change of class (letter, number, other); at a whitespace run and,
            when a non-space follows the run, at the run's last character (\\s+(?!\\S) leaves
            it out), which is a word of its own unless it is U+0020: that space opens the next
            word ( ?\\p{L}+ etc.); around a contraction ('s 't 're 've 'm 'll 'd), which the
            regex tries first wherever a match starts, i.e. after a letter, a number, a
            whitespace character other than U+0020 or at the row's start (after another "other"
            character the apostrophe is inside a [^\\s\\p{L}\\p{N}]+ run)."""
            chars, at = tf.strings.unicode_decode_with_offsets(text, "UTF-8")
            cp = chars.flat_values
            row = chars.value_rowids()
            pos = tf.range(tf.size(cp, out_type=tf.int64))
            first = tf.gather(chars.row_splits, row)
            end = tf.gather(chars.row_splits[1:], row)
            cls = tf.gather(self.class_codes,
                            tf.searchsorted(self.class_starts, cp, side="right") - 1)
            back = lambda x, k, fill: shift(x, k, fill, pos - k >= first)  # noqa: E731
            ahead = lambda x, k, fill: shift(x, -k, fill, pos + k < end)  # noqa: E731
            prev_cls, next_cls = back(cls, 1, -1), ahead(cls, 1, -1)
            prev_cp, next_cp, next2_cp = back(cp, 1, -1), ahead(cp, 1, -1), ahead(cp, 2, -1)
            is_first = pos == first
            space = cls == _SPACE
            after_space = prev_cls == _SPACE
            start = tf.where(
                space,
                is_first | ~after_space | ((next_cls >= 0) & (next_cls != _SPACE)),
                is_first | tf.where(after_space, prev_cp != 32, cls != prev_cls))
            can_contract = (cp == ord("'")) & (
                is_first | (prev_cls == _LETTER) | (prev_cls == _NUMBER) | (after_space & (prev_cp != 32)))
            short = tf.reduce_any(tf.stack([next_cp == ord(c) for c in "stmd"]), axis=0)
            long = tf.reduce_any(tf.stack([(next_cp == ord(a)) & (next2_cp == ord(b))
                                           for a, b in ("re", "ve", "ll")]), axis=0)
            length = tf.where(can_contract & short, 2, tf.where(can_contract & long, 3, 0))
            inside = back(length > 0, 1, False) | back(length == 3, 2, False)
            after = back(length == 2, 2, False) | back(length == 3, 3, False)
            start = (start & ~inside) | after
            # Byte spans of the words: from a word's first character to the next word's first
            # character, or to the end of its row.
            begin = tf.where(start)[:, 0]
            rows = tf.gather(row, begin)
            byte_begin = tf.gather(at.flat_values, begin)
            next_begin = tf.concat([byte_begin[1:], [0]], 0)
            same_row = tf.concat([rows[1:], [-1]], 0) == rows
            row_bytes = tf.gather(tf.cast(tf.strings.length(text), tf.int64), rows)
            byte_end = tf.where(same_row, next_begin, row_bytes)
            words = tf.strings.substr(tf.gather(text, rows), byte_begin, byte_end - byte_begin)
            return words, rows

        def merge(self, words):
            """Ids of each word (ragged [words, (pieces)]): its bytes' symbols merged pair by
            pair, the lowest rank first and the leftmost of equal pairs first (Hugging Face's
            BPE word merge; GPT-2's merges every occurrence of the best pair at once, which ends
            the same for merges learnt in order). One merge per word and step, over the batch's
            distinct words; a word leaves the loop when no pair of it merges, so that a long
            word costs its own steps only."""
            distinct, index = tf.unique(words)
            byte_strings = tf.strings.bytes_split(distinct)
            values = tf.reshape(tf.io.decode_raw(byte_strings.flat_values, tf.uint8), [-1])
            ids = tf.gather(self.byte_ids, tf.cast(values, tf.int32))
            size = tf.constant(self.size, tf.int64)
            never = tf.int64.max
            empty = tf.zeros([0], tf.int64)

            def step(ids, splits, word, done_ids, done_lengths, done_word):
                rows = tf.ragged.row_splits_to_segment_ids(splits)
                nrows = tf.size(splits, out_type=tf.int64) - 1
                lengths = splits[1:] - splits[:-1]
                found = self.merges.lookup(ids[:-1] * size + ids[1:])
                found = tf.where((rows[:-1] == rows[1:]) & (found >= 0), found, never)
                pair_rows = rows[:-1]
                best = tf.math.unsorted_segment_min(found, pair_rows, nrows)
                # Words with no pair that merges are final.
                final = best == never
                keep = tf.gather(~final, rows)
                done_ids = tf.concat([done_ids, tf.boolean_mask(ids, ~keep)], 0)
                done_lengths = tf.concat([done_lengths, tf.boolean_mask(lengths, final)], 0)
                done_word = tf.concat([done_word, tf.boolean_mask(word, final)], 0)
                # The others merge their leftmost best pair.
                is_best = (found == tf.gather(best, pair_rows)) & (found < never)
                where = tf.range(tf.size(found, out_type=tf.int64))
                leftmost = tf.math.unsorted_segment_min(tf.where(is_best, where, never),
                                                        pair_rows, nrows)
                chosen = is_best & (where == tf.gather(leftmost, pair_rows))
                merged = tf.concat([tf.where(chosen, found % size, ids[:-1]), ids[-1:]], 0)
                ids = tf.boolean_mask(merged, keep & tf.concat([[True], ~chosen], 0))
                lengths = tf.boolean_mask(lengths - 1, ~final)
                splits = tf.concat([[0], tf.cumsum(lengths)], 0)
                return ids, splits, tf.boolean_mask(word, ~final), done_ids, done_lengths, done_word

            _, _, _, done_ids, done_lengths, done_word = tf.while_loop(
                lambda ids, splits, *_: tf.size(splits) > 1, step,
                [ids, byte_strings.row_splits, tf.range(tf.size(distinct, out_type=tf.int64)),
                 empty, empty, empty],
                shape_invariants=[tf.TensorShape([None])] * 6)
            pieces = tf.RaggedTensor.from_row_lengths(done_ids, done_lengths)
            return tf.gather(tf.gather(pieces, tf.argsort(done_word)), index)

        def ids(self, text):
            """Ids of a string vector, int64 ragged [batch, (pieces)] (the ops)."""
            words, rows = self.words(self.prepare(text))
            pieces = tf.RaggedTensor.from_value_rowids(self.merge(words), rows,
                                                       nrows=tf.size(text, out_type=tf.int64))
            return pieces.merge_dims(1, 2)

        @tf.function(input_signature=spec)
        def __call__(self, text):
            return self.ids(text)

        # The merges' while loop runs far faster as a graph than op by op: eager calls use it.
        tokenize = __call__

        def tokenize_with_char_offsets(self, text):
            """(ids, starts, ends) ragged int64, spans in characters of the original text (its
            replacement-decoded text when it is not valid UTF-8): the pieces laid end to end
            over the (lowered) text's bytes, then as TextTokenizer.tokenize_with_offsets
            (leading whitespace left out)."""
            text = valid_utf8(text)
            lowered = lower_in_graph(text) if self.lower_case else text
            ids = self(text)
            lengths = tf.gather(self.piece_lengths, ids.flat_values)
            total = tf.cumsum(lengths)  # over the whole batch, then restarted per row
            before_row = tf.gather(tf.concat([[0], total], 0), ids.row_splits[:-1])
            flat_ends = total - tf.gather(before_row, ids.value_rowids())
            ends = ids.with_flat_values(flat_ends)
            starts = ids.with_flat_values(flat_ends - lengths)
            starts = strip_leading_space_in_graph(lowered, starts, ends)
            return (ids, *original_spans(text, lowered, starts, ends, self.lower_case))

    return BytePairModule
