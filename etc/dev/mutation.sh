#!/usr/bin/env bash
# Mutation testing with mutmut, module by module, outside CI (it is slow):
#
#   bash etc/dev/mutation.sh                 # every module below
#   bash etc/dev/mutation.sh trust kmsg      # some of them
#   bash etc/dev/mutation.sh --list          # the modules and the tests each one runs
#   SLURMKIT_MUTATION_MUTANTS="<names>" bash etc/dev/mutation.sh archive   # only those mutants
#
# Each module runs in its own scratch copy of the tree ($SLURMKIT_MUTATION_DIR, default
# /tmp/slurmkit-mutation/<module>), with a [tool.mutmut] section generated from the table
# below: the one source file to mutate and only its fast unit tests (mutmut then runs, for
# each mutant, only those of them that reach the mutated function). The score per module is
# printed and written to <scratch>/score.txt; survivors are listed with `mutmut results`
# and shown with `mutmut show <name>` run in that scratch directory. docs/testing.md has
# the last scores and why each survivor is accepted.
#
# mutmut is a developer tool, not installed by etc/dev/bootstrap.sh (CI never runs this):
# the first run installs the version pinned in etc/dev/constraints.txt into .venv.
# Runs at nice 19 with SLURMKIT_MUTATION_JOBS workers (default 2).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PY:-$REPO/.venv/bin/python}"
BASE_DIR="${SLURMKIT_MUTATION_DIR:-/tmp/slurmkit-mutation}"
JOBS="${SLURMKIT_MUTATION_JOBS:-2}"

# module -> "source file|test paths (space separated)". Unit tests only: no devcluster, no root.
declare -A MODULES=(
  [trust]="slurmkit/core/trust.py|tests/health/test_node_rules.py tests/core/test_trust.py tests/core/test_trust_walk.py tests/core/test_private_dir.py tests/core/test_files.py"
  [gate]="slurmkit/hooks/gate.py|tests/hooks/test_gate_inprocess.py tests/health/test_node_rules.py"
  [xid]="slurmkit/health/checks/xid.py|tests/health/test_xid_units.py tests/health/test_xid.py tests/health/test_xid_catalog.py tests/health/test_node_rules.py"
  [kmsg]="slurmkit/health/checks/kmsg.py|tests/health/test_kmsg.py tests/health/test_xid.py tests/health/test_xid_real.py tests/health/test_node_rules.py"
  [rules]="slurmkit/report/rules.py|tests/report/test_report_rules_units.py tests/report/test_report_rules_once.py tests/report/test_report_edges.py tests/report/test_report_lost.py"
  [lost]="slurmkit/report/lost.py|tests/report/test_report_edges.py tests/report/test_report_lost.py tests/report/test_report_aggregate.py"
  [efficiency]="slurmkit/report/efficiency.py|tests/report/test_report_efficiency_units.py tests/report/test_report_efficiency_summary.py tests/report/test_report_efficiency.py tests/report/test_report_edges.py"
  [archive]="slurmkit/report/archive.py|tests/report/test_report_archive_files.py tests/report/test_report_archive.py tests/report/test_report_edges.py"
)
ORDER=(kmsg rules lost trust xid efficiency gate archive)
# mutmut stops a mutant's tests after (their baseline time + timeout_constant) x
# timeout_multiplier of wall time (twice that of CPU time), defaults 1 s and 15, and counts
# the mutant as killed. The baseline it uses for the archive is far below what its DuckDB
# tests take on a loaded machine: an equivalent mutant (`os.mkdir(path)` without 0o700, whose
# tests pass in 16 s by hand) was stopped and counted as killed, and with a multiplier of 3
# many were. The archive gets 30 s more headroom instead (a real hang then costs minutes).
declare -A TIMEOUT_MULTIPLIER=()
declare -A TIMEOUT_CONSTANT=([archive]=30)
# how mutmut starts each mutant's worker: "fork" (its default) forks the process that ran the
# baseline tests; after DuckDB's threads ran there, a forked child blocks for ever on a lock
# one of them held (seen: the archive's mutants asleep on a futex, one thread, 7 s of CPU in
# 7 minutes, until the timeout counted them as killed). "forkserver" forks from a clean process.
declare -A PROCESS_ISOLATION=([archive]=forkserver)
# the functions a module is measured on, when not all of its file (mutmut's name patterns):
# the archive's ingest and the file handling around it, not its report-side readers
A=slurmkit.report.archive
declare -A FUNCTIONS=(
  [archive]="$A.x_ingest__* $A.x__ingest__* $A.x__bad_rows__* $A.x__typed_columns__* $A.x__write_multi__* $A.x__clean__* $A.x__remove_leftovers__* $A.x__private_dir__* $A.x__temporary__* $A.x__rule_versions__*"
)

if [ "${1:-}" = "--list" ]; then
  for m in "${ORDER[@]}"; do echo "$m: ${MODULES[$m]%%|*}${FUNCTIONS[$m]:+ (only ${FUNCTIONS[$m]})} <- ${MODULES[$m]#*|}"; done
  exit 0
