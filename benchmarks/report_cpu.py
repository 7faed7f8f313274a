"""CPU seconds of one report over a saved dump, in-process (all threads): a figure that a busy
machine disturbs less than wall time. Compare two checkouts by running each with ``PYTHONPATH``
set to it, alternating:

    PYTHONPATH=/tmp/base .venv/bin/python benchmarks/report_cpu.py /tmp/sacct-1m.txt --engine python --by user
"""

from __future__ import annotations

import argparse
import time

import slurmkit
from slurmkit.report import engine, sacct
from slurmkit.report.stream import StreamingAggregator
from slurmkit.report.window import resolve_window


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--engine", choices=("python", "duckdb"), default="python")
    ap.add_argument("--by", default="user")
    args = ap.parse_args()
    by = [d for d in args.by.split(",") if d]
    window = resolve_window(default_unbounded=True)
    now = 1800000000
    cpu, wall = time.process_time(), time.perf_counter()
    if args.engine == "python":
        agg = StreamingAggregator(by, window_start=window.start, prolog_requeue_seconds=120.0)
        sacct.read_sacct_file(args.file, window=window, now=now, sink=agg.add)
        _, total = agg.result()
    else:
        _, total, _ = engine.run(
            engine.probe_file(args.file),
            window=window,
            now=now,
            filters=None,
            by=by,
            prices=None,
            max_gpus=sacct.DEFAULT_MAX_GPUS,
            prolog_requeue_seconds=120.0,
        )
    print(
        f"cpu {time.process_time() - cpu:.3f} s wall {time.perf_counter() - wall:.3f} s "
        f"gpu_seconds {total.gpu_seconds} lost {total.lost} ({slurmkit.__file__})"
    )


if __name__ == "__main__":
    main()
