#!/usr/bin/env python3
"""Benchmark: planning one sweep run for 10,000 simulated nodes.

What is timed is what `slurmkit sweep` does between the Slurm answers and the first
sbatch: parse a generated ``sinfo -N`` answer and ``squeue`` answer (the same parser
as slurmkit.slurm.client), read the verdict store's summary of last passes (one file
kept up to date by every pass, next to 10,000 per-node JSON files with full heavy passes
and history), and plan. `--cold` also times a rebuild of the summary from the node files. Goal: < 1 s
in total (issue 6). The store is written once, outside the timing.

    python benchmarks/sweep_plan.py [--nodes 10000] [--repeat 5] [--store DIR]

Prints one line per phase (best and median of the repeats) and the total.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from slurmkit.slurm.client import JOB_FIELDS, NODE_FIELDS  # noqa: E402
from slurmkit.slurm.parse import parse_parsable2  # noqa: E402
from slurmkit.sweep.planner import plan, sweep_job_nodes  # noqa: E402
from slurmkit.verdict.store import VerdictStore  # noqa: E402

STATES = ["idle"] * 6 + ["mixed", "allocated", "allocated", "drained"]
HEAVY = [
    "nvlink_bandwidth",
    "allreduce_busbw",
    "gemm_tflops",
    "hbm_bandwidth",
    "storage_write",
    "storage_read",
]


def generate_sinfo(n: int, rng: random.Random) -> str:
    lines = []
    for i in range(n):
        state = rng.choice(STATES)
        reason = "slurmkit:GPU_ECC_UNCORRECTED gpu_ecc: 2 errors" if state == "drained" else "none"
        lines.append(f"gpu{i:05d}|{state}|gpu:h100:8(S:0-1)|sweep|224|2000000|{reason}")
    return "\n".join(lines) + "\n"


def generate_squeue(n: int, running: int, rng: random.Random) -> str:
    lines = []
    for j in range(running):
        node = f"gpu{rng.randrange(n):05d}"
        lines.append(f"{9000 + j}|RUNNING|root|sweep|{node}|None|slurmkit-sweep.{node}")
    for j in range(2000):  # the real jobs around them
        lines.append(f"{20000 + j}|RUNNING|alice|batch|gpu[{j:05d}-{j + 1:05d}]|None|train-{j}")
    return "\n".join(lines) + "\n"


def populate(store: VerdictStore, n: int, rng: random.Random) -> None:
    """Node files as three heavy passes would leave them, written directly (recording
    10,000 passes one by one would also rewrite the summary 10,000 times, which a real
    fleet spreads over a week), then the summary rebuilt once from the files."""
    from slurmkit.verdict.store import empty_doc

    now = time.time()
    for i in range(n):
        if i % 10 == 0:
            continue  # 10 % never checked
        name = f"gpu{i:05d}"
        t = now - rng.uniform(0, 14 * 86400)
        doc = empty_doc(name)
        for check in HEAVY:
            value = rng.uniform(300, 500)
            doc["checks"][check] = {
                "status": "ok",
                "code": "OK",
                "value": value,
                "unit": "GB/s",
                "reason": "",
                "action": "none",
                "timestamp": t,
                "valid_until": t + 7 * 86400,
                "tier": "heavy",
                "run_id": "bench",
            }
            doc["history"][check] = [[t - d * 86400, value, "bench"] for d in (2, 1, 0)]
        doc["last_pass"] = t
        doc["last_pass_status"] = "fail" if i % 97 == 0 else "ok"
        doc["passes"] = [
            {
                "run_id": "bench",
                "timestamp": t,
                "status": doc["last_pass_status"],
                "tier": "heavy",
                "checks": HEAVY,
            }
        ]
        doc["meta"] = {"gpu_model": "h100"}
        store._write(name, doc)
    if os.path.exists(store.summary_path):
        os.unlink(store.summary_path)
    store.summary()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--store", default=None, help="reuse (or create) the store here")
    ap.add_argument("--cold", action="store_true", help="also time reading every node file (summary rebuild)")
    args = ap.parse_args()
    rng = random.Random(42)
    sinfo_text = generate_sinfo(args.nodes, rng)
    squeue_text = generate_squeue(args.nodes, 6, rng)
    root = args.store or tempfile.mkdtemp(prefix="slurmkit-bench-store-")
    store = VerdictStore(root)
    if len(store.nodes()) < args.nodes * 0.9 - 1:
        t0 = time.perf_counter()
        populate(store, args.nodes, rng)
        print(
            f"(store populated: {len(store.nodes())} node files in {time.perf_counter() - t0:.1f}s at {root})"
        )

    phases = {"parse sinfo+squeue": [], "read store": [], "plan": [], "total": []}
    selected = 0
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        rows = parse_parsable2(sinfo_text, NODE_FIELDS, free_field="reason")
        jobs = sweep_job_nodes(parse_parsable2(squeue_text, JOB_FIELDS, free_field="name"), "slurmkit-sweep")
        t1 = time.perf_counter()
        summary = store.summary()
        last = {k: e.get("last_pass") for k, e in summary.items()}
        failed = [k for k, e in summary.items() if e.get("status") == "fail"]
        t2 = time.perf_counter()
        p = plan(
            rows,
            last,
            jobs.keys(),
            time.time(),
            max_nodes=24,
            max_concurrent=48,
            period_s=7 * 86400,
            min_interval_s=86400,
            cron_interval_s=4 * 3600,
            revalidate=failed,
        )
        t3 = time.perf_counter()
        selected = len(p.selected)
        for key, dt in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t3 - t0)):
            phases[key].append(dt)
    print(
        f"sweep planning, {args.nodes} nodes ({len(rows)} sinfo rows, "
        f"{len(summary)} nodes in the store summary, "
        f"{len(jobs)} running sweep jobs), {args.repeat} repeats; selected {selected}, "
        f"{len(p.overdue)} overdue, K needed for the period: {p.required_per_run}"
    )
    for key, values in phases.items():
        print(
            f"  {key:<20} best {min(values) * 1000:8.1f} ms"
            f"   median {statistics.median(values) * 1000:8.1f} ms"
        )
    total = statistics.median(phases["total"])
    if args.cold:
        t0 = time.perf_counter()
        docs = store.documents()
        print(
            f"  cold: reading all {len(docs)} node documents (summary rebuild) "
            f"{(time.perf_counter() - t0) * 1000:.0f} ms"
        )
    print(f"goal < 1000 ms: {'met' if total < 1.0 else 'NOT met'} (median total {total * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
