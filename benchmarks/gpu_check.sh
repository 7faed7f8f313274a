#!/usr/bin/env bash
# One-shot check of slurmkit_kernels on a machine with an H100/H200, in under 8 minutes:
#
#   bash benchmarks/gpu_check.sh [--out-dir DIR] [--budget-s S]
#
# Runs benchmarks/gpu_check.py, which runs each phase (versions, prewarm, correctness, gluon
# (the opt-in warp-specialised Gluon forward), throughput) as a separate process with its own timeout, appends every result to
# DIR/gpu_check.jsonl as it is measured (DIR: --out-dir, else $OUT, else ./out), writes
# DIR/kernels-<gpu>.md and prints a short summary last. See the docstring of gpu_check.py.
#
# Exit code: 0 everything passed; 1 a check failed, a phase timed out or crashed; 2 no GPU
# or no Python with torch.
# Environment: PYTHON (default .venv/bin/python, else python3); GPU_CHECK_BUDGET_S (seconds
# for all phases, default 450: with Python's start and the summary the run stays under
# 8 minutes); TRITON_CACHE_DIR (default a fresh directory under /tmp, so the prewarm
# compiles what this Triton version builds).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
if [ -n "${PYTHON:-}" ]; then
  PY="$PYTHON"
elif [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
else
  PY=python3
fi
budget="${GPU_CHECK_BUDGET_S:-450}"
unset TRITON_INTERPRET
if [ -z "${TRITON_CACHE_DIR:-}" ]; then
  TRITON_CACHE_DIR="$(mktemp -d /tmp/gpu-check-triton.XXXXXX)"
fi
export TRITON_CACHE_DIR
export PYTHONPATH="$PWD/kernels${PYTHONPATH:+:$PYTHONPATH}"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
  || echo "nvidia-smi: not available"
# The driver stops every phase at its own deadline; this outer timeout only guards the driver.
timeout "$((budget + 20))" "$PY" benchmarks/gpu_check.py --budget-s "$budget" "$@"
status=$?
if [ "$status" -eq 124 ]; then
  echo "gpu_check: the driver itself timed out; partial results are in the results file" >&2
  status=1
fi
exit "$status"
