"""docs/objectives.md section 3 (RoBERTa data): FULL-SENTENCES / DOC-SENTENCES packing of unmasked blocks.

Layout checked (data_pipelines/objectives/roberta.py): <s> + greedy whole-sentence blocks of at
most max_seq_length - 1 pieces; every sentence followed by </s>; FULL-SENTENCES adds one extra
</s> between documents; over-long sentences are split; the last partial block is written.
"""


import numpy as np
import pytest

from text import features
from data_pipelines.objectives import roberta
from objective_testing import objective_parser, run_documents
from text import vocab as text_vocab

# Byte-level BPE role tokens (ids 0..5), then word pieces.
BOS, PAD, EOS, UNK, MASK, EOD = 0, 1, 2, 3, 4, 5
FIRST_WORD = 6


def _vocab(size=300):
    tokens = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "<|endoftext|>"]
    tokens += ["\u0120w%d" % i if i % 3 else "p%d" % i for i in range(FIRST_WORD, size)]
    roles = {"bos": "<s>", "cls": "<s>", "pad": "<pad>", "eos": "</s>", "sep": "</s>", "unk": "<unk>",
             "mask": "<mask>", "eod": "<|endoftext|>"}
    return text_vocab.make_vocab(tokens, roles, word_start=lambda t: t.startswith("\u0120"), name="test-bpe")


def _run(segment_lists, opts, seed=1):
    return run_documents(roberta.OBJECTIVE, segment_lists, opts, _vocab(), seed)


def _corpus(rng, num_docs, max_sentence=12, long_every=0):
    docs = []
    for k in range(num_docs):
        sentences = []
        for j in range(int(rng.integers(1, 8))):
            n = int(rng.integers(1, max_sentence + 1))
            if long_every and (k * 7 + j) % long_every == 0:
                n = 80  # longer than a block of the tests' max_seq_length 32
            sentences.append([int(t) for t in rng.integers(FIRST_WORD, 300, size=n)])
        docs.append(sentences)
    return docs


def _stream(docs, cross_documents):
    """The expected pieces after <s> of all blocks: each sentence + </s>, (FULL) </s> between documents."""
    out = []
    for k, doc in enumerate(docs):
        if cross_documents and k:
            out.append(EOS)
        for s in doc:
            out.extend(s + [EOS])
    return out


def test_exact_blocks_full_sentences():
    opts = roberta.RobertaOptions(max_seq_length=6)  # blocks of 5 pieces after <s>
    instances, stats = _run([[[6, 7, 8], [9, 10]], [[11, 12, 13, 14, 15, 16, 17, 18]], [[20]]], opts)
    assert [f["input_ids"] for _, f in instances] == [
        [BOS, 6, 7, 8, EOS],          # [9 10 </s>] does not fit in the 1 piece left
        [BOS, 9, 10, EOS, EOS],       # ... then the extra </s> between documents
        [BOS, 11, 12, 13, 14, 15],    # a 9-piece unit (8 + </s>) is split: 5 ...
        [BOS, 16, 17, 18, EOS, EOS],  # ... + 4, and the next separator fits
        [BOS, 20, EOS],               # the pool's last partial block is written
    ]
    assert [f["input_mask"] for _, f in instances] == [[1] * len(f["input_ids"]) for _, f in instances]
    assert [k for k, _ in instances] == ["doc0000|0", "doc0000|1", "doc0001|0", "doc0001|1", "doc0002|0"]
    assert stats["blocks"] == 5 and stats["real_tokens"] == 5 + 5 + 6 + 6 + 3
    assert stats["positions"] == 5 * 6 and stats["partial_blocks"] == 3  # lengths 5, 5, 6, 6, 3
    assert stats["document_separators"] == 2 and stats["sentences_split"] == 1


def test_exact_blocks_doc_sentences():
    opts = roberta.RobertaOptions(max_seq_length=6, packing=roberta.DOC_SENTENCES)
    instances, stats = _run([[[6, 7, 8], [9, 10]], [[11, 12, 13, 14, 15, 16, 17, 18]], [[20]]], opts)
    assert [f["input_ids"] for _, f in instances] == [
        [BOS, 6, 7, 8, EOS], [BOS, 9, 10, EOS],
        [BOS, 11, 12, 13, 14, 15], [BOS, 16, 17, 18, EOS],
        [BOS, 20, EOS],
    ]
    assert "document_separators" not in stats


