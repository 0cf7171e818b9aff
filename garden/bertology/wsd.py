"""Word-sense disambiguation by nearest sense centroid, layer by layer (Wiedemann et al. 2019,
"Does BERT Make Any Sense?"; Reif et al. 2019, "Visualizing and Measuring the Geometry of
BERT").

Per layer (index 0: the embeddings): a sense's vector is the mean vector of its training
occurrences; a test occurrence of a lemma gets the sense of that lemma whose vector is nearest
by cosine. Accuracy per layer beside the most-frequent-sense baseline (each lemma's most
frequent training sense; ties: the first in sorted order). Test occurrences of a lemma without
training occurrences are left out and counted ("unseen_lemma"). Word vectors:
garden.bertology.representations (first piece by default).

File format (JSON Lines, UTF-8; one example per line, blank lines skipped):

    {"text": "We sat on the bank of the river .", "word_index": 4, "lemma": "bank",
     "sense": "bank%river"}
    {"text": "The bank approved the loan .", "start": 4, "end": 8, "lemma": "bank",
     "sense": "bank%money"}

  text        the sentence;
  word_index  the target's index among the words of `text` as
              garden.bertology.representations.words_of splits it (runs of letters, digits
              and underscores; every other non-space character is a word of its own), or
  start, end  the target's character span [start, end) in `text`, which must be exactly one
              such word;
  words       instead of text: the sentence as a list of words (pre-tokenized corpora such as
              SemCor), with word_index;
  lemma       the ambiguous word's lemma (centroids and the baseline are per lemma);
  sense       the sense's id, any string (e.g. a WordNet sense key "bank%1:17:01::").
A bad row is a ValueError naming the file, the line and what is wrong.

Also read: the XML + gold-key files of Raganato, Camacho-Collados & Navigli (2017), "Word Sense
Disambiguation: A Unified Evaluation Framework and Empirical Comparison" (SemCor, Senseval-2/3,
SemEval-2007/13/15 all ship in it): NAME.data.xml (<corpus><text><sentence> of <wf> words and
<instance id lemma> targets) with NAME.gold.key.txt beside it (lines "instance_id sense_key
[more keys]"; the first key is taken). Every instance becomes one example over its sentence's
words; an instance without a key, or a key of no instance, is a ValueError naming the id.

`sample_senses` makes such examples without any download: sentences where an ambiguous word
(bank, bat, spring, plant, crane) takes its sense from two context words of that sense,
deterministic for a seed; `write_senses` writes them in the format above.
"""

from __future__ import annotations

import dataclasses
import json
import os
import xml.etree.ElementTree as ElementTree
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from garden import plots
from garden.bertology import representations


@dataclasses.dataclass(frozen=True)
class SenseExample:
    words: Tuple[str, ...]
    word_index: int
    lemma: str
    sense: str
    line: int = 0  # 1-based line of its file (0: not from a file)


# -- the file format -------------------------------------------------------------------------

def _target(row: Mapping, words: List[str], text: Optional[str]) -> int:
    """The target word's index of a row (module docstring), or ValueError saying why not."""
    if "word_index" in row:
        index = row["word_index"]
        if not isinstance(index, int) or isinstance(index, bool) or \
                not 0 <= index < len(words):
            raise ValueError(f"word_index {index!r} is not an index of the sentence's "
                             f"{len(words)} words")
        return index
    if text is None or "start" not in row or "end" not in row:
        raise ValueError('give "word_index", or "start" and "end" (character offsets in '
                         '"text")')
    span = (row["start"], row["end"])
    spans = representations.word_spans(text)
    if span not in spans:
        near = [text[s:e] for s, e in spans if s < span[1] and e > span[0]]
        raise ValueError(f"start/end {list(span)} ({text[span[0]:span[1]]!r}) is not one word "
                         f"of the text (it overlaps {near})")
    return spans.index(span)


