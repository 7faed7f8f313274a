#!/usr/bin/env python3
"""Generate a *dirty* saved sacct dump, as users save them, for the report benchmarks.

    TZ=UTC .venv/bin/python benchmarks/report_gen_dirty.py OUT.txt --rows 1000000
    TZ=UTC .venv/bin/python benchmarks/report_gen_dirty.py OUT.txt --rows 10000000 --months 10

Next to :mod:`report_gen` (epoch times, clean rows), this one has what a plain
``sacct -a -D -P --format=<slurmkit's columns>`` dump holds (issue 26):

* ISO local times as ``sacct -P`` prints them (``2026-11-03T14:05:09``; written in the
  generator's ``TZ``: run it, and the reports, with ``TZ=UTC`` to compare with awk);
* about one malformed row per 500,000, alternately a truncated line and an unparsable time;
* array tasks (``123_4``, JobIDRaw their own id) and heterogeneous jobs (``123+0``,
  ``123+1``), requeued attempts (``REQUEUED`` then a final state, one JobIDRaw), typed and
  untyped GRES, ``.batch``/``.extern``/``.0`` steps;
* some exact duplicate rows (about one in 100,000 job rows written twice, as when two
  overlapping dumps are concatenated).

No free-text column: the dump has the columns of slurmkit's recommended command. Printed:
the expected total of the rows a report counts (no malformed row, each duplicate once), and
awk's total over every job row (duplicates twice, malformed rows as they parse).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from slurmkit.report.sacct import QUERY_FIELDS  # noqa: E402

FIRST_MONTH = 1764547200  # 2025-12-01T00:00:00Z
MONTH = 30 * 86400
MALFORMED_EVERY = 500_000
DUPLICATE_EVERY = 100_000


def iso(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def write_month(fh, rows: int, month: int, seed: int, counter: list) -> int:
    """Write ``rows`` rows of month ``month``; return the GPU-seconds a report counts."""
    rng = random.Random(seed * 1000 + month)
    users = [f"user{i:03d}" for i in range(200)]
    accounts = [f"acct{i:02d}" for i in range(20)]
    partitions = ["gpu", "debug", "sweep", "long"]
    gtypes = ["h100", "h200", "a100"]
    states = ["COMPLETED"] * 12 + ["FAILED", "CANCELLED by 1234", "TIMEOUT", "NODE_FAIL", "PREEMPTED"]
    start0 = FIRST_MONTH + month * MONTH
    counted = 0
    written = 0
    job = 1_000_000 + month * 10_000_000
    out = []

    def emit(line: str, gpu_s: int, job_row: bool) -> None:
        nonlocal written, counted
        counter[0] += 1
        if counter[0] % MALFORMED_EVERY == 0:
            counter[1] += 1  # the next job row is made malformed
        if counter[0] % DUPLICATE_EVERY == 0:
            counter[2] += 1  # the next job row is written twice
        if job_row and counter[1]:
            counter[1] -= 1
            counter[3] += 1
            if counter[3] % 2:
                out.append(line[: len(line) // 2] + "\n")  # a truncated line
            else:
                fields = line.rstrip("\n").split("|")
                fields[5] = fields[5].replace("-", "/")  # an unparsable Start
                out.append("|".join(fields) + "\n")
            written += 1
            return
        out.append(line)
        written += 1
        counted += gpu_s
        if job_row and counter[2] and written < rows:
            counter[2] -= 1
            out.append(line)  # an exact duplicate: counted once
            written += 1

    while written < rows:
        job += 1
        user = users[rng.randrange(200)]
        account = accounts[int(user[4:]) % 20] if rng.random() < 0.9 else accounts[rng.randrange(20)]
        part = partitions[rng.randrange(4)]
        nodes = 1 if rng.random() < 0.85 else (2, 4, 8)[rng.randrange(3)]
        gpus = (0, 1, 2, 4, 8, 8)[rng.randrange(6)] * nodes
        typed = rng.random() < 0.5
        gt = gtypes[rng.randrange(3)]
        first = rng.randrange(1, 500)
        nodelist = f"gpu{first:03d}" if nodes == 1 else f"gpu[{first:03d}-{first + nodes - 1:03d}]"
        cpus = max(1, gpus) * 8 * nodes
        gres = (f"gres/gpu:{gt}={gpus},gres/gpu={gpus}," if typed else f"gres/gpu={gpus},") if gpus else ""
        tres = f"billing={cpus},cpu={cpus},{gres}mem={cpus * 4}G,node={nodes}"
        kind = rng.random()
        if kind < 0.1:  # an array task: its own raw id, at least the array's
            ids = [(f"{job - rng.randrange(0, 50)}_{rng.randrange(100)}", str(job))]
        elif kind < 0.13:  # a heterogeneous job of two components
            ids = [(f"{job}+0", str(job)), (f"{job}+1", str(job + 1))]
            job += 1
        else:
            ids = [(str(job), str(job))]
        attempts = 2 if rng.random() < 0.03 else 1
        submit = start0 + rng.randrange(0, MONTH - 7200)
        for jid, raw in ids:
            t = submit
            for attempt in range(attempts):
                if written >= rows:
                    break
                start = t + rng.randrange(0, 600)
                end = start + rng.randrange(1, 3600)
                state = "REQUEUED" if attempt < attempts - 1 else states[rng.randrange(len(states))]
                reason = (
                    "launch_failed_requeued_held" if state == "REQUEUED" and rng.random() < 0.1 else "None"
                )
                emit(
                    f"{jid}|{raw}|{state}|{tres}|{iso(submit)}|{iso(start)}|{iso(end)}|{end - start}|{user}|"
                    f"{account}|{part}|{nodelist}|{reason}\n",
                    gpus * (end - start),
                    True,
                )
                step_tres = f"cpu={cpus},{gres}mem={cpus * 4}G,node={nodes}"
                for step in ("batch", "extern", "0")[: 3 if rng.random() < 0.5 else 2]:
                    if written >= rows:
                        break
                    emit(
                        f"{jid}.{step}|{raw}.{step}|{state}|{step_tres}|{iso(submit)}|{iso(start)}|{iso(end)}|"
                        f"{end - start}||{account}||{nodelist}|\n",
                        0,
                        False,
                    )
                t = end
        if len(out) > 50_000:
            fh.write("".join(out))
            out.clear()
    fh.write("".join(out))
    return counted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--months", type=int, default=1)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    t0 = time.perf_counter()
    total = 0
    counter = [0, 0, 0, 0]  # rows, malformed due, duplicates due, malformed written
    with open(args.out, "w", buffering=1 << 20) as fh:
        fh.write("|".join(QUERY_FIELDS) + "\n")
        per = args.rows // args.months
        for m in range(args.months):
            rows = per if m < args.months - 1 else args.rows - per * (args.months - 1)
            total += write_month(fh, rows, m, args.seed, counter)
    print(
        f"{args.out}: {args.rows:,} rows, {args.months} month(s), {os.path.getsize(args.out) / 1e6:.0f} MB "
        f"in {time.perf_counter() - t0:.1f}s; a report counts {total / 3600:.6f} GPU-hours"
    )


if __name__ == "__main__":
    main()
