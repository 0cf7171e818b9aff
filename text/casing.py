"""Is a vocabulary cased? The check behind make_pretrain's warning about --lower_case.

A vocabulary learned from lower-cased text (make_vocab --lower_case) holds no piece with an
upper-case letter; one learned from cased text holds many ("The", "In", "##A"). Two mismatches
give data that looks fine and is not what the user meant:

* a cased vocabulary with lower-casing on: text is lower-cased before tokenizing, so every
  piece with a capital is never produced (a share of the embedding table is dead) and the
  model cannot tell "Apple" from "apple";
* an uncased vocabulary with lower-casing off: every capitalised word misses its piece and is
  split into smaller ones or becomes the unknown token. This one is only a guess (a corpus
  without capitals, or a script without case, gives such a vocabulary too), so it is reported
  only when the vocabulary has many lower-case pieces and not one upper-case piece.

Both are warned about once, with the vocabulary's path, the counts and what to pass: a guess
must not stop a run, and ALBERT-style data deliberately lower-cases text for a cased model.
"""

from __future__ import annotations

import dataclasses
import re
from typing import List, Optional

from text import bpe, vocab_files

# A cased vocabulary: at least this share of its pieces with letters hold a capital. One
# learned from lower-cased text has none (tested for the three kinds); one learned from cased
# English has many (71 of 498 in a 600-piece WordPiece vocabulary of the sample corpus), except
# a tiny byte-level BPE one, whose capitals are mostly in the 256-byte alphabet that says
# nothing (1 of 131 merged pieces in a 400-piece one: 0.8%). A stray capital or two in a large
# uncased vocabulary stays below it.
CASED_SHARE = 0.005
# An uncased vocabulary (the guess): no capital in any piece, and at least this many pieces
# with a lower-case letter (the conftest's 32-word test vocabulary is below it).
UNCASED_MIN_LOWER = 100
# Special tokens in every kind's spelling: [CLS], <s>, <|endoftext|>, [unused7], ...
_SPECIAL = re.compile(r"^(\[[^\]]*\]|<[^>]*>)$")


@dataclasses.dataclass(frozen=True)
class Casing:
    """upper: pieces holding an upper-case letter (in vocabulary order); lower: the number of
    pieces holding a lower-case letter and no upper-case one."""

    upper: List[str]
    lower: int

    @property
    def cased(self) -> bool:
        return len(self.upper) >= max(1.0, CASED_SHARE * (len(self.upper) + self.lower))

    @property
    def uncased(self) -> bool:
        return not self.upper and self.lower >= UNCASED_MIN_LOWER


_FROM_CHAR = {c: b for b, c in bpe.bytes_to_unicode().items()}


def _text(kind: str, piece: str) -> str:
    """The text of an ordinary piece, without its word-start or continuation marker."""
    if kind == "bpe":
        # Byte-level pieces spell bytes with stand-in characters (the space byte is "Ġ", an
        # upper-case letter): decode them. The 256 one-byte pieces are the alphabet, cased or
        # not, and say nothing.
        if len(piece) < 2 or not all(c in _FROM_CHAR for c in piece):
            return ""
        return bytes(_FROM_CHAR[c] for c in piece).decode("utf-8", errors="ignore")
    marker = "##" if kind == "wordpiece" else vocab_files.SP_WORD_START
    return piece[len(marker):] if piece.startswith(marker) else piece


def casing(tokenizer) -> Casing:
    """The casing of a ``tokenizers.TextTokenizer``'s vocabulary (special tokens left out)."""
    vocab = tokenizer.vocab
    ordinary = [t for i, t in enumerate(vocab.tokens) if i not in vocab.special_ids and not _SPECIAL.match(t)]
    upper, lower = [], 0
    for piece in ordinary:
        text = _text(tokenizer.kind, piece)
        if any(c.isupper() for c in text):
            upper.append(piece)
        elif any(c.islower() for c in text):
            lower += 1
    return Casing(upper, lower)


def mismatch(tokenizer, lower_case: bool, flag: str = "--lower_case") -> Optional[str]:
    """The warning for a vocabulary whose casing contradicts ``lower_case``, or None."""
    found = casing(tokenizer)
    total = len(found.upper) + found.lower
    if lower_case and found.cased:
        # Whole words say "cased" more plainly than the single capitals of the alphabet.
        examples = ", ".join(repr(p) for p in sorted(found.upper, key=lambda p: len(p) < 3)[:5])
        return (f"{tokenizer.path} is a cased vocabulary ({len(found.upper)} of {total} pieces hold an "
                f"upper-case letter, e.g. {examples}) but {flag} is on: text is lower-cased first, so "
                f"those pieces are never used. For a cased model pass --no-{flag[2:]}; for an uncased "
                f"one learn the vocabulary with make_vocab --lower_case. (Lower-casing before a cased "
                f"model on purpose? Then ignore this.)")
    if not lower_case and found.uncased:
        return (f"{tokenizer.path} looks uncased (none of its {total} pieces holds an upper-case letter) "
                f"but {flag} is off: capitalised words will be split into smaller pieces or unknown "
                f"tokens. Pass {flag} for an uncased model (or ignore this if the corpus has no capitals).")
    return None
