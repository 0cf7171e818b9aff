"""benchmarks.xlnet_data's permutation-mask checks: silent on masks our XLNet objective makes,
loud on each kind of broken mask, and the target-run lengths it reports."""

import numpy as np
import pytest

from benchmarks import xlnet_data
from data_pipelines.objectives import xlnet

SEQ, REUSE, SEP, CLS = 48, 24, 4, 3


def _instance(seed):
    """One sequence laid out as A <sep> B <sep> <cls> after the reuse half, with our objective's
    targets and permutation mask; returns (cannot [L, L], is_target [L], is_functional [L])."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(10, 60, SEQ)
    tokens[REUSE + 10], tokens[-2], tokens[-1] = SEP, SEP, CLS
    is_start = np.zeros(60, dtype=bool)
    is_start[::2] = True
    vocab = xlnet.XLNetVocab(sep_id=SEP, cls_id=CLS, eod_id=7, is_start=is_start)
    options = xlnet.XLNetOptions(max_seq_length=SEQ, reuse_len=REUSE, num_predict=8)
    feats, _ = xlnet.make_instance(tokens, REUSE, rng, vocab, options)
    cannot = xlnet.perm_mask_from_rank(feats["perm_rank"], feats["input_q"])
    is_target = np.asarray(feats["input_q"]) > 0
    return cannot, is_target, (tokens == SEP) | (tokens == CLS)


def _check(cannot, is_target, is_functional, **kw):
    out = xlnet_data.perm_mask_violations(cannot[None], is_target[None], is_functional[None], REUSE, **kw)
    return {name for name, bad in out.items() if bad[0]}


@pytest.fixture(scope="module")
def instances():
    return [_instance(seed) for seed in range(8)]


def test_our_objective_masks_break_no_rule(instances):
    cannot = np.stack([c for c, _, _ in instances])
    is_target = np.stack([t for _, t, _ in instances])
    is_functional = np.stack([f for _, _, f in instances])
    assert is_target.sum(1).tolist() == [8] * len(instances)
    out = xlnet_data.perm_mask_violations(cannot, is_target, is_functional, REUSE)
    assert {name: int(bad.sum()) for name, bad in out.items()} == {name: 0 for name in out}


def _targets(is_target, half):
    t = np.flatnonzero(is_target)
    return t[t < REUSE] if half == 0 else t[t >= REUSE]


def test_each_broken_mask_is_caught(instances):
    cannot, is_target, func = instances[0]
    ctx = np.flatnonzero(~is_target & ~func)
    t0, t1 = _targets(is_target, 0), _targets(is_target, 1)
    c0 = ctx[ctx < REUSE]

    broken = cannot.copy()
    broken[t0[0], t0[0]] = False  # a target sees itself
    assert "target_sees_itself" in _check(broken, is_target, func)

    broken = cannot.copy()
    broken[0, REUSE + 1] = False  # memory sees the future half
    assert _check(broken, is_target, func) == {"reuse_sees_rest"}

    broken = cannot.copy()
    broken[t1[0], t0[0]] = True                         # a target misses a reuse-half target
    assert _check(broken, is_target, func) == {"rest_misses_reuse"}

    broken = cannot.copy()
    broken[c0[0], c0[1]] = True
    assert _check(broken, is_target, func) == {"context_misses_context"}

    broken = cannot.copy()
    broken[c0[0], t0[0]] = False  # a target's content leaks into context
    assert _check(broken, is_target, func) == {"context_sees_target"}

    broken = cannot.copy()
    broken[t1[0], ctx[ctx >= REUSE][0]] = True
    assert _check(broken, is_target, func) == {"target_misses_context"}

    sep = REUSE + 10
    broken = cannot.copy()
    broken[sep, sep] = True
    assert _check(broken, is_target, func) == {"functional_misses_context"}

    flagged = is_target.copy()
    flagged[sep] = True
    assert "target_functional" in _check(cannot, flagged, func)


def test_an_order_that_is_no_permutation_is_caught(instances):
    cannot, is_target, func = instances[1]
    t = _targets(is_target, 1)
    rank = {i: int((~cannot[i, t]).sum()) for i in t}   # targets each sees = its place in the order
    a, b, c = sorted(t, key=rank.get)[:3]               # the first three in the order: a < b < c
    cyc = cannot.copy()
    cyc[a, c] = False                                   # a also sees c: c before a before ... c
    assert _check(cyc, is_target, func) == {"targets_not_ordered"}

    mutual = cannot.copy()
    mutual[a, b] = False                                # a and b see each other
    assert _check(mutual, is_target, func) == {"targets_not_ordered"}

    unordered = cannot.copy()
    unordered[b, a] = True                              # neither sees the other
    assert _check(unordered, is_target, func) == {"targets_not_ordered"}


def test_a_leaked_target_is_context_only_when_asked(instances):
    # Model Garden's leak_ratio: the target sees itself and everyone sees it, like context.
    cannot, is_target, func = instances[2]
    t = _targets(is_target, 0)[0]
    context = ~is_target & ~func & (np.arange(SEQ) < REUSE)
    leaked = cannot.copy()
    leaked[:, t] = False                                # everyone sees it
    leaked[t, :] = ~context                             # it sees the context of its half ...
    leaked[t, t] = False                                # ... and itself
    strict = _check(leaked, is_target, func)
    assert {"target_sees_itself", "context_sees_target"} <= strict
    assert _check(leaked, is_target, func, leaked_as_context=True) == {"target_sees_itself"}


def test_run_lengths():
    t = np.array([[1, 1, 0, 1, 0, 0, 1, 1, 1], [1, 0, 0, 0, 0, 0, 0, 1, 1]], dtype=bool)
    assert xlnet_data.run_lengths(t).tolist() == [2, 1, 3, 1, 2]


def _batch(instances, seed=0):
    """Summary.add's inputs for our instances (tokens rebuilt so that target ids can be checked)."""
    rng = np.random.default_rng(seed)
    cannot = np.stack([c for c, _, _ in instances])
    is_target = np.stack([t for _, t, _ in instances])
    tokens = rng.integers(10, 60, is_target.shape)
    tokens[np.stack([f for _, _, f in instances])] = SEP
    num_predict = 10  # two padding rows after the 8 targets
    mapping = np.zeros((len(instances), num_predict, SEQ), dtype=np.int64)
    weight = np.zeros((len(instances), num_predict), dtype=np.float32)
    ids = np.zeros((len(instances), num_predict), dtype=np.int64)
    for b, t in enumerate(is_target):
        pos = np.flatnonzero(t)
        mapping[b, np.arange(len(pos)), pos] = 1
        weight[b, :len(pos)] = 1
        ids[b, :len(pos)] = tokens[b, pos]
    return tokens, cannot, mapping, weight, ids


