"""The vocabulary record every objective, task and packer reads: ids, special-token roles and
word starts (built by text.tokenizers.load_tokenizer for each tokenizer kind)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence, Tuple

import numpy as np

# Roles of special tokens. A tokenizer kind maps each role it has to an id, e.g. WordPiece
# cls -> [CLS]; byte-level BPE cls -> <s>, sep -> </s>, eod -> <|endoftext|>; SentencePiece
# (ALBERT/XLNet/T5 style) cls -> [CLS]/<cls>, eod -> <eod>, eos -> </s>.
ROLES = ("pad", "unk", "cls", "sep", "mask", "bos", "eos", "eod")


@dataclasses.dataclass(frozen=True, eq=False)
class Vocab:
    """What objectives may know about a vocabulary: ids, roles and word starts. No strings
    are looked up per element.

    tokens: the piece of every id (for messages and tests).
    specials: role -> id (see ROLES); only the roles this vocabulary has.
    special_ids: every control id (never a masking candidate, never a random replacement).
    is_word_start: bool per id; True for a piece that starts a word (WordPiece: no "##";
      SentencePiece: starts with U+2581; byte-level BPE: starts with "\u0120") and for specials.
    name: the vocabulary's path, for error messages.
    """

    tokens: Tuple[str, ...]
    specials: Mapping[str, int]
    special_ids: frozenset
    is_word_start: np.ndarray
    name: str = "<vocab>"

    @property
    def size(self) -> int:
        return len(self.tokens)

    def special(self, role: str, objective: str = "") -> int:
        """The id of a role, or a clear error naming the vocabulary and what to do."""
        try:
            return self.specials[role]
        except KeyError:
            who = f"objective {objective} " if objective else ""
            raise VocabularyRoleError(
                f"{who}needs a {role!r} token but vocabulary {self.name} has none "
                f"(it has {sorted(self.specials)}); build one with make_vocab --tokenizer=...") from None


class VocabularyRoleError(ValueError):
    pass


def make_vocab(tokens: Sequence[str], roles: Mapping[str, str], *, word_start: Callable[[str], bool],
               control: Sequence[str] = (), name: str = "<vocab>") -> Vocab:
    """A Vocab from its pieces. ``roles``: role -> piece (roles whose piece is absent are left
    out); ``control``: further pieces that are special (e.g. T5 sentinels, <unk>);
    ``word_start(piece)``: whether a piece starts a word."""
    tokens = tuple(tokens)
    index = {t: i for i, t in enumerate(tokens)}
    specials = {role: index[piece] for role, piece in roles.items() if piece in index}
    special_ids = frozenset(specials.values()) | frozenset(index[t] for t in control if t in index)
    starts = np.array([word_start(t) for t in tokens], dtype=bool)
    if special_ids:
        starts[sorted(special_ids)] = True
    return Vocab(tokens=tokens, specials=specials, special_ids=special_ids, is_word_start=starts, name=name)
