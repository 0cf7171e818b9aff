"""docs/objectives.md section 1 (BERT MLM + NSP) checked statistically on the plain functions.

Tolerances are binomial: |observed - expected| <= 5 * sqrt(p (1 - p) / n), so a correct
implementation fails about once in 3.5 million runs, and a wrong rate (say 0.7 instead of 0.8
with n in the thousands) fails every time.
"""

import math

import numpy as np
import pytest

from text import features
from data_pipelines.objectives import bert
from objective_testing import originals, within

CLS, SEP, MASK = 2, 3, 4


def _vocab(size=50, continuation=()):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [("##p%d" % i) if i in continuation else ("w%d" % i) for i in range(5, size)]
    return bert.BertVocab.from_tokens(tokens)


def _corpus(rng, num_docs, sentences_per_doc, sentence_len, vocab_size, disjoint=False):
    """Random documents; with disjoint=True document k only uses ids of its own range."""
    docs = []
    for k in range(num_docs):
        if disjoint:
            lo = 5 + k * 10
            docs.append([list(rng.integers(lo, lo + 10, size=sentence_len)) for _ in range(sentences_per_doc)])
        else:
            docs.append([list(rng.integers(5, vocab_size, size=sentence_len)) for _ in range(sentences_per_doc)])
    return docs


@pytest.fixture(scope="module")
def default_instances():
    vocab = _vocab(50)
    rng = np.random.default_rng(0)
    docs = _corpus(rng, 60, 40, 7, vocab.vocab_size)
    instances = bert.create_instances(docs, np.random.default_rng(1), vocab, bert.BertOptions(), dupe_factor=2)
    return vocab, instances


def test_number_of_predictions_matches_recipe(default_instances):
    _, instances = default_instances
    assert len(instances) > 500
    for inst in instances:
        n = len(inst["input_ids"])
        # 15% of 128 -> 19 predictions; of 40 -> 6.
        assert len(inst["masked_lm_positions"]) == min(20, max(1, int(round(n * 0.15))))
        assert inst["masked_lm_positions"] == sorted(set(inst["masked_lm_positions"]))
        assert inst["masked_lm_weights"] == [1.0] * len(inst["masked_lm_positions"])


def test_80_10_10_replacement(default_instances):
    vocab, instances = default_instances
    V = vocab.vocab_size
    n = masked = kept = other = 0
    other_ids = []
    for inst in instances:
        for pos, label in zip(inst["masked_lm_positions"], inst["masked_lm_ids"]):
            out = inst["input_ids"][pos]
            n += 1
            if out == MASK:
                masked += 1
            elif out == label:
                kept += 1
            else:
                other += 1
                other_ids.append(out)
    # A random replacement hits [MASK] or the original id with probability 1/V each.
    assert within(masked, n, 0.8 + 0.1 / V)
    assert within(kept, n, 0.1 + 0.1 / V)
    assert within(other, n, 0.1 * (1 - 2 / V))
    # Uniform over the WHOLE vocabulary, special tokens included (as the original).
    assert min(other_ids) < 5 and max(other_ids) == V - 1


def test_never_masks_special_positions_and_layout(default_instances):
    _, instances = default_instances
    for inst in instances:
        ids = originals(inst)
        seg = inst["segment_ids"]
        assert ids[0] == CLS and ids[-1] == SEP
        sep_positions = [i for i, t in enumerate(ids) if t == SEP]
        assert len(sep_positions) == 2
        first_sep = sep_positions[0]
        assert seg == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
        assert 1 <= first_sep - 1 and len(ids) - first_sep - 2 >= 1  # A and B non-empty
        assert len(ids) <= 128
        assert inst["input_mask"] == [1] * len(ids)
        assert not {0, first_sep, len(ids) - 1} & set(inst["masked_lm_positions"])


