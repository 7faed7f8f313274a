#!/usr/bin/env python3
"""The accounting archive: ingest a dump, then time every ``--by`` view over all of it.

    .venv/bin/python benchmarks/report_gen.py /tmp/sacct-10m.txt --rows 10000000 --months 10
    .venv/bin/python benchmarks/report_archive.py /tmp/sacct-10m.txt /tmp/archive [--runs 3] [--timeout 300]

Prints the ingest's wall time and peak RSS, then for each view the median wall time
of ``--runs`` alternating runs of ``slurmkit report --archive DIR --by VIEW --format
json`` (whole processes under ``/usr/bin/time -v``) with the window covering the whole
archive, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from report_engines import compile_package, timed  # noqa: E402

VIEWS = ["user", "account,user", "state", "partition", "gpu_type", "node", "day", "week", "month"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("archive")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--since", default="2026-09-01")
    ap.add_argument("--until", default="2027-09-01")
    ap.add_argument("--views", default=" ".join(VIEWS), help="space-separated --by values")
    ap.add_argument("--reuse", action="store_true", help="time the views of an archive already ingested")
    args = ap.parse_args()
    compile_package()
    py = sys.executable
    with open("/proc/loadavg") as fh:
        load_before = fh.read().split()[:3]
    if not args.reuse:
        shutil.rmtree(args.archive, ignore_errors=True)
        wall, rss, _ = timed(
            [
                py,
                "-m",
                "slurmkit.cli.main",
                "report",
                "ingest",
                "--archive",
                args.archive,
                "--trust-free-text",  # the generated names hold `|`: our own, trusted dump
                "--sacct-file",
                args.file,
            ],
            args.timeout,
        )
        size = (
            sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(args.archive) for f in fs) / 1e6
        )
        print(f"ingest {args.file}: {wall:.1f} s, peak RSS {rss:.0f} MiB, archive {size:.0f} MB")

    views = args.views.split()
    samples = {v: [] for v in views}
    totals = {}
    for _ in range(args.runs):
        for v in views:
            w, r, out = timed(
                [
                    py,
                    "-m",
                    "slurmkit.cli.main",
                    "report",
                    "--archive",
                    args.archive,
                    "--since",
                    args.since,
                    "--until",
                    args.until,
                    "--by",
                    v,
                    "--format",
                    "json",
                    "--no-health-log",
                ],
                args.timeout,
            )
            samples[v].append((w, r))
            data = json.loads(out)
            totals[v] = (data["totals"]["gpu_hours"], data["meta"]["engine"]["name"], len(data["rows"]))
    with open("/proc/loadavg") as fh:
        load_after = fh.read().split()[:3]
    print(
        f"median of {args.runs} alternating runs; load average before {' '.join(load_before)}, "
        f"after {' '.join(load_after)}"
    )
    print("| view | wall (median) | peak RSS | rows | GPU-hours | engine |")
    print("|---|---|---|---|---|---|")
    for v, vals in samples.items():
        hours, eng, n = totals[v]
        print(
            f"| --by {v} | {statistics.median(w for w, _ in vals):.2f} s | {max(r for _, r in vals):.0f} MiB "
            f"| {n:,} | {hours:,.3f} | {eng} |"
        )


if __name__ == "__main__":
    main()
