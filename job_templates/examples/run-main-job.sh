#!/usr/bin/env bash
# The main job, set-up included: `bash job_templates/examples/run-main-job.sh`.
# Installs slurmkit into .venv, brings up a 2-node local Slurm (slurmkit devcluster,
# netns mode, slurmkit's prolog and epilog wired in), then submits the tiny GPT
# example with ssubmit and follows it to the end (pre-flight all_reduce, training
# through the Triton kernel on CPU, checkpoint). Exits with the job's exit code.
# The cluster stays up afterwards: `slurmkit devcluster status`, `... down`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../etc/dev/bootstrap.sh"
cd "$REPO"

slurmkit devcluster up --nodes 2 --mode netns --hooks
eval "$(slurmkit devcluster env)"
ssubmit job_templates/examples/tiny-gpt.yaml --wait "$@"