fi
if ! "$PY" -c "import mutmut" 2>/dev/null; then
  echo "slurmkit: installing mutmut into $("$PY" -c 'import sys; print(sys.prefix)') (pinned in etc/dev/constraints.txt)" >&2
  "$PY" -m pip install -q -c "$REPO/etc/dev/constraints.txt" mutmut
fi
MUTMUT="$(dirname "$PY")/mutmut"

run_module() {
  local name=$1 src=${MODULES[$1]%%|*} tests=${MODULES[$1]#*|}
  local work="$BASE_DIR/$name"
  rm -rf "$work"
  mkdir -p "$work"
  # the tree the tests need (hooks, tables, fixtures), without the venv or build outputs
  (cd "$REPO" && tar -cf - --exclude=__pycache__ --exclude='*.egg-info' slurmkit tests etc docs prolog epilog pyproject.toml) \
    | tar -xf - -C "$work"
  # this module's [tool.mutmut]: the one file and its tests (pytest's own options come from
  # [tool.pytest.ini_options]; hypothesis keeps its examples database out of the copy)
  "$PY" - "$work/pyproject.toml" "${TIMEOUT_MULTIPLIER[$name]:-15}" "${TIMEOUT_CONSTANT[$name]:-1}" "${PROCESS_ISOLATION[$name]:-fork}" "$src" $tests <<'PY'
import re, sys
path, multiplier, constant, isolation, src, tests = (
    sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6:]
)
text = re.sub(r"(?ms)^\[tool\.mutmut\].*?(?=^\[|\Z)", "", open(path).read())
q = lambda xs: "[" + ", ".join(f'"{x}"' for x in xs) + "]"
text += (
    "\n[tool.mutmut]\n"
    'source_paths = ["slurmkit"]\n'
    f"only_mutate = {q([src])}\n"
    'also_copy = ["etc", "docs", "prolog", "epilog"]\n'
    # log messages are not behaviour: a mutant of one is not a test gap
    'do_not_mutate_patterns = ["\\\\blog\\\\.(debug|info|warning|error|exception)\\\\("]\n'
    f"pytest_add_cli_args_test_selection = {q(tests)}\n"
    'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-x"]\n'
    f"timeout_multiplier = {multiplier}\n"
    f"timeout_constant = {constant}\n"
    f'process_isolation = "{isolation}"\n'
)
open(path, "w").write(text)
PY
  echo "== $name: $src${FUNCTIONS[$name]:+ (functions: ${FUNCTIONS[$name]})} <- $tests" >&2
  local t0=$SECONDS rc=0
  # (mutmut runs the tests in-process from <scratch>/mutants, which then comes first on
  # sys.path; a hook test's subprocess imports the installed tree and kills no mutant)
  local only=()
  set -f  # the patterns are mutmut's, not the shell's
  [ -z "${FUNCTIONS[$name]:-}" ] || read -r -a only <<<"${FUNCTIONS[$name]}"
  # SLURMKIT_MUTATION_MUTANTS: only these mutants (mutmut's names), e.g. a module's survivors
  # again after new tests; the score printed is then theirs alone
  [ -z "${SLURMKIT_MUTATION_MUTANTS:-}" ] || read -r -a only <<<"$SLURMKIT_MUTATION_MUTANTS"
  set +f
  (cd "$work" && nice -n 19 "$MUTMUT" run --max-children "$JOBS" "${only[@]}" >run.log 2>&1) || rc=$?
  local secs=$((SECONDS - t0))
  (cd "$work" && "$MUTMUT" results --all true >results.txt 2>&1) || true
  "$PY" - "$work" "$name" "$src" "$secs" "$rc" "${only[@]}" <<'PY'
import collections, fnmatch, re, sys
work, name, src, secs, rc, *only = sys.argv[1:]
counts = collections.Counter()
for line in open(f"{work}/results.txt"):
    m = re.match(r"\s*(\S+): (killed|survived|no tests|timeout|suspicious|skipped|caught by type check|not checked|segfault)\s*$", line)
    # with FUNCTIONS, the module's other functions are not part of its score
    if m and (not only or any(fnmatch.fnmatchcase(m.group(1), p) for p in only)):
        counts[m.group(2)] += 1
total = sum(counts.values())
killed = counts["killed"] + counts["timeout"] + counts["caught by type check"] + counts["segfault"]
pct = 100.0 * killed / total if total else 0.0
what = f"{src} ({len(only)} name patterns)" if only else src
line = f"{name}: {what}: {killed}/{total} killed ({pct:.1f} %), {dict(counts)}; {secs} s; mutmut exit {rc}"
open(f"{work}/score.txt", "w").write(line + "\n")
print(line)
PY
}

for m in "${@:-${ORDER[@]}}"; do
  if [ -z "${MODULES[$m]:-}" ]; then
    echo "slurmkit: unknown module '$m' (etc/dev/mutation.sh --list)" >&2
    exit 2
  fi
  run_module "$m"
done
