#!/usr/bin/env bash
# The whole test suite, set-up included: `bash tests/run.sh [pytest args]`.
# Brings the devcluster up once (a pytest session fixture), runs unit, kernel
# (Triton interpreter) and integration tests, and tears the cluster down, even on
# failure. Extra arguments go to pytest (e.g. `bash tests/run.sh tests/unit -x`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../etc/dev/bootstrap.sh"
cd "$REPO"

# Integration tests must not silently skip here: no devcluster is a failure.
export SLURMKIT_REQUIRE_DEVCLUSTER=1
# Nor may the kernel, trainer and heavy-check tests skip because torch or triton is broken.
export SLURMKIT_REQUIRE_TRAIN=1
# Lint and format first (cheap; CI runs the whole suite, so it always runs both).
if [ "$#" -eq 0 ]; then
  "$PY" -m ruff check --quiet . || { echo "slurmkit: ruff check failed (fix, or ruff check --fix)" >&2; exit 1; }
  "$PY" -m ruff format --check --quiet . || { echo "slurmkit: ruff format --check failed (run ruff format)" >&2; exit 1; }
fi
# Which Slurm each part runs on is in pytest's header and its last line ("devcluster tests
# of this run ran on Slurm ...").
echo "=== part 1: the whole suite on this machine's Slurm ($(/usr/sbin/slurmd -V 2>/dev/null || echo 'packages not installed yet'))"
t0=$(date +%s)
set +e
"$PY" -m pytest -q -p no:cacheprovider --durations=15 "$@"
rc=$?
set -e
echo "=== part 1 took $(( $(date +%s) - t0 ))s (exit $rc)"
# Installed as an admin would: the wheel built from this checkout, in a clean venv, its hooks
# run with an empty environment on a simulated node (about 30 s).
if [ "$#" -eq 0 ] && [ "$rc" -eq 0 ]; then
  echo "=== the wheel, installed into a clean venv, runs the hooks as slurmd would"
  set +e
  timeout 600 bash "$REPO/tests/packaging/check_wheel.sh" "$PY"
  rc=$?
  set -e
fi
# Part 2, for the whole suite only: the Slurm-facing suites again on a newer Slurm inside a
# Debian root (debootstrap, installed and run here; the root is cached in
# /var/cache/slurmkit-devcluster). 26.05 by default (about 14 min, docs/compatibility.md);
# SLURMKIT_CI_RELEASES="24.11 26.05" adds 24.11, SLURMKIT_CI_RELEASES="" skips part 2.
if [ "$#" -eq 0 ] && [ "$rc" -eq 0 ]; then
  for release in ${SLURMKIT_CI_RELEASES-26.05}; do
    echo "=== part 2: the Slurm-facing suites on Slurm $release"
    t0=$(date +%s)
    set +e
    timeout 1800 bash "$REPO/tests/run-release.sh" "$release"
    rc=$?
    set -e
    echo "=== part 2 (Slurm $release) took $(( $(date +%s) - t0 ))s (exit $rc)"
    [ "$rc" -eq 0 ] || break
  done
fi
if [ "$rc" -eq 5 ]; then
  # pytest's 5 = nothing collected. For a selection (`-k`, a path) that is not an
  # error; for the whole suite it means the tests vanished, which is.
  if [ "$#" -gt 0 ]; then
    echo "slurmkit: pytest selected no tests for: $*" >&2
    exit 0
  fi
  echo "slurmkit: pytest collected no tests at all" >&2
  exit 1
fi
exit "$rc"
