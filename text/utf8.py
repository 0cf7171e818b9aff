"""Text as UTF-8 bytes and as characters, eagerly and in the graph: ill-formed bytes read as
Python's replacement decoding, lower-casing without tf.strings.lower's cut at a NUL, and piece
spans moved between bytes and characters and from lower-cased text back to the original. The
SentencePiece and byte-level BPE modules (text.sentencepiece_model, text.bpe) and the QA and
tagging exports use them."""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np



def byte_to_char_spans(text: str, starts: Sequence[int], ends: Sequence[int]) -> Tuple[List[int], List[int]]:
    """UTF-8 byte spans [start, end) in ``text`` -> character spans; a start inside a character
    moves to its start, an end inside one covers that whole character."""
    if text.isascii():
        return list(starts), list(ends)
    # Byte offset at which each character starts, and the text's length in bytes last.
    at = np.concatenate([[0], np.cumsum([len(c.encode("utf-8")) for c in text])])
    return ((np.searchsorted(at, np.asarray(starts, np.int64), side="right") - 1).tolist(),
            np.searchsorted(at, np.asarray(ends, np.int64), side="left").tolist())


def char_to_byte_spans(text: str, starts: Sequence[int], ends: Sequence[int]) -> Tuple[List[int], List[int]]:
    """Character spans [start, end) in ``text`` -> UTF-8 byte spans."""
    if text.isascii():
        return list(starts), list(ends)
    at = np.concatenate([[0], np.cumsum([len(c.encode("utf-8", "surrogatepass")) for c in text])])
    return at[np.asarray(starts, np.int64)].tolist(), at[np.asarray(ends, np.int64)].tolist()


def string_batch(texts: Sequence[str]):
    """A tf.string vector of `texts` (UTF-8), or ValueError naming the first text that has no
    UTF-8 form: a Python string can hold an unpaired surrogate (U+D800..U+DFFF, e.g. from
    ``errors="surrogateescape"``), which the reference tokenizers refuse too."""
    import tensorflow as tf

    try:
        return tf.constant(list(texts), dtype=tf.string, shape=[len(texts)])
    except (UnicodeEncodeError, ValueError):  # TF says "Error converting unicode string"
        for k, text in enumerate(texts):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(
                    f"text {k} holds an unpaired surrogate U+{ord(text[e.start]):04X} at character "
                    f"{e.start}, which UTF-8 cannot encode: decode the input with "
                    f"errors=\"replace\" (or pass its bytes to a served model, which reads "
                    f"ill-formed UTF-8 as U+FFFD)") from None
        raise


def ragged_to_lists(values: np.ndarray, splits: np.ndarray) -> List[List[int]]:
    # Much faster than RaggedTensor.to_list() (one tolist() and slices), which otherwise takes
    # a third of the eager tokenizer's time on large batches.
    flat = values.tolist()
    s = splits.tolist()
    return [flat[a:b] for a, b in zip(s[:-1], s[1:])]


_SPACES = frozenset(b" \t\n\r\x0b\x0c")


def strip_leading_space(texts: List[bytes], starts, ends):
    out_s = []
    for data, s_row, e_row in zip(texts, starts, ends):
        row = []
        for s, e in zip(s_row, e_row):
            while s < e and data[s] in _SPACES:
                s += 1
            row.append(s)
        out_s.append(row)
    return out_s, ends


def map_lowered_offsets(texts: List[str], lowered: List[bytes], starts, ends, lower_case: bool):
    """Maps byte offsets in the lower-cased texts back to the originals. Lower-casing maps
    characters one to one but may change their UTF-8 length ("İ" 2 -> 3 bytes, "ẞ" 3 -> 2),
    so non-ASCII texts are aligned character by character with the same TF op."""
    if not lower_case:
        return starts, ends
    import tensorflow as tf

    todo = [k for k, (t, low) in enumerate(zip(texts, lowered)) if len(t.encode("utf-8")) != len(low)
            or not t.isascii()]
    if not todo:
        return starts, ends
    starts, ends = list(starts), list(ends)
    chars = tf.strings.unicode_split(tf.constant([texts[k] for k in todo]), "UTF-8")
    # Each character's UTF-8 length before and after lower-casing, flat (one numpy array, not a
    # ragged row per text: indexing a RaggedTensor eagerly costs about a millisecond a row).
    splits = chars.row_splits.numpy()
    orig_all = tf.strings.length(chars.flat_values).numpy().astype(np.int64)
    low_all = tf.strings.length(lower_in_graph(chars.flat_values)).numpy().astype(np.int64)
    for j, k in enumerate(todo):
        orig_len, low_len = orig_all[splits[j]:splits[j + 1]], low_all[splits[j]:splits[j + 1]]
        if np.array_equal(orig_len, low_len):
            continue
        orig_at = np.concatenate([[0], np.cumsum(orig_len)])
        low_at = np.concatenate([[0], np.cumsum(low_len)])

        def back(xs, is_end):
            xs = np.asarray(xs, dtype=np.int64)
            if is_end:  # an end inside a character covers the whole character
                idx = np.searchsorted(low_at, xs, side="left")
            else:
                idx = np.searchsorted(low_at, xs, side="right") - 1
            return orig_at[np.clip(idx, 0, len(orig_at) - 1)].tolist()

        starts[k], ends[k] = back(starts[k], False), back(ends[k], True)
    return starts, ends


