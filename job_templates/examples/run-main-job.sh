#!/usr/bin/env bash
# The main job, set-up included: `bash job_templates/examples/run-main-job.sh [--slurm REL] [ssubmit args]`.
# Installs slurmkit into .venv, brings up a 2-node local Slurm (slurmkit devcluster,
# netns mode, slurmkit's prolog and epilog wired in), then submits the tiny GPT
# example with ssubmit and follows it to the end (pre-flight all_reduce, training
# through the Triton kernel on CPU, checkpoint). Exits with the job's exit code.
# `--slurm 24.11|26.05` (or SLURMKIT_SLURM=...) runs it on that Slurm release, in its
# Debian root (docs/devcluster.md; the first time builds the root, a few minutes); ssubmit
# then runs inside the root, with that release's clients.
# The cluster stays up afterwards: `slurmkit devcluster status`, `... down`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../etc/dev/bootstrap.sh"
cd "$REPO"

release="${SLURMKIT_SLURM:-host}"
if [ "${1:-}" = "--slurm" ]; then
  release="${2:?--slurm needs a release: host, 22.05, 24.11 or 26.05}"
  shift 2
fi
slurmkit devcluster up --nodes 2 --mode netns --hooks --slurm "$release"
if [ "$release" = host ]; then
  eval "$(slurmkit devcluster env)"
  ssubmit job_templates/examples/tiny-gpt.yaml --wait "$@"
else
  slurmkit devcluster run -- ssubmit job_templates/examples/tiny-gpt.yaml --wait "$@"
fi
