#!/usr/bin/env python3
"""Generate synthetic saved sacct dumps for the report benchmarks.

    .venv/bin/python benchmarks/report_gen.py OUT.txt --rows 1000000            # one month
    .venv/bin/python benchmarks/report_gen.py OUT.txt --rows 10000000 --months 10  # 10 concatenated months

The format is what ``slurmkit report`` asks sacct for (``SLURM_TIME_FORMAT=%s``, ``|``
delimiter, header line): job rows mixed with ``.batch``/``.extern``/``.0`` step rows,
typed and untyped GPUs, multi-node jobs, array tasks, requeued attempts (two job rows
with one JobIDRaw), CPU-only jobs and job names containing ``|``. ``--months N`` writes
N consecutive 30-day months of ``rows / N`` rows each (own job ids and times), so a
10M file is ten 1M months one after the other, as a year of monthly dumps would be.
All jobs finish inside their month, so a one-pass awk sum of GPUs x (End - Start)
over the job rows must equal the report's total; the expected total is printed.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from slurmkit.report.sacct import FIELDS  # noqa: E402

FIRST_MONTH = 1764547200  # 2025-12-01T00:00:00Z: ten 30-day months end before 2026-09-27, in the past
MONTH = 30 * 86400


def write_month(fh, rows: int, month: int, seed: int) -> int:
    """Write ``rows`` rows of month ``month``; return the GPU-seconds of its job rows."""
    rng = random.Random(seed * 1000 + month)
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
    start0 = FIRST_MONTH + month * MONTH
    gpu_seconds = 0
    written = 0
    job = 1_000_000 + month * 10_000_000
    out = []
    while written < rows:
        job += 1
        user = users[rng.randrange(200)]
        account = accounts[int(user[4:]) % 20] if rng.random() < 0.9 else accounts[rng.randrange(20)]
        part = partitions[rng.randrange(4)]
        nodes = 1 if rng.random() < 0.85 else (2, 4, 8)[rng.randrange(3)]
        gpus = (0, 1, 2, 4, 8, 8)[rng.randrange(6)] * nodes
        gt = gtypes[rng.randrange(3)]
        first = rng.randrange(1, 500)
        nodelist = f"gpu{first:03d}" if nodes == 1 else f"gpu[{first:03d}-{first + nodes - 1:03d}]"
        cpus = max(1, gpus) * 8 * nodes
        gres = f"gres/gpu:{gt}={gpus},gres/gpu={gpus}," if gpus else ""
        tres = f"billing={cpus},cpu={cpus},{gres}mem={cpus * 4}G,node={nodes}"
        array = rng.random() < 0.1
        attempts = 2 if rng.random() < 0.03 else 1
        submit = start0 + rng.randrange(0, MONTH - 7200)
        name = ("train", "eval|sweep", "prep", "llama-70b", "a|b|c")[rng.randrange(5)]
        jid = f"{job}_{rng.randrange(100)}" if array else str(job)
        for attempt in range(attempts):
            if written >= rows:
                break
            start = submit + rng.randrange(0, 600)
            end = start + rng.randrange(1, 3600)
            state = "REQUEUED" if attempt < attempts - 1 else states[rng.randrange(len(states))]
            out.append(
                f"{jid}|{job}|{state}|{tres}|{submit}|{start}|{end}|{end - start}|{user}|{account}|"
                f"{part}|{nodelist}|None|{name}\n"
            )
            gpu_seconds += gpus * (end - start)
            written += 1
            step_tres = f"cpu={cpus},gres/gpu:{gt}={gpus},gres/gpu={gpus},mem={cpus * 4}G,node={nodes}"
            for step in ("batch", "extern", "0")[: 3 if rng.random() < 0.5 else 2]:
                if written >= rows:
                    break
                out.append(
                    f"{jid}.{step}|{job}.{step}|{state}|{step_tres}|{submit}|{start}|{end}|"
                    f"{end - start}||{account}||{nodelist}||{step}\n"
                )
                written += 1
            submit = end
        if len(out) > 50_000:
            fh.write("".join(out))
            out.clear()
    fh.write("".join(out))
    return gpu_seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--months", type=int, default=1)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    t0 = time.perf_counter()
    total = 0
    with open(args.out, "w", buffering=1 << 20) as fh:
        fh.write("|".join(FIELDS) + "\n")
        per = args.rows // args.months
        for m in range(args.months):
            total += write_month(
                fh, per if m < args.months - 1 else args.rows - per * (args.months - 1), m, args.seed
            )
    print(
        f"{args.out}: {args.rows:,} rows, {args.months} month(s), {os.path.getsize(args.out) / 1e6:.0f} MB "
        f"in {time.perf_counter() - t0:.1f}s; expected total {total / 3600:.6f} GPU-hours"
    )


if __name__ == "__main__":
    main()
