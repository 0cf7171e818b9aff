"""docs/objectives.md section 9 (BART denoising) checked on ``add_noise`` (each noise alone, at its
rate) and on ``OBJECTIVE.create_instances``.

Statistical tolerances are 5 standard errors of the sample size, so a correct implementation
fails about once in 3.5 million runs. Blocks are made of distinct piece ids so that the
noised sequence can be aligned with the clean one without ambiguity.
"""

import argparse
import math

import numpy as np
import pytest

from text import features
from data_pipelines.objectives import bart, base
from text import vocab as text_vocab

# Byte-level BPE layout (RoBERTa/BART): <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4 <|endoftext|>=5.
SPECIAL = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "<|endoftext|>"]
BOS, EOS, MASK = 0, 2, 4
NUM_WORDS = 4000
WORD0 = len(SPECIAL)                # "\u0120w0" ... word-start pieces
CONT0 = len(SPECIAL) + NUM_WORDS    # "c0" ... continuation pieces


def _vocab():
    tokens = SPECIAL + ["\u0120w%d" % i for i in range(NUM_WORDS)] + ["c%d" % i for i in range(NUM_WORDS)]
    roles = {"bos": "<s>", "cls": "<s>", "pad": "<pad>", "eos": "</s>", "sep": "</s>", "unk": "<unk>",
             "mask": "<mask>", "eod": "<|endoftext|>"}
    return text_vocab.make_vocab(tokens, roles, word_start=lambda t: t.startswith("\u0120"), name="test-bpe")


VOCAB = _vocab()


def _opts(**kw):
    """Every noise off unless given."""
    off = dict(permute_sentence_ratio=0.0, mask_ratio=0.0, mask_random=0.0, delete_ratio=0.0,
               insert_ratio=0.0, rotate_ratio=0.0)
    off.update(kw)
    return bart.BartOptions(**off)


def _block(rng, num_sentences, words_per_sentence=(3, 9)):
    """(clean tokens, sentence_ends, sentences, number of words): distinct ids; a word is a
    word-start piece and 0-2 continuation pieces."""
    word_ids = iter(WORD0 + rng.permutation(NUM_WORDS))
    cont_ids = iter(CONT0 + rng.permutation(NUM_WORDS))
    sentences, words = [], 0
    for _ in range(num_sentences):
        s = []
        for _ in range(rng.integers(*words_per_sentence)):
            s += [int(next(word_ids))] + [int(next(cont_ids)) for _ in range(rng.integers(0, 3))]
            words += 1
        sentences.append(s)
    clean = [BOS] + [t for s in sentences for t in s] + [EOS]
    ends = list(1 + np.cumsum([len(s) for s in sentences]))
    return clean, ends, sentences, words


def _is_subsequence(short, long):
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


def test_exact_outputs_at_rates_zero_and_one():
    rng = np.random.default_rng(0)
    clean, ends, sentences, words = _block(rng, 4)
    content = len(clean) - 2
    assert bart.add_noise(clean, ends, rng, VOCAB, _opts()).tolist() == clean
    # Every word masked, one <mask> per word.
    out = bart.add_noise(clean, ends, rng, VOCAB, _opts(mask_ratio=1.0, mask_length="word"))
    assert out.tolist() == [BOS] + [MASK] * words + [EOS]
    # Span deletion of everything.
    out = bart.add_noise(clean, ends, rng, VOCAB, _opts(mask_ratio=1.0, mask_length="word", replace_length=0))
    assert out.tolist() == [BOS, EOS]
    # One <mask> per piece.
    out = bart.add_noise(clean, ends, rng, VOCAB, _opts(mask_ratio=1.0, mask_length="word", replace_length=-1))
    assert out.tolist() == [BOS] + [MASK] * content + [EOS]
    # Token (subword) masking.
    out = bart.add_noise(clean, ends, rng, VOCAB, _opts(mask_ratio=1.0, mask_length="subword"))
    assert out.tolist() == [BOS] + [MASK] * content + [EOS]
    # Every piece deleted; a one-sentence block is its own permutation.
    assert bart.add_noise(clean, ends, rng, VOCAB, _opts(delete_ratio=1.0)).tolist() == [BOS, EOS]
    one = [BOS] + sentences[0] + [EOS]
    assert bart.add_noise(one, [len(one) - 1], rng, VOCAB, _opts(permute_sentence_ratio=1.0)).tolist() == one
    # Insertion of one piece per piece (ceil(1.0 * len)) of masks only.
    out = bart.add_noise(clean, ends, rng, VOCAB, _opts(insert_ratio=1.0))
    assert len(out) == 2 * len(clean) and out[0] == BOS and out[-1] == EOS
    assert [t for t in out if t != MASK] == clean


