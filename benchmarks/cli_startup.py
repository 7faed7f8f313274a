"""Start-up time of the CLIs, as whole processes: `slurmkit --help`, `ssubmit --help`.

    python benchmarks/cli_startup.py [--runs 30]

Prints p50 and p95 wall time per command and the modules that cost most at import
(from `python -X importtime`). Goal: well under 0.2 s, and never torch or triton.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "slurmkit --help": ["slurmkit.cli.main", "--help"],
    "ssubmit --help": ["slurmkit.cli.ssubmit", "--help"],
    "slurmkit health list": ["slurmkit.cli.main", "health", "list"],
    "slurmkit report --help": ["slurmkit.cli.main", "report", "--help"],
}


def _bin(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


def time_runs(argv, runs):
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def top_imports(module_args, n=6):
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", *module_args], capture_output=True, text=True
    )
    rows = []
    for line in res.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            parts = [p.strip() for p in line[len("import time:") :].split("|")]
            if parts[0].isdigit():
                rows.append((int(parts[1]), parts[2].strip()))
    heavy = [name for _, name in rows if name.split(".")[0] in ("torch", "triton")]
    rows.sort(reverse=True)
    return rows[:n], heavy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    print(f"{'command':<24} {'p50 s':>8} {'p95 s':>8}  torch/triton imported")
    for label, module_args in COMMANDS.items():
        exe = _bin(label.split()[0])
        argv = [exe, *label.split()[1:]] if os.path.exists(exe) else [sys.executable, "-m", *module_args]
        p50, p95 = time_runs(argv, args.runs)
        top, heavy = top_imports(module_args)
        print(f"{label:<24} {p50:8.3f} {p95:8.3f}  {'YES: ' + ','.join(heavy[:3]) if heavy else 'no'}")
        print("    slowest imports (cumulative us): " + ", ".join(f"{name} {us}" for us, name in top))


if __name__ == "__main__":
    main()
