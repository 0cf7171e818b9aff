"""Tagging data: CoNLL-2003 named-entity recognition files, the reader, IOB schemes and the
first-sub-token features.

File format (the shared task's distribution, e.g. eng.train): one word per line with four
space-separated columns `word POS chunk NER`, e.g. `EU NNP B-NP I-ORG`; a blank line ends a
sentence; `-DOCSTART- -X- -X- O` lines start a document (they are not sentences). The NER tags
are IOB1 as distributed (an entity starts with I-; B- only separates two adjacent entities of
the same type); IOB2 files (every entity starts with B-) are accepted with scheme="iob2",
where an I-X that does not continue an X entity is an error. `iob1_to_iob2`
(text/tag_schemes.py) converts tags for scoring (garden.metrics.tagging).

Errors (FinetuneDataError) name file:line: a line without exactly four columns, a tag that is
not O / B-TYPE / I-TYPE (or not among the label names), an IOB2 violation, invalid UTF-8.

Features (docs/tasks.md "Token tagging"; one record per sentence piece): the words are
tokenized one by one (WordPiece and SentencePiece as is; byte-level BPE with a space before
every word but the first, as inside a sentence); a word that yields no pieces (e.g. only a
zero-width character) gets the unknown token, so every word has a first sub-token. The label
sits on each word's first sub-token, -1 on its other sub-tokens, on [CLS]/[SEP] and padding
(Model Garden's convention; Hugging Face writes -100). A sentence longer than
max_seq_length - 2 pieces is cut into non-overlapping pieces at word boundaries, greedily (a
word goes to the next piece when it does not fit), as Model Garden does: no word is dropped.
A single word longer than a whole piece keeps its first max_seq_length - 2 sub-tokens.

    token_ids, segment_ids, padding_mask, label_ids   int64 [max_seq_length]
    example_index                                     int64 [] (read_examples order)
    piece_index                                       int64 [] (0, 1, ... within a sentence)

Layout `[CLS] pieces [SEP]` (RoBERTa's `<s> pieces </s>`: the same with that vocabulary's
roles); segment_ids are all 0 (RoBERTa's backbone ignores them). garden/serving/tagging.py
builds the same ids in the graph from raw sentences (tested equal).

`tfds:conll2003[:split]` reads TensorFlow Datasets' prepared conll2003 from a local data_dir
(`read_examples("tfds:conll2003:dev", data_dir=...)`, make_finetune
`--input=tfds:conll2003:dev --tfds_data_dir=...`); its ner ClassLabel names are the tags.

make_finetune kind (text/finetune/__init__.py): NAME "tagging", flags
--max_seq_length (128), --conll_scheme (iob1), --conll_labels (CoNLL-2003's nine).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Tuple

from text.finetune import FinetuneDataError
from text.tag_schemes import iob1_to_iob2, tag_type  # noqa: F401  (iob1_to_iob2: this reader's API)
from text.finetune.base import FinetuneKind, records_by_example, spec_of_parsing

NAME = "tagging"

# CoNLL-2003's tag set in TensorFlow Datasets' order (its ner ClassLabel): O first, so that
# label id 0 is "outside".
CONLL2003_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC",
                    "I-MISC")
SCHEMES = ("iob1", "iob2")
DOCSTART = "-DOCSTART-"


@dataclasses.dataclass(frozen=True)
class ConllSentence:
    words: Tuple[str, ...]
    tags: Tuple[str, ...]
    pos: Tuple[str, ...] = ()
    chunks: Tuple[str, ...] = ()
    document_index: int = 0
    line: int = 0  # 1-based line of the first word in its file (0: not from a file)


@dataclasses.dataclass(frozen=True)
class ConllOptions:
    max_seq_length: int = 128
    scheme: str = "iob1"
    label_names: Tuple[str, ...] = CONLL2003_LABELS

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise ValueError(f"unknown tagging scheme {self.scheme!r}; expected one of {SCHEMES}")
        if self.max_seq_length < 3:
            raise ValueError(f"max_seq_length={self.max_seq_length} leaves no room for a word "
                             f"between [CLS] and [SEP]")
        if not self.label_names or self.label_names[0] != "O":
            raise ValueError(f"label_names must start with 'O', got {list(self.label_names)}")
        if len(set(self.label_names)) != len(self.label_names):
            raise ValueError(f"label_names repeat a label: {list(self.label_names)}")
        for tag in self.label_names:
            tag_type(tag)  # raises for a malformed tag


# -- tags and schemes ---------------------------------------------------------------------

def _check_iob2(path: str, lines: Sequence[int], tags: Sequence[str]) -> None:
    for i, tag in enumerate(tags):
        if tag.startswith("I-") and (i == 0 or tag_type(tags[i - 1]) != tag[2:]):
            before = tags[i - 1] if i else "the sentence start"
            raise FinetuneDataError(f"{path}:{lines[i]}: {tag} after {before} is not IOB2 (an "
                                    f"entity starts with B-); read the file with scheme='iob1'")


# -- reading ------------------------------------------------------------------------------

def _read(path: str) -> bytes:
    """A local file without TensorFlow (a Beam worker that only tokenizes need not load
    it); gs:// and other remote paths through tf.io.gfile."""
    if "://" not in path:
        if not os.path.isfile(path):
            raise FinetuneDataError(f"CoNLL file not found: {path}")
        with open(path, "rb") as f:
            return f.read()
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        raise FinetuneDataError(f"CoNLL file not found: {path}")
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def _decode(path: str, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise FinetuneDataError(f"{path}:{line}: invalid UTF-8") from e


def parse(text: str, path: str = "<string>", scheme: str = "iob1",
          label_names: Optional[Sequence[str]] = None) -> List[ConllSentence]:
    """The sentences of CoNLL-2003 text (see the module docstring), in order."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown tagging scheme {scheme!r}; expected one of {SCHEMES}")
    allowed = set(label_names) if label_names is not None else None
    sentences: List[ConllSentence] = []
    rows: List[Tuple[int, List[str]]] = []
    document = -1

    def flush():
        if not rows:
            return
        lines = [n for n, _ in rows]
        columns = list(zip(*(r for _, r in rows)))
        tags = columns[3]
        if scheme == "iob2":
            _check_iob2(path, lines, tags)
        sentences.append(ConllSentence(tuple(columns[0]), tuple(tags), tuple(columns[1]),
                                       tuple(columns[2]), max(document, 0), lines[0]))
        rows.clear()

    # "\n" only: a CoNLL line never holds a line break, and U+2028 or a form feed inside a
    # word is text (str.splitlines would cut there).
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            flush()
            continue
        fields = line.split()
        if fields[0] == DOCSTART:
            flush()
            document += 1
            continue
        if len(fields) != 4:
            raise FinetuneDataError(f"{path}:{number}: expected 4 columns (word POS chunk NER), "
                                    f"got {len(fields)}: {line[:80]!r}")
        try:
            tag_type(fields[3])
        except ValueError as e:
            raise FinetuneDataError(f"{path}:{number}: {e}") from None
        if allowed is not None and fields[3] not in allowed:
            raise FinetuneDataError(f"{path}:{number}: tag {fields[3]!r} is not among the "
                                    f"labels {list(label_names)}")
        rows.append((number, fields))
    flush()
    return sentences


def read_examples(path: str, scheme: str = "iob1", label_names: Optional[Sequence[str]] = None,
                  data_dir: Optional[str] = None) -> List[ConllSentence]:
    """The sentences of a CoNLL-2003 file (or `tfds:conll2003[:split]`), in file order.

    label_names: when given, a tag outside them is an error naming file:line.
    data_dir: TensorFlow Datasets' data_dir for a tfds: source (nothing is downloaded).
    """
    if path.startswith("tfds:"):
        name, _, split = path[len("tfds:"):].partition(":")
        sentences = read_tfds(name, split or "train", data_dir)
        for k, s in enumerate(sentences):
            for tag in s.tags:
                if label_names is not None and tag not in label_names:
                    raise FinetuneDataError(f"{path}: example {k}: tag {tag!r} is not among "
                                            f"the labels {list(label_names)}")
            if scheme == "iob2":
                _check_iob2(f"{path}: example {k}", range(1, len(s.tags) + 1), s.tags)
        return sentences
    sentences = parse(_decode(path, _read(path)), path, scheme, label_names)
    if not sentences:
        raise FinetuneDataError(f"{path} has no sentences")
    return sentences


def read_tfds(name: str, split: str, data_dir: Optional[str] = None) -> List[ConllSentence]:
    """The sentences of a prepared tensorflow-datasets split of conll2003 (``split`` may select
    shards, e.g. "train[0shard]"; CoNLL-2003's splits are train, dev, test), in the dataset's
    order, from data_dir (nothing is downloaded). Errors name the dataset, split and example."""
    import tensorflow_datasets as tfds

    if name.split("/")[0] != "conll2003":
        raise FinetuneDataError(f"tfds:{name}: only tfds:conll2003[:split] is a CoNLL source")
    try:
        builder = tfds.builder(name, data_dir=data_dir)
        ds = builder.as_dataset(split=split, shuffle_files=False)
    except (AssertionError, ValueError, FileNotFoundError) as e:
        raise FinetuneDataError(f"tfds:{name}:{split}: cannot read it from data_dir "
                                f"{data_dir!r} ({e}); prepare it with tfds first") from None
    names = builder.info.features["ner"].feature.names
    pos_names = builder.info.features["pos"].feature.names
    chunk_names = builder.info.features["chunks"].feature.names
    out = []
    for k, ex in enumerate(tfds.as_numpy(ds)):
        words = tuple(w.decode("utf-8") for w in ex["tokens"])
        lengths = {c: len(ex[c]) for c in ("tokens", "pos", "chunks", "ner")}
        if len(set(lengths.values())) != 1:
            raise FinetuneDataError(f"tfds:{name}:{split} example {k}: columns of different "
                                    f"lengths {lengths}")
        out.append(ConllSentence(words, tuple(names[i] for i in ex["ner"]),
                                 tuple(pos_names[i] for i in ex["pos"]),
                                 tuple(chunk_names[i] for i in ex["chunks"]), 0, k + 1))
    return out


def labels_of(sentences: Sequence[ConllSentence]) -> Tuple[str, ...]:
    """"O" then every other tag of the sentences, sorted (a label set for a new tag set)."""
    tags = {t for s in sentences for t in s.tags} - {"O"}
    return ("O",) + tuple(sorted(tags, key=lambda t: (tag_type(t), t)))


def format_sentences(sentences: Sequence[ConllSentence], documents: bool = True) -> str:
    """CoNLL-2003 text of the sentences (a -DOCSTART- line before each new document);
    missing POS / chunk columns are written as -X-."""
    out, document = [], None
    for s in sentences:
        if documents and s.document_index != document:
            out.append(f"{DOCSTART} -X- -X- O\n\n")
            document = s.document_index
        pos = s.pos or ("-X-",) * len(s.words)
        chunks = s.chunks or ("-X-",) * len(s.words)
        out.extend(f"{w} {p} {c} {t}\n" for w, p, c, t in zip(s.words, pos, chunks, s.tags))
        out.append("\n")
    return "".join(out)


# -- features -----------------------------------------------------------------------------

def word_texts(words: Sequence[str], kind: str) -> List[str]:
    """What each word is tokenized as: byte-level BPE marks a word start with a space (as
    the words after the first carry one inside a sentence); the other kinds mark it
    themselves (WordPiece: no ##; SentencePiece: its "\u2581")."""
    if kind != "bpe":
        return list(words)
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def word_pieces(words: Sequence[str], tokenizer) -> List[List[int]]:
    """Piece ids of each word; the unknown token for a word without pieces."""
    unk = tokenizer.vocab.special("unk", "tagging")
    return [ids or [unk] for ids in tokenizer.tokenize(word_texts(words, tokenizer.kind))]


def split_pieces(lengths: Sequence[int], budget: int) -> List[int]:
    """The piece (chunk) of each word: greedy, a word opens a new piece when it does not fit
    in the current one (lengths are capped at `budget`, as the words are truncated)."""
    out, piece, fill = [], 0, 0
    for n in lengths:
        n = min(n, budget)
        if fill and fill + n > budget:
            piece, fill = piece + 1, 0
        out.append(piece)
        fill += n
    return out


def example_features(example: ConllSentence, tokenizer, options: ConllOptions,
                     example_index: int = 0) -> List[Dict]:
    """The records of one sentence (module docstring); tags outside options.label_names, or
    (scheme iob2) an I-X that does not continue an X entity, are a FinetuneDataError naming
    the line (make_finetune skips and counts that sentence)."""
    index = {name: i for i, name in enumerate(options.label_names)}
    unknown = sorted(set(example.tags) - set(index))
    if unknown:
        raise FinetuneDataError(f"sentence at line {example.line}: tags {unknown} are not among "
                                f"the labels {list(options.label_names)}")
    if options.scheme == "iob2":  # one word per line: word i sits on line `line + i`
        _check_iob2("line", [example.line + i for i in range(len(example.tags))], example.tags)
    vocab = tokenizer.vocab
    cls, sep, pad = (vocab.special(r, "tagging") for r in ("cls", "sep", "pad"))
    length = options.max_seq_length
    budget = length - 2
    pieces = word_pieces(example.words, tokenizer)
    chunk_of = split_pieces([len(p) for p in pieces], budget)
    records = []
    for chunk in range(chunk_of[-1] + 1 if chunk_of else 0):
        ids, labels = [cls], [-1]
        for word, tag, c in zip(pieces, example.tags, chunk_of):
            if c != chunk:
                continue
            word = word[:budget]
            ids.extend(word)
            labels.extend([index[tag]] + [-1] * (len(word) - 1))
        ids.append(sep)
        labels.append(-1)
        real = len(ids)
        records.append({
            "token_ids": ids + [pad] * (length - real),
            "segment_ids": [0] * length,
            "padding_mask": [1] * real + [0] * (length - real),
            "label_ids": labels + [-1] * (length - real),
            "example_index": example_index,
            "piece_index": chunk,
        })
    return records


def feature_spec(options: ConllOptions):
    """What the records hold, as {name: tf.io.FixedLenFeature} (scalars of shape [])."""
    import tensorflow as tf

    length = options.max_seq_length
    spec = {name: tf.io.FixedLenFeature([length], tf.int64)
            for name in ("token_ids", "segment_ids", "padding_mask", "label_ids")}
    spec["example_index"] = tf.io.FixedLenFeature([], tf.int64)
    spec["piece_index"] = tf.io.FixedLenFeature([], tf.int64)
    return spec


# -- the make_finetune kind ---------------------------------------------------------------

def add_flags(parser) -> None:
    parser.add_argument("--max_seq_length", type=int, default=128,
                        help="sub-tokens per record, [CLS] and [SEP] included (default 128)")
    parser.add_argument("--conll_scheme", choices=SCHEMES, default="iob1",
                        help="the NER column's scheme: iob1 as CoNLL-2003 is distributed "
                             "(default), or iob2 (checked: I-X must continue an X entity)")
    parser.add_argument("--conll_labels", default=",".join(CONLL2003_LABELS),
                        help="comma-separated label names, O first (default CoNLL-2003's "
                             "nine); the label id is the index in this list")


def options_from_flags(args) -> ConllOptions:
    labels = tuple(n.strip() for n in args.conll_labels.split(",") if n.strip())
    return ConllOptions(max_seq_length=args.max_seq_length, scheme=args.conll_scheme,
                        label_names=labels)


def record_spec(options: ConllOptions):
    """feature_spec as text.features' Spec (what make_finetune serializes with)."""
    return spec_of_parsing(feature_spec(options))


KIND = FinetuneKind(name=NAME, add_flags=add_flags, make_options=options_from_flags,
                    read_examples=read_examples, record_spec=record_spec,
                    records=records_by_example(example_features, record_spec), read_tfds=read_tfds)
