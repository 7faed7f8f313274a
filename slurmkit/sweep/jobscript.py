"""The sweep job: its sbatch arguments and its (tiny) batch script.

Every value that varies (node name, partition, paths, config path) travels as one
argv item to ``sbatch`` or is shell-quoted into the script's single ``exec`` line;
nothing is interpolated raw into ``#SBATCH`` lines, so a hostile path cannot run a
command. The script is rendered with Jinja2 (``StrictUndefined``, a ``shquote``
filter) and checked against golden files in the tests.

Choices, and why:

* ``--nodelist=NODE --nodes=1 --exclusive``: one node per job, nothing else on it, so
  bandwidth probes measure the node, and a preempted job costs one node's pass only.
* ``--partition`` (and/or ``--qos``): the low-priority, preemptible partition or QOS
  (etc/slurm/sweep-qos.conf.example). Real jobs preempt it.
* ``--no-requeue`` by default: a preempted sweep job is cancelled and counts as not
  done. It wrote nothing to the store, so the node keeps its old ``last_pass`` and the
  planner picks it again on a later run when it is idle. Requeueing instead would
  leave a pending sweep job that blocks a slot of the concurrency cap and would grab
  the node the moment the real job ends, ahead of the rotation.
* ``--job-name=<prefix>.<node>``: the planner counts queued and running sweep jobs by
  this name, per node, including pending ones (whose nodelist squeue leaves empty).
* ``--comment=slurmkit-sweep run=<id>``: ties the job to one ``slurmkit sweep`` run.
"""

from __future__ import annotations

import shlex
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence

import jinja2

from slurmkit.verdict.store import check_node_name

SCRIPT_TEMPLATE = """\
#!/bin/bash
# slurmkit sweep job: deep (heavy-tier) health checks on {{ node }}.
# Submitted by `slurmkit sweep` (run {{ run_id }}); preemptible, one node, exclusive.
# Results go to the verdict store; see docs/sweeps.md.
set -u
{% for key, value in env | dictsort %}export {{ key }}={{ value | shquote }}
{% endfor %}exec {{ argv | map('shquote') | join(' ') }}
"""

_env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)
_env.filters["shquote"] = lambda v: shlex.quote(str(v))
_template = _env.from_string(SCRIPT_TEMPLATE)


def sbatch_args(node: str, cfg: Mapping[str, Any], run_id: str, output: str) -> List[str]:
    """``sbatch`` options for one sweep job, sorted by option name."""
    check_node_name(node)
    opts: Dict[str, Optional[str]] = {
        "--comment": f"slurmkit-sweep run={run_id}",
        "--exclusive": None,
        "--job-name": f"{cfg['job_name']}.{node}",
        "--nodelist": node,
        "--nodes": "1",
        "--output": output,
        "--time": str(cfg["time_limit"]),
    }
    return finish_sbatch_args(opts, cfg)


def finish_sbatch_args(opts: Dict[str, Optional[str]], cfg: Mapping[str, Any]) -> List[str]:
    """Add what every sweep job shares (partition, QOS, account, requeue policy) to
    ``opts`` and return them as sorted ``--key=value`` arguments, then the site's extras."""
    opts = dict(opts)
    if cfg.get("partition"):
        opts["--partition"] = cfg["partition"]
    if cfg.get("qos"):
        opts["--qos"] = cfg["qos"]
    if cfg.get("account"):
        opts["--account"] = cfg["account"]
    opts["--requeue" if cfg.get("requeue") else "--no-requeue"] = None
    args = [k if v is None else f"{k}={v}" for k, v in sorted(opts.items())]
    return args + list(cfg.get("extra_sbatch_args") or [])


def run_node_argv(
    node: str, run_id: str, *, python: Optional[str], config_path: Optional[str], gpu_model: Optional[str]
) -> List[str]:
    argv = [
        python or sys.executable,
        "-m",
        "slurmkit.cli.main",
        "sweep",
        "run-node",
        "--exit-zero",
        "--node",
        node,
        "--run-id",
        run_id,
    ]
    if gpu_model:
        argv += ["--gpu-model", gpu_model]
    if config_path:
        argv += ["--config", config_path]
    return argv


def render_script(
    node: str, run_id: str, argv: Sequence[str], env: Optional[Mapping[str, str]] = None
) -> str:
    check_node_name(node)  # it also appears in a comment line
    if any(ch in run_id for ch in "\n\r"):
        raise ValueError("run id must be one line")
    return _template.render(node=node, run_id=run_id, argv=list(argv), env=dict(env or {}))
