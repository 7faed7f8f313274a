#!/usr/bin/env python3
"""``slurmkit report`` engines against mawk and gawk on the same saved dump.

    .venv/bin/python benchmarks/report_gen.py /tmp/sacct-1m.txt --rows 1000000
    .venv/bin/python benchmarks/report_engines.py /tmp/sacct-1m.txt --runs 5 [--by user] [--timeout 300]

Each round runs every command once, in turn (alternating, so a burst of load on the
shared machine hits all of them alike), as a whole process under ``/usr/bin/time -v``:
wall time and peak RSS. Prints the median of the rounds per command, the ratio to
mawk, the machine load (``/proc/loadavg``) before and after, and checks that every
command found the same total GPU-hours. awk does the least any report must do: one
pass summing GPUs x (End - Start) over the job rows (no clipping, grouping, distinct
jobs, lost hours or waits); slurmkit computes the full ``--by`` report as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

AWK = r"""NR > 1 && $1 !~ /\./ {
    g = 0
    if (match($4, /gres\/gpu=[0-9]+/)) g = substr($4, RSTART + 9, RLENGTH - 9) + 0
    s += g * ($7 - $6)
}
END { printf "%.6f\n", s / 3600 }"""


def compile_package() -> None:
    """Write slurmkit's bytecode first, as ``pip install`` does. A checkout installed in
    editable mode has none, and with ``PYTHONDONTWRITEBYTECODE=1`` (set on these machines)
    every run would compile every module it imports again (~60 ms per process)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(root, "slurmkit")], check=True)


def timed(argv, timeout, cwd=None):
    """``(wall s, peak RSS MiB, stdout)`` of one run under /usr/bin/time -v."""
    proc = subprocess.run(
        ["/usr/bin/time", "-v", *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {proc.stderr[-800:]}")
    wall = re.search(
        r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", proc.stderr
    )
    h, m, s = (float(x) if x else 0.0 for x in wall.groups())
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1)) / 1024
    return h * 3600 + m * 60 + s, rss, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--by", default="user")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per command run")
    ap.add_argument("--engines", default="duckdb,python")
    ap.add_argument("--awks", default="mawk,gawk", help="the awks to time (mawk is the baseline)")
    args = ap.parse_args()
    compile_package()
    py = sys.executable
    commands = {}
    for awk in args.awks.split(","):
        if shutil.which(awk):
            commands[awk] = [awk, "-F", "|", AWK, args.file]
    for eng in args.engines.split(","):
        commands[f"slurmkit report --engine {eng}"] = [
            py,
            "-m",
            "slurmkit.cli.main",
            "report",
            "--trust-free-text",  # the generated names hold `|`: our own, trusted dump
            "--sacct-file",
            args.file,
            "--by",
            args.by,
            "--format",
            "json",
            "--no-health-log",
            "--engine",
            eng,
        ]
    with open("/proc/loadavg") as fh:
        load_before = fh.read().split()[:3]
    samples = {name: [] for name in commands}
    totals = {}
    for _ in range(args.runs):
        for name, argv in commands.items():
            wall, rss, out = timed(argv, args.timeout)
            samples[name].append((wall, rss))
            totals[name] = float(out.strip()) if "awk" in name else json.loads(out)["totals"]["gpu_hours"]
    with open("/proc/loadavg") as fh:
        load_after = fh.read().split()[:3]
    size = os.path.getsize(args.file) / 1e6
    print(
        f"file {args.file} ({size:.0f} MB), --by {args.by}, median of {args.runs} alternating runs; "
        f"load average before {' '.join(load_before)}, after {' '.join(load_after)}"
    )
    base = statistics.median(w for w, _ in samples["mawk"]) if "mawk" in samples else None
    print("| command | wall (median) | x mawk | peak RSS | GPU-hours |")
    print("|---|---|---|---|---|")
    for name, vals in samples.items():
        wall = statistics.median(w for w, _ in vals)
        rss = max(r for _, r in vals)
        ratio = f"{wall / base:.2f}" if base else "-"
        print(f"| {name} | {wall:.2f} s | {ratio} | {rss:.0f} MiB | {totals[name]:,.3f} |")
    first = next(iter(totals.values()))
    ok = all(abs(v - first) < 0.01 for v in totals.values())
    print("totals agree" if ok else "TOTALS DIFFER")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
