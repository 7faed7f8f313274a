#!/bin/bash
# Side by side: another checkout of slurmkit (BASE, e.g. `git archive f955001 | tar -x -C /tmp/report-base`)
# against this one, DuckDB engine, one saved dump, RUNS alternating runs, and mawk's GPU-hour sum in between.
#   benchmarks/report_ab.sh /tmp/report-base /tmp/report-1m.txt [RUNS] [EXTRA ARGS FOR THIS CHECKOUT]
# Runs from / so that each checkout is imported through PYTHONPATH, not the working directory.
set -u
BASE=$1; FILE=$2; RUNS=${3:-5}; EXTRA=${4:-}
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=$HERE/.venv/bin/python
cd /
for _ in $(seq "$RUNS"); do
  for v in base this; do
    if [ $v = base ]; then P=$BASE; X=""; else P=$HERE; X=$EXTRA; fi
    # shellcheck disable=SC2086
    /usr/bin/time -f "$v %e s %M KiB" env PYTHONPATH="$P" TZ=UTC "$PY" -m slurmkit.cli.main report \
      --sacct-file "$FILE" $X --by account,user --format json --no-health-log --engine duckdb >/dev/null
  done
  /usr/bin/time -f "mawk %e s" mawk -F'|' \
    'NR>1 && $1 !~ /\./ {n=0; if (match($4,/gres\/gpu=[0-9]+/)) n=substr($4,RSTART+9,RLENGTH-9); s+=n*($7-$6)} END{print s/3600}' \
    "$FILE" >/dev/null
done
cat /proc/loadavg
