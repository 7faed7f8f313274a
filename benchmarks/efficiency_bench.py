"""Per-job GPU efficiency: the epilog's collection and the report's parsing.

1. The epilog step's own work for one 8-GPU job (simulated backend, two accounted
   processes per GPU): read accounting, summarise, encode the AdminComment token; in
   process, ``--runs`` times (the sacctmgr call itself is one Slurm command and is not
   timed here).
2. ``slurmkit report efficiency --by user --json`` on a synthetic saved sacct file of
   ``--jobs`` jobs (1, 2, 4 or 8 GPUs each, one step row each), as a whole process.

    python benchmarks/efficiency_bench.py [--runs 50] [--jobs 100000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurmkit.health.backends.simulated import SimulatedBackend  # noqa: E402
from slurmkit.hooks import efficiency as eff  # noqa: E402
from slurmkit.report.efficiency import FIELDS  # noqa: E402
from slurmkit.slurm import admincomment  # noqa: E402


def epilog_collect(tmp: Path, runs: int) -> list:
    data = yaml.safe_load((REPO / "etc" / "gpu-fixtures" / "healthy-h100x8.yaml").read_text())
    now = time.time()
    for i, g in enumerate(data["gpus"]):
        g["accounting"] = [
            {
                "pid": 1000 + 10 * i + k,
                "gpu_util": 50 + k,
                "max_memory_mib": 30000,
                "time_ms": 3_600_000,
                "start_time": now - 3600 + k,
            }
            for k in range(2)
        ]
    path = tmp / "fx.yaml"
    path.write_text(yaml.safe_dump(data))
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        backend = SimulatedBackend(str(path))  # the epilog opens it once; its YAML load is timed too
        box: dict = {}
        eff.collect(backend, list(range(8)), cursor={}, job_start=None, job_pids=[], now=now, box=box)
        admincomment.job_summary("1", {"node1": {"acct": "on", "gpus": box["gpus"]}})
        times.append(time.perf_counter() - t0)
    return times


def synthetic_file(path: Path, jobs: int) -> None:
    random.seed(1)
    with open(path, "w") as out:
        out.write("|".join(FIELDS) + "\n")
        for j in range(jobs):
            n = random.choice([1, 2, 4, 8])
            gpus = {
                str(i): {
                    "u": round(random.uniform(0, 100), 1),
                    "t": 3600.0,
                    "b": 1000.0,
                    "m": random.randint(0, 80000),
                    "c": 81559,
                    "p": random.randint(0, 2),
                }
                for i in range(n)
            }
            tok = admincomment.encode(
                {
                    "v": 1,
                    "job": str(j),
                    "nodes": {f"node{j % 50}": {"acct": "on", "gpus": gpus}},
                    "missing": [],
                }
            )
            out.write(
                "|".join(
                    [
                        str(j),
                        str(j),
                        "COMPLETED",
                        f"billing=1,cpu=1,gres/gpu={n},mem=1000M,node=1",
                        "1764400000",
                        "1764403600",
                        "3600",
                        f"u{j % 300}",
                        f"a{j % 20}",
                        "gpu",
                        f"node{j % 50}",
                        "",
                        "",
                        tok,
                    ]
                )
                + "\n"
            )
            out.write(
                "|".join(
                    [
                        f"{j}.batch",
                        f"{j}.batch",
                        "COMPLETED",
                        "cpu=1",
                        "1764400000",
                        "1764403600",
                        "3600",
                        "",
                        "",
                        "",
                        "node1",
                        "cpu=00:00:01",
                        "",
                        "",
                    ]
                )
                + "\n"
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=100_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        t = sorted(epilog_collect(tmp, args.runs))
        print(
            f"epilog collection + summary, 8 GPUs x 2 processes: p50 {1000 * statistics.median(t):.1f} ms, "
            f"p95 {1000 * t[int(0.95 * (len(t) - 1))]:.1f} ms"
        )
        f = tmp / "eff.txt"
        synthetic_file(f, args.jobs)
        import resource

        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        cmd = [
            sys.executable,
            "-m",
            "slurmkit.cli.main",
            "report",
            "efficiency",
            "--sacct-file",
            str(f),
            "--by",
            "user",
            "--json",
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        assert res.returncode == 0, res.stderr
        print(
            f"report efficiency, {args.jobs} jobs ({f.stat().st_size / 1e6:.0f} MB): {wall:.2f} s wall, "
            f"{cpu:.2f} s CPU ({1e6 * cpu / args.jobs:.0f} us CPU per job)"
        )


if __name__ == "__main__":
    main()
