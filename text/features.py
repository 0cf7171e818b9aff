"""THE TFRecord schema of the garden.

Every writer (the Beam pipelines), every reader (garden.train's tf.data input) and every
serving signature imports its feature names, dtypes and shapes from here, so that the three
can never drift apart. Names follow the original BERT release (`create_pretraining_data.py`).

A spec is a plain dict ``name -> Feature(dtype, length)``: ``dtype`` is ``"int64"`` or
``"float32"``, ``length`` the fixed number of values per example. It is JSON-serialisable
(it goes into ``info.json``) and turns into ``tf.io.FixedLenFeature`` for parsing.
"""

from __future__ import annotations

import dataclasses
import itertools
import struct
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np

FORMAT_VERSION = 1

# Fine-tuning label feature names.
LABEL_IDS = "label_ids"


@dataclasses.dataclass(frozen=True)
class Feature:
    dtype: str  # "int64" | "float32"
    length: int

    def to_json(self) -> dict:
        return {"dtype": self.dtype, "length": self.length}


Spec = Dict[str, Feature]


def bert_pretrain_spec(max_seq_length: int, max_predictions_per_seq: int) -> Spec:
    """BERT MLM+NSP instances (docs/objectives.md section 1).

    next_sentence_labels: 1 = B is a random segment, 0 = B is the actual next segment.
    """
    return {
        "input_ids": Feature("int64", max_seq_length),
        "input_mask": Feature("int64", max_seq_length),
        "segment_ids": Feature("int64", max_seq_length),
        "masked_lm_positions": Feature("int64", max_predictions_per_seq),
        "masked_lm_ids": Feature("int64", max_predictions_per_seq),
        "masked_lm_weights": Feature("float32", max_predictions_per_seq),
        "next_sentence_labels": Feature("int64", 1),
    }


def classification_spec(max_seq_length: int) -> Spec:
    """Sentence (pair) classification: [CLS] A [SEP] (B [SEP]) plus an integer label."""
    return {
        "input_ids": Feature("int64", max_seq_length),
        "input_mask": Feature("int64", max_seq_length),
        "segment_ids": Feature("int64", max_seq_length),
        LABEL_IDS: Feature("int64", 1),
    }


def spec_to_json(spec: Spec) -> dict:
    return {name: f.to_json() for name, f in sorted(spec.items())}


def spec_from_json(data: Mapping[str, Mapping]) -> Spec:
    return {name: Feature(str(v["dtype"]), int(v["length"])) for name, v in data.items()}


def serialize_example(spec: Spec, values: Mapping[str, Sequence]) -> bytes:
    """Serialises one instance as a tf.train.Example, padding each feature with zeros.

    Raises ValueError when a feature is missing, unknown or longer than its spec allows,
    so a writer can never emit a record the reader would misparse.

    The bytes are those of ``tf.train.Example(...).SerializeToString(deterministic=True)``
    (map entries sorted by feature name, so two workers write the same bytes for the same
    instance), encoded here directly with numpy: building the protobuf message field by field
    cost about 0.4 ms per BERT instance, more than making the instance
    (tests/text/test_features.py checks the equality).
    """
    unknown = set(values) - set(spec)
    missing = set(spec) - set(values)
    if unknown or missing:
        raise ValueError(f"feature mismatch: unknown={sorted(unknown)} missing={sorted(missing)}")
    entries = []
    for name in sorted(spec):
        f = spec[name]
        vals = values[name]
        n = len(vals)
        if n > f.length:
            raise ValueError(f"feature {name!r} has {n} values, spec allows {f.length}")
        if f.dtype == "int64":
            payload = _varints(list(vals), f.length - n)
            field = b"\x1a"  # Feature.int64_list (field 3)
        elif f.dtype == "float32":
            payload = struct.pack(f"<{f.length}f", *vals, *([0.0] * (f.length - n)))
            field = b"\x12"  # Feature.float_list (field 2)
        else:
            raise ValueError(f"feature {name!r}: unsupported dtype {f.dtype!r}")
        value_list = b"\x0a" + _varint(len(payload)) + payload  # packed repeated field 1
        feature = field + _varint(len(value_list)) + value_list
        key = name.encode("utf-8")
        entry = b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(len(feature)) + feature
        entries.append(b"\x0a" + _varint(len(entry)) + entry)  # Features.feature map entry
    features_bytes = b"".join(entries)
    return b"\x0a" + _varint(len(features_bytes)) + features_bytes  # Example.features


