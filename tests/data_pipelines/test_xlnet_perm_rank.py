"""XLNet's perm_rank feature (data_pipelines/objectives/xlnet.py): the [seq_len] factorization
order the records hold expands (``perm_mask_from_rank``) to exactly the permutation mask the
objective wrote before it, rebuilt here from the same random draws by the original
construction (``reference_perm_mask``: ``local_perm_mask`` per half plus the fixed cross-half
blocks). The TensorFlow expansion of the trainer is checked in
tests/garden/tasks/pretraining/test_xlnet_reader.py."""

import numpy as np
import pytest

from text import features
from data_pipelines.objectives import xlnet

SEP, CLS, EOD = 4, 3, 7


def _sequence(rng, seq_len, reuse_len, vocab_size=60):
    """Random pieces laid out as reuse half, A <sep> B <sep> <cls>; every other id starts a word."""
    tokens = rng.integers(10, vocab_size, seq_len)
    a_end = reuse_len + int(rng.integers(1, seq_len - reuse_len - 3))
    tokens[a_end], tokens[-2], tokens[-1] = SEP, SEP, CLS
    is_start = np.zeros(vocab_size, dtype=bool)
    is_start[::2] = True
    is_start[[SEP, CLS, EOD]] = True
    return tokens, xlnet.XLNetVocab(sep_id=SEP, cls_id=CLS, eod_id=EOD, is_start=is_start)


def _replayed(tokens, reuse_len, seed, vocab, options):
    """make_instance's draws replayed on a Generator of the same seed, in the order the
    objective made them when it wrote perm_mask: targets of each half, then each half's order.
    Returns (is_target, the mask reference_perm_mask assembles from them)."""
    rng = np.random.default_rng(seed)
    is_func = (tokens == SEP) | (tokens == CLS)
    is_start = vocab.is_start[tokens]
    kw = dict(mask_alpha=options.mask_alpha, mask_beta=options.mask_beta, span_unit=options.span_unit)
    m0, _ = xlnet.sample_mask(is_start[:reuse_len], rng, options.num_predict_reuse, forbidden=is_func[:reuse_len], **kw)
    m1, _ = xlnet.sample_mask(is_start[reuse_len:], rng, options.num_predict_rest, forbidden=is_func[reuse_len:], **kw)
    is_target = np.concatenate([m0, m1])
    order_0, order_1 = rng.permutation(reuse_len), rng.permutation(len(tokens) - reuse_len)
    return is_target, xlnet.reference_perm_mask(is_target, is_func, order_0, order_1, reuse_len)


@pytest.mark.parametrize("seq_len,reuse_len,num_predict,span_unit", [
    (48, 24, 8, "piece"), (48, 24, 0, "piece"), (40, 12, 20, "word"), (64, 32, 11, "piece"), (30, 2, 3, "word")])
def test_ranks_expand_to_the_masks_written_before(seq_len, reuse_len, num_predict, span_unit):
    options = xlnet.XLNetOptions(max_seq_length=seq_len, reuse_len=reuse_len, num_predict=num_predict,
                                 span_unit=span_unit)
    for seed in range(40):
        tokens, vocab = _sequence(np.random.default_rng(1000 + seed), seq_len, reuse_len)
        feats, _ = xlnet.make_instance(tokens, reuse_len, np.random.default_rng(seed), vocab, options)
        is_target, reference = _replayed(tokens, reuse_len, seed, vocab, options)
        assert feats["input_q"].tolist() == is_target.astype(int).tolist()
        expanded = xlnet.perm_mask_from_rank(feats["perm_rank"], feats["input_q"])
        assert expanded.astype(np.int64).tolist() == reference.tolist(), seed


def test_ranks_are_dense_and_fit_one_varint_byte_at_the_published_recipe():
    """Reuse-half context 0, its targets 1..43, second-half context 44, its 42 targets and
    <sep> <sep> <cls> 45..89: one byte each on disk; the record is a few KiB, not the 256 KiB
    of a 512 x 512 mask."""
    options = xlnet.XLNetOptions()
    tokens, vocab = _sequence(np.random.default_rng(0), 512, 256)
    feats, _ = xlnet.make_instance(tokens, 256, np.random.default_rng(1), vocab, options)
    rank, context = feats["perm_rank"], (feats["input_q"] == 0) & (tokens != SEP) & (tokens != CLS)
    assert sorted(set(rank[:256].tolist())) == list(range(0, 44)) and (rank[:256][context[:256]] == 0).all()
    assert sorted(set(rank[256:].tolist())) == list(range(44, 90)) and (rank[256:][context[256:]] == 44).all()
    feats["seg_id"] = np.zeros(512, np.int64)
    spec = features.xlnet_pretrain_spec(512, 85)
    record = features.serialize_columns(spec, {k: np.asarray(v)[None] for k, v in feats.items()},
                                        {k: np.array([len(v)]) for k, v in feats.items()})[0]
    assert len(record) < 3 * 1024, len(record)
