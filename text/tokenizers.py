"""Tokenizers shared by pipelines, training and serving: ``load_tokenizer(kind, path)`` and the
``TextTokenizer`` it returns. Per kind: text/wordpiece.py, text/sentencepiece_model.py, text/bpe.py;
the vocabulary files and their fingerprints: text/vocab_files.py; UTF-8 and spans: text/utf8.py.

Three kinds, each learnt by ``data_pipelines.make_vocab --tokenizer=KIND``:

* ``wordpiece`` (BERT, SpanBERT, ERNIE, ELECTRA, DistilBERT): a one-token-per-line
  ``vocab.txt`` with [PAD] [UNK] [CLS] [SEP] [MASK] first; tokenized by BERT's rules (basic
  tokenization + WordPiece, lower-casing with NFD accent stripping when ``lower_case``) as
  text.wordpiece implements them, equal to Hugging Face's BertTokenizer.
* ``sentencepiece`` (ALBERT, XLNet, T5): a SentencePiece unigram ``.model`` (Kudo 2018;
  Kudo & Richardson 2018) with <pad>=0 </s>=1 <unk>=2 and control symbols [CLS] [SEP] [MASK]
  <eod>; tokenized by tensorflow-text's SentencepieceTokenizer, which applies the model's own
  normalizer spec (nmt_nfkc for make_vocab's models and the released ALBERT, XLNet and T5
  ones), after lower-casing when ``lower_case`` (ALBERT's do_lower_case: Python's
  ``str.lower``, as ``lower_in_graph`` computes it; accents are kept, see below). The op is
  asked for its 1-best (``return_nbest``, ``nbest_size=1``), which is SentencePiece's lattice
  Viterbi: the decoder the sentencepiece library defines, the only one until its 0.1.90 (2020),
  so the one ALBERT, XLNet and T5 were pretrained with, and the reference here. The op's plain
  Encode is the "optimized" encoder of the sentencepiece 0.1.96 it bundles, built so that a
  candidate's score is a double: it broke exact score ties (long runs of one letter) otherwise,
  on 27 of 3,000 random texts of every script; the library's own optimized encoder (float
  scores) differs from the lattice Viterbi on exact ties only, 4 of 20,000 texts. The 1-best
  costs 2.4x the plain op's CPU time (4.0 vs 9.7 MB of English per CPU-second).
  ALBERT's and XLNet's own preprocessing (and Hugging Face's AlbertTokenizer / XLNetTokenizer,
  keep_accents=False) also strips accents (NFKD, combining marks dropped) and XLNet's turns ``
  and '' into "; this module does not: make_vocab's vocabularies are learnt on the text it
  gives, but a converted ALBERT or XLNet checkpoint gets other ids than Hugging Face's on
  accented text.
* ``bpe`` (RoBERTa, GPT-2, BART): GPT-2 byte-level BPE (Radford et al. 2019), a ``vocab.json``
  with its ``merges.txt`` beside it (``X-vocab.json`` pairs with ``X-merges.txt``); the path
  that names it is the vocab.json (or the folder holding both). GPT-2 and RoBERTa are cased:
  pipelines should pass ``lower_case=False`` for it. Tokenized by this module's graph of core
  TF ops (text/bpe.py): GPT-2's pre-tokenizer regex as rules over character classes,
  its byte-to-symbol map, Hugging Face's merge order; the same ids as Hugging Face's
  ByteLevelBPETokenizer (transformers' GPT2Tokenizer and RobertaTokenizer) on every test text.
  It replaced keras-hub's BytePairTokenizer, which emulates the regex's lookahead with U+096C as
  a marker and so dropped that character, cut a text at a NUL (tensorflow-text's regex_split),
  split runs of whitespace other than spaces differently (47 of 3,052 test texts differed from
  Hugging Face's) and ran at 0.04 MB per CPU-second on text of every script (now 0.6-0.9;
  English 1.4 -> 3.4-3.9, Hugging Face's 1.5-2.4 on the same busy machine).

Both graphs read ill-formed UTF-8 (bytes a gRPC client may send) as Python's
``decode("utf-8", "replace")`` reads it (``valid_utf8``) and lower-case without
``tf.strings.lower``'s cut at a NUL. Where TensorFlow's ICU (Unicode 13.0) and Python's
(14.0 on 3.11) disagree, i.e. on lower-casing next to one of the 838 characters new in 14.0,
``lower_case`` follows ICU. The eager methods refuse a Python string holding an unpaired
surrogate, naming the text (it has no UTF-8 form; the reference libraries refuse it too).

``TextTokenizer.in_graph()`` is the module for tf.function and SavedModel signatures.
``TextTokenizer.tokenize`` (eager, used by the Beam job) runs that very module for sentencepiece
and bpe; for wordpiece it runs the ``tokenizers`` library's BERT pipeline (the reference itself,
without TensorFlow, so Beam workers need not load it), and the graph module is tested against it
on random text of every script (tests/text/test_wordpiece.py); sentencepiece and bpe
against their references likewise (tests/text/test_tokenizer_parity.py). Either way a
served model sees exactly the ids it was trained on. Text never produces special ids (a literal
"[MASK]" or "<mask>" in the input is ordinary text); objectives add specials by id.
"""