def serialize_examples(spec: Spec, instances: Sequence[Mapping[str, Sequence]]) -> List[bytes]:
    """``serialize_example`` of many instances at once: the same bytes, about 10x cheaper.

    Each feature of all the instances becomes one zero-padded [N, length] matrix
    (``columns_of``), encoded by ``serialize_columns``.
    """
    if not instances:
        return []
    for inst in instances:
        if len(inst) != len(spec) or any(name not in inst for name in spec):
            serialize_example(spec, inst)  # raises the per-instance error
    columns, lengths = columns_of(spec, instances)
    return serialize_columns(spec, columns, lengths)


def columns_of(spec: Spec, instances: Sequence[Mapping[str, Sequence]]):
    """Per-instance feature dicts -> ({name: zero-padded [N, length] matrix}, {name: [N] value counts})."""
    n = len(instances)
    columns, lengths = {}, {}
    for name, f in spec.items():
        counts = np.fromiter((len(inst[name]) for inst in instances), np.int64, n)
        _check_lengths(name, f, counts)
        dtype = np.int64 if f.dtype == "int64" else np.float32
        flat = np.fromiter(itertools.chain.from_iterable(inst[name] for inst in instances), dtype, int(counts.sum()))
        matrix = np.zeros((n, f.length), dtype)
        matrix[np.arange(f.length) < counts[:, None]] = flat
        columns[name], lengths[name] = matrix, counts
    return columns, lengths


def _check_lengths(name: str, f: Feature, counts: np.ndarray) -> None:
    if f.dtype not in ("int64", "float32"):
        raise ValueError(f"feature {name!r}: unsupported dtype {f.dtype!r}")
    if len(counts) and counts.max() > f.length:
        i = int(np.argmax(counts))
        raise ValueError(f"feature {name!r} has {int(counts[i])} values, spec allows {f.length}")


def serialize_columns(spec: Spec, columns: Mapping[str, np.ndarray], lengths: Mapping[str, np.ndarray]) -> List[bytes]:
    """tf.train.Example bytes (as ``serialize_example``) of N instances given as columns:
    ``columns[name]`` an [N, <= length] matrix, zero beyond each row's ``lengths[name]``
    values (narrower matrices are zero-padded to the spec's length).

    The varints (int64) or little-endian floats of each matrix are encoded by numpy in one
    pass; only the few bytes of message headers are put together per instance (from a cache
    keyed by payload length).
    """
    if set(columns) != set(spec):
        raise ValueError(f"feature mismatch: unknown={sorted(set(columns) - set(spec))} "
                         f"missing={sorted(set(spec) - set(columns))}")
    n = len(next(iter(columns.values()))) if columns else 0
    pieces = []  # per feature: (name, field, payload bytes, row offsets as a list)
    for name in sorted(spec):
        f = spec[name]
        _check_lengths(name, f, np.asarray(lengths[name]))
        matrix = np.asarray(columns[name])
        if matrix.shape[0] != n or matrix.ndim != 2 or matrix.shape[1] > f.length:
            raise ValueError(f"feature {name!r}: columns of shape {matrix.shape}, expected ({n}, <= {f.length})")
        if matrix.shape[1] < f.length:
            matrix = np.pad(matrix, ((0, 0), (0, f.length - matrix.shape[1])))
        if f.dtype == "int64":
            payload, row_bytes = _varint_rows(matrix)
        else:
            payload, row_bytes = matrix.astype("<f4").tobytes(), np.full(n, 4 * f.length, np.int64)
        offsets = np.concatenate([[0], np.cumsum(row_bytes)]).tolist()
        pieces.append((name, b"\x1a" if f.dtype == "int64" else b"\x12", payload, offsets))
    headers: Dict[tuple, bytes] = {}
    out = []
    for i in range(n):
        parts = []
        for name, field, payload, offsets in pieces:
            a, b = offsets[i], offsets[i + 1]
            header = headers.get((name, b - a))
            if header is None:
                header = headers[(name, b - a)] = _feature_header(name, field, b - a)
            parts.append(header)
            parts.append(payload[a:b])
        body = b"".join(parts)
        out.append(b"\x0a" + _varint(len(body)) + body)
    return out