def parse_row(row, where: str = "<row>") -> SenseExample:
    """One example from a decoded row; ValueError prefixed with `where` (file:line)."""
    try:
        if not isinstance(row, dict):
            raise ValueError(f"expected a JSON object, got {type(row).__name__}")
        for key in ("lemma", "sense"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                raise ValueError(f'"{key}" must be a non-empty string, got {row.get(key)!r}')
        text = row.get("text")
        if isinstance(text, str):
            words = representations.words_of(text)
        elif isinstance(row.get("words"), list) and row["words"] and \
                all(isinstance(w, str) and w.strip() for w in row["words"]):
            words, text = list(row["words"]), None
        else:
            raise ValueError('give the sentence as "text" (a string) or "words" (a list of '
                             'non-empty strings)')
        index = _target(row, words, text)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    return SenseExample(tuple(words), index, row["lemma"], row["sense"])


def gold_key_path(xml_path: str) -> str:
    """NAME.gold.key.txt beside NAME.data.xml (or NAME.xml), as the framework names them."""
    stem = xml_path[:-len(".data.xml")] if xml_path.endswith(".data.xml") else xml_path[:-4]
    return stem + ".gold.key.txt"


def read_raganato(xml_path: str, key_path: Optional[str] = None) -> List[SenseExample]:
    """The examples of a unified-framework corpus (module docstring), in document order; each
    example's `line` is its instance's position (1-based) among the corpus's instances."""
    key_path = key_path or gold_key_path(xml_path)
    if not os.path.isfile(key_path):
        raise ValueError(f"{xml_path}: its gold key file {key_path} is not there")
    keys = {}
    with open(key_path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if fields and len(fields) < 2:
                raise ValueError(f"{key_path}:{number}: expected 'instance_id sense_key'")
            if fields:
                keys[fields[0]] = fields[1]
    try:
        root = ElementTree.parse(xml_path).getroot()
    except ElementTree.ParseError as e:
        raise ValueError(f"{xml_path}: not well-formed XML ({e})") from None
    examples, used = [], set()
    for sentence in root.iter("sentence"):
        tokens = [t for t in sentence if t.tag in ("wf", "instance")]
        words = tuple((t.text or "").strip() for t in tokens)
        for index, token in enumerate(tokens):
            if token.tag != "instance":
                continue
            ident = token.get("id")
            if ident not in keys:
                raise ValueError(f"{xml_path}: instance {ident} has no sense in {key_path}")
            used.add(ident)
            examples.append(SenseExample(words, index, token.get("lemma") or words[index],
                                         keys[ident], len(examples) + 1))
    extra = sorted(set(keys) - used)
    if extra:
        raise ValueError(f"{key_path}: {len(extra)} keys name no instance of {xml_path} "
                         f"(first: {extra[0]})")
    if not examples:
        raise ValueError(f"{xml_path} holds no <instance>")
    return examples


def read_senses(path: str) -> List[SenseExample]:
    """The examples of a sense-labelled JSON Lines file (module docstring), in file order; a
    .xml path is read as a unified-framework corpus with its gold key file (read_raganato)."""
    if not os.path.isfile(path):
        raise ValueError(f"sense file not found: {path}")
    if path.endswith(".xml"):
        return read_raganato(path)
    examples = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            where = f"{path}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{where}: not UTF-8 text; each line holds one JSON "
                                 f"object") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not JSON ({e.msg} at column {e.colno}); each line "
                                 f"holds one object") from None
            examples.append(dataclasses.replace(parse_row(row, where), line=number))
    if not examples:
        raise ValueError(f"{path} holds no example")
    return examples


def write_senses(examples: Sequence[SenseExample], path: str) -> str:
    """`examples` as JSON Lines (text = the words joined by spaces, word_index)."""
    with open(path, "w", encoding="utf-8") as f:
        for e in examples:
            f.write(json.dumps({"text": " ".join(e.words), "word_index": e.word_index,
                                "lemma": e.lemma, "sense": e.sense}) + "\n")
    return path


# -- a sample without downloads ----------------------------------------------------------------

# lemma -> sense -> context words (space-separated) that only that sense of the lemma goes with.
SAMPLE_SENSES = {
    "bank": {"money": "loan deposit cash account teller mortgage savings cheque",
             "river": "river water fishing shore mud reeds current boat"},
    "bat": {"animal": "cave wings night insects fur roost echoes vampire",
            "sports": "baseball swing ball pitcher player innings wooden team"},
    "spring": {"season": "april flowers bloom warmth winter garden rain blossom",
               "coil": "metal coil mattress steel compressed bounce tension screw"},
    "plant": {"factory": "workers factory production machines shift assembly manager output",
              "flora": "leaves soil pot green roots sunlight seeds watering"},
    "crane": {"bird": "feathers nest marsh flock migration pond beak wetland",
              "machine": "construction lift site operator tower beams cargo girders"},
}
SAMPLE_TEMPLATES = (
    "the {w} near the {a} was full of {b} .",
    "we talked about the {w} and the {a} after the {b} .",
    "there was {a} by the {w} , and some {b} too .",
    "she pointed at the {w} while the {a} and the {b} waited .",
    "after the {a} , the {w} seemed close to the {b} .",
    "nobody expected the {a} , the {b} or the {w} .",
)


