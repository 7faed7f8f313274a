#!/usr/bin/env bash
# Set-up shared by the README's two commands (tests/run.sh and
# job_templates/examples/run-main-job.sh): Debian packages, then a virtual
# environment in .venv with slurmkit, slurmkit-kernels and the test tools.
# Idempotent: a second run only checks. Needs root (apt-get, and the devcluster
# starts daemons). Source it; it sets REPO and PY.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${SLURMKIT_VENV:-$REPO/.venv}"

if [ "$(id -u)" -ne 0 ]; then
  echo "slurmkit: this set-up needs root (apt-get and the local Slurm daemons); run it with sudo" >&2
  exit 2
fi

APT_PACKAGES=(python3 python3-venv python3-dev gcc iproute2 util-linux procps prometheus
              slurm-wlm slurmctld slurmd slurm-client slurmdbd munge mariadb-server)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "slurmkit: installing Debian packages: ${missing[*]}" >&2
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    # Keep the packages' maintainer scripts from starting system daemons: the
    # devcluster runs its own, under its own state directory.
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  timeout 600 apt-get update -q >/dev/null
  timeout 1200 apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
fi

# Prefer the interpreter on PATH (pyenv on CI images); Debian's python3 otherwise.
PYTHON="${PYTHON:-$(command -v python3)}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "slurmkit: creating $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
# slurmkit's extras installed for development and CI: add a new extra here (and its pins
# to the constraints file).
EXTRAS=(train gpu plot metrics report test)
# The exact versions (pyproject.toml has ranges); it pins torch, which unpinned would pull
# a multi-GB CUDA build.
CONSTRAINTS="$REPO/etc/dev/constraints.txt"
stamp="$VENV/.slurmkit-installed"
# Reinstall when the metadata, the pins or the extras change.
want="$( { cat "$REPO/pyproject.toml" "$REPO/kernels/pyproject.toml" "$CONSTRAINTS"; echo "${EXTRAS[*]}"; } \
         | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  extras="$(IFS=,; echo "${EXTRAS[*]}")"
  echo "slurmkit: installing slurmkit[$extras] and slurmkit-kernels into $VENV (pins: $CONSTRAINTS)" >&2
  timeout 1800 "$PY" -m pip install -q --disable-pip-version-check -c "$CONSTRAINTS" -e "$REPO[$extras]" \
    -e "$REPO/kernels"
  echo "$want" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