def _feature_header(name: str, field: bytes, payload_length: int) -> bytes:
    """The bytes of a Features map entry up to its packed payload (see serialize_example)."""
    key = name.encode("utf-8")
    value_list = 1 + len(_varint(payload_length)) + payload_length
    feature = len(field) + len(_varint(value_list)) + value_list
    key_part = b"\x0a" + _varint(len(key)) + key
    entry = len(key_part) + 1 + len(_varint(feature)) + feature
    return (b"\x0a" + _varint(entry) + key_part + b"\x12" + _varint(feature) + field + _varint(value_list)
            + b"\x0a" + _varint(payload_length))


def feature_header(name: str, payload: bytes) -> bytes:
    """The bytes of an int64 feature's Features map entry before its packed varint
    ``payload`` (for writers that put records together from encoded parts)."""
    return _feature_header(name, b"\x1a", len(payload))


def varint(n: int) -> bytes:
    """The protobuf varint of an int64 value >= 0 (from the precomputed table when small)."""
    if not _table:
        _varints([], 0)  # builds the table
    return _table[n] if n < _TABLE_SIZE else _varint(n)


def varint_pieces(values: np.ndarray) -> Tuple[bytes, List[int]]:
    """The protobuf varints of a vector of int64 values >= 0, joined, and the byte offset at
    which each value starts (one more at the end), encoded by numpy in one pass."""
    values = np.asarray(values, np.int64)
    if not len(values):
        return b"", [0]
    payload, _ = _varint_rows(values[None, :])
    width = np.ones(len(values), np.int64)
    for k in range(1, 10):
        more = values >= (1 << (7 * k))
        if not more.any():
            break
        width += more
    return payload, [0, *np.cumsum(width).tolist()]


_ROWS_PER_PASS = 256  # bounds the [rows, length, bytes] intermediates of _varint_rows


def _varint_rows(matrix: np.ndarray) -> Tuple[bytes, np.ndarray]:
    """Protobuf varints of an [N, L] int64 matrix, row-major: (bytes, bytes per row).
    Negative values take 10 bytes (two's complement), as protobuf writes int64."""
    if matrix.size and 0 <= matrix.min() and matrix.max() < 128:  # one byte each: the value itself
        return matrix.astype(np.uint8).tobytes(), np.full(len(matrix), matrix.shape[1], np.int64)
    chunks, row_bytes = [], []
    for start in range(0, len(matrix), _ROWS_PER_PASS):
        u = matrix[start:start + _ROWS_PER_PASS].astype(np.int64).view(np.uint64)
        width = np.ones(u.shape, np.int64)
        top = int(u.max()) if u.size else 0
        for k in range(1, 10):
            if top < (1 << (7 * k)):
                break
            width += u >= np.uint64(1 << (7 * k))
        widest = int(width.max()) if width.size else 1
        k = np.arange(widest, dtype=np.uint64)
        groups = ((u[..., None] >> (np.uint64(7) * k)) & np.uint64(0x7F)).astype(np.uint8)
        groups |= ((np.arange(widest) < (width[..., None] - 1)).astype(np.uint8) << 7)
        chunks.append(groups[np.arange(widest) < width[..., None]].tobytes())
        row_bytes.append(width.sum(axis=1))
    return b"".join(chunks), np.concatenate(row_bytes) if row_bytes else np.zeros(0, np.int64)


def _varint(n: int) -> bytes:
    if _table and 0 <= n < _TABLE_SIZE:
        return _table[n]
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


