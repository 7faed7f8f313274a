"""slurmkit's whole health catalog against REAL NVML and CUDA (tests marked ``gpu``).

Run them on a GPU node, as root, with the ``[gpu]`` and ``[train]`` extras installed::

    pytest -m gpu -s tests/gpu                         # -s prints what NVML and CUDA reported
    SLURMKIT_GPU_QUICK=1 pytest -m gpu -s tests/gpu    # small heavy-probe sizes (plumbing only)
    SLURMKIT_GPU_REPORT=out.json pytest -m gpu tests/gpu   # also write everything seen as JSON

Where NVML cannot start or sees no GPU (every CI runner without one) the module is skipped
with the reason: the one skip the suite allows. The unit tests of the same code paths run
everywhere against a fake NVML (tests/health/test_nvml_backend.py) and the simulated backend.

What is checked, in order:

1. **Backend**: NVML initialises and enumerates the GPUs (name, minor number = Slurm's host
   index, UUID, PCI bus id, memory).
2. **Raw probes per GPU**: every backend call the fast checks use (ECC counters, retired
   pages, row remaps, temperature, power, persistence, throttle reasons, NVLink link states,
   compute processes, used memory) and the Xid events in the kernel log. A call that raises
   anything but NVML's NOT_SUPPORTED (which reads as empty) fails.
3. **Fast tier** through the engine the prolog uses (deadlines included). A check that ends
   UNKNOWN because of a slurmkit fault fails the test; a real FAIL/WARN is the hardware's
   verdict and is printed, not a test failure.
4. **The prolog as a whole process** (``prolog/slurmkit-prolog``) with every GPU handed to a
   fake job, 5 runs: the slowest must stay within the 5 s budget.
5. **Heavy tier on CUDA**: the N x N NVLink copy matrix (>= 2 GPUs; printed), single-node
   NCCL all_reduce busbw, per-GPU BF16 GEMM TFLOP/s and HBM copy bandwidth, each judged
   against the model's thresholds. ``SLURMKIT_GPU_QUICK=1`` uses small sizes, so the numbers
   are then low and may FAIL their floors; only a check that could not run fails the test.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import yaml

from slurmkit.config import load_site_config
from slurmkit.health.backends import BackendError
from slurmkit.health.backends.nvml import NvmlBackend
from slurmkit.health.catalog import select
from slurmkit.health.engine import Context, run_checks
from slurmkit.verdict.base import Status, Tier

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
QUICK = bool(os.environ.get("SLURMKIT_GPU_QUICK"))
RAW_PROBES = (
    "ecc",
    "retired_pages",
    "remapped_rows",
    "temperature",
    "power",
    "persistence",
    "throttle",
    "nvlink",
    "processes",
    "memory_used_mib",
)
HEAVY_PARAMS = {
    "nvlink_bandwidth": {"size_mb": 64 if QUICK else 256, "iterations": 3 if QUICK else 5},
    "allreduce_busbw": {"size_mb": 64 if QUICK else 1024, "iterations": 5 if QUICK else 20},
    "gemm_tflops": {"size": 4096 if QUICK else 8192, "iterations": 5 if QUICK else 20},
    "hbm_bandwidth": {"size_mb": 256 if QUICK else 2048, "iterations": 5 if QUICK else 20},
}


def table(rows: List[Dict[str, Any]], cols: List[str]) -> None:
    """Print ``rows`` as aligned columns (what ``pytest -s`` shows)."""
    widths = [max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols]
    print("  ".join(c.upper().ljust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(w) for c, w in zip(cols, widths)))


@pytest.fixture(scope="module")
def backend() -> Iterator[NvmlBackend]:
    """The real NVML backend; skips the module where there is no NVIDIA GPU to talk to."""
    try:
        b = NvmlBackend()
    except BackendError as exc:
        pytest.skip(f"no NVIDIA GPU or NVML on this machine ({exc}); run tests marked gpu on a GPU node")
    if not b.gpus():
        b.close()
        pytest.skip("NVML started but enumerates no GPU; run tests marked gpu on a GPU node")
    yield b
    b.close()


@pytest.fixture(scope="module")
def seen() -> Iterator[Dict[str, Any]]:
    """Everything the tests saw; written to $SLURMKIT_GPU_REPORT at the end when set."""
    out: Dict[str, Any] = {}
    yield out
    if os.environ.get("SLURMKIT_GPU_REPORT"):
        Path(os.environ["SLURMKIT_GPU_REPORT"]).write_text(json.dumps(out, indent=2, default=str))


@pytest.fixture(scope="module")
def site(tmp_path_factory, backend):
    tmp = tmp_path_factory.mktemp("real-nvml")
    path = tmp / "slurmkit.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "paths": {
                    "state_dir": str(tmp / "state"),
                    "shared_dir": str(tmp / "shared"),
                    "metrics_dir": str(tmp / "metrics"),
                    "log_dir": str(tmp / "log"),
                },
                "health": {"backend": "nvml", "checks": HEAVY_PARAMS},
            }
        )
    )
    cfg = load_site_config(str(path))
    return path, cfg.section("health"), cfg.section("paths")


def test_nvml_enumerates_the_gpus(backend, seen):
    try:
        drv = backend.nv.nvmlSystemGetDriverVersion()
        print(
            f"driver {drv.decode() if isinstance(drv, bytes) else drv}, "
            f"nvidia-ml-py {getattr(backend.nv, '__version__', '?')}"
        )
    except Exception:  # the version line is information only
        pass
    gpus = backend.gpus()
    table(
        [
            {
                "index": g.index,
                "name": g.name,
                "uuid": g.uuid,
                "pci": g.pci_bus_id,
                "memory_mib": f"{g.memory_total_mib:.0f}",
            }
            for g in gpus
        ],
        ["index", "name", "uuid", "pci", "memory_mib"],
    )
    seen["gpus"] = [g.__dict__ for g in gpus]
    assert len({g.index for g in gpus}) == len(gpus), "two GPUs with one host index (minor number)"
    assert len({g.uuid for g in gpus}) == len(gpus), "two GPUs with one UUID"
    for g in gpus:
        assert g.name and g.uuid and g.pci_bus_id and g.memory_total_mib > 0, g.__dict__


def test_every_raw_probe_answers_on_every_gpu(backend, seen):
    problems, raw = [], []
    for g in backend.gpus():
        row: Dict[str, Any] = {"index": g.index}
        for call in RAW_PROBES:
            try:
                val = getattr(backend, call)(g.index)
                if call == "nvlink":
                    val = f"{sum(val)}/{len(val)} active"
                elif call == "processes":
                    val = [(p.pid, round(p.used_mib)) for p in val]
                row[call] = val
            except Exception as exc:
                row[call] = f"ERROR {type(exc).__name__}: {exc}"
                problems.append(f"probe {call} on GPU {g.index}: {exc}")
        raw.append(row)
        print(json.dumps(row, default=str))
    seen["raw"] = raw
    assert problems == []


def test_xid_events_are_readable(backend, seen):
    xids = backend.xid_events(0.0)
    print(
        f"Xid events in the kernel log since boot: {len(xids)}"
        + (f" (last: Xid {xids[-1].xid} on GPU {xids[-1].gpu})" if xids else "")
    )
    seen["xid_events"] = [e.to_dict() for e in xids]
    assert all(isinstance(e.xid, int) for e in xids)


def test_fast_tier_runs_without_a_slurmkit_fault(site, seen):
    _, health, paths = site
    ctx = Context.from_env(health, paths, "manual", env={}, node=os.uname().nodename.split(".")[0])
    try:
        fast = run_checks(ctx, select(Tier.FAST, "manual", health_cfg=health))
    finally:
        ctx.close()
    table(
        [
            {
                "check": r.check,
                "status": r.status.value,
                "code": r.code,
                "value": r.value,
                "s": f"{r.seconds:.3f}",
                "reason": r.reason[:80],
            }
            for r in fast
        ],
        ["check", "status", "code", "value", "s", "reason"],
    )
    seen["fast"] = [r.to_dict() for r in fast]
    assert {r.check for r in fast} == {s.name for s in select(Tier.FAST, "manual", health_cfg=health)}
    faults = [
        f"{r.check}: {r.code} {r.reason}"
        for r in fast
        if r.status == Status.UNKNOWN and r.details.get("internal")
    ]
    assert faults == []


def test_prolog_process_stays_within_its_budget(site, backend, seen):
    cfg_path = site[0]
    env = {
        "SLURMKIT_CONFIG": str(cfg_path),
        "SLURMD_NODENAME": "gpu-selftest",
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_UID": "0",
        "SLURM_JOB_GPUS": ",".join(str(g.index) for g in backend.gpus()),
    }
    walls, codes = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        res = subprocess.run(
            [sys.executable, str(REPO / "prolog" / "slurmkit-prolog")],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        walls.append(time.perf_counter() - t0)
        codes.append(res.returncode)
    print(
        f"prolog wall p50 {statistics.median(walls) * 1000:.0f} ms, max {max(walls) * 1000:.0f} ms; "
        f"exit codes {codes} (1 = the node itself fails a check; budget 5 s)"
    )
    seen["prolog_wall_s"], seen["prolog_exit_codes"] = walls, codes
    assert max(walls) <= 5.5, f"prolog took {max(walls):.2f}s > 5 s budget"


def test_heavy_tier_on_cuda(site, seen):
    from slurmkit.health.checks import heavy

    _, health, paths = site
    ctx = Context.from_env(health, paths, "manual", env={}, node="gpu-selftest")
    try:
        try:
            m = heavy.nvlink_matrix(ctx, size_mb=HEAVY_PARAMS["nvlink_bandwidth"]["size_mb"])
            print("NVLink copy matrix, GB/s (row = source GPU, column = destination):")
            print("      " + "".join(f"{j:>8d}" for j in range(len(m))))
            for i, row in enumerate(m):
                print(f"{i:>4d}  " + "".join(f"{v:8.1f}" for v in row))
            seen["nvlink_matrix"] = m
        except BackendError as exc:  # one GPU, or no CUDA: the check below reports it
            print(f"NVLink matrix not measured: {exc}")
        results = run_checks(ctx, select(Tier.HEAVY, "manual", health_cfg=health))
    finally:
        ctx.close()
    table(
        [
            {
                "check": r.check,
                "status": r.status.value,
                "code": r.code,
                "value": r.value,
                "unit": r.unit,
                "s": f"{r.seconds:.1f}",
                "reason": r.reason[:80],
            }
            for r in results
        ],
        ["check", "status", "code", "value", "unit", "s", "reason"],
    )
    for r in results:
        if r.check in ("gemm_tflops", "hbm_bandwidth"):
            print(f"  {r.check} per device: {r.details.get('per_device')}")
    seen["heavy"] = [r.to_dict() for r in results]
    assert {r.check for r in results} == set(HEAVY_PARAMS)
    faults = [
        f"{r.check}: {r.code} {r.reason}"
        for r in results
        if r.status == Status.UNKNOWN and r.details.get("internal") and r.code != "NO_CUDA"
    ]
    assert faults == []
