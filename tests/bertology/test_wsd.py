"""garden.bertology.wsd: accuracy 1 when senses are separated, the most-frequent-sense
baseline, the file format's errors naming file and line, the seeded sample, and the whole path
through a tiny BERT."""

from __future__ import annotations

import json

import numpy as np
import pytest

from garden.bertology import wsd
from representation_testing import tiny_bert


def test_separated_senses_are_found_and_the_baseline_is_the_most_frequent_sense():
    rng = np.random.default_rng(0)
    senses = np.array(["bank%money"] * 30 + ["bank%river"] * 10 + ["bat%a"] * 8 + ["bat%b"] * 8)
    lemmas = np.array([s.split("%")[0] for s in senses])
    centre = {s: rng.normal(size=16) for s in set(senses)}
    # layer 0 separates the senses (their centres plus small noise); layer 1 is noise
    separated = np.stack([centre[s] for s in senses]) + rng.normal(0, 0.05, (len(senses), 16))
    layers = np.stack([separated, rng.normal(size=separated.shape)])
    train = np.arange(len(senses)) % 2 == 0
    test = ~train
    result = wsd.nearest_sense(layers[:, train], lemmas[train], senses[train],
                               layers[:, test], lemmas[test], senses[test])
    assert result["accuracy"][0] == 1.0
    # MFS: money for every bank (15 of 20 right), a tie for bat -> "bat%a" (4 of 8)
    assert result["mfs_accuracy"] == pytest.approx((15 + 4) / 28)
    assert result["lemmas"]["bank"]["mfs_accuracy"] == 0.75
    assert result["test"] == 28 and result["unseen_lemma"] == 0


def test_unseen_test_lemmas_are_counted_not_scored():
    v = np.eye(3)[None]
    result = wsd.nearest_sense(v[:, :2], ["a", "a"], ["a%1", "a%2"], v, ["a", "a", "b"],
                               ["a%1", "a%2", "b%1"])
    assert result["accuracy"] == [1.0] and result["unseen_lemma"] == 1 and result["test"] == 2


@pytest.mark.parametrize("line, message", [
    ('{"text": "a bank", "word_index": 1, "lemma": "bank"', "not JSON"),
    ('["a", "bank"]', "expected a JSON object"),
    ('{"text": "a bank", "word_index": 2, "lemma": "bank", "sense": "s"}', "word_index 2"),
    ('{"text": "a bank", "lemma": "bank", "sense": "s"}', 'give "word_index"'),
    ('{"text": "the banks", "start": 4, "end": 8, "lemma": "bank", "sense": "s"}',
     "is not one word"),
    ('{"text": "a bank", "word_index": 1, "lemma": "", "sense": "s"}', '"lemma" must be'),
    ('{"words": [], "word_index": 0, "lemma": "bank", "sense": "s"}', 'as "text"'),
])
def test_a_bad_row_names_the_file_and_line(tmp_path, line, message):
    path = tmp_path / "senses.jsonl"
    good = '{"text": "We sat on the bank .", "word_index": 4, "lemma": "bank", "sense": "r"}'
    path.write_text(good + "\n\n" + line + "\n")
    with pytest.raises(ValueError, match=f"{path}:3: .*{message}"):
        wsd.read_senses(str(path))


def test_rows_by_index_span_and_words(tmp_path):
    rows = [{"text": "The bank, approved.", "start": 4, "end": 8, "lemma": "bank", "sense": "m"},
            {"text": "The bank, approved.", "word_index": 1, "lemma": "bank", "sense": "m"},
            {"words": ["by", "the", "bank"], "word_index": 2, "lemma": "bank", "sense": "r"}]
    path = tmp_path / "senses.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a, b, c = wsd.read_senses(str(path))
    assert a.words == ("The", "bank", ",", "approved", ".") and a.word_index == 1
    assert (a.words, a.word_index, a.line) == (b.words, b.word_index, 1) and b.line == 2
    assert c.words[c.word_index] == "bank" and c.sense == "r"


def test_sample_is_seeded_and_round_trips(tmp_path):
    sample = wsd.sample_senses(per_sense=5, seed=1)
    assert sample == wsd.sample_senses(per_sense=5, seed=1)
    assert sample != wsd.sample_senses(per_sense=5, seed=2)
    # an example does not depend on how many others are made
    bats = [e for e in sample if e.lemma == "bat"]  # 5 of each sense, in order
    assert wsd.sample_senses(per_sense=2, seed=1, lemmas=["bat"]) == bats[:2] + bats[5:7]
    assert len(sample) == 5 * 2 * len(wsd.SAMPLE_SENSES)
    assert all(e.words[e.word_index] == e.lemma for e in sample)
    read = wsd.read_senses(wsd.write_senses(sample, str(tmp_path / "s.jsonl")))
    assert [(e.words, e.word_index, e.lemma, e.sense) for e in read] == \
        [(e.words, e.word_index, e.lemma, e.sense) for e in sample]
    train, test = wsd.split_senses(sample, 0.4, seed=0)
    assert len(test) == 2 * 2 * len(wsd.SAMPLE_SENSES) and not set(train) & set(test)


