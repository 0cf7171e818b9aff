"""Peer parity: our BERT pretraining data against Model Garden's create_pretraining_data.

Model Garden's script (``official.nlp.data.create_pretraining_data``, a port of the original
BERT release) is the reference for docs/objectives.md section 1. Both tools get the same text, the
same WordPiece vocabulary and the same arguments; what must agree:

1. Tokenization, sentence by sentence: our graph tokenizer (text.wordpiece, what
   training and serving run) and Model Garden's FullTokenizer: identical ids on every sentence.
2. The distribution of the instances. The tools draw different random numbers (Python's
   ``random`` in one process vs numpy Generators per document and dupe pass), so instances
   are compared through statistics, each with a tolerance of Z standard errors.

Why the standard errors are clustered by document: the target length (max_num_tokens, or
with prob 0.1 a random shorter one) is drawn once per document per dupe pass and applies to
all of that document's instances, so instances are not independent. On the unsplit sample
corpus (215 documents, up to 301 sentences each) the seed-to-seed spread of the mean
instance length is ~3.9x the naive per-instance standard error, and a per-instance
tolerance of 4.5 SE fails about one seed in five for a correct tool. Hence:

- the test splits documents into pieces of at most 20 sentences (~440 documents, each
  still long enough for 2-3 chunks and the "put back" of unused segments);
- it finds each instance's source document (segment A is a contiguous run of its own
  document's tokens; masked positions are restored from masked_lm_ids first);
- it compares the tools document by document: with u_c a document's contribution to a mean
  (sum over its instances of (x - mean) / n), the difference of the two means is
  sum_c (u_c[mg] - u_c[ours]) and its variance is estimated by sum_c (u_c[mg] - u_c[ours])^2
  (documents independent, same expectation per document under parity).

Checked offline (the two tools' instance functions, 10 seeds each, dupe_factor 3): the
spread of the differences was 0.8-1.05x this standard error for every statistic, and the
tools' averages over seeds agreed within 0.5 SE. Power, measured: ours with short_seq_prob
0.05 instead of 0.1 lands 5.2 SE off in mean length (and 4.4 SE in the short fraction);
0.0 lands 7+ SE off. The number of masked positions per instance is not statistical at all:
it is checked exactly for both tools.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import subprocess
import sys
from typing import Dict, List, Tuple

import numpy as np
import pytest

tokenization = pytest.importorskip(
    "official.nlp.tools.tokenization",
    reason="Model Garden (tf-models-official, the `bench` extra) is the peer under test")

import tensorflow as tf  # noqa: E402

from text import features, vocab_files, wordpiece  # noqa: E402
from testing import REPO_ROOT, python_env, run_fixture_tool, run_module  # noqa: E402

MODEL_GARDEN_MODULE = "official.nlp.data.create_pretraining_data"

MAX_SEQ_LENGTH = 128
MAX_PREDICTIONS = 20
DUPE_FACTOR = 6          # 2 files x 6 passes -> ~10,600 instances per tool, ~10 s each
SEED = 12345
CORPUS_FILES = 2         # of the sample corpus's 4
SENTENCES_PER_DOCUMENT = 20
SHORT_INSTANCE = 64      # real tokens: the short_seq_prob draws plus document ends (~19%)
Z = 4.5                  # tolerance in standard errors of the difference
MAX_COUNT_GAP = 0.05     # instance counts: seed-to-seed spread of the gap is ~1.3%


@dataclasses.dataclass
class Corpus:
    sample_files: List[str]       # the whole sample corpus (tokenizer parity)
    files: List[str]              # what both pipelines read, each ending with a blank line
    documents: List[List[str]]    # their documents (sentences), in file order
    vocab: str


def _read_documents(path: str) -> List[List[str]]:
    """One sentence per line, blank line between documents: split on b"\\n" and strip, as
    both tools do (no universal-newline translation)."""
    with open(path, "rb") as f:
        lines = f.read().decode("utf-8").split("\n")
    documents, current = [], []
    for line in lines:
        line = line.strip()
        if line:
            current.append(line)
        elif current:
            documents.append(current)
            current = []
    if current:
        documents.append(current)
    return documents


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Corpus:
    root = tmp_path_factory.mktemp("bert_parity")
    sample_dir = root / "sample"
    run_fixture_tool("data_pipelines.sample_corpus", f"--output={sample_dir}")
    sample_files = sorted(glob.glob(str(sample_dir / "*.txt")))
    assert len(sample_files) == 4, sample_files
    corpus_dir = root / "corpus"
    corpus_dir.mkdir()
    files, documents = [], []
    for k, path in enumerate(sample_files[:CORPUS_FILES]):
        pieces = [doc[i:i + SENTENCES_PER_DOCUMENT]
                  for doc in _read_documents(path)
                  for i in range(0, len(doc), SENTENCES_PER_DOCUMENT)]
        # Every document, the last included, ends with a blank line: Model Garden would
        # otherwise merge a file's last document into the next file's first.
        target = corpus_dir / f"part-{k:05d}.txt"
        target.write_text("".join("\n".join(doc) + "\n\n" for doc in pieces), encoding="utf-8")
        files.append(str(target))
        documents += pieces
    vocab = root / "vocab.txt"
    run_fixture_tool("data_pipelines.make_vocab", f"--input={corpus_dir}/*.txt",
                     f"--output={vocab}", "--vocab_size=8000", "--lower_case")
    return Corpus(sample_files, files, documents, str(vocab))


# ---------------------------------------------------------------------------------------------
# 1. Tokenizer


def test_tokenizer_matches_model_garden(corpus):
    sentences = [s for path in corpus.sample_files for doc in _read_documents(path) for s in doc]
    assert len(sentences) > 10000
    reference = tokenization.FullTokenizer(vocab_file=corpus.vocab, do_lower_case=True)
    expected = [reference.convert_tokens_to_ids(reference.tokenize(s)) for s in sentences]
    vocab = vocab_files.load_vocab(corpus.vocab)
    ours = wordpiece.graph_module(vocab, lower_case=True).tokenize(sentences).to_list()

    # The vocabulary is learnt on 2 of the 4 files: the other two exercise ## pieces and
    # [UNK] for real (without them, agreement would prove little).
    pieces = [vocab[i] for ids in expected for i in ids]
    assert sum(p.startswith("##") for p in pieces) > 0.1 * len(pieces)
    assert pieces.count("[UNK]") > 0

    diffs = [(s, e, o) for s, e, o in zip(sentences, expected, ours) if e != o]
    assert sum(not s.isascii() for s in sentences) > 10  # the comparison covers non-ASCII text
    assert not diffs, f"{len(diffs)} of {len(sentences)} sentences tokenized differently:" + "".join(
        f"\n  {s!r}\n    model garden {[vocab[i] for i in e]}\n    ours         {[vocab[i] for i in o]}"
        for s, e, o in diffs[:3])


# ---------------------------------------------------------------------------------------------
# 2. Instances


def _run_both(corpus: Corpus, tmp_path) -> Tuple[List[str], List[str]]:
    """Model Garden in a subprocess alongside ours (2 cores: the two overlap)."""
    mg_output = str(tmp_path / "model_garden.tfrecord")
    mg_log = tmp_path / "model_garden.log"
    mg_cmd = [
        sys.executable, "-m", MODEL_GARDEN_MODULE,
        f"--input_file={','.join(corpus.files)}",
        f"--output_file={mg_output}",
        f"--vocab_file={corpus.vocab}",
        "--do_lower_case=True",
        f"--max_seq_length={MAX_SEQ_LENGTH}",
        f"--max_predictions_per_seq={MAX_PREDICTIONS}",
        "--masked_lm_prob=0.15",
        "--short_seq_prob=0.1",
        f"--random_seed={SEED}",
        f"--dupe_factor={DUPE_FACTOR}",
    ]
    # Its log goes to a file: it logs 20 whole examples, more than a pipe holds while we wait.
    with open(mg_log, "wb") as log:
        mg = subprocess.Popen(mg_cmd, cwd=REPO_ROOT, env=python_env(), stdout=log,
                              stderr=subprocess.STDOUT)
        try:
            ours_dir = tmp_path / "ours"
            run_module("data_pipelines.make_pretrain", "--objective=bert",
                       f"--input={os.path.dirname(corpus.files[0])}/*.txt",
                       f"--output_dir={ours_dir}", f"--vocab={corpus.vocab}",
                       f"--max_seq_length={MAX_SEQ_LENGTH}",
                       f"--max_predictions_per_seq={MAX_PREDICTIONS}",
                       "--masked_lm_prob=0.15", "--short_seq_prob=0.1",
                       f"--dupe_factor={DUPE_FACTOR}", f"--seed={SEED}", "--num_shards=2")
            returncode = mg.wait(timeout=600)
        finally:
            if mg.poll() is None:
                mg.kill()
                mg.wait()
    assert returncode == 0, f"{' '.join(mg_cmd)} exited {returncode}:\n{mg_log.read_text()[-4000:]}"
    ours_files = sorted(glob.glob(str(ours_dir / "train-*.tfrecord")))
    assert ours_files and (ours_dir / "COMPLETED").exists()
    return [mg_output], ours_files


def _check_record_layout(path: str, spec: features.Spec) -> None:
    """Model Garden's records carry exactly our feature names, dtypes and lengths."""
    raw = next(iter(tf.data.TFRecordDataset([path]).take(1))).numpy()
    example = tf.train.Example.FromString(raw)
    layout = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        values = getattr(feature, kind).value
        layout[name] = features.Feature({"int64_list": "int64", "float_list": "float32"}[kind],
                                        len(values))
    assert layout == spec, f"Model Garden writes {layout}, our schema is {spec}"