_TABLE_SIZE = 1 << 16  # covers every vocabulary id of the family's vocabularies
_table: List[bytes] = []


def _varints(values: List[int], zeros: int) -> bytes:
    """Protobuf varints of int64 values followed by ``zeros`` zero values (negative values
    as 10-byte two's complement). Small values come from a table of precomputed encodings:
    one list lookup per value instead of bit twiddling."""
    if not _table:
        encoded = [_varint(v) for v in range(_TABLE_SIZE)]  # built whole, then published
        _table.extend(encoded)
    if values and (min(values) < 0 or max(values) >= _TABLE_SIZE):
        body = b"".join(_varint(int(v) & 0xFFFFFFFFFFFFFFFF) for v in values)
    else:
        table = _table
        body = b"".join([table[v] for v in values])
    return body + b"\x00" * zeros


def parse_example(spec: Spec, serialized: bytes) -> Dict[str, np.ndarray]:
    """Eager, numpy-returning parse of one serialized example (tests, inspection)."""
    import tensorflow as tf

    ex = tf.train.Example.FromString(serialized)
    out = {}
    for name, f in spec.items():
        feat = ex.features.feature[name]
        vals = feat.int64_list.value if f.dtype == "int64" else feat.float_list.value
        out[name] = np.asarray(vals, dtype=np.int64 if f.dtype == "int64" else np.float32)
    return out


def tf_parsing_spec(spec: Spec) -> dict:
    """``name -> tf.io.FixedLenFeature`` for ``tf.io.parse_example``."""
    import tensorflow as tf

    dtypes = {"int64": tf.int64, "float32": tf.float32}
    return {name: tf.io.FixedLenFeature([f.length], dtypes[f.dtype]) for name, f in spec.items()}


def roberta_pretrain_spec(max_seq_length: int) -> Spec:
    """RoBERTa packed blocks (docs/objectives.md section 3): ``<s>`` + up to max_seq_length - 1
    pieces, UNMASKED; the input pipeline (text.dynamic) adds masked_lm_positions,
    masked_lm_ids and masked_lm_weights afresh every time a block is read."""
    return {
        "input_ids": Feature("int64", max_seq_length),
        "input_mask": Feature("int64", max_seq_length),
    }


def gpt2_pretrain_spec(max_seq_length: int) -> Spec:
    """GPT-2 causal LM blocks (docs/objectives.md section 11): max_seq_length consecutive pieces of
    the concatenated documents (<|endoftext|> after each). No label feature: the model's
    labels are input_ids shifted left by one."""
    return {
        "input_ids": Feature("int64", max_seq_length),
        "input_mask": Feature("int64", max_seq_length),
    }


def bilm_pretrain_spec(max_seq_length: int, max_characters: int = 0) -> Spec:
    """Bidirectional LM blocks for the recurrent models (ELMo, ULMFiT; docs/objectives.md
    section 13): max_seq_length consecutive pieces of the pool's sentences, each between
    <S> and </S>. The forward targets are input_ids shifted left, the backward ones shifted
    right (the model shifts). max_characters > 0 adds char_ids: ELMo's character ids of each
    piece, max_characters per piece, flattened ([T * max_characters])."""
    spec = {"input_ids": Feature("int64", max_seq_length),
            "input_mask": Feature("int64", max_seq_length)}
    if max_characters:
        spec["char_ids"] = Feature("int64", max_seq_length * max_characters)
    return spec


def electra_pretrain_spec(max_seq_length: int) -> Spec:
    """ELECTRA unmasked sequences (docs/objectives.md section 6): [CLS] A [SEP] (B [SEP]); the
    model masks in the graph."""
    return {
        "input_ids": Feature("int64", max_seq_length),
        "input_mask": Feature("int64", max_seq_length),
        "segment_ids": Feature("int64", max_seq_length),
    }


