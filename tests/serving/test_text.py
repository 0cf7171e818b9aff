"""TextPacker, WordPiece in BERT's layout: exact ids of [CLS] A [SEP] (B [SEP]) on a
hand-written vocabulary. (tests/serving/test_packing.py compares all three tokenizer kinds
with the Beam job's tokenizer on the sample corpus.)"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from text import tokenizers, vocab_files
from garden.serving.text import TextPacker

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
         "the", "quick", "brown", "fox", "jump", "##s", "over", "lazy", "dog", ".",
         "cafe", "naive"]
ID = {t: i for i, t in enumerate(VOCAB)}


@pytest.fixture
def make_packer(tmp_path):
    """TextPacker of a vocabulary given as tokens (written to a file) or a path."""
    def make(vocab, lower_case, max_seq_length):
        if not isinstance(vocab, str):
            path = tmp_path / f"vocab-{len(list(tmp_path.iterdir()))}.txt"
            path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
            vocab = str(path)
        tokenizer = tokenizers.load_tokenizer("wordpiece", vocab, lower_case=lower_case)
        return TextPacker(tokenizer, max_seq_length)
    return make


def bert_truncate_seq_pair(len_a, len_b, budget):
    """BERT run_classifier.py `_truncate_seq_pair`: pop from the longer, from B on a tie."""
    while len_a + len_b > budget:
        len_a, len_b = (len_a - 1, len_b) if len_a > len_b else (len_a, len_b - 1)
    return len_a, len_b


def test_single_sentence_exact_ids_and_padding(make_packer):
    enc = make_packer(VOCAB, lower_case=True, max_seq_length=12)
    out = enc.encode_numpy(["The quick brown fox jumps."])
    # [CLS] the quick brown fox jump ##s . [SEP] -> 9 tokens, then 3 [PAD]
    expected = [2, 5, 6, 7, 8, 9, 10, 14, 3, 0, 0, 0]
    np.testing.assert_array_equal(out["token_ids"], [expected])
    np.testing.assert_array_equal(out["segment_ids"], [[0] * 12])
    np.testing.assert_array_equal(out["padding_mask"], [[1] * 9 + [0] * 3])
    for v in out.values():
        assert v.dtype == np.int32 and v.shape == (1, 12)


def test_pair_exact_ids_and_segments(make_packer):
    enc = make_packer(VOCAB, lower_case=True, max_seq_length=10)
    out = enc.encode_numpy(["the fox", "dog"], ["lazy dog", "the quick fox"])
    np.testing.assert_array_equal(out["token_ids"], [
        [2, 5, 8, 3, 12, 13, 3, 0, 0, 0],  # [CLS] the fox [SEP] lazy dog [SEP]
        [2, 13, 3, 5, 6, 8, 3, 0, 0, 0],   # [CLS] dog [SEP] the quick fox [SEP]
    ])
    np.testing.assert_array_equal(out["segment_ids"], [
        [0, 0, 0, 0, 1, 1, 1, 0, 0, 0],
        [0, 0, 0, 1, 1, 1, 1, 0, 0, 0],
    ])
    np.testing.assert_array_equal(out["padding_mask"], [[1] * 7 + [0] * 3] * 2)


def test_pair_truncation_matches_bert_truncate_seq_pair(make_packer):
    max_len = 9  # budget 6 tokens for A + B
    enc = make_packer(VOCAB, lower_case=True, max_seq_length=max_len)
    words_a = ["the", "quick", "brown", "fox", "over", "the", "lazy", "dog"]
    words_b = ["lazy", "dog", "over", "the", "quick", "brown", "fox", "dog"]
    cases = list(itertools.product(range(0, 9), range(0, 9)))
    out = enc.encode_numpy([" ".join(words_a[:la]) for la, _ in cases],
                           [" ".join(words_b[:lb]) for _, lb in cases])
    for row, (la, lb) in enumerate(cases):
        ka, kb = bert_truncate_seq_pair(la, lb, max_len - 3)
        expected = ([ID["[CLS]"]] + [ID[w] for w in words_a[:ka]] + [ID["[SEP]"]]
                    + [ID[w] for w in words_b[:kb]] + [ID["[SEP]"]])
        expected += [ID["[PAD]"]] * (max_len - len(expected))
        np.testing.assert_array_equal(out["token_ids"][row], expected, err_msg=f"{la}, {lb}")
        segments = [0] * (ka + 2) + [1] * (kb + 1) + [0] * (max_len - ka - kb - 3)
        np.testing.assert_array_equal(out["segment_ids"][row], segments)
        if la and lb:  # a long pair keeps both sides
            assert ka >= 1 and kb >= 1
    # One case spelled out: 8 + 8 tokens into 6 -> 3 + 3 (ties trim B, so A never loses more).
    assert bert_truncate_seq_pair(8, 8, 6) == (3, 3)
    assert bert_truncate_seq_pair(3, 4, 5) == (3, 2)
    assert bert_truncate_seq_pair(4, 3, 6) == (3, 3)


def test_single_sentence_truncation_keeps_final_sep(make_packer):
    enc = make_packer(VOCAB, lower_case=True, max_seq_length=5)
    out = enc.encode_numpy(["the quick brown fox jumps over"])
    np.testing.assert_array_equal(out["token_ids"], [[2, 5, 6, 7, 3]])
    np.testing.assert_array_equal(out["padding_mask"], [[1] * 5])


def test_lower_casing_and_accents(make_packer):
    uncased = make_packer(VOCAB, lower_case=True, max_seq_length=6)
    cased = make_packer(VOCAB, lower_case=False, max_seq_length=6)
    text = ["Café NAÏVE The"]
    np.testing.assert_array_equal(uncased.encode_numpy(text)["token_ids"],
                                  [[2, ID["cafe"], ID["naive"], ID["the"], 3, 0]])
    # Cased: no lower-casing, no accent stripping -> three unknown words.
    np.testing.assert_array_equal(cased.encode_numpy(text)["token_ids"], [[2, 1, 1, 1, 3, 0]])


def test_special_ids_come_from_the_vocabulary(make_packer, tmp_path):
    permuted = ["the", "dog", "[UNK]", "[SEP]", "[MASK]", "[CLS]", "[PAD]"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(permuted) + "\n", encoding="utf-8")
    enc = make_packer(str(path), lower_case=True, max_seq_length=7)
    out = enc.encode_numpy(["the cat"], ["dog"])
    # [CLS]=5 the=0 cat->[UNK]=2 [SEP]=3 dog=1 [SEP]=3 [PAD]=6
    np.testing.assert_array_equal(out["token_ids"], [[5, 0, 2, 3, 1, 3, 6]])
    np.testing.assert_array_equal(out["padding_mask"], [[1, 1, 1, 1, 1, 1, 0]])


def test_missing_vocab_file_names_the_path(make_packer, tmp_path):
    with pytest.raises(vocab_files.VocabularyError, match="nope.txt"):
        make_packer(str(tmp_path / "nope.txt"), lower_case=True, max_seq_length=8)


def test_same_ids_in_tf_data_map(make_packer):
    enc = make_packer(VOCAB, lower_case=True, max_seq_length=10)
    texts_a, texts_b = ["the fox", "Quick dog.", ""], ["lazy dog", "", "fox"]
    ds = tf.data.Dataset.from_tensor_slices({"a": texts_a, "b": texts_b}).batch(2)
    ds = ds.map(lambda x: enc(x["a"], x["b"]))
    got = {k: np.concatenate([batch[k].numpy() for batch in ds]) for k in ("token_ids",
                                                                            "segment_ids",
                                                                            "padding_mask")}
    eager = enc.encode_numpy(texts_a, texts_b)
    for k in got:
        np.testing.assert_array_equal(got[k], eager[k])