def test_text_infilling_budget_poisson_spans_and_one_mask_per_span():
    rng = np.random.default_rng(1)
    opts = _opts(mask_ratio=0.3)  # span_poisson, lambda 3, replace_length 1, no random pieces
    draws, nonzero_lengths = [], []
    words = budget = masked_words = 0
    for _ in range(400):
        clean, ends, _, num_words = _block(rng, 6)
        record = {}
        out = bart.add_noise(clean, ends, rng, VOCAB, opts, record).tolist()
        # ceil(0.3 * words) words to mask, split into spans whose lengths add up to it exactly.
        assert record["words"] == num_words
        assert record["num_to_mask"] == math.ceil(0.3 * num_words)
        assert sum(record["span_lengths"]) == record["num_to_mask"]
        draws += record["poisson_draws"]
        words += num_words
        budget += record["num_to_mask"]
        # Align: ids are distinct, so the hidden positions are the clean ones missing in out.
        assert out[0] == BOS and out[-1] == EOS
        kept = [t for t in out if t != MASK]
        assert _is_subsequence(kept, clean)
        hidden = [i for i, t in enumerate(clean) if t not in set(kept)]
        covered = sorted({i for s, e in record["spans"] for i in range(s, e)})
        assert hidden == covered
        # Each span starts at a word and covers `length` whole words (fewer only at </s>).
        lengths = [x for x in record["span_lengths"] if x > 0]
        assert len(lengths) == len(record["spans"])
        starts = bart.word_starts(np.array(clean), ends, bart.as_bart_vocab(VOCAB), "span_poisson")
        for (s, e), length in zip(record["spans"], lengths):
            assert starts[s]
            assert starts[s:e].sum() == length or e == len(clean) - 1
            assert e == len(clean) - 1 or starts[e]
        nonzero_lengths += lengths
        # One <mask> per span left after overlaps, plus one per zero-length span.
        assert out.count(MASK) == record["replaced_spans"] + record["inserted_masks"]
        assert record["inserted_masks"] == record["span_lengths"].count(0)
        masked_words += int(starts[hidden].sum())
    # Budget: 0.3 of the words, plus under one word of ceiling per block.
    assert 0.3 <= budget / words <= 0.3 + 400 / words
    # Realised: spans may overlap (as fairseq), so somewhat fewer words are hidden.
    assert 0.2 < masked_words / words <= budget / words
    # The sampled span lengths are Poisson(3): mean 3, variance 3 (SE of the sample
    # variance sqrt((mu4 - sigma^4) / n) = sqrt((3 + 3 * 9 - 9) / n)), P(0) = e^-3 = 0.0498.
    n = len(draws)
    assert n > 3000  # 400 blocks x ~11 words to mask
    assert abs(np.mean(draws) - 3.0) <= 5 * math.sqrt(3.0 / n)
    assert abs(np.var(draws) - 3.0) <= 5 * math.sqrt(21.0 / n)
    p0 = math.exp(-3)
    assert abs(draws.count(0) / n - p0) <= 5 * math.sqrt(p0 * (1 - p0) / n)


def test_word_masking_and_random_replacement_share():
    rng = np.random.default_rng(2)
    opts = _opts(mask_ratio=0.3, mask_length="word", mask_random=0.1)
    spans = random_pieces = 0
    for _ in range(300):
        clean, ends, _, num_words = _block(rng, 6)
        record = {}
        out = bart.add_noise(clean, ends, rng, VOCAB, opts, record).tolist()
        # One word per span and distinct starts: exactly ceil(0.3 * words) words, no overlap.
        assert record["masked_words"] == record["num_to_mask"] == math.ceil(0.3 * num_words)
        assert record["replaced_spans"] == record["num_to_mask"]
        assert len(out) == len(clean) - record["masked_tokens"] + record["num_to_mask"]
        foreign = [t for t in out if t not in set(clean) and t != MASK]
        assert all(t >= len(SPECIAL) for t in foreign), "random pieces are never special"
        # Every span became one piece: <mask> or random (a random draw may equal a clean id,
        # so count them as the non-mask pieces beyond the kept ones).
        randoms = len(out) - out.count(MASK) - (len(clean) - record["masked_tokens"])
        assert len(foreign) <= randoms
        spans += record["num_to_mask"]
        random_pieces += randoms
    # 10% of the spans get a random piece.
    assert abs(random_pieces / spans - 0.1) <= 5 * math.sqrt(0.09 / spans)


