#!/usr/bin/env python3
"""Two or more versions of slurmkit over archives, every ``--by`` view, in alternation.

    .venv/bin/python benchmarks/report_archive_compare.py --runs 5 \\
        --case before=/tmp/old-tree:/tmp/archive-v1 --case after=.:/tmp/archive-v2

Each case is ``NAME=TREE:ARCHIVE``: ``slurmkit report --archive ARCHIVE --by VIEW --format
json`` runs with TREE as the working directory, so ``python -m`` imports that tree's slurmkit
(a copy of an older commit, ``git archive REV | tar -x -C DIR``), with this interpreter and its
dependencies. One round runs every view under every case, one after the other, so a slow
phase of the machine hits all cases alike; the table gives each median with its range.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from report_archive import VIEWS  # noqa: E402
from report_engines import timed  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", required=True, help="NAME=TREE:ARCHIVE (two or more)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--since", default="2025-12-01")
    ap.add_argument("--until", default="2026-12-01")
    ap.add_argument("--views", default=" ".join(VIEWS), help="space-separated --by values")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    cases = []
    for spec in args.case:
        name, _, rest = spec.partition("=")
        tree, _, archive = rest.partition(":")
        if not (name and tree and archive):
            ap.error(f"--case {spec!r}: expected NAME=TREE:ARCHIVE")
        tree, archive = os.path.abspath(tree), os.path.abspath(archive)
        # bytecode first, as pip install writes it (see report_engines.compile_package)
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(tree, "slurmkit")], check=True)
        cases.append((name, tree, archive))
    views = args.views.split()
    with open("/proc/loadavg") as fh:
        load_before = fh.read().split()[:3]
    walls: dict = {}
    rss: dict = {}
    for _ in range(args.runs):
        for view in views:
            for name, tree, archive in cases:
                argv = [sys.executable, "-m", "slurmkit.cli.main", "report", "--archive", archive]
                argv += ["--by", view, "--since", args.since, "--until", args.until, "--format", "json"]
                wall, peak, _ = timed(argv, args.timeout, cwd=tree)
                walls.setdefault((view, name), []).append(wall)
                rss[(view, name)] = max(rss.get((view, name), 0), peak)
    with open("/proc/loadavg") as fh:
        load_after = fh.read().split()[:3]
    print(
        f"median of {args.runs} alternating runs (range); load average before {' '.join(load_before)}, "
        f"after {' '.join(load_after)}"
    )
    print("| view | " + " | ".join(name for name, _, _ in cases) + " |")
    print("|---|" + "---|" * len(cases))
    for view in views:
        cells = []
        for name, _, _ in cases:
            w = walls[(view, name)]
            cells.append(
                f"{statistics.median(w):.2f} s ({min(w):.2f}–{max(w):.2f}), {rss[(view, name)]:.0f} MiB"
            )
        print(f"| `--by {view}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
