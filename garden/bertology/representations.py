"""Every layer's vector of each word occurrence in a corpus: what the contextuality, probing and
word-sense analyses read.

A sentence is a list of words (raw text is split by `words_of`: runs of letters, digits and
underscores, and every other non-space character alone, so punctuation marks are words of
their own). Words are packed as the tagging task packs them for fine-tuning
(text.finetune.tagging's word_pieces and split_pieces): each word tokenized on its own (byte-level
BPE with a space before every word but the first), a word without pieces gets the unknown
token, each row framed as the packer frames one text (garden.serving.text's layouts:
`[CLS] pieces [SEP]` for "bert" and "roberta", `pieces <sep> <cls>` for "xlnet", the bare pieces
for "gpt2"), and a sentence longer than max_seq_length minus those special tokens cut at word
boundaries into several rows, so no word is dropped.

A word's vector is, per layer (index 0: the embeddings), its FIRST piece's hidden state
(pooling="first", the default: the piece the tagging task labels; Ethayarajh 2019 had whole-word
tokens from ELMo, and for BERT and GPT-2 took one vector per token) or the mean of its pieces'
states (pooling="mean").

Memory: (L + 1) x words x hidden float32, e.g. 13 x 10,000 x 768 x 4 B = 400 MB for BERT-base,
so sample the sentences of a large corpus (`sample`, seeded) or keep only the words needed
(`keep`). Runs over a few seconds print their progress to stderr.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from typing import Collection, List, Optional, Sequence, Tuple

import numpy as np

from text.finetune import tagging
from garden.models import instrument

POOLINGS = ("first", "mean")
# How each garden.serving.text layout frames one text: the special tokens before and after
# the pieces, as packer attributes.
FRAMES = {"bert": (("cls_id",), ("sep_id",)), "roberta": (("cls_id",), ("sep_id",)),
          "xlnet": ((), ("sep_id", "cls_id")), "gpt2": ((), ())}
LAYOUTS = tuple(FRAMES)
_WORD = re.compile(r"\w+|[^\w\s]")


@dataclasses.dataclass
class Occurrences:
    """Word occurrences and their vectors: row n of every array is one occurrence."""

    vectors: np.ndarray       # float32 [L + 1, N, H]; index 0 the embeddings
    words: np.ndarray         # str [N], as given (lower-cased by words_of when asked)
    sentence_ids: np.ndarray  # int64 [N], index of the sentence in the list given
    word_index: np.ndarray    # int64 [N], index of the word in its sentence
    pooling: str

    def __len__(self) -> int:
        return len(self.words)

    def subset(self, rows) -> "Occurrences":
        """The occurrences at `rows` (indices or a boolean mask)."""
        return Occurrences(self.vectors[:, rows], self.words[rows], self.sentence_ids[rows],
                           self.word_index[rows], self.pooling)


def words_of(text: str, lower_case: bool = False) -> List[str]:
    """The words of raw text (module docstring), lower-cased when asked."""
    return _WORD.findall(text.lower() if lower_case else text)


def word_spans(text: str) -> List[Tuple[int, int]]:
    """The character span [start, end) of each of words_of(text)."""
    return [m.span() for m in _WORD.finditer(text)]


def sample(count: int, limit: Optional[int], seed: int) -> np.ndarray:
    """Sorted indices of `limit` of `count` items drawn without replacement (seeded), or all of
    them when limit is None or not below count."""
    if limit is None or limit >= count:
        return np.arange(count)
    return np.sort(np.random.default_rng(seed).choice(count, limit, replace=False))


def tokenizer_of(packer):
    """The Python tokenizer (text.tokenizers) of a TextPacker's vocabulary: its
    `vocab_path` (TextPacker records the file it was made from) loaded with its kind and
    casing."""
    from text import tokenizers

    path = getattr(packer, "vocab_path", None)
    if not path:
        raise ValueError("the packer does not say where its vocabulary is (no vocab_path): pass "
                         "tokenizer=text.tokenizers.load_tokenizer(kind, vocab, "
                         "lower_case=...)")
    return tokenizers.load_tokenizer(packer.kind, path, lower_case=packer.lower_case)


def collect(backbone, packer, sentences: Sequence[Sequence[str]], *, tokenizer=None,
            keep: Optional[Sequence[Optional[Collection[int]]]] = None,
            pooling: str = "first", batch_size: int = 32, progress_seconds: float = 10.0,
            name: str = "representations") -> Occurrences:
    """Every layer's vector of the words of `sentences` (lists of words; see the module
    docstring), in sentence and word order.

    Args:
        backbone: an encoder of garden.models.backbone.Backbone (its hidden states are
            switched on with the same weights).
        packer: its TextPacker (a LAYOUTS layout; max_seq_length is the row length).
        tokenizer: the packer's Python tokenizer; default tokenizer_of(packer).
        keep: per sentence, the indices of the words to return (None: all of its words).
        pooling: "first" (first piece) or "mean" (mean of the word's pieces).
        name: the prefix of the progress lines.
    """
    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling {pooling!r}; choose from {POOLINGS}")
    if packer.layout not in LAYOUTS:
        raise ValueError(f"word representations read the {LAYOUTS} text layouts; the model "
                         f"packs {packer.layout!r}")
    if keep is not None and len(keep) != len(sentences):
        raise ValueError(f"keep has {len(keep)} entries for {len(sentences)} sentences")
    tokenizer = tokenizer if tokenizer is not None else tokenizer_of(packer)
    if tokenizer.fingerprint != packer.fingerprint:
        raise ValueError(f"the tokenizer's vocabulary ({tokenizer.fingerprint}) is not the "
                         f"packer's ({packer.fingerprint})")
    model = instrument.instrumented(backbone, output_hidden_states=True)
    vectors, words, sentence_ids, word_index = [], [], [], []
    start = last = time.time()
    for b in range(0, len(sentences), batch_size):
        records, owners = [], []
        for s in range(b, min(b + batch_size, len(sentences))):
            for record in word_rows(sentences[s], tokenizer, packer):
                records.append(record)
                owners.append(s)
        if not records:
            continue
        batch = {k: np.asarray([r[k] for r in records], np.int32)
                 for k in ("token_ids", "segment_ids", "padding_mask", "first_piece")}
        states = instrument.run(model, batch)["hidden_states"]  # [L+1, R, T, H]
        counter = {}
        for r, s in enumerate(owners):
            starts = np.flatnonzero(batch["first_piece"][r])
            ends = np.append(starts[1:], records[r]["pieces_end"])
            if pooling == "mean":
                summed = np.concatenate([np.zeros_like(states[:, r, :1]),
                                         np.cumsum(states[:, r], axis=1)], axis=1)
            for p, e in zip(starts, ends):
                k = counter.get(s, 0)
                counter[s] = k + 1
                if keep is not None and keep[s] is not None and k not in keep[s]:
                    continue
                vectors.append(states[:, r, p] if pooling == "first"
                               else (summed[:, e] - summed[:, p]) / (e - p))
                words.append(sentences[s][k])
                sentence_ids.append(s)
                word_index.append(k)
        done = min(b + batch_size, len(sentences))
        if time.time() - last >= progress_seconds:
            last = time.time()
            print(f"[{name}] {done}/{len(sentences)} sentences, {len(words)} words, "
                  f"{done / (last - start):.1f} sentences/s", file=sys.stderr, flush=True)
    if not vectors:
        raise ValueError("no word occurrence in the sentences given")
    return Occurrences(np.stack(vectors, axis=1).astype(np.float32), np.asarray(words),
                       np.asarray(sentence_ids, np.int64), np.asarray(word_index, np.int64),
                       pooling)


def word_rows(words: Sequence[str], tokenizer, packer) -> List[dict]:
    """The packed rows of one sentence's words: each word's pieces (tokenized alone, as
    text.finetune.tagging's word_pieces; the unknown token for a word without pieces), rows cut at
    word boundaries (tagging.split_pieces) to fit max_seq_length with the layout's special
    tokens (FRAMES), a word longer than a row cut to it. Each row: token_ids, segment_ids,
    padding_mask, first_piece (1 at each word's first piece) as lists of max_seq_length, and
    pieces_end (the position after its last word piece)."""
    before, after = (tuple(getattr(packer, name) for name in names)
                     for names in FRAMES[packer.layout])
    length = packer.max_seq_length
    budget = length - len(before) - len(after)
    pieces = tokenizer.tokenize(tagging.word_texts(words, tokenizer.kind))
    if not all(pieces):  # a byte-level BPE vocabulary (GPT-2's) has no unknown token
        unk = tokenizer.vocab.specials.get("unk")
        if unk is None:
            raise ValueError(f"the word {words[[bool(p) for p in pieces].index(False)]!r} has "
                             f"no pieces in {tokenizer.vocab.name}, which has no unknown token")
        pieces = [p or [unk] for p in pieces]
    chunk_of = tagging.split_pieces([len(p) for p in pieces], budget)
    rows = []
    for chunk in range(chunk_of[-1] + 1 if chunk_of else 0):
        ids, first = list(before), [0] * len(before)
        for word, c in zip(pieces, chunk_of):
            if c == chunk:
                word = word[:budget]
                ids.extend(word)
                first.extend([1] + [0] * (len(word) - 1))
        end = len(ids)
        ids.extend(after)
        real = len(ids)
        pad = length - real
        segments = [0] * length
        if packer.layout == "xlnet":
            segments[real - 1] = 2  # <cls>'s own segment, as garden.serving.text.combine's
        rows.append({"token_ids": ids + [packer.pad_id] * pad, "segment_ids": segments,
                     "padding_mask": [1] * real + [0] * pad,
                     "first_piece": first + [0] * (length - len(first)), "pieces_end": end})
    return rows
