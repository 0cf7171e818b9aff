"""The CoNLL-2003 reader (IOB1 / IOB2, malformed lines named by file:line, tfds:conll2003 from
mock data), first-sub-token features with non-overlapping pieces, and the CoNLL sample task."""

from __future__ import annotations

import pytest

from text import tokenizers
from text.finetune import FinetuneDataError, tagging
from data_pipelines.sample_tasks import conll as sample_conll

from conll_testing import ENG_TRAIN_HEAD, VOCAB

# The shared task's first lines, then the start of its next document.
ENG_TRAIN = ENG_TRAIN_HEAD + """
-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP I-LOC
1996-08-22 CD I-NP O
"""


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return str(path)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("conll_vocab") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return tokenizers.load_tokenizer("wordpiece", str(path))


def test_reads_sentences_documents_and_lines(tmp_path):
    s = tagging.read_examples(_write(tmp_path, "eng.train", ENG_TRAIN))
    assert [x.words for x in s] == [
        ("EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."),
        ("Peter", "Blackburn"), ("BRUSSELS", "1996-08-22")]
    assert s[0].tags[:3] == ("I-ORG", "O", "I-MISC") and s[0].pos[0] == "NNP"
    assert s[0].chunks[1] == "B-VP"
    assert [x.document_index for x in s] == [0, 0, 1]
    assert [x.line for x in s] == [3, 13, 18]
    # Written back, the text reads the same sentences.
    again = tagging.parse(tagging.format_sentences(s))
    assert [(x.words, x.tags, x.pos, x.document_index) for x in again] == \
        [(x.words, x.tags, x.pos, x.document_index) for x in s]


@pytest.mark.parametrize("bad_line, message", [
    ("call NN O", r"eng\.train:6: expected 4 columns \(word POS chunk NER\), got 3"),
    ("call NN I-NP O extra", r"eng\.train:6: expected 4 columns .* got 5"),
    ("call NN I-NP X-PER", r"eng\.train:6: tag 'X-PER' is not O, B-TYPE or I-TYPE"),
    ("call NN I-NP B-", r"eng\.train:6: tag 'B-' is not"),
])
def test_malformed_lines_name_file_and_line(tmp_path, bad_line, message):
    text = ENG_TRAIN.replace("call NN I-NP O", bad_line)
    with pytest.raises(FinetuneDataError, match=message):
        tagging.read_examples(_write(tmp_path, "eng.train", text))


def test_unknown_label_and_invalid_utf8_name_the_line(tmp_path):
    path = _write(tmp_path, "eng.train", ENG_TRAIN)
    with pytest.raises(FinetuneDataError, match=r"eng\.train:13: tag 'I-PER' is not among"):
        tagging.read_examples(path, label_names=["O", "I-ORG", "I-MISC"])
    raw = tmp_path / "bad.txt"
    raw.write_bytes(b"a B C O\n\nb\xff B C O\n")
    with pytest.raises(FinetuneDataError, match=r"bad\.txt:3: invalid UTF-8"):
        tagging.read_examples(str(raw))


