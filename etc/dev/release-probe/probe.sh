#!/usr/bin/env bash
# What slurmkit's designs assume of a Slurm release, observed on the devcluster (issue 24):
#   flock /tmp/slurmkit-devcluster.lock bash etc/dev/release-probe/probe.sh 22.05|24.11|26.05
# Brings the devcluster up on that release (production configuration) with a Prolog/Epilog
# that records its environment, runs each probe, prints what Slurm answered, and takes the
# cluster down. Findings go to docs/compatibility.md.
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
SK="$REPO/.venv/bin/slurmkit"
rel=${1:?usage: probe.sh 22.05|24.11|26.05}
hook="$REPO/etc/dev/release-probe/hook"
"$SK" devcluster up --slurm "$rel" --prolog "$hook" --epilog "$hook" >/dev/null || exit 1
trap '"$SK" devcluster down >/dev/null' EXIT
state=$("$SK" devcluster env | sed -n 's/^export SLURM_CONF=//p' | xargs dirname | xargs dirname)
probe="$state/shared/scratch/probe"
run() { "$SK" devcluster run -- "$@"; }
alice() { "$SK" devcluster run --user alice -- "$@"; }
say() { printf '%-28s %s\n' "$1" "$2"; }
finished() { # wait until job $1 left the queue
  for _ in $(seq 240); do [ -z "$(run squeue -h -j "$1" -o %T 2>/dev/null)" ] && return 0; sleep 0.5; done; return 1
}
state_of() { run squeue -h -j "$1" -o %T 2>/dev/null; }
running() { for _ in $(seq 120); do [ "$(state_of "$1")" = RUNNING ] && return 0; sleep 0.5; done; return 1; }
say "slurmd -V" "$(run slurmd -V 2>&1)"

# --- one GPU job: sacct fields, hook environment, AdminComment after the end
j=$(alice sbatch --parsable -w node1 --gres=gpu:2 -o /dev/null --wrap 'sleep 2')
finished "$j"; sleep 2
say "sacct -X" "$(run sacct -X -n -P -j "$j" --format=JobID,State,ExitCode,ElapsedRaw,AllocTRES,NodeList,Start,End)"
say "sacct steps" "$(run sacct -n -P -j "$j" --format=JobID | tr '\n' ' ')"
for ctx in prolog_slurmd epilog_slurmd; do
  f="$probe/$ctx.$j.node1"
  if [ -f "$f" ]; then
    for k in SLURM_JOB_START_TIME SLURM_JOB_END_TIME SLURM_JOB_GPUS CUDA_VISIBLE_DEVICES SLURM_JOB_NODELIST SLURM_NODELIST SLURM_JOB_USER SLURM_JOB_UID; do
      say "$ctx $k" "$(grep "^$k=" "$f" | cut -d= -f2- || true)"
    done
    say "$ctx SLURM_ARRAY_*" "$(grep -c '^SLURM_ARRAY_' "$f")"
  else
    say "$ctx" "no environment recorded ($f)"
  fi
done
out=$(run scontrol update JobId="$j" AdminComment=SK1:Probe.Case 2>&1); say "scontrol AdminComment (ended)" "rc=$? ${out:-ok}"
out=$(run sacctmgr -i modify job where jobid="$j" set AdminComment=SK1:Probe.Case 2>&1); say "sacctmgr AdminComment" "rc=$? $(echo "$out" | tr '\n' ' ')"
sleep 2; say "sacct AdminComment" "$(run sacct -X -n -P -j "$j" --format=AdminComment)"

# --- sacctmgr's answer to an association it already has (alice is in research since up)
out=$(run sacctmgr -i add user alice Account=research 2>&1); say "sacctmgr add existing assoc" "rc=$? $(echo "$out" | tr '\n' ' ')"

# --- AdminComment while the job runs
j=$(alice sbatch --parsable -w node1 -o /dev/null --wrap 'sleep 8')
running "$j"
out=$(run scontrol update JobId="$j" AdminComment=SK1:Run.Case 2>&1); say "scontrol AdminComment (run)" "rc=$? ${out:-ok}"
finished "$j"; sleep 2; say "sacct AdminComment (run)" "$(run sacct -X -n -P -j "$j" --format=AdminComment)"

# --- array tasks: the hooks' environment
j=$(alice sbatch --parsable -w node2 --array=1-2 -o /dev/null --wrap 'sleep 1')
finished "$j"; sleep 1
for f in "$probe"/epilog_slurmd.*.node2; do
  say "array epilog $(basename "$f")" "$(grep -E '^SLURM_(ARRAY_[A-Z_]*|JOB_ID)=' "$f" | tr '\n' ' ')"
done

# --- requeue with an exclude list (the hold -> update -> release dance)
j=$(alice sbatch --parsable -w node1 -N1 -o /dev/null --wrap 'sleep 60')
running "$j"
out=$(run scontrol update JobId="$j" ExcNodeList=node1 2>&1); say "ExcNodeList while running" "rc=$? ${out:-ok}"
out=$(run scontrol requeuehold "$j" 2>&1); say "requeuehold" "rc=$? ${out:-ok} state=$(state_of "$j")"
run scontrol update JobId="$j" ReqNodeList= >/dev/null 2>&1
out=$(run scontrol update JobId="$j" ExcNodeList=node1 2>&1); say "ExcNodeList when held" "rc=$? ${out:-ok}"
run scontrol release "$j" >/dev/null 2>&1
say "after release" "$(run scontrol show job "$j" | grep -oE '(JobState|ExcNodeList|Reason)=[^ ]*' | tr '\n' ' ')"
sleep 3; say "after release +3s" "$(run squeue -h -j "$j" -o '%T %N %r')"
run scancel "$j"; finished "$j"

# --- drain reasons and node states
j=$(alice sbatch --parsable -w node2 -o /dev/null --wrap 'sleep 20')
running "$j"
say "node2 with a 1-cpu job" "$(run sinfo -h -n node2 -o '%T|%E')"
run scontrol update NodeName=node2 State=DRAIN "Reason=slurmkit:XID_79 xid: probe" >/dev/null
say "drain while running" "$(run sinfo -h -n node2 -o '%T|%E') / $(run scontrol show node node2 | grep -oE 'State=[^ ]*')"
run scancel "$j"; finished "$j"; sleep 1
say "drain after the job" "$(run sinfo -h -n node2 -o '%T|%E')"
say "scontrol Reason line" "$(run scontrol show node node2 | grep -oE 'Reason=.*')"
run scontrol update NodeName=node2 State=RESUME >/dev/null
say "after resume" "$(run sinfo -h -n node2 -o '%T|%E')"

# --- the job container: extern steps that could not make the job's namespace
say "ns base mount failures" "$(cat "$state"/log/slurmd-node*.log | grep -c 'ns base mount failed') of $(cat "$state"/log/slurmd-node*.log | grep -cE '\.extern\] (done with step|error: _create_ns)') extern steps"
