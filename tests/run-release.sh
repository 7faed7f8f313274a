#!/usr/bin/env bash
# The Slurm-facing suites on one Slurm release from Debian's archive:
#   bash tests/run-release.sh 26.05|24.11 [pytest args]
# Builds (once; then cached in /var/cache/slurmkit-devcluster) a Debian root with that
# release, and runs pytest inside it with --slurm-release, so the devcluster fixture brings
# that release up and every Slurm client the tests call is that release's. Needs root.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../etc/dev/bootstrap.sh"
cd "$REPO"
release="${1:?usage: bash tests/run-release.sh 26.05|24.11 [pytest args]}"
shift
export SLURMKIT_REQUIRE_DEVCLUSTER=1
# The Slurm-facing suites: integration (efficiency and ssubmit end to end included), the
# attack tests that use the cluster, the devcluster's own, and the other devcluster-marked tests.
if [ "$#" -eq 0 ]; then
  set -- -m devcluster tests/integration tests/security tests/devcluster tests/health tests/sweep
fi
t0=$(date +%s)
# Build the root first with its own timeout, so its time shows apart from the tests'.
timeout 1800 "$PY" -c "
from slurmkit.devcluster import releases, rootfs
rootfs.ensure(releases.get('$release'))"
echo "slurmkit: Slurm $release root ready in $(( $(date +%s) - t0 ))s" >&2
set +e
"$REPO/.venv/bin/slurmkit" devcluster in-root --slurm "$release" -- \
  "$PY" -m pytest -q -p no:cacheprovider --durations=10 --slurm-release "$release" "$@"
rc=$?
set -e
[ "$rc" -ne 5 ] || { echo "slurmkit: no Slurm-facing test collected for $release" >&2; exit 1; }
exit "$rc"