def sample_senses(per_sense: int = 20, seed: int = 0,
                  lemmas: Optional[Sequence[str]] = None) -> List[SenseExample]:
    """`per_sense` sentences for each sense of SAMPLE_SENSES (of `lemmas`, default all): a
    template of SAMPLE_TEMPLATES with the lemma and two distinct context words of the sense,
    drawn from numpy's Generator keyed by (seed, lemma, sense, k), so that an example does not
    depend on how many others are made. Sense ids are "lemma%sense"."""
    names = list(SAMPLE_SENSES) if lemmas is None else list(lemmas)
    unknown = sorted(set(names) - set(SAMPLE_SENSES))
    if unknown:
        raise ValueError(f"no sample senses for {unknown}; choose from {sorted(SAMPLE_SENSES)}")
    examples = []
    for lemma in names:
        l_key = list(SAMPLE_SENSES).index(lemma)
        for s_key, (sense, context) in enumerate(SAMPLE_SENSES[lemma].items()):
            context = context.split()
            for k in range(per_sense):
                rng = np.random.default_rng([seed, l_key, s_key, k])
                template = SAMPLE_TEMPLATES[rng.integers(len(SAMPLE_TEMPLATES))]
                a, b = rng.choice(len(context), 2, replace=False)
                words = representations.words_of(template.format(w=lemma, a=context[a],
                                                                 b=context[b]))
                examples.append(SenseExample(tuple(words), words.index(lemma), lemma,
                                             f"{lemma}%{sense}"))
    return examples


