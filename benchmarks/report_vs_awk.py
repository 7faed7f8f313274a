#!/usr/bin/env python3
"""Benchmark: ``slurmkit report`` against a one-pass awk on a 1,000,000-row sacct dump.

Usage::

    .venv/bin/python benchmarks/report_vs_awk.py [--rows 1000000] [--keep FILE] [--repeat 3]

What it does:

1. generates a synthetic ``SLURM_TIME_FORMAT=%s sacct -a -D -T --parsable2`` file in
   the column order slurmkit requests (header line included): job rows mixed with
   ``.batch``/``.extern``/``.0`` step rows, typed and untyped GPUs, multi-node jobs,
   array tasks, requeued attempts (``-D`` duplicates), CPU-only jobs and job names
   containing ``|``;
2. times ``awk`` (and ``mawk`` when installed) summing GPUs x (End - Start) over job
   rows in one pass, the minimum arithmetic any report needs;
3. times the full ``slurmkit report --sacct-file FILE --by account,user --format json``
   command (process start-up, parsing, grouping, lost hours, rendering);
4. checks that both found the same total GPU-hours, prints the times and the ratio.

All jobs lie inside the window and have finished, so awk's plain End - Start agrees
with slurmkit's clipped arithmetic; the goal is a ratio of at most 2.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from slurmkit.report.sacct import FIELDS  # noqa: E402

WINDOW_START = 1790812800  # 2026-10-01T00:00:00Z
WINDOW_DAYS = 30

#: awk cannot subtract ISO times; with --times iso it multiplies by ElapsedRaw ($8) instead,
#: which equals End - Start for the generated (finished, in-window) jobs.
AWK_PROGRAM_ISO = r"""
NR > 1 && $1 !~ /\./ {
    g = 0
    if (match($4, /gres\/gpu=[0-9]+/)) g = substr($4, RSTART + 9, RLENGTH - 9) + 0
    s += g * $8
}
END { printf "%.6f\n", s / 3600 }
"""

AWK_PROGRAM = r"""
NR > 1 && $1 !~ /\./ {
    g = 0
    if (match($4, /gres\/gpu=[0-9]+/)) g = substr($4, RSTART + 9, RLENGTH - 9) + 0
    s += g * ($7 - $6)
}
END { printf "%.6f\n", s / 3600 }
"""


def generate(path: str, rows: int, seed: int = 7, iso: bool = False) -> float:
    """Write ``rows`` sacct rows to ``path`` (plus the header); return the expected
    GPU-hours. The last job's step rows are cut off at ``rows``."""
    rng = random.Random(seed)
    users = [f"user{i:03d}" for i in range(200)]
    accounts = [f"acct{i:02d}" for i in range(20)]
    partitions = ["gpu", "debug", "sweep", "long"]
    gtypes = ["h100", "h200", "a100"]
    states = ["COMPLETED"] * 12 + [
        "FAILED",
        "CANCELLED by 1234",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
    ]
    gpu_seconds = 0
    written = 0
    # ISO local times, as sacct prints them without SLURM_TIME_FORMAT=%s
    fmt = (lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))) if iso else str
    job = 1_000_000
    with open(path, "w", buffering=1 << 20) as fh:
        fh.write("|".join(FIELDS) + "\n")
        while written < rows:
            job += 1
            user = rng.choice(users)
            account = accounts[hash(user) % len(accounts)] if rng.random() < 0.9 else rng.choice(accounts)
            part = rng.choice(partitions)
            nodes = 1 if rng.random() < 0.85 else rng.choice((2, 4, 8))
            per_node = rng.choice((0, 1, 2, 4, 8, 8))
            gpus = per_node * nodes
            gt = rng.choice(gtypes)
            first_node = rng.randrange(1, 500)
            last_node = first_node + nodes - 1
            nodelist = f"gpu{first_node:03d}" if nodes == 1 else f"gpu[{first_node:03d}-{last_node:03d}]"
            cpus = max(1, gpus) * 8 * nodes
            gres = f"gres/gpu:{gt}={gpus},gres/gpu={gpus}," if gpus else ""
            tres = f"billing={cpus},cpu={cpus}," + gres + f"mem={cpus * 4}G,node={nodes}"
            array = rng.random() < 0.1
            attempts = 2 if rng.random() < 0.03 else 1  # requeued: two job rows with the same JobIDRaw
            submit = WINDOW_START + rng.randrange(0, WINDOW_DAYS * 86400 - 7200)
            name = rng.choice(("train", "eval|sweep", "prep", "llama-70b", "a|b|c"))
            for attempt in range(attempts):
                if written >= rows:
                    break
                start = submit + rng.randrange(0, 600)
                end = start + rng.randrange(1, 3600)
                state = "REQUEUED" if attempt < attempts - 1 else rng.choice(states)
                jid = f"{job}_{rng.randrange(100)}" if array else str(job)
                fh.write(
                    f"{jid}|{job}|{state}|{tres}|{fmt(submit)}|{fmt(start)}|{fmt(end)}|{end - start}|"
                    f"{user}|{account}|{part}|{nodelist}|None|{name}\n"
                )
                gpu_seconds += gpus * (end - start)
                written += 1
                step_tres = f"cpu={cpus},gres/gpu:{gt}={gpus},gres/gpu={gpus},mem={cpus * 4}G,node={nodes}"
                for step in ("batch", "extern") + (("0",) if rng.random() < 0.5 else ()):
                    if written >= rows:
                        break
                    fh.write(
                        f"{jid}.{step}|{job}.{step}|{state}|{step_tres}|{fmt(submit)}|{fmt(start)}|"
                        f"{fmt(end)}|{end - start}||{account}||{nodelist}||{step}\n"
                    )
                    written += 1
                submit = end
    return gpu_seconds / 3600


