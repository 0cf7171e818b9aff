"""TFRecord files written without TensorFlow, through Beam's FileSystems (local or gs://), and
the one walker of their framing.

A record is framed as: uint64 length (little-endian), masked CRC-32C of those 8 bytes, the
data, masked CRC-32C of the data. ``write_tfrecords`` writes that framing; ``frame_lengths``
walks it by the length fields alone (the trainer's check of a pipeline directory written
before info.json recorded shard sizes, garden/data.py), so the rules live here only.

A Beam worker that never imports TensorFlow saves about 4 CPU-seconds and 0.7 GB; tf.data
reads the files back in the tests (tests/data_pipelines/test_make_pretrain.py). The trainer
imports this module without Beam: Beam is imported where a file is written.
"""

from __future__ import annotations

import os
import struct
from typing import Dict, Iterable, Iterator

import google_crc32c

_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
FRAME_OVERHEAD = _LENGTH.size + 2 * _CRC.size  # 16 bytes around each record's data


class FramingError(ValueError):
    """A TFRecord file ends inside a frame (truncated, or not a TFRecord file)."""

    def __init__(self, path: str, records: int, offset: int, size: int):
        self.path, self.records, self.offset, self.size = path, records, offset, size
        super().__init__(f"{path} ({size} bytes) ends inside record {records} (0-based), which "
                         f"starts at byte {offset}: truncated or not a TFRecord file")


def frame_lengths(path: str) -> Iterator[int]:
    """Yields the data length of each record of the uncompressed local TFRecord file ``path``
    in order, reading only the 8-byte length fields (one seek and read per record; neither the
    data nor the CRCs are read or checked). Raises FramingError naming the record and its byte
    offset where a frame does not fit in the file."""
    size = os.path.getsize(path)
    records = offset = 0
    with open(path, "rb") as f:
        while offset < size:
            f.seek(offset)
            header = f.read(_LENGTH.size)
            if len(header) < _LENGTH.size:
                raise FramingError(path, records, offset, size)
            length = _LENGTH.unpack(header)[0]
            end = offset + FRAME_OVERHEAD + length
            if end > size:
                raise FramingError(path, records, offset, size)
            yield length
            offset, records = end, records + 1
_WRITE_BLOCK = 1 << 20  # bytes gathered before one write call


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C, rotated right by 15 bits plus 0xa282ead8 (TensorFlow's
    core/lib/hash/crc32c.h "Mask"), so that a CRC over data holding CRCs stays well spread."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def write_tfrecords(path: str, records: Iterable[bytes], compress: bool) -> int:
    """Writes ``records`` (bytes) to ``path`` in the TFRecord format (per record: uint64 length,
    masked CRC-32C of the length, the data, masked CRC-32C of the data; GZIP-compressed when
    ``compress``). Returns the number written."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    compression = CompressionTypes.GZIP if compress else CompressionTypes.UNCOMPRESSED
    n, block, size = 0, [], 0
    headers: Dict[int, bytes] = {}  # record length -> length + its checksum (lengths repeat)
    with FileSystems.create(path, compression_type=compression) as f:
        for record in records:
            header = headers.get(len(record))
            if header is None:
                length = _LENGTH.pack(len(record))
                header = headers[len(record)] = length + _CRC.pack(masked_crc32c(length))
            block += (header, record, _CRC.pack(masked_crc32c(record)))
            size += len(record) + FRAME_OVERHEAD
            n += 1
            if size >= _WRITE_BLOCK:
                f.write(b"".join(block))
                block, size = [], 0
        f.write(b"".join(block))
    return n