def split_senses(examples: Sequence[SenseExample], test_fraction: float = 0.3,
                 seed: int = 0) -> Tuple[List[SenseExample], List[SenseExample]]:
    """(train, test), stratified by sense: of each sense's n examples, round(n *
    test_fraction) go to test, at least 1 when n >= 2 and always at least 1 to train (seeded)."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction={test_fraction} must lie in (0, 1)")
    rng = np.random.default_rng(seed)
    test_rows = set()
    for sense in sorted({e.sense for e in examples}):
        rows = [i for i, e in enumerate(examples) if e.sense == sense]
        n_test = min(max(int(round(len(rows) * test_fraction)), 1), len(rows) - 1)
        test_rows.update(rng.permutation(rows)[:n_test].tolist())
    return ([e for i, e in enumerate(examples) if i not in test_rows],
            [e for i, e in enumerate(examples) if i in test_rows])


# -- the measurement -----------------------------------------------------------------------------

TSNE_MAX = 2000  # occurrences of one lemma up to which plot_senses uses t-SNE, PCA above


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def nearest_sense(train_vectors: np.ndarray, train_lemmas: Sequence[str],
                  train_senses: Sequence[str], test_vectors: np.ndarray,
                  test_lemmas: Sequence[str], test_senses: Sequence[str]) -> Dict:
    """Nearest-centroid WSD of [L + 1, N, H] vectors (module docstring).

    Returns {"accuracy": [L + 1], "mfs_accuracy", "test", "train", "unseen_lemma",
    "lemmas": {lemma: {"senses", "train", "test", "accuracy": [L + 1], "mfs_accuracy"}}}.
    """
    train_lemmas, train_senses = np.asarray(train_lemmas), np.asarray(train_senses)
    test_lemmas, test_senses = np.asarray(test_lemmas), np.asarray(test_senses)
    layers = train_vectors.shape[0]
    correct = np.zeros((layers, len(test_senses)), bool)
    seen = np.isin(test_lemmas, train_lemmas)
    mfs_correct = np.zeros(len(test_senses), bool)
    lemmas = {}
    for lemma in sorted(set(test_lemmas[seen])):
        train_rows = np.flatnonzero(train_lemmas == lemma)
        test_rows = np.flatnonzero(test_lemmas == lemma)
        senses, counts = np.unique(train_senses[train_rows], return_counts=True)
        mfs_correct[test_rows] = test_senses[test_rows] == senses[np.argmax(counts)]
        for layer in range(layers):
            centroids = np.stack([train_vectors[layer, train_rows[train_senses[train_rows] == s]]
                                  .mean(0) for s in senses])
            cosine = _unit(test_vectors[layer, test_rows]) @ _unit(centroids).T
            correct[layer, test_rows] = senses[cosine.argmax(1)] == test_senses[test_rows]
        lemmas[str(lemma)] = {"senses": senses.tolist(), "train": len(train_rows),
                              "test": len(test_rows),
                              "accuracy": correct[:, test_rows].mean(1).tolist(),
                              "mfs_accuracy": float(mfs_correct[test_rows].mean())}
    if not seen.any():
        raise ValueError("no test lemma has training occurrences")
    return {"accuracy": correct[:, seen].mean(1).tolist(),
            "mfs_accuracy": float(mfs_correct[seen].mean()), "test": int(seen.sum()),
            "train": len(train_senses), "unseen_lemma": int((~seen).sum()), "lemmas": lemmas}


def _vectors(backbone, packer, examples: Sequence[SenseExample], tokenizer, pooling: str,
             name: str) -> np.ndarray:
    """[L + 1, len(examples), H]: each example's target word's vectors."""
    found = representations.collect(backbone, packer, [e.words for e in examples],
                                    tokenizer=tokenizer, keep=[{e.word_index} for e in examples],
                                    pooling=pooling, name=name)
    assert list(found.sentence_ids) == list(range(len(examples)))  # one target per sentence
    return found.vectors


def wsd(backbone, packer, train: Sequence[SenseExample],
        test: Optional[Sequence[SenseExample]] = None, *, tokenizer=None,
        pooling: str = "first", test_fraction: float = 0.3, seed: int = 0,
        plot_dir: Optional[str] = None) -> Dict:
    """Nearest-centroid WSD of `backbone`'s layers: train and test examples (read_senses,
    sample_senses), or `train` split by split_senses(test_fraction, seed) when test is None.
    Returns nearest_sense's dict plus the pooling and split; with `plot_dir`, also
    "sense_plot": {path, lemma, layer, method}, plot_senses of the lemma with the most
    occurrences at the layer of best accuracy (train and test occurrences together)."""
    split = ("given" if test is not None
             else f"{test_fraction:.0%} of each sense to test, seed {seed}")
    if test is None:
        train, test = split_senses(train, test_fraction, seed)
    train_vectors = _vectors(backbone, packer, train, tokenizer, pooling, "wsd train")
    test_vectors = _vectors(backbone, packer, test, tokenizer, pooling, "wsd test")
    result = nearest_sense(train_vectors, [e.lemma for e in train], [e.sense for e in train],
                           test_vectors, [e.lemma for e in test], [e.sense for e in test])
    result.update(pooling=pooling, split=split)
    if plot_dir:
        examples = list(train) + list(test)
        lemmas = [e.lemma for e in examples]
        lemma = max(sorted(set(lemmas)), key=lemmas.count)
        layer = int(np.argmax(result["accuracy"]))
        rows = [i for i, e in enumerate(examples) if e.lemma == lemma]
        vectors = np.concatenate([train_vectors[layer], test_vectors[layer]])[rows]
        path, method = plot_senses(vectors, [examples[i].sense for i in rows], lemma, layer,
                                   os.path.join(plot_dir, "wsd_senses.png"), seed)
        result["sense_plot"] = {"path": path, "lemma": lemma, "layer": layer, "method": method}
    return result


def plot_senses(vectors: np.ndarray, senses: Sequence[str], lemma: str, layer: int,
                path: str, seed: int = 0) -> Tuple[str, str]:
    """One lemma's occurrences in 2-D, coloured by sense: t-SNE (scikit-learn) for up to
    TSNE_MAX occurrences, PCA above (t-SNE's cost grows with the square of the points); a PNG
    at `path`. Returns (path, the method used). Occurrences whose vectors are all the same
    (a layer that reads the word alone, e.g. a word table's) have no layout: they are drawn at
    one point, and the method says why (t-SNE's PCA start divides by their zero spread, and
    scikit-learn's Barnes-Hut t-SNE crashed the process on the NaNs, 2026-12-08)."""
    from sklearn.decomposition import PCA
    from sklearn.manifold import TSNE

    vectors = np.asarray(vectors, np.float64)
    if len(vectors) and np.ptp(vectors, axis=0).max() == 0:
        method, points = "none: the occurrences' vectors are identical", np.zeros((len(vectors), 2))
    elif len(vectors) <= TSNE_MAX:
        method = "t-SNE"
        points = TSNE(2, perplexity=min(30.0, (len(vectors) - 1) / 3), random_state=seed,
                      init="pca").fit_transform(vectors)
    else:
        method, points = "PCA", PCA(2, random_state=seed).fit_transform(vectors)
    plt = plots.pyplot()
    figure, axis = plt.subplots(figsize=(5, 4))
    senses = np.asarray(senses)
    for sense in sorted(set(senses)):
        axis.scatter(*points[senses == sense].T, s=14, label=sense)
    axis.set(title=f"{lemma}: its occurrences at layer {layer} ({method})")
    axis.legend(fontsize=7)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return plots.save(figure, path), method


def plot_wsd(results: Mapping[str, Mapping], path: str) -> str:
    """Accuracy across layers, a line per model (a dict name -> wsd result) with its
    most-frequent-sense baseline dotted, as one PNG at `path`."""
    plt = plots.pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    for name, result in results.items():
        line, = axis.plot(range(len(result["accuracy"])), result["accuracy"], marker="o",
                          label=name)
        axis.axhline(result["mfs_accuracy"], ls=":", color=line.get_color(),
                     label=f"{name}: most frequent sense")
    axis.set(title="word sense by nearest centroid", xlabel="layer (0: embeddings)",
             ylabel="accuracy", ylim=(0, 1.02))
    axis.legend(fontsize=7)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return plots.save(figure, path)
