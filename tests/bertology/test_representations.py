"""garden.bertology.representations: each word's first-piece (or mean) vector is the hidden
state the packed row gives it; long sentences keep every word; seeded sampling."""

from __future__ import annotations

import numpy as np
import pytest

from garden.bertology import representations as reps
from garden.models import instrument
from representation_testing import tiny_bert

WORDS = ["the", "movie", "##s", "was", "good", "plot", "it", "."]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_bert(tmp_path_factory.mktemp("vocab"), WORDS, max_seq_length=6)


def _states(backbone, packer, text):
    model = instrument.instrumented(backbone, output_hidden_states=True)
    return instrument.run(model, packer.encode_numpy([text]))["hidden_states"][:, 0]


def test_first_piece_and_mean_of_pieces(model):
    backbone, packer, tokenizer = model
    words = ["the", "movies", "."]  # pieces: [CLS] the movie ##s . [SEP]
    states = _states(backbone, packer, "the movies .")
    first = reps.collect(backbone, packer, [words], tokenizer=tokenizer)
    assert list(first.words) == words and list(first.word_index) == [0, 1, 2]
    np.testing.assert_allclose(first.vectors, states[:, [1, 2, 4]], atol=1e-6)
    mean = reps.collect(backbone, packer, [words], tokenizer=tokenizer, pooling="mean")
    np.testing.assert_allclose(mean.vectors[:, 1], states[:, 2:4].mean(1), atol=1e-6)
    np.testing.assert_allclose(mean.vectors[:, [0, 2]], states[:, [1, 4]], atol=1e-6)


def test_a_long_sentence_is_cut_at_words_and_keeps_every_word(model):
    backbone, packer, tokenizer = model
    long = "the movie was good it was good".split()  # 7 pieces, 4 per row: rows of 4 + 3
    out = reps.collect(backbone, packer, [long, ["it"]], tokenizer=tokenizer)
    assert list(out.words) == long + ["it"]
    assert list(out.sentence_ids) == [0] * 7 + [1]
    # the second row is [CLS] it was good [SEP]: the same vectors as that sentence alone
    tail = reps.collect(backbone, packer, [long[4:]], tokenizer=tokenizer)
    np.testing.assert_allclose(out.vectors[:, 4:7], tail.vectors, atol=1e-5)


def test_keep_selects_words_and_subset_rows(model):
    backbone, packer, tokenizer = model
    sentences = [["the", "plot", "."], ["it", "was", "good"]]
    out = reps.collect(backbone, packer, sentences, tokenizer=tokenizer, keep=[{1}, None],
                       batch_size=1)
    assert list(out.words) == ["plot", "it", "was", "good"]
    assert list(out.word_index) == [1, 0, 1, 2]
    part = out.subset(out.sentence_ids == 1)
    assert list(part.words) == ["it", "was", "good"] and part.vectors.shape[1] == 3


def test_sample_is_seeded_sorted_and_all_when_enough():
    a, b = reps.sample(100, 10, seed=3), reps.sample(100, 10, seed=3)
    assert list(a) == list(b) and list(a) == sorted(set(a)) and len(a) == 10
    assert list(reps.sample(5, 10, seed=3)) == [0, 1, 2, 3, 4]
    assert list(reps.sample(5, None, seed=3)) == [0, 1, 2, 3, 4]


def test_words_of_splits_punctuation():
    assert reps.words_of("The bank's loan, approved.", lower_case=True) == \
        ["the", "bank", "'", "s", "loan", ",", "approved", "."]


def test_bad_arguments_are_clear(model, monkeypatch):
    backbone, packer, tokenizer = model
    with pytest.raises(ValueError, match="pooling"):
        reps.collect(backbone, packer, [["it"]], tokenizer=tokenizer, pooling="max")
    # A TextPacker records its vocabulary file; a packer-like object without one is refused.
    monkeypatch.setattr(packer, "vocab_path", None)
    with pytest.raises(ValueError, match="vocab_path"):
        reps.collect(backbone, packer, [["it"]])