from __future__ import annotations

import json
from typing import List, Optional, Sequence, Tuple

import numpy as np

from text import vocab as text_vocab
from text import wordpiece
from text.bpe import bytepair_module, bytes_to_unicode
from text.sentencepiece_model import sentencepiece_module
from text.utf8 import (byte_to_char_spans, char_to_byte_spans, map_lowered_offsets, ragged_to_lists,
                       string_batch, strip_leading_space)
from text.vocab_files import (BPE_SPECIALS, BPE_WORD_START, CLS, KINDS, MASK, PAD, SEP, SP_PAD,
                              SP_UNK, SP_EOS, SP_WORD_START, UNK, VocabularyError, bpe_files,
                              detect_kind, files_fingerprint, load_vocab, read_bytes,
                              vocab_fingerprint)

# How many texts one call of the TF tokenizer gets: large batches amortise the per-call
# cost (about 2x the throughput of batches of 64, see benchmarks/README.md "Tokenizers").
_CHUNK = 4096


class TextTokenizer:
    """A vocabulary and the one TF tokenizer that maps text to its ids.

    kind: "wordpiece" | "sentencepiece" | "bpe".
    path: the vocabulary path it was loaded from (vocab.txt, .model, vocab.json).
    vocab: a ``text.vocab.Vocab`` (roles, special ids, word starts).
    fingerprint: "sha256:..." over the vocabulary file(s), recorded in info.json.
    lower_case: whether text is lower-cased first (must match make_vocab --lower_case).
    """

    def __init__(self, kind: str, path: str, vocab, fingerprint: str, lower_case: bool, make_module,
                 make_eager=None):
        self.kind = kind
        self.path = path
        self.vocab = vocab
        self.fingerprint = fingerprint
        self.lower_case = lower_case
        # Built on first use: a caller that only needs the vocabulary and its fingerprint
        # (make_pretrain's launcher) skips building the TF tokenizer (about 1 s of CPU).
        self._make_module = make_module
        self._module_instance = None
        # wordpiece: the reference pipeline of the ``tokenizers`` library, the same ids as the TF
        # module (tested) without importing TensorFlow: a Beam worker that only tokenizes never
        # loads it.
        self._make_eager = make_eager
        self._eager_instance = None
        self._piece_bytes: Optional[List[bytes]] = None

    @property
    def _module(self):
        if self._module_instance is None:
            self._module_instance = self._make_module()
        return self._module_instance

    @property
    def _eager(self):
        if self._eager_instance is None:
            self._eager_instance = self._make_eager()
        return self._eager_instance

    def __repr__(self) -> str:
        return (f"TextTokenizer(kind={self.kind!r}, path={self.path!r}, size={self.vocab.size}, "
                f"lower_case={self.lower_case})")

    def in_graph(self):
        """A tf.Module whose ``__call__`` maps a tf.string batch [batch] to int64 ids
        RaggedTensor [batch, (pieces)]; usable inside tf.function and SavedModel signatures
        (keep it as an attribute of the exported module so its resources are saved)."""
        return self._module

    def tokenize(self, texts: Sequence[str]) -> List[List[int]]:
        """Ids of each text (eager, batched): wordpiece with the ``tokenizers`` library (no
        TensorFlow), the other kinds with the in-graph module's ops on chunks of texts."""
        if self._make_eager is not None:
            return self._eager.tokenize(texts)
        return self.tokenize_in_graph(texts)

    def tokenize_in_graph(self, texts: Sequence[str]) -> List[List[int]]:
        """Ids of each text from the in-graph module's ops (what a served model computes), run
        eagerly on chunks of texts."""
        out: List[List[int]] = []
        for i in range(0, len(texts), _CHUNK):
            # SentencePiece: its op and tf.strings.lower one by one, which for Python strings
            # without a NUL is what __call__ computes, without the function call's cost (see
            # tokenize_strings); otherwise module.tokenize.
            chunk = texts[i:i + _CHUNK]
            if self.kind == "sentencepiece" and not any("\x00" in t for t in chunk):
                ids = self._module.tokenize_strings(string_batch(chunk))
            else:
                ids = self._module.tokenize(string_batch(chunk))
            out.extend(ragged_to_lists(ids.flat_values.numpy(), ids.row_splits.numpy()))
        return out

    def tokenize_with_offsets(self, texts: Sequence[str]) -> Tuple[List[List[int]], List[List[int]], List[List[int]]]:
        """(ids, starts, ends): ids as ``tokenize`` and each piece's UTF-8 byte span
        [start, end) in the original text. A span leaves out the leading whitespace a
        word-start piece carries ("\u2581the", "\u0120the" start at "t"); a whitespace-only
        piece is the empty span at the end of its whitespace; a piece of a character that
        lower-casing or normalisation expanded covers the whole character."""
        ids_all, starts_all, ends_all = [], [], []
        for i in range(0, len(texts), _CHUNK):
            chunk = list(texts[i:i + _CHUNK])
            ids, starts, ends = self._offsets_chunk(chunk)
            ids_all.extend(ids)
            starts_all.extend(starts)
            ends_all.extend(ends)
        return ids_all, starts_all, ends_all

    def tokenize_with_char_offsets(self, texts: Sequence[str]) -> List[Tuple[List[int], List[int], List[int]]]:
        """(ids, starts, ends) of each text with CHARACTER spans: ``tokenize_with_offsets``'s
        byte spans converted (a start inside a character moves to its start, an end inside one
        covers it). WordPiece computes them with the ``tokenizers`` library, without TensorFlow
        (the graph module's spans are tested against them: tests/text/test_wordpiece.py)."""
        if self._make_eager is not None:
            return self._eager.tokenize_with_char_offsets(texts)
        ids, starts, ends = self.tokenize_with_offsets(texts)
        return [(i, *byte_to_char_spans(t, a, b)) for t, i, a, b in zip(texts, ids, starts, ends)]

    def _offsets_chunk(self, texts: List[str]):
        if self.kind == "wordpiece":
            ids, starts, ends = [], [], []
            for text, (i, s, e) in zip(texts, self._eager.tokenize_with_char_offsets(texts)):
                s, e = char_to_byte_spans(text, s, e)
                ids.append(i)
                starts.append(s)
                ends.append(e)
            return ids, starts, ends
        lowered = self._module.prepare(string_batch(texts))
        lowered_bytes = lowered.numpy().tolist()
        if self.kind == "sentencepiece":
            ids, starts, ends = self._module.tokenizer.tokenize_with_offsets(lowered)
            ids_l = ragged_to_lists(ids.flat_values.numpy().astype(np.int64), ids.row_splits.numpy())
            starts_l = ragged_to_lists(starts.flat_values.numpy(), starts.row_splits.numpy())
            ends_l = ragged_to_lists(ends.flat_values.numpy(), ends.row_splits.numpy())
        else:
            # Byte-level BPE pieces are the text's bytes: find each piece from where the last
            # one ended (a find, not a running sum, so that a byte the splitter drops, e.g.
            # keras-hub's marker character, cannot shift the later spans).
            ids_l = self.tokenize(texts)
            pieces = self._bpe_piece_bytes()
            starts_l, ends_l = [], []
            for row, data in zip(ids_l, lowered_bytes):
                pos, s_row, e_row = 0, [], []
                for t in row:
                    piece = pieces[t]
                    at = data.find(piece, pos) if piece else -1
                    start = at if at >= 0 else pos
                    end = start + len(piece) if at >= 0 else pos
                    s_row.append(start)
                    e_row.append(end)
                    pos = end
                starts_l.append(s_row)
                ends_l.append(e_row)
        starts_l, ends_l = strip_leading_space(lowered_bytes, starts_l, ends_l)
        return ids_l, *map_lowered_offsets(texts, lowered_bytes, starts_l, ends_l, self.lower_case)

    def _bpe_piece_bytes(self) -> List[bytes]:
        if self._piece_bytes is None:
            byte_of = {c: b for b, c in bytes_to_unicode().items()}
            specials = set(self.vocab.special_ids)
            self._piece_bytes = [
                b"" if i in specials or any(c not in byte_of for c in tok) else bytes(byte_of[c] for c in tok)
                for i, tok in enumerate(self.vocab.tokens)]
        return self._piece_bytes