def test_sentence_permutation_is_a_permutation_and_uniform():
    rng = np.random.default_rng(3)
    first_kept = moved_max = 0
    trials = 2000
    for t in range(trials):
        clean, ends, sentences, _ = _block(rng, 4, words_per_sentence=(1, 4))
        ratio = 1.0 if t % 2 == 0 else 0.5
        out = bart.add_noise(clean, ends, rng, VOCAB, _opts(permute_sentence_ratio=ratio)).tolist()
        assert out[0] == BOS and out[-1] == EOS and len(out) == len(clean)
        # Cut the output back into sentences by where each sentence's first id lands.
        starts = sorted(out.index(s[0]) for s in sentences)
        pieces = [tuple(out[a:b]) for a, b in zip(starts, starts[1:] + [len(out) - 1])]
        assert sorted(pieces) == sorted(tuple(s) for s in sentences)
        moved = sum(1 for p, s in zip(pieces, sentences) if p != tuple(s))
        if ratio == 1.0:
            first_kept += pieces[0] == tuple(sentences[0])
        else:
            # ceil(4 * 0.5) = 2 sentences shuffled: at most 2 move.
            assert moved <= 2
            moved_max = max(moved_max, moved)
    assert moved_max == 2
    # Full permutation of 4 sentences: the first stays first with probability 1/4.
    n = trials // 2
    assert abs(first_kept / n - 0.25) <= 5 * math.sqrt(0.25 * 0.75 / n)


def test_rotation_is_cyclic_and_uniform():
    rng = np.random.default_rng(4)
    clean = [BOS] + list(range(WORD0, WORD0 + 10)) + [EOS]
    offsets, rotated = [], 0
    for _ in range(2000):
        out = bart.add_noise(clean, [11], rng, VOCAB, _opts(rotate_ratio=1.0)).tolist()
        assert out[0] == BOS and out[-1] == EOS
        offset = out[1] - WORD0
        assert out[1:-1] == clean[1 + offset:-1] + clean[1:1 + offset]
        offsets.append(offset)
        record = {}
        bart.add_noise(clean, [11], rng, VOCAB, _opts(rotate_ratio=0.5), record)
        rotated += record["rotated"]
    n = len(offsets)
    # Uniform start among 10 pieces: each 1/10.
    for k in range(10):
        assert abs(offsets.count(k) / n - 0.1) <= 5 * math.sqrt(0.09 / n)
    assert abs(rotated / n - 0.5) <= 5 * math.sqrt(0.25 / n)


def test_token_deletion_count_and_insertion_count():
    rng = np.random.default_rng(5)
    for _ in range(50):
        clean, ends, _, _ = _block(rng, 5)
        out = bart.add_noise(clean, ends, rng, VOCAB, _opts(delete_ratio=0.2)).tolist()
        # ceil(0.2 * non-special pieces) removed, order kept, <s> and </s> kept.
        assert len(clean) - len(out) == math.ceil(0.2 * (len(clean) - 2))
        assert _is_subsequence(out, clean) and out[0] == BOS and out[-1] == EOS
        out = bart.add_noise(clean, ends, rng, VOCAB, _opts(insert_ratio=0.1)).tolist()
        assert len(out) - len(clean) == math.ceil(0.1 * len(clean))
        assert [t for t in out if t != MASK] == clean and out[0] == BOS and out[-1] == EOS
        out = bart.add_noise(clean, ends, rng, VOCAB, _opts(insert_ratio=0.1, mask_random=1.0)).tolist()
        assert MASK not in out and len(out) - len(clean) == math.ceil(0.1 * len(clean))


def _docs(rng, num_docs, sentences=(1, 12)):
    docs = []
    for k in range(num_docs):
        _, _, segs, _ = _block(rng, int(rng.integers(*sentences)))
        docs.append(base.Doc("doc%03d" % k, segs))
    return docs


def _run(docs, opts, seed=1, dupe=0):
    ctx = base.PoolContext(seed=seed, dupe=dupe, vocab=VOCAB, options=opts)
    return list(bart.OBJECTIVE.create_instances(docs, ctx)), ctx


