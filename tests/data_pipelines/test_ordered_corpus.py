"""data_pipelines.ordered_corpus: documents whose sentence order the text gives away."""

from __future__ import annotations

import glob
import os
import re

import pytest

from data_pipelines import ordered_corpus as oc


def test_every_document_reads_in_order():
    docs = oc.documents(300, seed=7)
    lengths = set()
    for name, sentences in docs:
        n = len(sentences)
        lengths.add(n)
        assert oc.MIN_STEPS <= n <= oc.MAX_STEPS, name
        markers = [s.split(" , ", 1)[0] for s in sentences]
        assert markers[0] == "first" and markers[-1] == "finally", (name, markers)
        for k, marker in enumerate(markers[1:-1], start=1):
            # The ordinal of this very step, or a connective that never opens a procedure.
            assert marker in (oc.ORDINALS[k - 1], *oc.CONNECTIVES), (name, k, marker)
        # Each step after the first refers back to the previous step's object.
        for k in range(1, n):
            first_object = re.search(r"(?:a|the) \w+ (\w+)", sentences[k - 1].split(" , ", 1)[1])
            assert sentences[k].rstrip(" .").split(" so that ")[0].endswith(
                f"the {first_object.group(1)}"), (name, k, sentences[k - 1], sentences[k])
    assert lengths == set(range(oc.MIN_STEPS, oc.MAX_STEPS + 1))  # 300 draws cover all 6 lengths


def test_documents_depend_only_on_seed_and_index():
    assert oc.documents(5, seed=3) == oc.documents(8, seed=3)[:5]
    assert oc.documents(5, seed=3) != oc.documents(5, seed=4)
    plain = oc.documents(5, seed=3, markers=False)
    assert all(" , " not in s for _, sentences in plain for s in sentences)
    with pytest.raises(ValueError, match="min_steps"):
        oc.documents(1, min_steps=3, max_steps=oc.MAX_STEPS + 1)


def test_main_writes_the_sample_corpus_format(tmp_path, capsys):
    oc.main([f"--output={tmp_path}", "--num_files=2", "--documents_per_file=10", "--seed=1"])
    paths = sorted(glob.glob(os.path.join(tmp_path, "*.txt")))
    assert [os.path.basename(p) for p in paths] == ["corpus-00000-of-00002.txt",
                                                    "corpus-00001-of-00002.txt"]
    expected = oc.documents(20, seed=1)
    for index, path in enumerate(paths):
        with open(path) as f:
            blocks = [b.split("\n") for b in f.read().strip("\n").split("\n\n")]
        assert blocks == [s for _, s in expected[index::2]]  # dealt round-robin
    assert "20 documents" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="^2$"):
        oc.main([f"--output={tmp_path}", "--min_steps=5", "--max_steps=4"])
    assert "need 2 <= min_steps <= max_steps" in capsys.readouterr().err