def test_sample_senses_through_a_tiny_bert(tmp_path):
    sample = wsd.sample_senses(per_sense=8, seed=0, lemmas=["bank", "bat"])
    words = sorted({w for e in sample for w in e.words})
    backbone, packer, tokenizer = tiny_bert(tmp_path, words, context_free_embeddings=True)
    result = wsd.wsd(backbone, packer, sample, tokenizer=tokenizer, test_fraction=0.25)
    assert result["test"] == 8 and result["train"] == 24
    assert len(result["accuracy"]) == 3
    # layer 0 is the word alone: every bank is the same vector, so the nearest centroid is a
    # tie that the first sense wins (balanced senses: half right)
    assert result["accuracy"][0] == 0.5
    json.dumps(result)
    assert wsd.plot_wsd({"tiny": result}, str(tmp_path / "wsd.png")).endswith("wsd.png")


RAGANATO_XML = """<?xml version="1.0" encoding="UTF-8"?>
<corpus lang="en" source="test">
<text id="d000">
<sentence id="d000.s000">
<wf lemma="we" pos="PRON">We</wf>
<wf lemma="sit" pos="VERB">sat</wf>
<wf lemma="by" pos="ADP">by</wf>
<wf lemma="the" pos="DET">the</wf>
<instance id="d000.s000.t000" lemma="bank" pos="NOUN">bank</instance>
<wf lemma="." pos=".">.</wf>
</sentence>
<sentence id="d000.s001">
<instance id="d000.s001.t000" lemma="bank" pos="NOUN">Banks</instance>
<instance id="d000.s001.t001" lemma="lend" pos="VERB">lend</instance>
<wf lemma="money" pos="NOUN">money</wf>
</sentence>
</text>
</corpus>
"""
RAGANATO_KEYS = ("d000.s000.t000 bank%1:17:01::\n"
                 "d000.s001.t000 bank%1:14:00:: bank%1:06:00::\n"
                 "d000.s001.t001 lend%2:40:00::\n")


def test_the_unified_framework_xml_and_its_gold_keys(tmp_path):
    """Raganato et al. (2017)'s NAME.data.xml + NAME.gold.key.txt: one example per instance
    over its sentence's words (wf and instance alike), its first key; read_senses takes it."""
    (tmp_path / "test.data.xml").write_text(RAGANATO_XML)
    (tmp_path / "test.gold.key.txt").write_text(RAGANATO_KEYS)
    examples = wsd.read_senses(str(tmp_path / "test.data.xml"))
    assert [(e.words, e.word_index, e.lemma, e.sense, e.line) for e in examples] == [
        (("We", "sat", "by", "the", "bank", "."), 4, "bank", "bank%1:17:01::", 1),
        (("Banks", "lend", "money"), 0, "bank", "bank%1:14:00::", 2),
        (("Banks", "lend", "money"), 1, "lend", "lend%2:40:00::", 3)]


@pytest.mark.parametrize("keys, xml, message", [
    (None, RAGANATO_XML, r"gold key file \S+test\.gold\.key\.txt is not there"),
    (RAGANATO_KEYS.splitlines()[0] + "\n", RAGANATO_XML,
     r"instance d000\.s001\.t000 has no sense in"),
    (RAGANATO_KEYS + "d000.s009.t000 x%1\n", RAGANATO_XML,
     r"1 keys name no instance of \S+ \(first: d000\.s009\.t000\)"),
    (RAGANATO_KEYS, RAGANATO_XML.replace("</corpus>", ""), r"not well-formed XML"),
    ("d000.s000.t000\n", RAGANATO_XML, r"test\.gold\.key\.txt:1: expected 'instance_id"),
])
def test_a_bad_framework_file_names_the_file_and_record(tmp_path, keys, xml, message):
    (tmp_path / "test.data.xml").write_text(xml)
    if keys is not None:
        (tmp_path / "test.gold.key.txt").write_text(keys)
    with pytest.raises(ValueError, match=message):
        wsd.read_raganato(str(tmp_path / "test.data.xml"))


def test_the_senses_of_one_lemma_are_drawn(tmp_path):
    sample = wsd.sample_senses(per_sense=8, seed=0, lemmas=["bank", "bat"])
    words = sorted({w for e in sample for w in e.words})
    backbone, packer, tokenizer = tiny_bert(tmp_path, words, context_free_embeddings=True)
    result = wsd.wsd(backbone, packer, sample, tokenizer=tokenizer, test_fraction=0.25,
                     plot_dir=str(tmp_path / "plots"))
    plot = result["sense_plot"]
    assert plot["method"] == "t-SNE" and plot["lemma"] in ("bank", "bat")
    assert plot["layer"] == int(np.argmax(result["accuracy"]))
    with open(plot["path"], "rb") as f:
        assert f.read(4) == b"\x89PNG"
    path, method = wsd.plot_senses(np.random.default_rng(0).normal(size=(wsd.TSNE_MAX + 1, 4)),
                                   ["a", "b"] * ((wsd.TSNE_MAX + 1) // 2) + ["a"], "x", 0,
                                   str(tmp_path / "pca.png"))
    assert method == "PCA"
    # Identical vectors (a word table's layer): one point, said so, and no crash (t-SNE on
    # them killed the process with a segmentation fault).
    path, method = wsd.plot_senses(np.ones((12, 4)), ["a", "b"] * 6, "x", 0,
                                   str(tmp_path / "same.png"))
    assert method == "none: the occurrences' vectors are identical"
    with open(path, "rb") as f:
        assert f.read(4) == b"\x89PNG"