def test_nsp_labels_random_is_one_and_rate_just_over_half():
    vocab = _vocab(5 + 10 * 40)
    rng = np.random.default_rng(2)
    # 40 documents with disjoint id ranges, 1-token sentences: a chunk of up to 125 segments
    # always has >= 2 segments except possibly the last chunk of a document.
    docs = _corpus(rng, 40, 1500, 1, vocab.vocab_size, disjoint=True)
    opts = bert.BertOptions(short_seq_prob=0.0)
    instances = bert.create_instances(docs, np.random.default_rng(3), vocab, opts)
    n = len(instances)
    random_next = 0
    for inst in instances:
        ids = originals(inst)
        first_sep = ids.index(SEP)
        doc_of = lambda t: (t - 5) // 10
        a_docs = {doc_of(t) for t in ids[1:first_sep]}
        b_docs = {doc_of(t) for t in ids[first_sep + 1:-1]}
        assert len(a_docs) == 1
        if inst["next_sentence_labels"] == [1]:
            random_next += 1
            assert a_docs.isdisjoint(b_docs), "label 1 must mean B comes from another document"
        else:
            assert b_docs == a_docs, "label 0 must mean B is the actual continuation"
    # P(random) = 0.5 + 0.5 * share of single-segment chunks; at most one per document pass,
    # and a pass makes >= 1500/125 = 12 chunks, so the share is at most 1/12.
    sigma = math.sqrt(0.25 / n)
    assert 0.5 - 5 * sigma <= random_next / n <= 0.5 + 0.5 / 12 + 5 * sigma

    # Single-sentence documents: every chunk has one segment, every B is random.
    single = [[s] for s in _corpus(rng, 30, 1, 20, vocab.vocab_size)[0] * 30]
    for inst in bert.create_instances(single, np.random.default_rng(4), vocab, opts):
        assert inst["next_sentence_labels"] == [1]


def test_target_length_draw_rate():
    rng = np.random.default_rng(5)
    draws = [bert.draw_target_seq_length(rng, 125, 0.1) for _ in range(20000)]
    short = [d for d in draws if d != 125]
    # randint(2, 125) can return 125 itself with prob 1/124.
    assert within(len(short), len(draws), 0.1 * 123 / 124)
    assert min(short) >= 2 and max(short) <= 124


def test_short_sequence_rate_from_long_documents():
    vocab = _vocab(50)
    rng = np.random.default_rng(6)
    # Long documents of 5-token sentences: with target 125 every IsNext instance of a pass is
    # exactly 125 tokens long (25 segments); a short target t <= 120 makes them shorter.
    docs = _corpus(rng, 600, 400, 5, vocab.vocab_size)
    opts = bert.BertOptions()
    passes = short_passes = 0
    for k, doc in enumerate(docs):
        other = docs[(k + 1) % len(docs)]
        insts = bert.create_instances_from_document(doc, np.random.default_rng(k), lambda r: other, vocab, opts)
        lengths = [len(i["input_ids"]) - 3 for i in insts[:-1] if i["next_sentence_labels"] == [0]]
        if not lengths:
            continue
        passes += 1
        short_passes += max(lengths) < 125
    assert passes > 590
    # P(short pass) = 0.1 * P(randint(2,125) <= 120) = 0.1 * 119/124.
    assert within(short_passes, passes, 0.1 * 119 / 124)


def test_truncation_trims_longer_side_and_keeps_both():
    rng = np.random.default_rng(7)
    front = back = 0
    for _ in range(2000):
        a, b = list(range(100, 160)), list(range(200, 210))
        bert.truncate_seq_pair(a, b, 20, rng)
        assert len(a) + len(b) == 20 and len(a) >= 1 and len(b) >= 1
        # B (10) is never trimmed until A is down to 10; then the two alternate, B on ties.
        assert len(a) == 10 and len(b) == 10
        # A stays a contiguous slice of the original.
        assert a == list(range(a[0], a[0] + 10))
        front += a[0] - 100
        back += 159 - a[-1]
    # 50 trims of A, each from the front with prob 0.5.
    assert within(front, front + back, 0.5)

    a, b = [1, 2, 3], [4, 5, 6]
    bert.truncate_seq_pair(a, b, 5, np.random.default_rng(0))
    assert len(a) == 3 and len(b) == 2  # ties trim B


def _truncate_step_by_step(a, b, max_num_tokens, rng):
    """The rule as Google's create_pretraining_data states it: while too long, trim the
    longer side (B on ties), at its front or back by one coin each."""
    excess = len(a) + len(b) - max_num_tokens
    if excess <= 0:
        return a, b
    for from_front in rng.random(excess) < 0.5:
        side = a if len(a) > len(b) else b
        del side[0 if from_front else -1]
    return a, b


def test_truncation_equals_the_step_by_step_rule():
    """truncate_seq_pair counts the steps instead of replaying them: same coins, same result."""
    cases = np.random.default_rng(3)
    for _ in range(3000):
        len_a, len_b = int(cases.integers(0, 60)), int(cases.integers(0, 60))
        limit, seed = int(cases.integers(1, 90)), int(cases.integers(1 << 30))
        a, b = list(range(len_a)), list(range(100, 100 + len_b))
        expected = _truncate_step_by_step(list(a), list(b), limit, np.random.default_rng(seed))
        bert.truncate_seq_pair(a, b, limit, np.random.default_rng(seed))
        assert (a, b) == expected, (len_a, len_b, limit)