def valid_utf8(text):
    """In the graph: `text` with every ill-formed UTF-8 sequence (a stray byte, a cut or overlong
    sequence, an encoded surrogate such as ED A0 80, a code point above U+10FFFF) replaced by
    U+FFFD, as Python's ``bytes.decode("utf-8", "replace")`` does (one U+FFFD per maximal
    ill-formed subsequence; tests/text/test_tokenizer_parity.py compares the two);
    valid text passes unchanged. A string tensor that a client sends over gRPC is bytes: the
    SentencePiece and BPE modules start with this, so that a served model answers for such bytes
    as for their replacement-decoded text instead of failing on them."""
    import tensorflow as tf

    return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace",
                                        replacement_char=0xFFFD)


def lower_in_graph(text):
    """In the graph: ``tf.strings.lower(text, encoding="utf-8")`` (Unicode's full lower-casing,
    Python's ``str.lower``: "İ" -> "i" + U+0307, a final "Σ" -> "ς") without its truncation: the
    op cuts a string at its first NUL ("a\\x00B" -> "a"). The parts between NULs are lowered one
    by one and joined again (a NUL is neither cased nor case-ignorable, so no character's lower
    case depends on text across one). `text`: a string vector, or a ragged tensor of strings."""
    import tensorflow as tf

    if isinstance(text, tf.RaggedTensor):
        return text.with_flat_values(lower_in_graph(text.flat_values))
    parts = tf.strings.split(text, sep="\x00")
    # Each part but a row's last gets its NUL back (reduce_join's separator is an attribute, a C
    # string: a NUL separator would be empty).
    last = tf.range(tf.size(parts.flat_values, out_type=tf.int64)) == \
        tf.gather(parts.row_splits[1:], parts.value_rowids()) - 1
    nul = tf.where(last, tf.constant(""), tf.constant("\x00"))
    lowered = tf.strings.join([tf.strings.lower(parts.flat_values, encoding="utf-8"), nul])
    return tf.strings.reduce_join(parts.with_flat_values(lowered), axis=-1)


def char_spans(text, starts, ends):
    """In the graph: UTF-8 byte spans [start, end) of text[i] (ragged [batch, (pieces)]) ->
    character spans, as text.finetune.question_answering_windows.char_offsets computes them eagerly: a
    start inside a character moves to that character's start, an end inside one covers it."""
    import tensorflow as tf

    _, char_bytes = tf.strings.unicode_decode_with_offsets(text, "UTF-8")
    # Byte offset at which each character starts, then the text's length, per row.
    lengths = tf.expand_dims(tf.cast(tf.strings.length(text), tf.int64), 1)
    at = tf.concat([char_bytes, tf.RaggedTensor.from_tensor(lengths)], axis=1)
    table = at.to_tensor(default_value=tf.int64.max)

    def search(offsets, side):
        values = tf.cast(offsets, tf.int64).to_tensor(default_value=0)
        found = tf.searchsorted(table, values, side=side, out_type=tf.int64)
        return tf.RaggedTensor.from_tensor(found, lengths=offsets.row_lengths())

    return search(starts, "right") - 1, search(ends, "left")


def _lowered_to_original(text, lowered_starts, lowered_ends):
    """Character spans in lower_in_graph(text) -> spans in text. Lower-casing maps each
    character to one or more ("İ" -> "i" + U+0307), so each original character's lowered
    length is summed and searched, as map_lowered_offsets does with bytes."""
    import tensorflow as tf

    chars = tf.strings.unicode_split(text, "UTF-8")
    lowered_lengths = tf.strings.length(lower_in_graph(chars), unit="UTF8_CHAR")
    zero = tf.zeros_like(lowered_lengths[:, :1])
    at = tf.cast(tf.concat([zero, tf.math.cumsum(lowered_lengths, axis=1)], axis=1), tf.int64)
    table = at.to_tensor(default_value=tf.int64.max)

    def search(offsets, side):
        found = tf.searchsorted(table, offsets.to_tensor(default_value=0), side=side,
                                out_type=tf.int64)
        return tf.RaggedTensor.from_tensor(found, lengths=offsets.row_lengths())

    return search(lowered_starts, "right") - 1, search(lowered_ends, "left")


def strip_leading_space_in_graph(text, starts, ends):
    """The graph twin of strip_leading_space: a piece's span starts after the whitespace it
    carries ("\u2581the" starts at "t"); a whitespace-only piece becomes empty at its end."""
    import tensorflow as tf

    rows = tf.gather(text, starts.value_rowids())
    pieces = tf.strings.substr(rows, starts.flat_values, ends.flat_values - starts.flat_values)
    stripped = tf.strings.regex_replace(pieces, "^[ \t\n\r\x0b\x0c]+", "")
    shift = tf.cast(tf.strings.length(pieces) - tf.strings.length(stripped), starts.dtype)
    return starts.with_flat_values(starts.flat_values + shift)


def original_spans(text, lowered, starts, ends, lower_case: bool):
    """Byte spans in the (lowered) text the tokenizer saw -> character spans in `text`."""
    starts, ends = char_spans(lowered, starts, ends)
    return _lowered_to_original(text, starts, ends) if lower_case else (starts, ends)
