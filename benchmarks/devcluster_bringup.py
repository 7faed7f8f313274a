"""Bring-up time of `slurmkit devcluster` (this stops any devcluster running here).

    python benchmarks/devcluster_bringup.py [--state-dir DIR]

Measures, as whole `slurmkit devcluster` processes:
  fresh  - `up` with an empty state directory (new munge key, MariaDB data directory,
           accounting database, cluster registration, accounts), packages installed;
  warm   - `up` after `down --keep-state` (daemons restart on existing state);
  no-op  - `up` while the same cluster already runs;
  down   - `down`.
The time to install the Debian packages on a machine without them is measured by
`etc/dev/bootstrap.sh` only on such a machine; see docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def timed(argv):
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed: {res.stderr.strip()}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", default=None)
    ap.add_argument("--hooks", action="store_true", help="wire slurmkit's prolog and epilog in")
    args = ap.parse_args()
    base = [os.path.join(os.path.dirname(sys.executable), "slurmkit"), "devcluster"]
    sd = ["--state-dir", args.state_dir] if args.state_dir else []
    up = base + ["up", *sd] + (["--hooks"] if args.hooks else [])
    subprocess.run(base + ["down", *sd], capture_output=True)
    results = {"fresh up": timed(up), "no-op up": timed(up)}
    timed(base + ["down", "--keep-state", *sd])
    results["warm up"] = timed(up)
    results["down"] = timed(base + ["down", *sd])
    for k, v in results.items():
        print(f"{k:<10} {v:6.1f} s")


if __name__ == "__main__":
    main()