def t5_pretrain_spec(inputs_length: int, targets_length: int) -> Spec:
    """T5 span corruption (docs/objectives.md section 8): encoder ``inputs`` (kept pieces, one
    sentinel per noise span, EOS) and decoder ``targets`` (sentinel + noise run per span, EOS).
    Zero (SentencePiece <pad>) pads both; ids run up to the SentencePiece size + sentinels."""
    return {
        "inputs": Feature("int64", inputs_length),
        "targets": Feature("int64", targets_length),
    }


def bart_pretrain_spec(max_seq_length: int) -> Spec:
    """BART denoising (docs/objectives.md section 9).

    input_ids / input_mask: the noised block <s> ... </s> and its real positions.
    labels: the clean block <s> ... </s>; decoder_input_ids: labels shifted right with </s> as
    the decoder start token (fairseq BART's prev_output_tokens, Hugging Face's
    decoder_start_token_id). decoder_input_mask marks the real positions of both, because
    zero is a real id (<s>) in a RoBERTa-style byte-level BPE vocabulary.
    """
    return {
        "input_ids": Feature("int64", max_seq_length),
        "input_mask": Feature("int64", max_seq_length),
        "labels": Feature("int64", max_seq_length),
        "decoder_input_ids": Feature("int64", max_seq_length),
        "decoder_input_mask": Feature("int64", max_seq_length),
    }


def albert_pretrain_spec(max_seq_length: int, max_predictions_per_seq: int) -> Spec:
    """ALBERT MLM + sentence-order prediction (docs/objectives.md section 2): the BERT features
    plus ``token_boundary`` (1 for word-start pieces and special tokens, from the unmasked
    sequence). next_sentence_labels: 1 = A and B swapped (or B random for a single-segment
    chunk), 0 = in order."""
    return {**bert_pretrain_spec(max_seq_length, max_predictions_per_seq),
            "token_boundary": Feature("int64", max_seq_length)}


def spanbert_pretrain_spec(max_seq_length: int, max_predictions_per_seq: int) -> Spec:
    """SpanBERT span masking + span boundary objective (docs/objectives.md section 4).

    [CLS] block [SEP], one segment (segment_ids all 0), no NSP. The SBO features are aligned
    with masked_lm_positions (one entry per masked piece): span_left_positions /
    span_right_positions are the positions just outside the piece's (merged) span
    (start - 1, end + 1), span_relative_positions its 0-based offset in the span (clipped to
    14 where the offset is >= 15), sbo_weights 1.0 when the piece is an SBO target: the span
    touches neither edge of the block (its boundaries are not [CLS] / [SEP]) and the offset
    is < 15, else 0.0.
    """
    mlm = {k: f for k, f in bert_pretrain_spec(max_seq_length, max_predictions_per_seq).items()
           if k != "next_sentence_labels"}  # no NSP
    return {
        **mlm,
        "span_left_positions": Feature("int64", max_predictions_per_seq),
        "span_right_positions": Feature("int64", max_predictions_per_seq),
        "span_relative_positions": Feature("int64", max_predictions_per_seq),
        "sbo_weights": Feature("float32", max_predictions_per_seq),
    }


def xlnet_pretrain_spec(seq_len: int, num_predict: int) -> Spec:
    """XLNet permutation-LM instances (docs/objectives.md section 7; objectives/xlnet.py).

    No [seq_len, seq_len] feature: perm_rank holds the factorization order (0 = reuse-half
    context, then that half's targets and <sep>/<cls> in order, then one rank for the second
    half's context, then its targets and <sep>/<cls>), and the trainer's reader expands it:
    perm_mask[i, j] = 1 (i cannot attend to j) iff perm_rank[i] + 1 - input_q[i] <= perm_rank[j];
    target_mapping (row k one-hot at the k-th target position) comes from input_q. input_q is
    a 0/1 int64 (one byte per value packed on disk, against four for float32); target_mask is
    float32, as the original input function's weights.
    """
    return {
        "input_k": Feature("int64", seq_len),
        "input_q": Feature("int64", seq_len),
        "seg_id": Feature("int64", seq_len),
        "perm_rank": Feature("int64", seq_len),
        "target": Feature("int64", num_predict),
        "target_mask": Feature("float32", num_predict),
    }
