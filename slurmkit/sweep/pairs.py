"""Pairwise 2-node all_reduce: inter-node links exercised over time.

``slurmkit sweep`` (with ``sweep.pairs.enabled``) picks disjoint pairs of idle nodes
with :func:`slurmkit.sweep.probes.select_pairs` (oldest pairwise test first, across
leaf switches of ``topology.conf`` when it exists) and submits one 2-node job per
pair. The job runs ``srun`` over both nodes; every rank runs ``slurmkit sweep
run-pair``, which joins a ``torch.distributed`` group (NCCL over the node's GPUs, one
rank per GPU; gloo on CPU, one rank per node, when there are no GPUs) and runs the
collective probe (:mod:`slurmkit.health.checks.collective`, shared with the pre-flight and the
heavy check). Rank 0 judges nccl-tests' busbw (``size/t x 2(n-1)/n``) against
``pairs.min_busbw_gbps`` and 90 % of ``pairs.theoretical_busbw_gbps``, and records
``pair_allreduce_busbw`` for both nodes in the verdict store (tier ``pair``: not a
complete pass, so the rotation of full passes is unaffected).

Why NCCL_ALGO=Ring is set: on two nodes NCCL's Tree/NVLSTree busbw exceeds what the
NICs can carry (nccl-tests #196, #290), which would hide a weak link.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from slurmkit.errors import UsageError
from slurmkit.health.checks import collective
from slurmkit.slurm.jobenv import JobEnv
from slurmkit.sweep.jobscript import finish_sbatch_args
from slurmkit.sweep.probes import (
    find_topology_conf,
    parse_topology_conf,
    select_pairs,
)
from slurmkit.verdict.base import CheckResult
from slurmkit.verdict.store import check_node_name

log = logging.getLogger("slurmkit.sweep.pairs")

PAIR_CHECK = "pair_allreduce_busbw"
PAIR_TIER = "pair"


def pair_job_name(prefix: str, a: str, b: str) -> str:
    """``<prefix>.<a>+<b>``: ``+`` cannot appear in a node name, so the planner can
    split it back and count both nodes as busy."""
    return f"{prefix}.{check_node_name(a)}+{check_node_name(b)}"


def last_pair_tests(store, nodes: Sequence[str]) -> Dict[str, Optional[float]]:
    out: Dict[str, Optional[float]] = {}
    for n in nodes:
        entry = store.node(n).get(PAIR_CHECK)
        out[n] = (
            float(entry["timestamp"]) if entry and isinstance(entry.get("timestamp"), (int, float)) else None
        )
    return out


def plan_pairs(store, idle: Sequence[str], cfg: Mapping[str, Any], slots: int) -> List[Tuple[str, str]]:
    pcfg = cfg["pairs"]
    if not pcfg["enabled"] or slots <= 0 or pcfg["max_pairs"] <= 0:
        return []
    topo_path = find_topology_conf(pcfg.get("topology_conf"), JobEnv.from_env().slurm_conf)
    topology = None
    if topo_path:
        from slurmkit.core import trust
        from slurmkit.errors import ConfigError

        try:
            raw = trust.read_strict(topo_path)  # root plans from root's topology only
        except trust.UntrustedFile as exc:
            raise ConfigError(f"topology.conf not trusted: {exc.why}", path=topo_path) from None
        except OSError as exc:
            raise ConfigError(f"cannot read topology.conf: {exc.strerror}", path=topo_path) from None
        topology = parse_topology_conf(raw.decode("utf-8", "replace"), topo_path)
    return select_pairs(idle, last_pair_tests(store, idle), topology, min(pcfg["max_pairs"], slots))


def pair_sbatch_args(
    a: str, b: str, cfg: Mapping[str, Any], run_id: str, output: str, tasks_per_node: int
) -> List[str]:
    opts: Dict[str, Optional[str]] = {
        "--comment": f"slurmkit-sweep-pair run={run_id}",
        "--exclusive": None,
        "--job-name": pair_job_name(cfg["job_name"], a, b),
        "--nodelist": f"{a},{b}",
        "--nodes": "2",
        "--ntasks-per-node": str(tasks_per_node),
        "--output": output,
        "--time": str(cfg["time_limit"]),
    }
    return finish_sbatch_args(opts, cfg)


def pair_argv(
    a: str, b: str, run_id: str, *, python: Optional[str], config_path: Optional[str], tasks: int
) -> List[str]:
    import sys

    argv = [
        "srun",
        f"--ntasks={tasks}",
        "--kill-on-bad-exit=1",
        python or sys.executable,
        "-m",
        "slurmkit.cli.main",
        "sweep",
        "run-pair",
        "--nodes",
        f"{a},{b}",
        "--run-id",
        run_id,
    ]
    if config_path:
        argv += ["--config", config_path]
    return argv


def _master_address(node: str) -> str:
    from slurmkit.slurm import client

    info = client.show_node(node) or {}
    addr = info.get("NodeAddr") or node
    try:
        return socket.gethostbyname(addr)
    except OSError:
        return addr


def run_pair(
    site_cfg,
    nodes: Sequence[str],
    run_id: str,
    env: Optional[Mapping[str, str]] = None,
    record: bool = True,
    master: Optional[str] = None,
) -> Optional[CheckResult]:
    """One rank of the pair job (``srun`` starts one per task). Returns rank 0's verdict.

    Rank, world size and port come from Slurm's task environment; rank 0's address is
    the first node's ``NodeAddr`` (``master`` overrides it)."""
    import torch
    import torch.distributed as dist

    env = dict(os.environ if env is None else env)
    pcfg = site_cfg.section("sweep")["pairs"]
    task = JobEnv.from_env(env)
    if task.procid is None or task.ntasks is None:
        raise UsageError("run the pair probe under srun: SLURM_PROCID and SLURM_NTASKS are not set")
    rank, world = task.procid, task.ntasks
    local = task.localid or 0
    job = int(task.job_id) if (task.job_id or "").isdigit() else 0
    backend = pcfg["backend"]
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    os.environ.setdefault("NCCL_ALGO", "Ring")
    init = f"tcp://{master or _master_address(nodes[0])}:{20000 + job % 20000}"
    dist.init_process_group(
        backend,
        init_method=init,
        rank=rank,
        world_size=world,
        timeout=__import__("datetime").timedelta(seconds=120),
    )
    try:
        device = torch.device(f"cuda:{local}") if backend == "nccl" else torch.device("cpu")
        if backend == "nccl":
            torch.cuda.set_device(local)
        probe = collective.timed_allreduce(pcfg["size_mb"] * 1024 * 1024, pcfg["iterations"], device=device)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    result = collective.judge(
        PAIR_CHECK,
        probe.busbw_gbps,
        wrong=probe.wrong,
        floor=pcfg.get("min_busbw_gbps"),
        expected=pcfg.get("theoretical_busbw_gbps"),
        where=f" between {nodes[0]} and {nodes[1]} over {world} ranks ({backend})",
        details=dict(probe.details(), nodes=list(nodes)),
    )
    if record:
        from slurmkit.sweep.runnode import open_store

        store = open_store(site_cfg)
        valid_for = site_cfg.section("sweep")["valid_for_s"]
        for node in nodes:
            store.record(node, [result], valid_for, tier=PAIR_TIER, run_id=run_id)
    return result
