"""docs/objectives.md (bilm): <S> sentence </S> streams cut into full blocks, and ELMo's
character ids of each piece.

data_pipelines/objectives/bilm.py: sentence marks from the bos/eos (or cls/sep) roles, the
tail dropped and counted, keys by the document holding a block's first piece, char_ids as
bilm-tf / AllenNLP spell them (+1, text/char_ids.py)."""

import numpy as np
import pytest

from text import features
from text import char_ids
from data_pipelines.objectives import base, bilm
from text import vocab as text_vocab

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
WORDS = ["the", "##s", "caf\u00e9", "a" * 60]  # ids 5, 6, 7, 8


def _vocab():
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    roles = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
    return text_vocab.make_vocab(tokens, roles, word_start=lambda t: not t.startswith("##"),
                           name="test-wordpiece")


VOCAB = _vocab()


def _run(docs, **options):
    docs = [base.Doc(id=f"doc{k}", segments=[list(s) for s in segs]) for k, segs in enumerate(docs)]
    ctx = base.PoolContext(seed=0, dupe=0, vocab=VOCAB, options=bilm.BiLMOptions(**options))
    return list(bilm.OBJECTIVE.create_instances(docs, ctx)), ctx.stats


def test_sentences_between_marks_cut_into_full_blocks():
    instances, stats = _run([[[5, 6], [7]], [], [[8, 5, 5]]], max_seq_length=4)
    # Stream: CLS 5 6 SEP CLS 7 SEP | CLS 8 5 5 SEP (12) -> 3 blocks, no tail.
    assert [f["input_ids"] for _, f in instances] == [
        [CLS, 5, 6, SEP], [CLS, 7, SEP, CLS], [8, 5, 5, SEP]]
    assert [k for k, _ in instances] == ["doc0|0", "doc0|1", "doc2|0"]
    assert all(f["input_mask"] == [1] * 4 for _, f in instances)
    assert "char_ids" not in instances[0][1]
    assert stats == {"dropped/empty_document": 1, "sentences": 3, "real_tokens": 12}
    instances, stats = _run([[[5, 6, 7]]], max_seq_length=4)
    assert len(instances) == 1 and stats["dropped/tail_tokens"] == 1 and stats["dropped/tail"] == 1


def test_elmo_character_ids():
    instances, _ = _run([[[5, 6, 7, 8]]], max_seq_length=6, characters=True, max_characters=10)
    chars = np.array(instances[0][1]["char_ids"]).reshape(6, 10)
    bow, eow, pad = 259, 260, 261  # bilm-tf's 258, 259, 260, + 1

    def b(text: bytes):
        return [c + 1 for c in text]

    np.testing.assert_array_equal(chars[0], [bow, 257, eow] + [pad] * 7)        # <S>
    np.testing.assert_array_equal(chars[1], [bow, *b(b"the"), eow] + [pad] * 5)
    np.testing.assert_array_equal(chars[2], [bow, *b(b"s"), eow] + [pad] * 7)      # "##s"
    np.testing.assert_array_equal(chars[3], [bow, *b("caf\u00e9".encode()), eow] + [pad] * 3)
    assert chars[3, 4] - 1 == 0xC3 and chars[3, 5] - 1 == 0xA9  # UTF-8 bytes, not characters
    np.testing.assert_array_equal(chars[4], [bow, *b(b"a" * 8), eow])               # cut to fit
    np.testing.assert_array_equal(chars[5], [bow, 258, eow] + [pad] * 7)        # </S>
    spec = features.bilm_pretrain_spec(6, 10)
    features.serialize_example(spec, instances[0][1])


def test_byte_level_pieces_map_back_to_their_bytes():
    assert char_ids.piece_bytes("\u0120caf\u00c3\u00a9", byte_level=True) == "caf\u00e9".encode()
    assert char_ids.piece_bytes("\u2581caf\u00e9") == "caf\u00e9".encode()
    assert char_ids.piece_bytes("<s>", byte_level=True) == b"<s>"


def test_options_and_marks_are_checked():
    with pytest.raises(ValueError, match="max_seq_length must be >= 2"):
        bilm.BiLMOptions(max_seq_length=1)
    with pytest.raises(ValueError, match="max_characters must be >= 3"):
        bilm.BiLMOptions(max_characters=2)
    bare = text_vocab.make_vocab(["a", "b"], {}, word_start=lambda t: True, name="bare")
    with pytest.raises(text_vocab.VocabularyRoleError, match="bilm needs sentence marks .* bare"):
        char_ids.sentence_marks(bare)