def _load(files: List[str], spec: features.Spec) -> Dict[str, np.ndarray]:
    ds = tf.data.TFRecordDataset(files).batch(1024).map(
        lambda x: tf.io.parse_example(x, features.tf_parsing_spec(spec)))
    batches = list(ds.as_numpy_iterator())
    return {name: np.concatenate([b[name] for b in batches]) for name in spec}


class DocumentIndex:
    """Finds the document a run of token ids comes from.

    The documents' ids (as one tool tokenizes them) are laid end to end as int32 with a -1
    between documents, so a run found by bytes.find never straddles two documents.
    """

    def __init__(self, documents_ids: List[List[List[int]]]):
        stream, self._starts = [], []
        for doc in documents_ids:
            self._starts.append(len(stream))
            stream.extend(i for sentence in doc for i in sentence)
            stream.append(-1)
        self._bytes = np.asarray(stream, dtype="<i4").tobytes()
        self._starts = np.asarray(self._starts)

    def find(self, ids: np.ndarray) -> int:
        """The first document holding `ids` contiguously, or -1."""
        needle = np.asarray(ids, dtype="<i4").tobytes()
        at = self._bytes.find(needle)
        while at >= 0 and at % 4:  # a match must start on a token boundary
            at = self._bytes.find(needle, at + 1)
        if at < 0:
            return -1
        return int(np.searchsorted(self._starts, at // 4, side="right")) - 1


@dataclasses.dataclass
class Instances:
    """Per-instance and per-masked-position values of one tool's output."""

    document: np.ndarray          # source document of each instance (segment A's)
    real_tokens: np.ndarray
    masked: np.ndarray            # masked positions per instance
    random_next: np.ndarray
    position_document: np.ndarray  # per masked position: its instance's document
    position_kind: np.ndarray     # per masked position: 0 [MASK], 1 kept, 2 other id


def _instances(data: Dict[str, np.ndarray], index: DocumentIndex, mask_id: int) -> Instances:
    weights = data["masked_lm_weights"] > 0
    rows = np.nonzero(weights)[0]
    positions = data["masked_lm_positions"][weights]
    shown = data["input_ids"][rows, positions]
    original_ids = data["masked_lm_ids"][weights]
    restored = data["input_ids"].copy()
    restored[rows, positions] = original_ids
    real = data["input_mask"].sum(axis=1)
    # [CLS] A [SEP] have segment 0 (padding too, hence the input_mask).
    len_a = ((data["segment_ids"] == 0) & (data["input_mask"] == 1)).sum(axis=1) - 2
    document = np.array([index.find(restored[i, 1:1 + len_a[i]]) for i in range(len(real))])
    kind = np.where(shown == mask_id, 0, np.where(shown == original_ids, 1, 2))
    return Instances(document=document, real_tokens=real, masked=weights.sum(axis=1),
                     random_next=data["next_sentence_labels"][:, 0],
                     position_document=document[rows], position_kind=kind)


def _contributions(values: np.ndarray, clusters: np.ndarray, n: int) -> np.ndarray:
    """u_c = sum over the cluster's items of (x - mean) / N: the cluster's share of the mean."""
    values = np.asarray(values, dtype=np.float64)
    return np.bincount(clusters, weights=values - values.mean(), minlength=n) / len(values)


def _compare(mg: Instances, ours: Instances, n_documents: int) -> List[dict]:
    rows = []

    def add(name, mg_values, mg_docs, ours_values, ours_docs):
        mg_values, ours_values = np.asarray(mg_values), np.asarray(ours_values)
        u = (_contributions(mg_values, mg_docs, n_documents)
             - _contributions(ours_values, ours_docs, n_documents))
        rows.append({"statistic": name, "model_garden": float(mg_values.mean()),
                     "ours": float(ours_values.mean()), "se": float(np.sqrt(np.sum(u ** 2)))})

    add("real tokens / instance", mg.real_tokens, mg.document, ours.real_tokens, ours.document)
    add("masked positions / instance", mg.masked, mg.document, ours.masked, ours.document)
    add("random next (label 1)", mg.random_next, mg.document, ours.random_next, ours.document)
    add(f"instances < {SHORT_INSTANCE} real tokens", mg.real_tokens < SHORT_INSTANCE, mg.document,
        ours.real_tokens < SHORT_INSTANCE, ours.document)
    for kind, name in enumerate(("[MASK]", "kept", "other id")):
        add(f"masked positions: {name}", mg.position_kind == kind, mg.position_document,
            ours.position_kind == kind, ours.position_document)
    counts = (np.bincount(mg.document, minlength=n_documents)
              - np.bincount(ours.document, minlength=n_documents))
    rows.append({"statistic": "instances", "model_garden": float(len(mg.document)),
                 "ours": float(len(ours.document)), "se": float(np.sqrt(np.sum(counts ** 2)))})
    for row in rows:
        row["z"] = (row["ours"] - row["model_garden"]) / row["se"]
    return rows


def _table(rows: List[dict]) -> str:
    lines = [f"{'statistic':34s} {'model garden':>12s} {'ours':>10s} {'se(diff)':>9s} {'z':>6s}"]
    for r in rows:
        lines.append(f"{r['statistic']:34s} {r['model_garden']:12.4f} {r['ours']:10.4f} "
                     f"{r['se']:9.4f} {r['z']:6.2f}")
    return "\n".join(lines)


def test_instance_statistics_match_model_garden(corpus, tmp_path):
    mg_files, ours_files = _run_both(corpus, tmp_path)
    spec = features.bert_pretrain_spec(MAX_SEQ_LENGTH, MAX_PREDICTIONS)
    _check_record_layout(mg_files[0], spec)
    vocab = vocab_files.load_vocab(corpus.vocab)
    mask_id = vocab.index(vocab_files.MASK)

    # Each tool's instances are traced back to the documents as that tool tokenizes them.
    reference = tokenization.FullTokenizer(vocab_file=corpus.vocab, do_lower_case=True)
    mg_index = DocumentIndex([[reference.convert_tokens_to_ids(reference.tokenize(s)) for s in doc]
                              for doc in corpus.documents])
    sentences = [s for doc in corpus.documents for s in doc]
    ids = iter(wordpiece.graph_module(vocab, lower_case=True).tokenize(sentences).to_list())
    ours_index = DocumentIndex([[next(ids) for _ in doc] for doc in corpus.documents])

    mg = _instances(_load(mg_files, spec), mg_index, mask_id)
    ours = _instances(_load(ours_files, spec), ours_index, mask_id)
    # Segment A is a contiguous run of one document in both tools' output, every time.
    for name, inst in (("model garden", mg), ("ours", ours)):
        lost = int(np.sum(inst.document < 0))
        assert lost == 0, f"{name}: segment A of {lost} of {len(inst.document)} instances is not " \
                          f"a contiguous run of any one document"

    # The masking budget is exact, not statistical: 15% of the real tokens, specials
    # included, rounded half to even, at least 1, at most 20 (128 -> 19).
    for name, inst in (("model garden", mg), ("ours", ours)):
        budget = np.array([min(MAX_PREDICTIONS, max(1, int(round(n * 0.15))))
                           for n in inst.real_tokens])
        off = np.nonzero(inst.masked != budget)[0]
        assert off.size == 0, (
            f"{name}: {off.size} of {len(budget)} instances mask other than "
            f"min({MAX_PREDICTIONS}, max(1, round(0.15 * real tokens))) positions, e.g. "
            f"{[(int(inst.real_tokens[i]), int(inst.masked[i])) for i in off[:5]]}")

    rows = _compare(mg, ours, len(corpus.documents))
    table = _table(rows)
    print(f"\n{len(corpus.documents)} documents, dupe_factor {DUPE_FACTOR}, seed {SEED}\n{table}")
    far = [r["statistic"] for r in rows if abs(r["z"]) > Z]
    assert not far, f"more than {Z} standard errors apart: {far}\n{table}"
    gap = abs(len(ours.document) - len(mg.document)) / len(mg.document)
    assert gap < MAX_COUNT_GAP, f"instance counts differ by {gap:.1%}\n{table}"
    # The recipe's 80/10/10 itself, as a check on the check: ~165,000 masked positions put
    # one tool's binomial standard error at 0.0010 (0.8) and 0.0007 (0.1); 10 of them here.
    stats = {r["statistic"]: r for r in rows}
    for tool in ("model_garden", "ours"):
        assert abs(stats["masked positions: [MASK]"][tool] - 0.8) < 0.01, table
        assert abs(stats["masked positions: kept"][tool] - 0.1) < 0.007, table
        assert abs(stats["masked positions: other id"][tool] - 0.1) < 0.007, table
    assert 0.5 < stats["random next (label 1)"]["ours"] < 0.65
