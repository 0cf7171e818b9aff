"""Vocabulary files: where each kind's tokens live (local or gs:// paths), their reserved
tokens, which kind a path names, and the fingerprint a run records of them. No TensorFlow import
for local files: a Beam launcher that only checks the vocabulary stays light."""

from __future__ import annotations

import hashlib
import os
from typing import Dict, List, Sequence, Tuple

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
RESERVED_TOKENS = [PAD, UNK, CLS, SEP, MASK]

KINDS = ("wordpiece", "sentencepiece", "bpe")

# SentencePiece layout written by make_vocab (T5's ids for pad/eos/unk; no bos), then the
# control symbols the objectives need (ALBERT [CLS]/[SEP]/[MASK], XLNet <eod>).
SP_PAD, SP_EOS, SP_UNK = "<pad>", "</s>", "<unk>"
SP_CONTROL = ["[CLS]", "[SEP]", "[MASK]", "<eod>"]
SP_WORD_START = "\u2581"

# Byte-level BPE special tokens (RoBERTa's four + <mask>, GPT-2's <|endoftext|>), ids 0..5.
BPE_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "<|endoftext|>"]
BPE_WORD_START = "\u0120"  # GPT-2's printable stand-in for the space byte


class VocabularyError(ValueError):
    """A vocabulary file is missing, empty, of the wrong kind or lacks the reserved tokens."""


def _is_remote(path: str) -> bool:
    return "://" in path  # gs://, s3://, hdfs://: through tf.io.gfile


def _exists(path: str) -> bool:
    if not _is_remote(path):
        return os.path.exists(path)
    import tensorflow as tf

    return tf.io.gfile.exists(path)


def _isdir(path: str) -> bool:
    if not _is_remote(path):
        return os.path.isdir(path)
    import tensorflow as tf

    return tf.io.gfile.isdir(path)


def read_bytes(path: str) -> bytes:
    """The file's bytes: local paths with plain Python (no TensorFlow import: a Beam launcher
    that only checks the vocabulary stays light), remote ones through tf.io.gfile."""
    if not _exists(path):
        raise VocabularyError(f"vocabulary file not found: {path} (create one with "
                              f"`python -m data_pipelines.make_vocab --output={path} ...`)")
    if not _is_remote(path):
        with open(path, "rb") as f:
            return f.read()
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def load_vocab(path: str) -> List[str]:
    """Returns the tokens of a one-token-per-line vocabulary, checking the reserved ones."""
    data = read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise VocabularyError(f"vocabulary {path} is not valid UTF-8 (byte {e.start})") from e
    tokens = text.splitlines()
    if not tokens:
        raise VocabularyError(f"vocabulary {path} is empty")
    missing = [t for t in RESERVED_TOKENS if t not in tokens]
    if missing:
        raise VocabularyError(f"vocabulary {path} lacks reserved tokens {missing}; "
                              f"is it a WordPiece vocabulary made by data_pipelines.make_vocab?")
    if len(set(tokens)) != len(tokens):
        raise VocabularyError(f"vocabulary {path} has duplicate tokens")
    return tokens


def vocab_fingerprint(path: str) -> str:
    """A content hash of the vocabulary, recorded in info.json and checked by the trainer."""
    return "sha256:" + hashlib.sha256(read_bytes(path)).hexdigest()


# ---------------------------------------------------------------------------------------------
# Kinds and files


def detect_kind(path: str) -> str:
    """The kind a vocabulary path names: ``*.model`` -> sentencepiece; ``*vocab.json`` or a
    folder holding vocab.json -> bpe; anything else -> wordpiece."""
    if path.endswith(".model"):
        return "sentencepiece"
    if path.endswith(".json"):
        return "bpe"
    if _isdir(path):
        return "bpe" if _exists(join_path(path, "vocab.json")) else "wordpiece"
    return "wordpiece"


def join_path(folder: str, name: str) -> str:
    return folder.rstrip("/") + "/" + name


def bpe_files(path: str) -> Tuple[str, str]:
    """(vocab.json, merges.txt) of a byte-level BPE vocabulary named by its vocab.json (merges
    beside it: ``vocab.json`` -> ``merges.txt``, ``X-vocab.json`` -> ``X-merges.txt``) or by
    the folder holding both."""
    if not path.endswith(".json") and _isdir(path):
        path = join_path(path, "vocab.json")
    folder, name = os.path.split(path)
    merges = name[:-len("vocab.json")] + "merges.txt" if name.endswith("vocab.json") else "merges.txt"
    return path, (join_path(folder, merges) if folder else merges)


def files_fingerprint(paths: Sequence[str]) -> str:
    """sha256 over the files' bytes; with several files, over each one's length and bytes in
    order, so that moving bytes from one file to the other changes it."""
    if len(paths) == 1:
        return vocab_fingerprint(paths[0])
    h = hashlib.sha256()
    for p in paths:
        data = read_bytes(p)
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return "sha256:" + h.hexdigest()


def tokenizer_files(vocab: str) -> Tuple[str, Dict[str, str]]:
    """(kind, {file name in a model directory: path}) of a vocabulary file: vocab.txt or a
    SentencePiece *.model as itself, a byte-level BPE vocab.json with the merges.txt beside it
    (what garden.convert, garden.to_huggingface and a pruned model's directory copy)."""
    kind = detect_kind(vocab)
    if kind == "bpe":
        vocab_json, merges = bpe_files(vocab)
        return kind, {"vocab.json": vocab_json, "merges.txt": merges}
    return kind, {os.path.basename(vocab): vocab}