def test_create_instances_clean_labels_blocks_and_decoder_inputs():
    rng = np.random.default_rng(6)
    docs = _docs(rng, 60)
    opts = bart.BartOptions(max_seq_length=64)  # BART-large noise
    instances, ctx = _run(docs, opts)
    spec = bart.OBJECTIVE.feature_spec(opts)
    by_doc = {}
    for key, f in instances:
        doc_id, _ = key.split("|")
        labels = f["labels"]
        assert labels[0] == BOS and labels[-1] == EOS and len(labels) <= 64
        assert f["decoder_input_ids"] == [EOS] + labels[:-1]
        assert f["decoder_input_mask"] == [1] * len(labels)
        assert f["input_ids"][0] == BOS and f["input_ids"][-1] == EOS and len(f["input_ids"]) <= 64
        assert f["input_mask"] == [1] * len(f["input_ids"])
        assert f["input_ids"] != labels
        by_doc.setdefault(doc_id, []).append(labels[1:-1])
        parsed = features.parse_example(spec, features.serialize_example(spec, f))
        assert list(parsed["labels"][:len(labels)]) == labels
    # The clean labels are the unnoised blocks: whole sentences of one document, in order.
    for doc in docs:
        blocks = by_doc[doc.id]
        assert [t for b in blocks for t in b] == [t for s in doc.segments for t in s]
        for b in blocks:
            bounds = set(np.cumsum([0] + [len(s) for s in doc.segments]).tolist())
            offset = sum(len(x) for x in blocks[:blocks.index(b)])
            assert offset in bounds and offset + len(b) in bounds
        # A block is only closed when the next sentence would not fit in 62 pieces.
        for b, nxt in zip(blocks, blocks[1:]):
            first_sentence = next(s for s in doc.segments if s[0] == nxt[0])
            assert len(b) + len(first_sentence) > 62
    assert ctx.stats["real_tokens"] == sum(len(f["input_ids"]) for _, f in instances)
    summary = bart.OBJECTIVE.summarize({**ctx.stats, "instances": len(instances)})
    assert 0.3 <= summary["mask_budget_rate"] < 0.4
    assert 0.2 < summary["masked_word_rate"] <= summary["mask_budget_rate"]
    assert summary["permuted_sentence_rate"] == 1.0


def test_bad_input_dupes_and_truncation():
    rng = np.random.default_rng(7)
    opts = bart.BartOptions(max_seq_length=32)
    assert _run([], opts)[0] == []
    long_sentence = list(range(WORD0, WORD0 + 100))
    docs = [base.Doc("one", [[WORD0 + 5]]), base.Doc("long", [long_sentence]), base.Doc("empty", [[], []])]
    instances, ctx = _run(docs, opts)
    spec = bart.OBJECTIVE.feature_spec(opts)
    for _, f in instances:
        features.serialize_example(spec, f)
    # 100 pieces cut into 30-piece sentences: 4 blocks; the one-piece document: 1 block.
    assert [k for k, _ in instances] == ["one|0", "long|0", "long|1", "long|2", "long|3"]
    assert [t for k, f in instances if k.startswith("long") for t in f["labels"][1:-1]] == long_sentence
    assert ctx.stats["split_long_sentences"] == 1
    assert ctx.stats["dropped/empty_document"] == 1
    # Fresh noise per dupe pass, same noise for the same seed and pass.
    docs = _docs(rng, 10)
    a, _ = _run(docs, opts, dupe=0)
    b, _ = _run(docs, opts, dupe=0)
    c, _ = _run(docs, opts, dupe=1)
    assert a == b
    assert [f["input_ids"] for _, f in a] != [f["input_ids"] for _, f in c]
    assert [f["labels"] for _, f in a] == [f["labels"] for _, f in c]
    # Insertion can outgrow the block: cut to max_seq_length with </s> last, and counted.
    instances, ctx = _run(docs, _opts(max_seq_length=32, insert_ratio=1.0))
    assert ctx.stats["truncated_inputs"] > 0
    assert all(len(f["input_ids"]) <= 32 and f["input_ids"][-1] == EOS for _, f in instances)
    with pytest.raises(ValueError, match=r"sentence_ends \[1\] must increase"):
        bart.add_noise([BOS, WORD0, EOS], [1], rng, VOCAB, opts)


def test_flags_defaults_are_bart_large_and_help_names_code_defaults():
    parser = argparse.ArgumentParser()
    bart.OBJECTIVE.add_flags(parser)
    args = parser.parse_args([])
    args.max_seq_length = 512
    assert bart.OBJECTIVE.make_options(args) == bart.BartOptions(
        max_seq_length=512, permute_sentence_ratio=1.0, mask_ratio=0.3, mask_length="span_poisson",
        poisson_lambda=3.0, replace_length=1, mask_random=0.1, delete_ratio=0.0, insert_ratio=0.0,
        rotate_ratio=0.0)
    help_text = " ".join(parser.format_help().split())
    assert "code default 0.5" in help_text and "code default 0" in help_text
    assert bart.OBJECTIVE.tokenizer == "bpe"
    # BART-large: 512 tokens, dynamic-style single pass, cased byte-level BPE.
    assert bart.OBJECTIVE.defaults == {"max_seq_length": 512, "dupe_factor": 1, "do_lower_case": False}
    with pytest.raises(ValueError, match="mask_length must be one of .*got \'span\'"):
        bart.BartOptions(mask_length="span")
