#!/usr/bin/env python3
"""Benchmark: what the progress line costs (issue 26 item 5). The same command runs with
stderr a pseudo-terminal (progress shown, the default 4 updates a second) and a pipe (no
progress), alternating, so a busy machine weighs on both alike.

    TZ=UTC .venv/bin/python benchmarks/report_progress.py /tmp/report-1m.txt --runs 3

The file is a saved dump (``report_gen.py``); the commands: the usage report by user with the
DuckDB engine and with the reference (``--engine python``), and ``report ingest`` into a fresh
archive. Prints per command the median wall and CPU time (user + sys of the child) of each mode,
their range, and the difference.
"""

from __future__ import annotations

import argparse
import os
import pty
import resource
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(argv, env, tty: bool):
    """``(wall, CPU)`` seconds of one run (CPU: user + sys of the child, the steadier figure)."""
    t0, c0 = time.perf_counter(), _cpu()
    if not tty:
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return time.perf_counter() - t0, _cpu() - c0
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    while True:  # drain the terminal until the child closes it
        select.select([leader], [], [], 600)
        try:
            if not os.read(leader, 65536):
                break
        except OSError:
            break
    os.close(leader)
    if proc.wait() != 0:
        raise SystemExit(f"{argv}: exit {proc.returncode}")
    return time.perf_counter() - t0, _cpu() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dump")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    py = sys.executable
    env = dict(os.environ)
    work = tempfile.mkdtemp(prefix="report-progress-")
    cfg = os.path.join(work, "slurmkit.yaml")
    os.mkdir(os.path.join(work, "log"))
    with open(cfg, "w") as fh:
        fh.write(f"paths:\n  log_dir: {work}/log\n  state_dir: {work}\n")
    env["SLURMKIT_CONFIG"] = cfg
    base = [py, "-m", "slurmkit.cli.main", "report"]
    commands = {
        "report --by user, duckdb": base + ["--sacct-file", args.dump, "--trust-free-text", "--by", "user",
                                            "--engine", "duckdb", "--json"],
        "report --by user, python": base + ["--sacct-file", args.dump, "--trust-free-text", "--by", "user",
                                            "--engine", "python", "--json"],
        "report ingest": base + ["ingest", "--sacct-file", args.dump, "--trust-free-text", "--archive"],
    }  # fmt: skip
    try:
        for name, argv in commands.items():
            times = {True: [], False: []}
            for i in range(args.runs):
                for tty in (False, True):
                    cmd = list(argv)
                    if name == "report ingest":
                        cmd.append(os.path.join(work, f"a{i}{int(tty)}"))
                    times[tty].append(run(cmd, env, tty))
            for k, what in ((0, "wall"), (1, "CPU")):
                a = [t[k] for t in times[False]]
                b = [t[k] for t in times[True]]
                off, on = statistics.median(a), statistics.median(b)
                print(
                    f"{name:26s} {what:4s} no progress {off:6.2f} s ({min(a):.2f}-{max(a):.2f}), "
                    f"progress {on:6.2f} s ({min(b):.2f}-{max(b):.2f}), difference {100 * (on - off) / off:+.1f}%",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
