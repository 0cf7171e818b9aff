"""Work files of the data jobs: bulk data (tokenized documents, serialized records) moves between
a job's stages through files under ``<output_dir>/_work-<run id>/``, written and read with
Beam's FileSystems (local or gs://), while the PCollections carry only small descriptors. A
range of a work file is a run of (sort key, record) entries: (key length, record length) as
``<HI``, the ASCII key, the record bytes; a shard is merged from key-sorted ranges.
"""

from __future__ import annotations

import contextlib
import gc
import struct
from typing import Iterator, Sequence, Tuple

from apache_beam.io.filesystems import FileSystems

_ENTRY = struct.Struct("<HI")  # (key length, record length), key, record
_READ_BLOCK = 64 << 10  # per range while merging a shard


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector off for a block that allocates millions of small lists
    and no cycles (a pool's pieces and instances): its passes over them cost 40% of the time
    of making BERT instances. Reference counting still frees everything."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def encode_entries(entries: Sequence[Tuple[str, bytes]]) -> bytes:
    """(sort key, record) pairs -> bytes of a work file range."""
    parts = []
    for key, record in entries:
        k = key.encode("ascii")
        parts.append(_ENTRY.pack(len(k), len(record)))
        parts.append(k)
        parts.append(record)
    return b"".join(parts)


def read_entries(path: str, offset: int, length: int, block: int = _READ_BLOCK) -> Iterator[Tuple[str, bytes]]:
    """The (sort key, record) pairs of a range of a work file, read ``block`` bytes at a time
    (the file is opened per block, so a merge over many ranges holds no file handles)."""
    pos, end = offset, offset + length
    buf, i = b"", 0  # entries are parsed at buf[i:]; buf is only replaced on a refill
    while True:
        left = len(buf) - i
        need = _ENTRY.size + sum(_ENTRY.unpack_from(buf, i)) if left >= _ENTRY.size else _ENTRY.size
        if left < need:
            if pos >= end:
                if left:
                    raise ValueError(f"{path}: truncated entry at byte {pos - left} (a corrupt work file)")
                return
            with FileSystems.open(path, compression_type="uncompressed") as f:
                f.seek(pos)
                more = f.read(min(max(block, need - left), end - pos))
            if not more:
                raise ValueError(f"{path}: ends at byte {pos}, expected {end} (a corrupt work file)")
            pos += len(more)
            buf, i = buf[i:] + more, 0
            continue
        key_len, rec_len = _ENTRY.unpack_from(buf, i)
        start = i + _ENTRY.size
        i = start + key_len + rec_len
        yield buf[start:start + key_len].decode("ascii"), buf[start + key_len:i]
