"""The latency benchmarks' shared flags: the reps at each batch size and the report's settings
come from benchmarks.common, and serving_latency refuses an unknown contender before any work."""

import argparse

import pytest

from benchmarks import common, serving_latency


def test_reps_by_batch_and_settings():
    p = argparse.ArgumentParser()
    common.add_latency_flags(p)
    args = p.parse_args(["--reps=7", "--reps_batch32=2", "--warmup=1"])
    assert args.batches == [1, 32] and not hasattr(args, "tiny")  # no tiny twin asked for
    assert [common.latency_reps(args, b) for b in (1, 7, 8, 32)] == [7, 7, 2, 2]
    assert common.latency_settings(args, seed=3) == {"warmup": 1, "reps": 7, "reps_batch32": 2,
                                                     "seed": 3}


def test_batches_parse_and_the_tiny_twin_flag():
    p = argparse.ArgumentParser()
    common.add_latency_flags(p, tiny="2 x 32 model: a run in seconds")
    args = p.parse_args(["--batches=1,8,64", "--tiny"])
    assert args.batches == [1, 8, 64] and args.tiny


def test_an_unknown_contender_is_refused_before_the_export(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        serving_latency.main(["--contenders=ours,grpc", f"--work_dir={tmp_path}/work"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--contenders: unknown ['grpc']" in err and "'http'" in err
    assert not (tmp_path / "work").exists()  # nothing exported
