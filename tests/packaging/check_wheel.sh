#!/usr/bin/env bash
# Install slurmkit as an admin would and run its hooks as slurmd would.
#
#   bash tests/packaging/check_wheel.sh [PYTHON]    (PYTHON: the dev venv's, default .venv/bin/python)
#
# 1. `python -m build` the wheel and the sdist of slurmkit and of slurmkit-kernels from this
#    checkout (no build isolation: setuptools and wheel come from the dev venv, so no download);
# 2. a clean venv (no system site-packages) gets the slurmkit wheel, its runtime dependencies
#    resolved by pip with etc/dev/constraints.txt (from pip's configured index or cache), nothing else;
# 3. from /, with `env -i` and only what slurmd gives a Prolog (SLURM_JOB_*, SLURMD_NODENAME) plus
#    SLURMKIT_CONFIG, the installed hook scripts run on a simulated 8 x H100 node: the prolog
#    passes and records, a failing GPU fixture exits 1 and drains through a recording scontrol,
#    the epilog and healthcheck run, and the installed version is the one source's.
# Everything lives under a temporary directory, removed at the end. Exit 0 only if every step passed.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${1:-$REPO/.venv/bin/python}"
WORK="$(mktemp -d /tmp/slurmkit-wheel-check.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
say() { printf 'check_wheel: %s\n' "$*"; }
fail() { say "FAIL: $*"; exit 1; }

say "building wheels and sdists"
"$PY" -m build --no-isolation --wheel --sdist --outdir "$WORK/dist" "$REPO" >"$WORK/build.log" 2>&1 \
  || { tail -20 "$WORK/build.log"; fail "python -m build (slurmkit)"; }
"$PY" -m build --no-isolation --wheel --sdist --outdir "$WORK/dist" "$REPO/kernels" >>"$WORK/build.log" 2>&1 \
  || { tail -20 "$WORK/build.log"; fail "python -m build (slurmkit-kernels)"; }
VERSION="$("$PY" -c 'import re,sys; print(re.search(r"^__version__ = \"(.+)\"$", open(sys.argv[1]).read(), re.M).group(1))' "$REPO/slurmkit/__init__.py")"
KVERSION="$("$PY" -c 'import re,sys; print(re.search(r"^__version__ = \"(.+)\"$", open(sys.argv[1]).read(), re.M).group(1))' "$REPO/kernels/slurmkit_kernels/__init__.py")"
for f in "slurmkit-$VERSION-py3-none-any.whl" "slurmkit-$VERSION.tar.gz" \
         "slurmkit_kernels-$KVERSION-py3-none-any.whl" "slurmkit?kernels-$KVERSION.tar.gz"; do
  compgen -G "$WORK/dist/$f" >/dev/null || { ls "$WORK/dist"; fail "missing $f"; }
done

say "installing the wheel into a clean venv"
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q -c "$REPO/etc/dev/constraints.txt" \
  "$WORK/dist/slurmkit-$VERSION-py3-none-any.whl" >"$WORK/pip.log" 2>&1 \
  || { tail -20 "$WORK/pip.log"; fail "pip install of the wheel"; }
extra="$("$WORK/venv/bin/python" -m pip list --format=freeze 2>/dev/null | cut -d= -f1 | tr 'A-Z_' 'a-z-' | sort \
  | grep -vxE 'slurmkit|click|pyyaml|psutil|jinja2|markupsafe|pip|setuptools' || true)"
[ -z "$extra" ] || fail "the wheel pulled in more than its runtime dependencies: $extra"
[ "$(env -i "$WORK/venv/bin/slurmkit" --version)" = "slurmkit, version $VERSION" ] \
  || fail "slurmkit --version is not $VERSION"

say "running the installed hooks with an empty environment"
NODE="$WORK/node"
mkdir -p "$NODE/gpu" "$NODE/bin"
chmod 755 "$NODE" "$NODE/gpu" "$NODE/bin"
cp "$REPO/etc/gpu-fixtures/healthy-h100x8.yaml" "$NODE/gpu/node1.yaml"
cat >"$NODE/bin/scontrol" <<SH
#!/bin/sh
echo "\$*" >> "$NODE/scontrol.calls"
case "\$*" in *"show node"*) echo "NodeName=node1 State=IDLE" ;; esac
exit 0
SH
chmod 755 "$NODE/bin/scontrol"
cat >"$NODE/slurmkit.yaml" <<YAML
slurm:
  bin_dir: $NODE/bin
paths:
  state_dir: $NODE/state
  shared_dir: $NODE/shared
  metrics_dir: $NODE/metrics
  log_dir: $NODE/log
health:
  backend: simulated
  simulated_fixture: $NODE/gpu/{node}.yaml
YAML
chmod 644 "$NODE/slurmkit.yaml"
hook() {  # hook NAME: run the installed hook script as slurmd would, from /
  (cd / && env -i SLURMKIT_CONFIG="$NODE/slurmkit.yaml" SLURMKIT_CACHE_DIR="$NODE/cache" SLURMD_NODENAME=node1 \
     SLURM_JOB_ID=4242 SLURM_JOB_UID=65534 SLURM_JOB_USER=nobody SLURM_JOB_GPUS=0,1,2,3,4,5,6,7 \
     "$WORK/venv/bin/slurmkit-$1")
}
set +e
out="$(hook prolog 2>&1)"; rc=$?
set -e
[ "$rc" = 0 ] || fail "prolog exited $rc on a healthy node: $out"
[ -z "$out" ] || fail "prolog said something on a healthy node: $out"
"$WORK/venv/bin/python" - "$NODE" <<'PYCHECK' || fail "the prolog's record or metrics"
import json, sys
node = sys.argv[1]
rec = [json.loads(line) for line in open(f"{node}/log/health.jsonl")][-1]
assert rec["status"] == "ok" and rec["hook"] == "prolog" and rec["job_id"] == "4242", rec
assert len(rec["results"]) >= 10, len(rec["results"])
prom = open(f"{node}/metrics/slurmkit_health_prolog_node1.prom").read()
assert 'slurmkit_health_status{hook="prolog",node="node1"} 0.0' in prom, prom
assert "prometheus_client" not in sys.modules
PYCHECK
if command -v promtool >/dev/null; then
  promtool check metrics <"$NODE/metrics/slurmkit_health_prolog_node1.prom" >/dev/null 2>&1 || [ $? = 3 ] \
    || fail "promtool rejects the prolog's metrics"
fi
for h in epilog healthcheck; do
  set +e; out="$(hook "$h" 2>&1)"; rc=$?; set -e
  [ "$rc" = 0 ] || fail "$h exited $rc on a healthy node: $out"
done
"$WORK/venv/bin/python" - "$NODE/gpu/node1.yaml" <<'PYBREAK'
import sys, yaml
path = sys.argv[1]
data = yaml.safe_load(open(path))
data["gpus"][3]["ecc"] = {"volatile_uncorrected": 2}
open(path, "w").write(yaml.safe_dump(data))
PYBREAK
set +e; out="$(hook prolog 2>&1)"; rc=$?; set -e
[ "$rc" = 1 ] || fail "prolog exited $rc on a GPU with uncorrected ECC errors: $out"
grep -q "update NodeName=node1 State=DRAIN Reason=slurmkit:GPU_ECC" "$NODE/scontrol.calls" \
  || fail "no slurmkit drain: $(cat "$NODE/scontrol.calls" 2>/dev/null)"
say "OK: slurmkit $VERSION and slurmkit-kernels $KVERSION built; the wheel's hooks pass, fail and drain as installed"