# ---------------------------------------------------------------------------------------------
# Loading


def load_tokenizer(kind: str, path: str, *, lower_case: bool = True) -> TextTokenizer:
    """The tokenizer of vocabulary ``path`` of ``kind`` (see the module docstring).

    Raises VocabularyError naming the file and what to do when it is missing, of another kind
    or lacks the tokens every pipeline needs (wordpiece: the five reserved tokens;
    sentencepiece: <pad> and <unk>; bpe: all 256 byte symbols). Roles an objective needs
    beyond those are checked by ``Vocab.special`` when the objective asks for them.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; expected one of {KINDS}")
    try:
        if kind == "wordpiece":
            return _load_wordpiece(path, lower_case)
        if kind == "sentencepiece":
            return _load_sentencepiece(path, lower_case)
        return _load_bpe(path, lower_case)
    except VocabularyError as e:
        guess = detect_kind(path)
        if guess != kind and "not found" not in str(e):
            raise VocabularyError(f"{e} (its name suggests a {guess} vocabulary: "
                                  f"use --tokenizer={guess}, or give a {kind} vocabulary)") from None
        raise


def _load_wordpiece(path: str, lower_case: bool) -> TextTokenizer:

    tokens = load_vocab(path)
    vocab = text_vocab.make_vocab(
        tokens, {"pad": PAD, "unk": UNK, "cls": CLS, "sep": SEP, "mask": MASK},
        word_start=lambda t: not t.startswith("##"), name=path)
    # The TF module is built (and TensorFlow imported) on first use, not here.
    return TextTokenizer("wordpiece", path, vocab, vocab_fingerprint(path), lower_case,
                         lambda: wordpiece.graph_module(tokens, lower_case, unk=UNK),
                         make_eager=lambda: wordpiece.WordPieceTokenizer(tokens, lower_case, unk=UNK))


def _load_sentencepiece(path: str, lower_case: bool) -> TextTokenizer:
    import sentencepiece as spm

    model = read_bytes(path)
    sp = spm.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(model)
    except (RuntimeError, OSError) as e:
        raise VocabularyError(f"{path} is not a SentencePiece model ({e}); make one with "
                              f"`python -m data_pipelines.make_vocab --tokenizer=sentencepiece "
                              f"--output=X.model ...`") from None
    tokens = [sp.IdToPiece(i) for i in range(sp.GetPieceSize())]
    missing = [t for t in (SP_PAD, SP_UNK) if t not in tokens]
    if missing:
        raise VocabularyError(f"SentencePiece model {path} lacks {missing}; make one with "
                              f"`python -m data_pipelines.make_vocab --tokenizer=sentencepiece ...`")
    present = set(tokens)
    # XLNet's released model spells them <cls> <sep> <mask>; ours (and ALBERT's) [CLS] [SEP] [MASK].
    pick = lambda *names: next((n for n in names if n in present), names[0])
    roles = {"pad": SP_PAD, "eos": SP_EOS, "unk": SP_UNK, "cls": pick("[CLS]", "<cls>"),
             "sep": pick("[SEP]", "<sep>"), "mask": pick("[MASK]", "<mask>"), "eod": "<eod>"}
    control = [tokens[i] for i in range(len(tokens)) if sp.IsControl(i) or sp.IsUnknown(i)]
    vocab = text_vocab.make_vocab(tokens, roles, word_start=lambda t: t.startswith(SP_WORD_START),
                            control=control, name=path)
    return TextTokenizer("sentencepiece", path, vocab, vocab_fingerprint(path), lower_case,
                         lambda: sentencepiece_module()(model, lower_case))


def _load_bpe(path: str, lower_case: bool) -> TextTokenizer:

    vocab_path, merges_path = bpe_files(path)
    try:
        vocabulary = json.loads(read_bytes(vocab_path).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise VocabularyError(f"{vocab_path} is not a byte-level BPE vocab.json ({e}); make one with "
                              f"`python -m data_pipelines.make_vocab --tokenizer=bpe ...`") from None
    if not isinstance(vocabulary, dict) or not all(isinstance(v, int) for v in vocabulary.values()):
        raise VocabularyError(f"{vocab_path} is not a byte-level BPE vocab.json (a JSON object piece -> id)")
    ids = sorted(vocabulary.values())
    if ids != list(range(len(ids))):
        raise VocabularyError(f"{vocab_path}: ids are not 0..{len(ids) - 1} without gaps")
    missing_bytes = [c for c in bytes_to_unicode().values() if c not in vocabulary]
    if missing_bytes:
        raise VocabularyError(f"{vocab_path} lacks {len(missing_bytes)} of the 256 byte symbols "
                              f"(e.g. {missing_bytes[:3]}): not a byte-level BPE vocabulary; make one "
                              f"with `python -m data_pipelines.make_vocab --tokenizer=bpe ...`")
    merges_text = read_bytes(merges_path).decode("utf-8")
    merges = [line for line in merges_text.splitlines() if line and not line.startswith("#version")]
    for n, merge in enumerate(merges, 1):
        parts = merge.split(" ")
        if len(parts) != 2 or parts[0] not in vocabulary or parts[1] not in vocabulary:
            raise VocabularyError(f"{merges_path} line {n}: merge {merge!r} is not two pieces of "
                                  f"{vocab_path}; the two files must come from the same make_vocab run")
        if parts[0] + parts[1] not in vocabulary:  # Hugging Face refuses such a merge too
            raise VocabularyError(f"{merges_path} line {n}: merge {merge!r} makes "
                                  f"{parts[0] + parts[1]!r}, which {vocab_path} lacks; the two files "
                                  f"must come from the same make_vocab run")
    tokens = [None] * len(ids)
    for piece, i in vocabulary.items():
        tokens[i] = piece
    roles = {"bos": "<s>", "cls": "<s>", "pad": "<pad>", "eos": "</s>", "sep": "</s>", "unk": "<unk>",
             "mask": "<mask>", "eod": "<|endoftext|>"}
    vocab = text_vocab.make_vocab(tokens, roles, word_start=lambda t: t.startswith(BPE_WORD_START),
                            control=BPE_SPECIALS, name=vocab_path)
    return TextTokenizer("bpe", vocab_path, vocab, files_fingerprint([vocab_path, merges_path]),
                         lower_case, lambda: bytepair_module()(vocabulary, merges, lower_case))
