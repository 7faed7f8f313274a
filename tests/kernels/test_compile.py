"""Ahead-of-time compilation of the shipped configs for real GPU architectures.

The interpreter never runs Triton's compiler, so code that only breaks when compiled,
or tiles that overflow shared memory, would pass every other CPU test. This runs
``python -m slurmkit_kernels.compile_check`` (full compile to a cubin with the ptxas
bundled in the triton wheel; no GPU needed) in a subprocess, because this test process
has TRITON_INTERPRET=1 set. To stay within the CI budget it compiles only the combinations
with the largest shared-memory footprint; run the tool without filters for the full
matrix.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNELS_SRC = Path(__file__).resolve().parents[2] / "kernels"


@pytest.mark.parametrize(
    "config, arch, head_dims, dtypes",
    [
        # d128 has the largest tiles, so it decides the shared-memory fit; the code is the
        # same for every head dim. fp32 on sm_90 is left out: it compiles slowly (~20 s per
        # kernel with IEEE dots) and uses under half of sm_90's shared memory.
        ("h100", "90", ["128"], ["bfloat16"]),
        ("default", "86", ["128"], ["float32"]),  # sm_86: the smallest smem limit; fp32: the largest tiles
    ],
)
def test_shipped_configs_compile_and_fit_shared_memory(config, arch, head_dims, dtypes, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(KERNELS_SRC), env.get("PYTHONPATH", "")])
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    proc = subprocess.run(
        [sys.executable, "-m", "slurmkit_kernels.compile_check", "--config", config, "--arch", arch,
         "--head-dims", *head_dims, "--dtypes", *dtypes],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.rstrip().endswith(" ok")]
    assert len(rows) == 3 * len(head_dims) * len(dtypes), proc.stdout  # one row per kernel
