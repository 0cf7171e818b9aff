"""The tagging export's in-graph rows equal make_finetune's records for every tokenizer kind
(WordPiece, SentencePiece, byte-level BPE): words split at the same whitespace, each word
tokenized alone (BPE with its leading space), long sentences dealt into the same pieces."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from text import tokenizers
from text.finetune import tagging
from garden.models.bert.presets import untrained_bert_backbone
from garden.models.tagging import TokenTagger
from garden.serving.tagging import TaggingServing
from garden.serving.text import load_packer

MAX_LEN = 24


@pytest.mark.parametrize("kind", ["wordpiece", "sentencepiece", "bpe"])
def test_in_graph_rows_equal_the_records(serving_corpus, kind):
    vocab = serving_corpus.vocab[kind]
    with open(serving_corpus.corpus_slice, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()][:15]
    # Unicode whitespace between words, a zero-width word, a very long word.
    lines += ["tabs\tand\u00a0no-break\u3000spaces  twice", "a \u200b word",
              "x" * 60 + " tail"]
    tokenizer = tokenizers.load_tokenizer(kind, vocab, lower_case=True)
    packer = load_packer(vocab, MAX_LEN, kind=kind, lower_case=True)
    model = TokenTagger(untrained_bert_backbone("bert_tiny", vocab_size=packer.vocab_size,
                                                  num_layers=1), len(tagging.CONLL2003_LABELS))
    module = TaggingServing(model, packer, tokenizer.vocab.special("unk"), vocab,
                            tagging.CONLL2003_LABELS)
    options = tagging.ConllOptions(max_seq_length=MAX_LEN)
    expected, positions = [], []
    for i, line in enumerate(lines):
        words = line.split()
        records = tagging.example_features(tagging.ConllSentence(tuple(words), ("O",) * len(words)),
                                           tokenizer, options, i)
        expected.extend(r["token_ids"] for r in records)
        positions.extend(j for r in records for j, x in enumerate(r["label_ids"]) if x >= 0)
    assert len(expected) > len(lines)  # some sentences needed several pieces
    import tensorflow_text as tf_text
    from garden.serving.tagging import WHITESPACE

    words, _, _ = tf_text.regex_split_with_offsets(tf.constant(lines), WHITESPACE)
    assert words.to_list() == [[w.encode() for w in line.split()] for line in lines]
    inputs, rows, first = module.encode_words(words)
    np.testing.assert_array_equal(inputs["token_ids"].numpy(), expected)
    np.testing.assert_array_equal(first.numpy(), positions)
    assert sorted(inputs) == sorted(packer.input_names)
