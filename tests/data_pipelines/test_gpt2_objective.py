"""docs/objectives.md section 11 (GPT-2 data): documents joined by <|endoftext|>, cut into full blocks.

data_pipelines/objectives/gpt2.py: every document is followed by <|endoftext|>; the pool's
stream is cut into blocks of exactly max_seq_length; the tail is dropped and counted.
"""


import numpy as np
import pytest

from text import features
from data_pipelines.objectives import gpt2
from objective_testing import objective_parser, random_documents, run_documents
from text import vocab as text_vocab

BOS, PAD, EOS, UNK, MASK, EOD = 0, 1, 2, 3, 4, 5
FIRST_WORD = 6


def _vocab(size=300):
    tokens = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "<|endoftext|>"]
    tokens += ["\u0120w%d" % i for i in range(FIRST_WORD, size)]
    roles = {"bos": "<s>", "cls": "<s>", "pad": "<pad>", "eos": "</s>", "sep": "</s>", "unk": "<unk>",
             "mask": "<mask>", "eod": "<|endoftext|>"}
    return text_vocab.make_vocab(tokens, roles, word_start=lambda t: t.startswith("\u0120"), name="test-bpe")


def _run(segment_lists, opts):
    return run_documents(gpt2.OBJECTIVE, segment_lists, opts, _vocab())


def test_exact_blocks_and_dropped_tail():
    instances, stats = _run([[[6, 7, 8], [9, 10]], [], [[11, 12, 13, 14, 15, 16, 17, 18]], [[20]]],
                            gpt2.GPT2Options(max_seq_length=4))
    # Stream: 6 7 8 9 10 EOD 11 .. 18 EOD 20 EOD (17 pieces) -> 4 blocks of 4, tail [EOD] dropped.
    assert [f["input_ids"] for _, f in instances] == [
        [6, 7, 8, 9], [10, EOD, 11, 12], [13, 14, 15, 16], [17, 18, EOD, 20]]
    assert all(f["input_mask"] == [1, 1, 1, 1] for _, f in instances)
    # Keyed by the document holding the block's first piece (doc0001 is empty).
    assert [k for k, _ in instances] == ["doc0000|0", "doc0000|1", "doc0002|0", "doc0002|1"]
    assert stats == {"dropped/empty_document": 1, "eod_tokens": 3, "dropped/tail_tokens": 1, "dropped/tail": 1,
                     "real_tokens": 16}


def test_blocks_cover_the_stream_with_eod_after_every_document():
    rng = np.random.default_rng(0)
    docs = random_documents(rng, FIRST_WORD, 300, 150, sentences=(1, 6), pieces=(1, 40))
    opts = gpt2.GPT2Options(max_seq_length=64)
    instances, stats = _run(docs, opts)
    spec = features.gpt2_pretrain_spec(64)
    for _, f in instances:
        features.serialize_example(spec, f)
    blocks = [f["input_ids"] for _, f in instances]
    assert all(len(b) == 64 for b in blocks)
    written = [t for b in blocks for t in b]
    # Built independently: where each document's <|endoftext|> must sit in the stream.
    lengths = [sum(len(s) for s in d) for d in docs]
    eod_positions = np.cumsum([n + 1 for n in lengths]) - 1
    total = int(eod_positions[-1]) + 1
    assert len(written) == total // 64 * 64 and stats["dropped/tail_tokens"] == total % 64
    assert [i for i, t in enumerate(written) if t == EOD] == [int(p) for p in eod_positions if p < len(written)]
    pieces = [t for d in docs for s in d for t in s]
    assert [t for t in written if t != EOD] == pieces[:len(written) - sum(p < len(written) for p in eod_positions)]
    # Blocks cross documents (documents average ~60 pieces, blocks are 64).
    assert sum(EOD in b[:-1] for b in blocks) > len(blocks) // 2
    assert len({k for k, _ in instances}) == len(instances)
    assert stats["eod_tokens"] == len(docs) and stats["real_tokens"] == len(written)


def test_pool_shorter_than_a_block_and_empty_pool():
    instances, stats = _run([[[6, 7]], [[8]]], gpt2.GPT2Options(max_seq_length=16))
    assert instances == [] and stats["dropped/tail_tokens"] == 5 and stats["dropped/tail"] == 1
    assert _run([], gpt2.GPT2Options(max_seq_length=16)) == ([], {})
    # A sentence longer than a block is simply cut across blocks.
    instances, stats = _run([[[7] * 10]], gpt2.GPT2Options(max_seq_length=4))
    assert [f["input_ids"] for _, f in instances] == [[7] * 4, [7] * 4] and stats["dropped/tail_tokens"] == 3


def test_flags_defaults_and_summary():
    parser = objective_parser(gpt2.OBJECTIVE)
    assert gpt2.OBJECTIVE.make_options(parser.parse_args([])) == gpt2.GPT2Options(max_seq_length=1024)
    assert gpt2.OBJECTIVE.tokenizer == "bpe"
    with pytest.raises(ValueError, match="max_seq_length must be >= 2 .*got 1"):
        gpt2.GPT2Options(max_seq_length=1)
    summary = gpt2.OBJECTIVE.summarize({"instances": 3, "real_tokens": 12, "dropped/tail_tokens": 4,
                                        "eod_tokens": 2})
    assert summary == {"tail_drop_rate": 0.25, "eod_rate": 2 / 12}
