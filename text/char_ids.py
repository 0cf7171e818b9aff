"""ELMo's character ids of a vocabulary's pieces (bilm-tf's UnicodeCharsVocabulary, AllenNLP's
ELMoCharacterMapper): what make_pretrain --objective=bilm --characters writes as char_ids and
the table garden's ELMo backbone looks a vocabulary's token ids up in.

A piece is beginning-of-word 258, its UTF-8 bytes (at most max_characters - 2), end-of-word
259, padding 260; <S> is 258 256 259, </S> 258 257 259; every id + 1, so that 0 is "no
character". A piece's text is the piece without its subword marker (WordPiece "##",
SentencePiece U+2581, byte-level BPE U+0120; BPE's byte symbols are mapped back to their
bytes).
"""

from __future__ import annotations

import functools
from typing import Tuple

import numpy as np

from text import vocab as text_vocab

BOS_CHAR, EOS_CHAR, BOW_CHAR, EOW_CHAR, PAD_CHAR = 256, 257, 258, 259, 260


def sentence_marks(vocab: text_vocab.Vocab) -> Tuple[int, int]:
    """(<S>, </S>) ids: the bos / eos roles, else WordPiece's cls / sep."""
    start = vocab.specials.get("bos", vocab.specials.get("cls"))
    end = vocab.specials.get("eos", vocab.specials.get("sep"))
    if start is None or end is None:
        raise text_vocab.VocabularyRoleError(
            f"objective bilm needs sentence marks (bos/eos or cls/sep) but vocabulary "
            f"{vocab.name} has {sorted(vocab.specials)}")
    return start, end


def piece_bytes(piece: str, byte_level: bool = False) -> bytes:
    """The text a piece stands for, as UTF-8 bytes, without its subword marker; byte_level:
    the piece is byte-level BPE symbols (U+0120 for a space), mapped back to their bytes."""
    if byte_level:
        from text.bpe import bytes_to_unicode

        byte_of = {c: b for b, c in bytes_to_unicode().items()}
        if all(c in byte_of for c in piece):
            return bytes(byte_of[c] for c in piece).lstrip(b" ")
        return piece.encode("utf-8")  # a special such as <s>
    if piece.startswith("##"):
        return piece[2:].encode("utf-8")
    return piece.lstrip("\u2581").encode("utf-8")


def word_char_ids(text: bytes, max_characters: int) -> np.ndarray:
    """ELMo's ids of one word (+ 1): BOW, its bytes (cut to fit), EOW, padding."""
    ids = np.full(max_characters, PAD_CHAR, np.int64)
    body = list(text[:max_characters - 2])
    ids[:len(body) + 2] = [BOW_CHAR, *body, EOW_CHAR]
    return ids + 1


@functools.lru_cache(maxsize=4)
def char_table(vocab: text_vocab.Vocab, max_characters: int) -> np.ndarray:
    """[vocab size, max_characters] ELMo character ids of every piece (<S>, </S> marked)."""
    start, end = sentence_marks(vocab)
    byte_level = any(t.startswith("\u0120") for t in vocab.tokens)
    table = np.stack([word_char_ids(piece_bytes(t, byte_level), max_characters)
                      for t in vocab.tokens])
    for piece_id, char in ((start, BOS_CHAR), (end, EOS_CHAR)):
        table[piece_id] = word_char_ids(b"", max_characters)
        table[piece_id, 1:3] = [char + 1, EOW_CHAR + 1]
    return table
