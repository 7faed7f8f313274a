#!/usr/bin/env python3
"""Benchmark: ``slurmkit report`` against mawk's one-pass GPU-hour sum, on dumps made by
``report_gen_dirty.py`` (ISO times, bad rows, duplicates) and ``report_gen.py`` (clean),
run side by side (alternating, in one run, so a busy machine weighs on both alike).

    TZ=UTC .venv/bin/python benchmarks/report_dirty.py /tmp/report-dirty-1m.txt /tmp/report-1m.txt --runs 3
    TZ=UTC .venv/bin/python benchmarks/report_dirty.py /tmp/report-dirty-1m.txt --base /tmp/report-base

``--base DIR``: also run another checkout's ``slurmkit`` (``git archive COMMIT slurmkit | tar -x -C
DIR``), imported through ``PYTHONPATH`` (every command runs from ``/``, so neither checkout is
imported from the working directory); ``--engines``: the engines to run (default duckdb,auto).

mawk's sum: for each job row (JobID without a dot), GPUs from ``gres/gpu=N`` times
End - Start, the ISO times turned into epochs by the civil-calendar arithmetic in awk (UTC:
run with ``TZ=UTC``), or taken as they are when they are epochs. It does the least any
report must do, and none of the checks (duplicates and bad rows are summed as they parse).
Prints, per file and command, the median wall time, its range, the median CPU time (user and
system, every thread: steadier than the wall time on a shared host) and the peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

AWK = r"""
function ep(t,  y, m, d) {
    if (t ~ /^[0-9]+$/) return t + 0
    y = substr(t, 1, 4) + 0; m = substr(t, 6, 2) + 0; d = substr(t, 9, 2) + 0
    if (m <= 2) { y--; m += 12 }
    return (365 * y + int(y / 4) - int(y / 100) + int(y / 400) + int((153 * (m - 3) + 2) / 5) + d - 719469) * 86400 \
        + substr(t, 12, 2) * 3600 + substr(t, 15, 2) * 60 + substr(t, 18, 2)
}
NR > 1 && $1 !~ /\./ {
    if (match($4, /gres\/gpu=[0-9]+/)) s += substr($4, RSTART + 9, RLENGTH - 9) * (ep($7) - ep($6))
}
END { printf "%.6f\n", s / 3600 }
"""


def timed(argv, env):
    """Wall seconds, CPU seconds (user and system, all threads), peak RSS (MiB), stdout, exit code."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd="/")
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    cpu = usage.ru_utime + usage.ru_stime
    return time.perf_counter() - t0, cpu, usage.ru_maxrss / 1024, out, os.waitstatus_to_exitcode(status)


def _answer(out: bytes) -> str:
    """The report's JSON without what differs from run to run or by engine (when, and which engine)."""
    try:
        doc = json.loads(out)
    except ValueError:
        return "not JSON"
    for key in ("generated_at", "engine"):
        doc.get("meta", {}).pop(key, None)
    return json.dumps(doc, sort_keys=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--by", default="user")
    ap.add_argument("--base", help="another checkout's directory holding slurmkit/, run side by side")
    ap.add_argument("--engines", default="duckdb,auto")
    args = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checkouts = {"": here}
    if args.base:
        checkouts["base "] = os.path.abspath(args.base)
    py = sys.executable
    for where in checkouts.values():
        # bytecode as an installed package has it: with PYTHONDONTWRITEBYTECODE set, a checkout's
        # edited modules would otherwise be compiled again by every run (about 50 ms here)
        subprocess.run([py, "-m", "compileall", "-q", os.path.join(where, "slurmkit")], check=True,
                       stdout=subprocess.DEVNULL, env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})  # fmt: skip
    # (a base older than --trust-free-text, such as f9d397b, trusted free text without it)
    trust = {}
    for where in checkouts.values():
        with open(os.path.join(where, "slurmkit", "cli", "report.py"), encoding="utf-8") as fh:
            trust[where] = ["--trust-free-text"] if "--trust-free-text" in fh.read() else []
    commands = {}
    envs = {}
    for f in args.files:
        f = os.path.abspath(f)
        if shutil.which("mawk"):
            commands[(f, "mawk")] = ["mawk", "-F", "|", AWK, f]
            envs[(f, "mawk")] = dict(os.environ)
        for label, where in checkouts.items():
            for eng in args.engines.split(","):
                key = (f, f"{label}slurmkit --engine {eng}")
                commands[key] = [
                    py, "-m", "slurmkit.cli.main", "report", "--sacct-file", f, *trust[where],
                    "--by", args.by, "--format", "json", "--no-health-log", "--engine", eng,
                ]  # fmt: skip
                envs[key] = dict(os.environ, PYTHONPATH=where)
    samples = {k: [] for k in commands}
    cpus = {k: [] for k in commands}
    rss = {k: 0.0 for k in commands}
    outputs = {k: set() for k in commands}
    with open("/proc/loadavg") as fh:
        print("load before:", fh.read().split()[:3])
    for _ in range(args.runs):
        for k, argv in commands.items():
            wall, cpu, peak, out, rc = timed(argv, envs[k])
            samples[k].append(wall)
            cpus[k].append(cpu)
            rss[k] = max(rss[k], peak)
            outputs[k].add(_answer(out) if k[1] != "mawk" else out)
            if rc != 0:
                print(f"{k}: exit {rc}")
    with open("/proc/loadavg") as fh:
        print("load after:", fh.read().split()[:3])
    for f in dict.fromkeys(f for f, _ in commands):
        answers = set().union(*(o for (g, name), o in outputs.items() if g == f and name != "mawk"))
        print(f"{os.path.basename(f)}: the slurmkit commands printed {len(answers)} distinct output(s)")
    for (f, name), xs in samples.items():
        mawk = statistics.median(samples[(f, "mawk")]) if (f, "mawk") in samples else None
        ratio = f" ({statistics.median(xs) / mawk:.2f}x mawk)" if mawk and name != "mawk" else ""
        print(
            f"{os.path.basename(f)}  {name:29s} median {statistics.median(xs):6.2f} s "
            f"({min(xs):.2f}-{max(xs):.2f}){ratio}, CPU {statistics.median(cpus[(f, name)]):.2f} s, "
            f"peak RSS {rss[(f, name)]:.0f} MiB"
        )


if __name__ == "__main__":
    main()
