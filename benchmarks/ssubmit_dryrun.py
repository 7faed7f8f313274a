"""ssubmit --dry-run wall time against bare ``sbatch --test-only``.

    python benchmarks/ssubmit_dryrun.py [--spec SPEC] [--runs N] [--config FILE]

Prints medians (and min/max) of:

* ``ssubmit SPEC --dry-run`` as a user runs it (new Python process: interpreter start,
  imports, YAML load, validation, Jinja2 render, the sinfo partition check);
* the same spec rendered in-process (load + validate + render, no process start);
* ``sbatch --test-only`` on the already-rendered script (needs a running cluster, e.g.
  ``eval "$(slurmkit devcluster env)"``; skipped with a note otherwise).

The point of the comparison: ssubmit's own overhead should be in the same range as the
one Slurm call it replaces, so nobody is tempted to skip the validation.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SPEC = REPO / "job_templates" / "examples" / "tiny-gpt.yaml"


def timed(fn, runs):
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def show(label, samples):
    ms = [s * 1e3 for s in samples]
    print(
        f"{label:48s} median {statistics.median(ms):8.1f} ms   min {min(ms):8.1f}   max {max(ms):8.1f}   "
        f"(n={len(ms)})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default=str(DEFAULT_SPEC))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--config", default=None, help="site config (default: $SLURMKIT_CONFIG)")
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="spec overrides, as for ssubmit (e.g. nodes=1 when a node is drained)",
    )
    args = ap.parse_args()
    env = dict(os.environ)
    if args.config:
        env["SLURMKIT_CONFIG"] = args.config
    cmd = [sys.executable, "-m", "slurmkit.cli.ssubmit", args.spec, "--dry-run", "-q"]
    for item in args.sets:
        cmd += ["--set", item]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    if first.returncode != 0:
        print(f"ssubmit --dry-run failed ({first.returncode}): {first.stderr.strip()}", file=sys.stderr)
        return 1
    script = first.stdout
    print(f"spec: {args.spec}" + (f" with --set {' '.join(args.sets)}" if args.sets else ""))
    show(
        "ssubmit --dry-run (new process, incl. sinfo)",
        timed(lambda: subprocess.run(cmd, capture_output=True, env=env, timeout=120), args.runs),
    )

    from slurmkit.cli.common import load_config
    from slurmkit.submit.render import render
    from slurmkit.submit.spec import load_spec

    os.environ.update({k: v for k, v in env.items() if k == "SLURMKIT_CONFIG"})
    cfg = load_config(args.config)
    site, paths = cfg.section("submit"), cfg.section("paths")

    def in_process():
        spec = load_spec(args.spec, site_defaults=site["defaults"], sets=args.sets)
        render(spec, site=site, paths=paths, spec_path=args.spec)

    in_process()
    show("load + validate + render (in-process)", timed(in_process, args.runs * 5))

    sbatch = shutil.which("sbatch")
    probe = (
        subprocess.run(["scontrol", "ping"], capture_output=True, text=True, env=env, timeout=15)
        if shutil.which("scontrol")
        else None
    )
    if not sbatch or probe is None or probe.returncode != 0:
        print(
            "sbatch --test-only: skipped (no reachable Slurm controller; run `slurmkit devcluster up` "
            'and `eval "$(slurmkit devcluster env)"`)'
        )
        return 0
    test_cmd = [sbatch, "--test-only"]
    res = subprocess.run(test_cmd, input=script, capture_output=True, text=True, env=env, timeout=60)
    if res.returncode != 0:
        print(f"sbatch --test-only failed: {res.stderr.strip()}")
        return 0
    show(
        "bare sbatch --test-only (same script)",
        timed(
            lambda: subprocess.run(
                test_cmd, input=script, capture_output=True, text=True, env=env, timeout=60
            ),
            args.runs,
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