@pytest.mark.parametrize("packing", roberta.PACKING)
def test_packing_invariants(packing):
    rng = np.random.default_rng(0)
    docs = _corpus(rng, 200, long_every=23)
    opts = roberta.RobertaOptions(max_seq_length=32, packing=packing)
    instances, stats = _run(docs, opts)
    blocks = [f["input_ids"] for _, f in instances]
    spec = features.roberta_pretrain_spec(32)
    for _, f in instances:
        features.serialize_example(spec, f)
    for b in blocks:
        assert 2 <= len(b) <= 32
        assert b[0] == BOS and BOS not in b[1:]
    # Every piece exactly once, in order; nothing dropped (the last partial block is written).
    full = packing == roberta.FULL_SENTENCES
    assert [t for b in blocks for t in b[1:]] == _stream(docs, cross_documents=full)
    # Greedy: within a packing run (the pool, or one document for DOC-SENTENCES) a block is
    # closed only when the next block's first unit (up to its first </s>) would not fit; a
    # block cut inside a long sentence is full.
    runs = {}
    for key, f in instances:
        runs.setdefault("pool" if full else key.split("|")[0], []).append(f["input_ids"])
    for run in runs.values():
        for b, nxt in zip(run, run[1:]):
            body = nxt[1:]
            first_unit = body.index(EOS) + 1 if EOS in body else len(body)
            assert len(b) - 1 + first_unit > 31
    # Keys are unique; counters agree with the output.
    assert len({k for k, _ in instances}) == len(instances)
    assert stats["blocks"] == len(blocks)
    assert stats["real_tokens"] == sum(len(b) for b in blocks)
    assert stats["partial_blocks"] == sum(len(b) < 32 for b in blocks)
    long_sentences = sum(len(s) + 1 > 31 for d in docs for s in d)
    assert long_sentences > 5 and stats["sentences_split"] == long_sentences
    if full:
        # A document boundary inside a block reads "</s> </s> <next document's first piece>".
        crossing = sum(any(b[i] == EOS and b[i + 1] == EOS and b[i + 2] != EOS for i in range(1, len(b) - 2))
                       for b in blocks)
        assert crossing > 20
        assert stats["document_separators"] == len(docs) - 1
        # Only the pool's last block is partial by necessity; whole-sentence packing fills the
        # others to 31 - (next unit - 1) at worst: mean fill well above half (sentences <= 13).
        assert np.mean([len(b) for b in blocks]) > 24
    else:
        # DOC-SENTENCES never crosses a document: each document's blocks hold exactly its pieces.
        by_doc = {}
        for key, f in instances:
            by_doc.setdefault(key.split("|")[0], []).extend(f["input_ids"][1:])
        assert by_doc == {"doc%04d" % k: _stream([d], False) for k, d in enumerate(docs)}
        assert EOS not in [b[1] for b in blocks]  # no separator unit at a block start


def test_full_sentences_uses_fewer_blocks_than_doc_sentences():
    docs = _corpus(np.random.default_rng(1), 100)
    full, _ = _run(docs, roberta.RobertaOptions(max_seq_length=64))
    per_doc, _ = _run(docs, roberta.RobertaOptions(max_seq_length=64, packing=roberta.DOC_SENTENCES))
    # Documents here average ~4 sentences of ~6.5 pieces (+</s>): ~30 pieces, so DOC-SENTENCES
    # writes about one half-empty block per document, FULL-SENTENCES about half as many blocks.
    assert len(per_doc) >= len(docs)
    assert len(full) < 0.7 * len(per_doc)


def test_bad_input_gives_instances_or_counted_skips():
    opts = roberta.RobertaOptions(max_seq_length=8)
    assert _run([], opts) == ([], {})
    instances, stats = _run([[], [[6]], [[7] * 20]], opts)  # empty doc, one-sentence doc, long sentence
    assert stats["dropped/empty_document"] == 1
    assert [f["input_ids"] for _, f in instances] == [
        [BOS, 6, EOS, EOS],  # the 21-piece unit does not fit: the block closes, then it is split
        [BOS] + [7] * 7, [BOS] + [7] * 7, [BOS] + [7] * 6 + [EOS]]
    assert stats["sentences_split"] == 1 and stats["document_separators"] == 1


def test_flags_and_defaults():
    parser = objective_parser(roberta.OBJECTIVE)
    opts = roberta.OBJECTIVE.make_options(parser.parse_args([]))
    assert opts == roberta.RobertaOptions(max_seq_length=512, packing="full_sentences")
    assert roberta.OBJECTIVE.defaults["dupe_factor"] == 1  # masking is dynamic
    opts = roberta.OBJECTIVE.make_options(parser.parse_args(["--packing=doc_sentences", "--max_seq_length=64"]))
    assert opts.packing == roberta.DOC_SENTENCES and opts.block_size == 63
    assert set(roberta.OBJECTIVE.feature_spec(opts)) == {"input_ids", "input_mask"}
    with pytest.raises(ValueError, match="max_seq_length must be >= 2, got 1"):
        roberta.RobertaOptions(max_seq_length=1)
    summary = roberta.OBJECTIVE.summarize({"instances": 2, "blocks": 2, "real_tokens": 12, "positions": 16,
                                           "partial_blocks": 1})
    assert summary == {"fill_rate": 0.75, "mean_block_length": 6.0, "partial_block_fraction": 0.5}
