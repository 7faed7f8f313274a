#!/usr/bin/env python3
"""Run slurmkit's whole health catalog against REAL NVML and CUDA, and print what it saw.

Not a pytest module (CI has no GPU): run it by hand, or from CI on a GPU runner, as
root on a GPU node with the ``[gpu]`` and ``[train]`` extras installed::

    python tests/gpu/run_real_nvml.py [--quick] [--json out.json]

What it checks, in order, and what makes it exit non-zero:

1. **Backend**: NVML initialises and enumerates the GPUs (name, minor number = Slurm's
   host index, UUID, PCI bus id, memory). Fails if NVML cannot start.
2. **Raw probes per GPU**: every backend call the fast checks use (ECC counters, retired
   pages, row remaps, temperature, power, persistence, throttle reasons, NVLink link
   states, compute processes, used memory) and the Xid events in the kernel log.
   Fails if a call raises anything but NVML's NOT_SUPPORTED (which reads as empty).
3. **Fast tier** through the same engine the prolog uses (deadlines included), printing
   each verdict. Fails if a check ends UNKNOWN because of a slurmkit fault (an
   exception in our NVML code path) -- a real FAIL/WARN is the hardware's verdict and is
   printed, not treated as a script failure.
4. **The prolog as a whole process** (``prolog/slurmkit-prolog``) with every GPU
   handed to a fake job, 5 runs: wall time p50/max against the 5 s budget.
5. **Heavy tier on CUDA**: the N x N NVLink copy matrix (needs >= 2 GPUs; printed),
   single-node NCCL all_reduce busbw (>= 2 GPUs), per-GPU BF16 GEMM TFLOP/s and HBM
   copy bandwidth, each judged against the model's thresholds. ``--quick`` uses small
   sizes (a plumbing check; the numbers are then low and may FAIL their floors).

Exit status: 0 when every step ran; 1 when a step could not run or slurmkit raised.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def table(rows, cols):
    widths = (
        [max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols]
        if rows
        else [len(c) for c in cols]
    )
    print("  ".join(c.upper().ljust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(w) for c, w in zip(cols, widths)))


def main() -> int:
    ap = argparse.ArgumentParser(description="slurmkit health catalog against real NVML/CUDA")
    ap.add_argument("--quick", action="store_true", help="small heavy-probe sizes (plumbing check)")
    ap.add_argument("--skip-heavy", action="store_true")
    ap.add_argument("--json", help="also write everything to this JSON file")
    args = ap.parse_args()
    problems = []
    out = {}
    tmp = Path(tempfile.mkdtemp(prefix="slurmkit-real-nvml-"))
    heavy_params = {
        "nvlink_bandwidth": {"size_mb": 64 if args.quick else 256, "iterations": 3 if args.quick else 5},
        "allreduce_busbw": {"size_mb": 64 if args.quick else 1024, "iterations": 5 if args.quick else 20},
        "gemm_tflops": {"size": 4096 if args.quick else 8192, "iterations": 5 if args.quick else 20},
        "hbm_bandwidth": {"size_mb": 256 if args.quick else 2048, "iterations": 5 if args.quick else 20},
    }
    cfg_path = tmp / "slurmkit.yaml"
    import yaml

    cfg_path.write_text(
        yaml.safe_dump(
            {
                "paths": {
                    "state_dir": str(tmp / "state"),
                    "shared_dir": str(tmp / "shared"),
                    "metrics_dir": str(tmp / "metrics"),
                    "log_dir": str(tmp / "log"),
                },
                "health": {"backend": "nvml", "checks": heavy_params},
            }
        )
    )
    os.environ["SLURMKIT_CONFIG"] = str(cfg_path)

    from slurmkit.config import load_site_config
    from slurmkit.health.backends import BackendError
    from slurmkit.health.backends.nvml import NvmlBackend
    from slurmkit.health.base import Status, Tier
    from slurmkit.health.catalog import select
    from slurmkit.health.engine import Context, run_checks

    cfg = load_site_config(str(cfg_path))
    health, paths = cfg.section("health"), cfg.section("paths")

    # 1. backend
    print("== 1. NVML backend")
    try:
        b = NvmlBackend()
    except BackendError as exc:
        print(f"NVML unavailable: {exc}")
        return 1
    try:
        drv = b.nv.nvmlSystemGetDriverVersion()
        print(
            f"driver {drv.decode() if isinstance(drv, bytes) else drv}, "
            f"nvidia-ml-py {getattr(b.nv, '__version__', '?')}"
        )
    except Exception:
        pass
    gpus = b.gpus()
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
    out["gpus"] = [g.__dict__ for g in gpus]

    # 2. raw probes
    print("\n== 2. raw probes per GPU")
    raw = []
    for g in gpus:
        row = {"index": g.index}
        for call in (
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
        ):
            try:
                val = getattr(b, call)(g.index)
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
    try:
        xids = b.xid_events(0.0)
        print(
            f"Xid events in the kernel log since boot: {len(xids)}"
            + (f" (last: Xid {xids[-1].xid} on GPU {xids[-1].gpu})" if xids else "")
        )
        out["xid_events"] = [e.to_dict() for e in xids]
    except Exception as exc:
        problems.append(f"xid_events: {exc}")
    out["raw"] = raw
    b.close()

    # 3. fast tier
    print("\n== 3. fast tier (engine, deadlines)")
    ctx = Context.from_env(health, paths, "manual", env={}, node=os.uname().nodename.split(".")[0])
    fast = run_checks(ctx, select(Tier.FAST, "manual", health_cfg=health))
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
    for r in fast:
        if r.status == Status.UNKNOWN and r.details.get("internal"):
            problems.append(f"fast check {r.check} could not run: {r.code} {r.reason}")
    out["fast"] = [r.to_dict() for r in fast]

    # 4. prolog as a whole process
    print("\n== 4. prolog as a whole process (all GPUs handed to a fake job)")
    env = {
        "SLURMKIT_CONFIG": str(cfg_path),
        "SLURMD_NODENAME": "gpu-selftest",
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_UID": "0",
        "SLURM_JOB_GPUS": ",".join(str(g.index) for g in gpus),
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
        f"wall p50 {statistics.median(walls) * 1000:.0f} ms, max {max(walls) * 1000:.0f} ms; "
        f"exit codes {codes}"
        f" (1 = the node itself fails a check; budget 5 s)"
    )
    out["prolog_wall_s"] = walls
    if max(walls) > 5.5:
        problems.append(f"prolog took {max(walls):.2f}s > 5 s budget")

    # 5. heavy tier
    if not args.skip_heavy:
        print("\n== 5. heavy tier (CUDA)")
        from slurmkit.health import heavy

        ctx = Context.from_env(health, paths, "manual", env={}, node="gpu-selftest")
        try:
            m = heavy.nvlink_matrix(ctx, size_mb=heavy_params["nvlink_bandwidth"]["size_mb"])
            print("NVLink copy matrix, GB/s (row = source GPU, column = destination):")
            print("      " + "".join(f"{j:>8d}" for j in range(len(m))))
            for i, row in enumerate(m):
                print(f"{i:>4d}  " + "".join(f"{v:8.1f}" for v in row))
            out["nvlink_matrix"] = m
        except BackendError as exc:
            print(f"NVLink matrix not measured: {exc}")
        heavy_results = run_checks(ctx, select(Tier.HEAVY, "manual", health_cfg=health))
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
                for r in heavy_results
            ],
            ["check", "status", "code", "value", "unit", "s", "reason"],
        )
        for r in heavy_results:
            if r.check in ("gemm_tflops", "hbm_bandwidth"):
                print(f"  {r.check} per device: {r.details.get('per_device')}")
            if r.status == Status.UNKNOWN and r.details.get("internal") and r.code not in ("NO_CUDA",):
                problems.append(f"heavy check {r.check}: {r.code} {r.reason}")
        out["heavy"] = [r.to_dict() for r in heavy_results]

    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    print("\n== result:", "OK, every step ran" if not problems else "PROBLEMS:\n  " + "\n  ".join(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
