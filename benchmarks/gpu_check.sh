#!/usr/bin/env bash
# GPU readiness check (issue 34 item 6): BERT-base's train step in float32, mixed_bfloat16 and
# mixed_bfloat16 + XLA, and serving latency at batch 1 and 32, with MFU against the GPU's
# bfloat16 matmul peak measured in the same run, inside a hard budget (benchmarks/gpu_check.py;
# --budget_s, default 420 s). Run from anywhere; arguments are passed on (--tiny: the CPU dry
# run). The JSON report goes to $OUT/gpu_check.json when OUT is set, else /tmp/gpu_check.json.
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
[ -x "$python" ] || python=python3
# The module kills its child at the budget; this is the backstop should the driver itself hang.
exec timeout 570 "$python" -m benchmarks.gpu_check --output_json="${OUT:-/tmp}/gpu_check.json" "$@"