def test_iob1_is_refused_as_iob2_and_converted_for_scoring(tmp_path):
    path = _write(tmp_path, "eng.train", ENG_TRAIN)
    with pytest.raises(FinetuneDataError, match=r"eng\.train:3: I-ORG after the sentence start "
                                                 r"is not IOB2"):
        tagging.read_examples(path, scheme="iob2")
    iob2 = ENG_TRAIN.replace("I-ORG", "B-ORG").replace("German JJ B-NP I-MISC",
                                                       "German JJ B-NP B-MISC")
    iob2 = iob2.replace("British JJ B-NP I-MISC", "British JJ B-NP B-MISC")
    iob2 = iob2.replace("Peter NNP B-NP I-PER", "Peter NNP B-NP B-PER")
    iob2 = iob2.replace("BRUSSELS NNP B-NP I-LOC", "BRUSSELS NNP B-NP B-LOC")
    s2 = tagging.read_examples(_write(tmp_path, "iob2.txt", iob2), scheme="iob2")
    s1 = tagging.read_examples(path)
    assert [tagging.iob1_to_iob2(x.tags) for x in s1] == [list(x.tags) for x in s2]
    # IOB1's B- separates two adjacent entities of one type; I- after another type starts one.
    assert tagging.iob1_to_iob2(["I-PER", "I-PER", "B-PER", "I-LOC", "O", "I-LOC"]) == \
        ["B-PER", "I-PER", "B-PER", "B-LOC", "O", "B-LOC"]
    # make_finetune reads with the default scheme; the iob2 option checks each sentence.
    with pytest.raises(FinetuneDataError, match=r"line:3: I-ORG after the sentence start"):
        tagging.example_features(s1[0], None, tagging.ConllOptions(scheme="iob2"))
    bad = iob2.replace("Blackburn NNP I-NP I-PER", "Blackburn NNP I-NP I-LOC")
    with pytest.raises(FinetuneDataError, match=r"iob2\.txt:14: I-LOC after B-PER"):
        tagging.read_examples(_write(tmp_path, "iob2.txt", bad), scheme="iob2")


def test_first_sub_token_carries_the_label(tokenizer):
    s = tagging.parse(ENG_TRAIN)[0]
    (record,) = tagging.example_features(s, tokenizer, tagging.ConllOptions(max_seq_length=16), 7)
    pieces = [VOCAB[i] for i in record["token_ids"]]
    assert pieces[:13] == ["[CLS]", "eu", "rejects", "german", "call", "to", "boy", "##cot",
                           "##t", "british", "lamb", ".", "[SEP]"]
    L = tagging.CONLL2003_LABELS.index
    assert record["label_ids"][:13] == [-1, L("I-ORG"), 0, L("I-MISC"), 0, 0, 0, -1, -1,
                                        L("I-MISC"), 0, 0, -1]
    assert record["label_ids"][13:] == [-1] * 3 and record["padding_mask"] == [1] * 13 + [0] * 3
    assert record["example_index"] == 7 and record["piece_index"] == 0
    assert set(record["segment_ids"]) == {0}


def test_long_sentences_become_non_overlapping_pieces_with_every_word(tokenizer):
    s = tagging.parse(ENG_TRAIN)[0]
    # budget 4 pieces: [eu rejects german call] [to boy ##cot ##t] [british lamb .]
    records = tagging.example_features(s, tokenizer, tagging.ConllOptions(max_seq_length=6), 3)
    assert [r["piece_index"] for r in records] == [0, 1, 2]
    assert [[VOCAB[i] for i in r["token_ids"] if i > 0] for r in records] == [
        ["[CLS]", "eu", "rejects", "german", "call", "[SEP]"],
        ["[CLS]", "to", "boy", "##cot", "##t", "[SEP]"],
        ["[CLS]", "british", "lamb", ".", "[SEP]"]]
    labels = [x for r in records for x in r["label_ids"] if x >= 0]
    assert [tagging.CONLL2003_LABELS[i] for i in labels] == list(s.tags)  # every word, in order
    # A word longer than a whole piece keeps its first pieces; its neighbours are not lost.
    records = tagging.example_features(s, tokenizer, tagging.ConllOptions(max_seq_length=4))
    assert [VOCAB[i] for i in records[2]["token_ids"]] == ["[CLS]", "to", "[SEP]", "[PAD]"]
    assert [VOCAB[i] for i in records[3]["token_ids"]] == ["[CLS]", "boy", "##cot", "[SEP]"]
    assert sum(x >= 0 for r in records for x in r["label_ids"]) == len(s.words)


def test_a_word_without_pieces_gets_unk_and_bpe_words_carry_their_space(tokenizer):
    s = tagging.ConllSentence(("eu", "\u200b", "lamb"), ("I-ORG", "O", "O"))
    (record,) = tagging.example_features(s, tokenizer, tagging.ConllOptions(max_seq_length=8))
    assert [VOCAB[i] for i in record["token_ids"][:5]] == ["[CLS]", "eu", "[UNK]", "lamb", "[SEP]"]
    assert tagging.word_texts(["a", "b", "c"], "bpe") == ["a", " b", " c"]
    assert tagging.word_texts(["a", "b"], "wordpiece") == ["a", "b"]


