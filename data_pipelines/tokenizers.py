"""WordPiece vocabularies and the in-graph tokenizer shared by pipelines, training and serving.

The same function builds the tokenizer for the Beam pipeline (eager calls on batches of
sentences) and for the exported SavedModel (inside the serving graph), so that a served
model sees exactly the ids it was trained on.
"""

from __future__ import annotations

import hashlib
from typing import List

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
RESERVED_TOKENS = [PAD, UNK, CLS, SEP, MASK]


class VocabularyError(ValueError):
    """A vocabulary file is missing, empty or lacks the reserved tokens."""


def _read_bytes(path: str) -> bytes:
    import tensorflow as tf  # tf.io.gfile reads local paths and gs:// alike

    if not tf.io.gfile.exists(path):
        raise VocabularyError(f"vocabulary file not found: {path} (create one with "
                              f"`python -m data_pipelines.make_vocab --output={path} ...`)")
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def load_vocab(path: str) -> List[str]:
    """Returns the tokens of a one-token-per-line vocabulary, checking the reserved ones."""
    data = _read_bytes(path)
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
    return "sha256:" + hashlib.sha256(_read_bytes(path)).hexdigest()


def wordpiece_tokenizer(vocab: List[str], lower_case: bool):
    """tensorflow-text FastBertTokenizer (basic tokenization + WordPiece) emitting int64 ids.

    Usable eagerly on a batch of strings (returns a RaggedTensor [batch, (pieces)]) and inside
    a tf.function / SavedModel signature.
    """
    import tensorflow as tf
    import tensorflow_text as tf_text

    return tf_text.FastBertTokenizer(
        vocab=vocab,
        suffix_indicator="##",
        max_bytes_per_word=100,
        token_out_type=tf.int64,
        unknown_token=UNK,
        no_pretokenization=False,
        support_detokenization=False,
        lower_case_nfd_strip_accents=lower_case,
    )