def timed(argv, repeat: int):
    """Best wall time and best CPU time (user + sys of the child) of ``repeat`` runs.

    CPU time is printed too because the build machine is shared: under load the wall
    time of both sides stretches, the CPU time much less."""
    best, best_cpu, out = None, None, ""
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        dt = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {proc.stderr[-500:]}")
        out = proc.stdout
        best = dt if best is None else min(best, dt)
        best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
    return best, best_cpu, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--keep", help="write the generated file here and keep it")
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs for each side")
    ap.add_argument(
        "--times",
        choices=("epoch", "iso"),
        default="epoch",
        help="epoch: what slurmkit's own sacct call returns (SLURM_TIME_FORMAT=%%s); "
        "iso: local ISO times, as in a dump saved without it",
    )
    args = ap.parse_args()

    tmpdir = tempfile.mkdtemp(prefix="slurmkit-bench-")
    path = args.keep or os.path.join(tmpdir, "sacct-1m.txt")
    t0 = time.perf_counter()
    expected = generate(path, args.rows, iso=args.times == "iso")
    gen_s = time.perf_counter() - t0
    size_mb = os.path.getsize(path) / 1e6
    print(
        f"file: {path} ({args.rows:,} rows, {args.times} times, {size_mb:.0f} MB, generated in {gen_s:.1f}s); "
        f"expected {expected:,.3f} GPU-hours"
    )

    env_python = sys.executable
    report_argv = [
        env_python,
        "-m",
        "slurmkit.cli.main",
        "report",
        "--trust-free-text",  # the generated names hold `|`: our own, trusted dump
        "--sacct-file",
        path,
        "--by",
        "account,user",
        "--format",
        "json",
    ]
    results = {}
    names = {}
    for awk in ("awk", "gawk", "mawk"):
        exe = shutil.which(awk)
        if exe and os.path.realpath(exe) not in names.values():
            names[awk] = os.path.realpath(exe)
            program = AWK_PROGRAM_ISO if args.times == "iso" else AWK_PROGRAM
            dt, cpu, out = timed([awk, "-F", "|", program, path], args.repeat)
            results[awk] = (dt, cpu, float(out.strip()))
    dt, cpu, out = timed(report_argv, args.repeat)
    data = json.loads(out)
    report_hours = data["totals"]["gpu_hours"]
    results["slurmkit"] = (dt, cpu, report_hours)

    for name, (w, c, h) in results.items():
        label = (
            f"{name} ({os.path.basename(names[name])})"
            if name in names
            else "slurmkit report --by account,user --format json"
        )
        print(f"{label}: wall {w:.2f}s, cpu {c:.2f}s -> {h:,.3f} GPU-hours")
    for awk in names:
        w, c, _ = results[awk]
        base = os.path.basename(names[awk])
        print(f"ratio slurmkit/{awk} ({base}): wall {dt / w:.2f}x, cpu {cpu / c:.2f}x (goal <= 2x)")
    ok = all(abs(v[2] - expected) < 0.01 for v in results.values())
    print("totals agree" if ok else "TOTALS DIFFER")
    if not args.keep:
        shutil.rmtree(tmpdir, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
