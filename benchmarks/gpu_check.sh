#!/usr/bin/env bash
# One-shot check of slurmkit_kernels on a machine with an H100/H200, in under 8 minutes:
#
#   bash benchmarks/gpu_check.sh [--out FILE] [--budget-s S] [--with-tests]
#
# 1. prints the GPU, driver, Python, torch, triton, CUDA and cuDNN versions;
# 2. compiles every kernel the next steps launch, in parallel processes (the machinery of
#    python -m slurmkit_kernels.compile_check, which also fails on spills), filling the
#    Triton cache so the correctness and timed steps do not wait for the compiler;
# 3. correctness of the shipped config for this GPU, forward and backward, fp16/bf16/fp32,
#    d64/d128, full/causal, ragged and GQA shapes, against float64 (benchmarks/gpu_check.py);
# 4. TFLOP/s of forward and forward+backward, fp16 and bf16, d64 and d128, causal off/on,
#    sequence 1k-16k, next to SDPA's flash and cuDNN back ends with the ratio; the table
#    goes to docs/kernels-<gpu>.md (or --out), which docs/kernels.md links;
# 5. with --with-tests, the kernel test suite compiled on the GPU with the time left.
#
# Exit code: 0 everything passed; 1 a check failed; 2 no GPU or no Python with torch.
# Environment: PYTHON (default .venv/bin/python, else python3); GPU_CHECK_BUDGET_S (total
# seconds, default 470); TRITON_CACHE_DIR (default a fresh directory under /tmp).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
if [ -n "${PYTHON:-}" ]; then
  PY="$PYTHON"
elif [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
else
  PY=python3
fi
budget="${GPU_CHECK_BUDGET_S:-470}"
deadline=$((SECONDS + budget))
with_tests=0
args=()
for a in "$@"; do
  if [ "$a" = "--with-tests" ]; then with_tests=1; else args+=("$a"); fi
done
unset TRITON_INTERPRET
if [ -z "${TRITON_CACHE_DIR:-}" ]; then
  TRITON_CACHE_DIR="$(mktemp -d /tmp/gpu-check-triton.XXXXXX)"
fi
export TRITON_CACHE_DIR
export PYTHONPATH="$PWD/kernels${PYTHONPATH:+:$PYTHONPATH}"
left() { echo $((deadline - SECONDS)); }

echo "== versions"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader \
  || echo "nvidia-smi: not available"
if ! "$PY" - <<'EOF'
import sys

import torch
import triton

print(f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}, "
      f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")
if not torch.cuda.is_available():
    print("gpu_check: torch sees no CUDA GPU", file=sys.stderr)
    sys.exit(2)
print(f"GPU {torch.cuda.get_device_name(0)}, capability {torch.cuda.get_device_capability(0)}")
EOF
then
  exit 2
fi

status=0
echo "== compile, correctness of the shipped config, throughput (time left $(left) s)"
# The script stops starting rows at --budget-s; the rest covers the rows in flight and the table.
run_budget=$(($(left) - 45))
if ! timeout "$(($(left) - 5))" "$PY" benchmarks/gpu_check.py --budget-s "$run_budget" \
    ${args[@]+"${args[@]}"}; then
  status=1
fi

if [ "$with_tests" = 1 ]; then
  echo "== kernel test suite on the GPU (time left $(left) s)"
  if [ "$(left)" -gt 30 ]; then
    SLURMKIT_TEST_DEVICE=cuda timeout "$(left)" "$PY" -m pytest tests/kernels -q -p no:cacheprovider \
      -m "not compile_sweep" --ignore tests/kernels/test_compile.py || status=1
  else
    echo "no time left for the test suite"
  fi
fi
echo "== gpu_check: exit $status (Triton cache: $TRITON_CACHE_DIR)"
exit "$status"
