"""garden.bertology.contextuality: Ethayarajh's metrics on vectors with known answers, and the
whole path on a tiny BERT whose embedding layer is context-free."""

from __future__ import annotations

import numpy as np
import pytest

from garden.bertology import contextuality as ctx
from representation_testing import tiny_bert


def test_self_similarity_is_one_when_vectors_depend_only_on_the_word():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(4, 16))
    words = np.repeat(np.arange(4), 6)
    vectors = table[words] * rng.uniform(0.5, 2.0, (len(words), 1))  # scale: cosine unchanged
    result = ctx.layer_metrics(vectors, words, np.arange(len(words)) // 3)
    assert result["self_similarity"] == pytest.approx(1.0, abs=1e-9)
    assert result["max_explainable_variance"] == pytest.approx(1.0, abs=1e-9)  # multiples
    assert result["words"] == 4 and result["occurrences"] == 24


def test_anisotropy_of_isotropic_vectors_is_near_zero():
    d, n = 64, 4000
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(n, d))
    words = np.arange(n) % 200
    result = ctx.layer_metrics(vectors, words, np.arange(n) // 10, baseline_pairs=n)
    # The cosine of two random directions in d dims has sd 1/sqrt(d); the mean of ~n pairs
    # 1/sqrt(d n). Five of those.
    assert abs(result["anisotropy"]) < 5 / np.sqrt(d * n * 0.99)
    assert abs(result["self_similarity"]) < 5 / np.sqrt(d * 200 * 190)


def test_intra_sentence_similarity_is_one_when_a_sentence_shares_one_vector():
    rng = np.random.default_rng(2)
    sentence_ids = np.repeat(np.arange(5), 4)
    vectors = rng.normal(size=(5, 8))[sentence_ids]
    assert ctx.intra_sentence_similarity(vectors, sentence_ids) == pytest.approx(1.0)
    # and a layer where words differ inside sentences is below 1
    assert ctx.intra_sentence_similarity(rng.normal(size=(20, 8)), sentence_ids) < 0.9


def test_self_similarity_of_two_known_vectors():
    assert ctx.self_similarity(np.array([[1.0, 0.0], [0.0, 1.0]])) == pytest.approx(0.0)
    assert ctx.self_similarity(np.array([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]])) == \
        pytest.approx(-1 / 3)


def test_too_little_text_is_a_clear_error():
    with pytest.raises(ValueError, match="5 or more occurrences"):
        ctx.layer_metrics(np.ones((3, 4)), np.array(["a", "b", "a"]), np.zeros(3))


def test_tiny_bert_embedding_layer_is_context_free_and_plots(tmp_path):
    words = ["the", "movie", "was", "good", "bad", "plot", "it", "."]
    backbone, packer, tokenizer = tiny_bert(tmp_path, words, context_free_embeddings=True)
    rng = np.random.default_rng(3)
    sentences = [" ".join(rng.choice(words[:-1], 5)) + " ." for _ in range(40)]
    result = ctx.contextuality(backbone, packer, sentences, tokenizer=tokenizer,
                               max_sentences=30)
    assert len(result["self_similarity"]) == 3  # embeddings + 2 layers
    assert result["self_similarity"][0] == pytest.approx(1.0, abs=1e-5)
    assert result["self_similarity"][2] < 0.999  # the encoder mixes in the context
    assert result["occurrences"][0] == 30 * 6  # 30 of the 40 sentences, 6 words each
    paths = ctx.plot_contextuality({"tiny": result, "tiny again": result}, str(tmp_path))
    assert len(paths) == 3 and all((tmp_path / p.split("/")[-1]).exists() for p in paths)