def test_sentence_longer_than_max_seq_length_is_truncated():
    vocab = _vocab(50)
    opts = bert.BertOptions(max_seq_length=32, max_predictions_per_seq=5)
    doc = [list(range(5, 45)) * 5]  # one 200-token sentence
    other = [[7, 8, 9], [10, 11]]
    insts = bert.create_instances_from_document(doc, np.random.default_rng(0), lambda r: other, vocab, opts)
    assert len(insts) == 1
    inst = insts[0]
    assert len(inst["input_ids"]) <= 32
    assert inst["next_sentence_labels"] == [1]  # a single-segment chunk always takes a random B
    ids = originals(inst)
    first_sep = ids.index(SEP)
    assert first_sep >= 2 and len(ids) - first_sep - 2 >= 1


def test_whole_word_masking_masks_full_words():
    continuation = set(range(25, 50))  # ids 25..49 are "##" pieces
    vocab = _vocab(50, continuation)
    rng = np.random.default_rng(8)
    docs = []
    for _ in range(40):
        doc = []
        for _ in range(30):
            sent = []
            for _ in range(rng.integers(2, 6)):
                sent.append(int(rng.integers(5, 25)))
                sent += [int(x) for x in rng.integers(25, 50, size=rng.integers(0, 3))]
            doc.append(sent)
        docs.append(doc)
    opts = bert.BertOptions(whole_word_mask=True)
    instances = bert.create_instances(docs, np.random.default_rng(9), vocab, opts)
    multi_piece_masked = 0
    for inst in instances:
        ids = originals(inst)
        masked = set(inst["masked_lm_positions"])
        n = len(ids)
        assert len(masked) <= min(20, max(1, int(round(n * 0.15))))
        words, current = [], None
        for i, t in enumerate(ids):
            if t in (CLS, SEP):
                current = None
                continue
            if current is not None and vocab.is_continuation[t]:
                current.append(i)
            else:
                current = [i]
                words.append(current)
        for word in words:
            hit = masked.intersection(word)
            assert not hit or hit == set(word), f"partial word masked: {word} {sorted(masked)}"
            multi_piece_masked += bool(hit) and len(word) > 1
    assert multi_piece_masked > 100


def test_deterministic_for_fixed_seed():
    vocab = _vocab(50)
    docs = _corpus(np.random.default_rng(10), 10, 30, 6, 50)
    a = bert.create_instances(docs, np.random.default_rng(11), vocab, dupe_factor=2)
    b = bert.create_instances(docs, np.random.default_rng(11), vocab, dupe_factor=2)
    c = bert.create_instances(docs, np.random.default_rng(12), vocab, dupe_factor=2)
    assert a == b
    assert a != c


def test_features_round_trip_padded():
    vocab = _vocab(50)
    docs = _corpus(np.random.default_rng(13), 3, 10, 4, 50)
    spec = features.bert_pretrain_spec(128, 20)
    for inst in bert.create_instances(docs, np.random.default_rng(14), vocab):
        parsed = features.parse_example(spec, features.serialize_example(spec, inst))
        for name, f in spec.items():
            values = np.asarray(inst[name], dtype=np.float32 if f.dtype == "float32" else np.int64)
            assert parsed[name].shape == (f.length,)
            np.testing.assert_array_equal(parsed[name][:len(values)], values)
            assert not parsed[name][len(values):].any(), f"{name} not zero-padded"


def test_columnar_batch_equals_the_per_instance_dicts():
    """make_batch (the Beam job's path) writes exactly the records of make_instances for the
    same pairs and Generator state."""
    from data_pipelines.objectives import bert as b

    vocab = b.BertVocab(cls_id=2, sep_id=3, mask_id=4, vocab_size=300, is_continuation=np.zeros(300, bool))
    opts = b.BertOptions(max_seq_length=40, max_predictions_per_seq=5)
    rng = np.random.default_rng(3)
    pairs = []
    for _ in range(200):
        la = int(rng.integers(1, 20))
        lb = int(rng.integers(1, 38 - la))
        pairs.append((rng.integers(5, 300, la).tolist(), rng.integers(5, 300, lb).tolist(),
                      int(rng.integers(0, 2)), False))
    spec = features.bert_pretrain_spec(40, 5)
    dicts = b.make_instances(pairs, np.random.default_rng(9), vocab, opts)
    batch = b.make_batch([str(i) for i in range(len(pairs))], pairs, np.random.default_rng(9), vocab, opts)
    assert features.serialize_columns(spec, batch.columns, batch.lengths) == features.serialize_examples(spec, dicts)
    assert batch.keys == [str(i) for i in range(len(pairs))]
