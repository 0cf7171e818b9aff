"""benchmarks/gpu_check's CPU dry run (`--tiny`): every phase runs and reports its figures, the
precision switch takes effect in each, MFU is against the measured bfloat16 peak, and the hard
budget stops a run and names what it did not reach."""

import json
import os
import subprocess
import sys

from benchmarks import common, gpu_check

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_tiny_dry_run_reports_every_phase(tmp_path, capsys):
    report = gpu_check.main(["--tiny", f"--output_json={tmp_path / 'gpu_check.json'}"])
    printed = capsys.readouterr().out
    assert json.loads((tmp_path / "gpu_check.json").read_text()) == json.loads(
        json.dumps(report))
    assert report["not_reached"] == [] and report["stopped"] == "" and report["child_rc"] == 0
    assert report["device"]["kind"] == "cpu" and report["elapsed_s"] < report["budget_s"]

    # The header names the device, the CPU's ISA flags, oneDNN and the precisions.
    machine = common.machine_info(())
    assert report["header"].startswith("no GPU: CPU dry run | CPU ")
    for part in (machine["cpu_features"], "oneDNN ", "precision float32,mixed_bfloat16"):
        assert part in report["header"]
    assert printed.splitlines()[0] == report["header"]

    phases = report["phases"]
    peaks = phases["peak"]["peaks"]
    assert {p: peaks[p]["dtype"] for p in peaks} == {"mixed_bfloat16": "bfloat16",
                                                     "float32": "float32"}
    for peak in peaks.values():
        assert peak["best_gflops"] == max(r["best_gflops"] for r in peak["rates"].values()) > 0
        assert {"tf_eager_square_256", "tf_graph_square_256"} <= set(peak["rates"])
    bf16_peak = peaks["mixed_bfloat16"]["best_gflops"]

    # Each training phase ran at its precision (the dtype policy took effect), XLA only in
    # the last; MFU is its FLOP rate over the measured peaks.
    trains = {name: phases[name] for name in ("train_float32", "train_mixed_bfloat16",
                                               "train_mixed_bfloat16_xla")}
    assert {n: (t["policy"], t["jit_compile"]) for n, t in trains.items()} == {
        "train_float32": ("float32", False), "train_mixed_bfloat16": ("mixed_bfloat16", False),
        "train_mixed_bfloat16_xla": ("mixed_bfloat16", True)}
    for name, t in trains.items():
        assert t["tokens_per_s"] > 0 and t["median_step_s"] > 0
        assert abs(t["mfu_bf16_peak"] - t["gflops"] / bf16_peak) < 1e-9
        own = peaks[t["precision"]]["best_gflops"]
        assert abs(t["mfu_own_peak"] - t["gflops"] / own) < 1e-9
        assert f"{name} " in printed and "% of bf16 peak" in printed

    for precision in ("float32", "mixed_bfloat16"):
        serve = phases[f"serve_{precision}"]
        assert serve["policy"] == precision and set(serve["batches"]) == {"1", "32"}
        for b, t in serve["batches"].items():
            assert t["ms"] > 0 and abs(t["mfu_bf16_peak"] - t["gflops"] / bf16_peak) < 1e-9
            assert f"serve_{precision} batch {b} " in printed


def test_the_budget_kills_the_run_and_names_what_was_not_reached(tmp_path):
    # One second: the child is killed while it imports TensorFlow.
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--tiny",
                           "--budget_s=1", f"--output_json={tmp_path / 'out.json'}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["stopped"] == "budget: child killed" and report["child_rc"] is None
    assert report["not_reached"] == list(gpu_check.PHASES) and report["phases"] == {}
    assert "not reached (budget: child killed): peak, train_float32" in proc.stdout