def test_tfds_conll2003_from_mock_data():
    import tensorflow as tf
    import tensorflow_datasets as tfds

    ner = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]

    def as_dataset(self, split, *args, **kwargs):
        assert split == "dev", split
        return tf.data.Dataset.from_tensor_slices({
            "tokens": tf.ragged.constant([["EU", "rejects"], ["Peter", "Blackburn", "."]]),
            "pos": tf.ragged.constant([[1, 2], [3, 4, 5]], dtype=tf.int64),
            "chunks": tf.ragged.constant([[1, 2], [3, 4, 0]], dtype=tf.int64),
            "ner": tf.ragged.constant([[4, 0], [2, 2, 0]], dtype=tf.int64)})

    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        s = tagging.read_examples("tfds:conll2003:dev", data_dir="/nonexistent")
    assert [x.words for x in s] == [("EU", "rejects"), ("Peter", "Blackburn", ".")]
    assert [x.tags for x in s] == [("I-ORG", "O"), ("I-PER", "I-PER", "O")]
    assert ner == list(tagging.CONLL2003_LABELS)
    with pytest.raises(FinetuneDataError, match="only tfds:conll2003"):
        tagging.read_examples("tfds:glue/sst2")


def test_make_finetune_flags_give_the_options():
    import argparse

    parser = argparse.ArgumentParser()
    tagging.add_flags(parser)
    options = tagging.options_from_flags(parser.parse_args(
        ["--max_seq_length=32", "--conll_scheme=iob2", "--conll_labels=O,B-KW,I-KW"]))
    assert options == tagging.ConllOptions(32, "iob2", ("O", "B-KW", "I-KW"))
    spec = tagging.feature_spec(options)
    assert spec["label_ids"].shape == [32] and spec["piece_index"].shape == []
    with pytest.raises(ValueError, match="must start with 'O'"):
        tagging.ConllOptions(label_names=("B-KW", "O"))


def test_sample_task_tags_and_is_deterministic(tmp_path):
    modules = frozenset(["asyncio", "collections", "time", "os"])
    assert [sample_conll.tag_word(w, modules) for w in
            ["None", "none", "lambda", "if", "asyncio", "collections.abc", "time", "ValueError",
             "base_events", "obj.method", "e.g", "Value", "."]] == \
        ["KW", "O", "KW", "O", "MOD", "MOD", "O", "CODE", "CODE", "CODE", "O", "O", "O"]
    assert sample_conll.iob1(["MOD", "MOD", "O", "CODE", "KW"]) == \
        ["I-MOD", "B-MOD", "O", "I-CODE", "I-KW"]
    docs = [(f"module:m{k}", [f"Use asyncio.run or os.path with value_{k} ValueError and "
                              f"None {k}.", f"Plain words only {k}.", "Call lambda now."])
            for k in range(40)]
    a = sample_conll.write(docs, str(tmp_path / "a"))
    b = sample_conll.write(list(docs), str(tmp_path / "b"))
    assert a == b and a["files"] == ["train.txt", "dev.txt"]
    for name in a["files"]:
        with open(tmp_path / "a" / name, "rb") as fa, open(tmp_path / "b" / name, "rb") as fb:
            assert fa.read() == fb.read()
    train = tagging.read_examples(str(tmp_path / "a" / "train.txt"), label_names=sample_conll.LABELS)
    dev = tagging.read_examples(str(tmp_path / "a" / "dev.txt"), label_names=sample_conll.LABELS)
    assert len(train) == a["counts"]["train"]["sentences"] and len(dev) >= 1
    assert a["baseline"]["all_O_f1"] == 0.0
    # Every dev word was seen in train with the same tag except value_<k> (unseen): lookup
    # misses exactly those CODE entities.
    assert 0.0 < a["baseline"]["lookup_f1"] < 1.0