def test_summary_counts_targets_runs_and_mapping_errors(instances):
    tokens, cannot, mapping, weight, ids = _batch(instances)
    summary = xlnet_data.Summary(REUSE)
    summary.add(tokens, cannot, mapping, weight, ids)
    good = summary.result()
    assert (good["sequences"], good["targets_per_sequence"], good["mapping_errors"]) == (len(instances), 8.0, 0)
    assert good["runs"] == len(xlnet_data.run_lengths(np.stack([t for _, t, _ in instances])))
    assert sum(good["violations"].values()) == 0

    bad_ids = ids.copy()
    bad_ids[0, 0] += 1                     # the first target's id is not the token at its position
    bad_map = mapping.copy()
    bad_map[1, 0, :] = 0                   # a real target row that names no position
    summary = xlnet_data.Summary(REUSE)
    summary.add(tokens, cannot, mapping, weight, bad_ids)
    summary.add(tokens, cannot, bad_map, weight, ids)
    assert summary.result()["mapping_errors"] == 2

    leaky = cannot.copy()
    t = np.flatnonzero(mapping[0].any(0))[0]
    leaky[0, t, t] = False                 # one target of 8 * len(instances) sees itself
    summary = xlnet_data.Summary(REUSE)
    summary.add(tokens, leaky, mapping, weight, ids)
    leaked = summary.result()
    assert leaked["leaked_target_fraction"] == 1 / (8 * len(instances))
    assert leaked["violations"]["target_sees_itself"] == 1

    rows = [{"what": w, "sequences": 8, "cpu_s": 1.0, "wall_s": 1.0, "seq_per_cpu_s": 8.0, "net_cpu_s": None,
             "net_seq_per_cpu_s": None, "peak_rss_mib": 1, "includes": ""}
            for w in ("ours make_pretrain", "MG create", "MG loader (1 pass)", "MG create + loader")]
    args = xlnet_data.parse_args(["--seq_length=48", "--reuse_length=24"])
    report = xlnet_data.format_report(rows, {"ours": good, "model_garden": good}, args)
    assert "targets_not_ordered" in report and "1.00" in report
