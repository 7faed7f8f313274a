#!/usr/bin/env python3
"""Benchmark: the DuckDB engine's first statement, storing a dump's lines, two ways.

    .venv/bin/python benchmarks/report_lines.py /tmp/report-dirty-10m.txt [--runs 3]

``window``: the job lines numbered by ``row_number() OVER ()`` (a streaming window: one thread),
steps dropped, as before 2026-12-03; ``place``: what ``engine.read_lines`` does now, every line
stored in the file's order (``preserve_insertion_order`` for the statement) with steps as NULL,
numbered later by ``rowid``. Each run in a new session with the engine's settings
(``engine.session``); prints the wall time of the statement and the process's peak RSS so far.
"""

from __future__ import annotations

import argparse
import resource
import time

from slurmkit.report import engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    plan = engine._Plan(engine.probe_file(args.file))
    place = (
        plan.lines()
    )  # SELECT CASE WHEN <step> THEN NULL ELSE l END AS l, <step> AS step FROM read_csv(...)
    step = place[len("SELECT CASE WHEN ") : place.index(" THEN NULL")]
    reader = place[place.index(" FROM read_csv(") :]
    window = f"SELECT ln, l FROM (SELECT row_number() OVER () AS ln, l{reader}) WHERE NOT {step}"
    for run in range(args.runs):
        for name, sql, ordered in (("window", window, False), ("place", place, True)):
            with engine.session() as con:
                con.execute(f"SET preserve_insertion_order = {str(ordered).lower()}")
                t0 = time.perf_counter()
                con.execute(f"CREATE TEMP TABLE lines AS {sql}")
                wall = time.perf_counter() - t0
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"run {run + 1} {name:6s} {wall:6.3f} s   peak RSS so far {peak:.0f} MiB")


if __name__ == "__main__":
    main()
