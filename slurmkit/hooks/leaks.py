"""The cron leak killer: ``slurmkit kill-leaks [--dry-run]``.

A *leak* is a process holding more than ``leaks.gpu_memory_fraction`` (95 %) of one
GPU's memory, or more than ``leaks.host_memory_fraction`` of host memory, that belongs
to no running job. Never touched, whatever it holds:

* root and system users (uid < ``leaks.min_uid``, 1000 by default);
* processes under a ``slurmstepd`` (a live job step);
* processes in the cgroup of a job Slurm still runs (``squeue``; when squeue fails
  nothing is killed), by Slurm's own cgroup layout only (``slurm[_<node>]/uid_<uid>/
  job_<id>`` at the root of a v1 hierarchy, with ``<uid>`` the process's and the job's
  uid; ``system.slice/[<node>_]slurmstepd.scope/job_<id>`` on v2): a cgroup a user made
  and named ``job_<someone else's job>`` spares nothing;
* this process and its ancestors.

A process's own ``SLURM_JOB_ID`` proves nothing (its user can set it to any running
job's id), so it never spares a process; it is only copied into the audit log.

Kills are SIGTERM, then SIGKILL after ``health.kill_grace``, each sent only to the
process judged (pidfd, start time and uid re-checked: a reused pid is refused); every
candidate and every action goes to a JSON-lines audit log. It signals other users'
processes and appends to root's audit log, so it runs as root only
(:data:`NOT_ROOT_MESSAGE`).
"""

from __future__ import annotations

import os
import pwd
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Set, Union

from slurmkit.hooks import procs

#: What ``slurmkit kill-leaks`` says (exit 2) when started by anyone but root.
NOT_ROOT_MESSAGE = (
    "slurmkit kill-leaks: must run as root (it signals other users' processes and writes "
    "root's audit log); run it from root's cron"
)


@dataclass
class Leak:
    pid: int
    uid: int
    user: str
    comm: str
    why: str  # "gpu" or "host"
    detail: str
    gpu: Optional[int] = None
    used_mib: Optional[float] = None
    rss_mib: Optional[float] = None
    job_id: Optional[str] = None  # SLURM_JOB_ID in its environment (a finished job's)
    outcome: str = "candidate"

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass
class Spared:
    pid: int
    why: str


@dataclass
class Scan:
    leaks: List[Leak] = field(default_factory=list)
    spared: List[Spared] = field(default_factory=list)
    gpu_error: Optional[str] = None
    judged: Dict[int, procs.Proc] = field(default_factory=dict)  # each leak's process as judged


def running_job_ids() -> Dict[str, Optional[int]]:
    """Ids Slurm still runs anywhere (running, completing, suspended, configuring), as
    both ``<id>`` and ``<array>_<task>``, each with its user's uid. Raises on squeue
    failure: no kill without it."""
    from slurmkit.slurm import client

    res = client.call("squeue", ["-h", "-t", "R,CG,S,CF", "-o", "%i|%A|%U"])
    ids: Dict[str, Optional[int]] = {}
    for line in res.stdout.splitlines():
        toks = [t.strip() for t in line.strip().split("|")]
        if len(toks) != 3:
            continue
        uid = int(toks[2]) if toks[2].isdigit() else None
        for tok in toks[:2]:
            if tok:
                ids[tok] = uid
    return ids


def _job_uid(running: Union[Set[str], Dict[str, Optional[int]]], job_id: str) -> Optional[int]:
    return running.get(job_id) if isinstance(running, dict) else None


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def scan(
    health: Dict[str, Any], node: str, running: Union[Set[str], Dict[str, Optional[int]]], backend=None
) -> Scan:
    leaks_cfg = health["leaks"]
    min_uid = int(leaks_cfg["min_uid"])
    table = {p.pid: p for p in procs.iter_procs()}
    protect = procs.protected_pids()
    out = Scan()
    found: Dict[int, Leak] = {}

    def spare_reason(pid: int) -> Optional[str]:
        p = table.get(pid)
        if p is None:
            return "gone"
        if pid in protect:
            return "slurmkit itself"
        if p.uid == 0 or p.uid < min_uid:
            return f"system user (uid {p.uid} < {min_uid})" if p.uid else "root"
        if procs.under_slurmstepd(pid, table):
            return "under slurmstepd (live job step)"
        cg = procs.proven_cgroup_job(pid, table)  # Slurm's layout only, uid level = the process's uid
        if cg is not None and cg.job_id in running:
            job_uid = _job_uid(running, cg.job_id)
            if job_uid is None or job_uid == p.uid:
                return f"in the cgroup of running job {cg.job_id}"
        return None

    def consider(pid: int, why: str, detail: str, **kw) -> None:
        reason = spare_reason(pid)
        if reason:
            out.spared.append(Spared(pid, reason))
            return
        p = table[pid]
        if pid in found:
            found[pid].detail += "; " + detail
            return
        found[pid] = Leak(
            pid=pid,
            uid=p.uid,
            user=_user(p.uid),
            comm=p.comm,
            why=why,
            detail=detail,
            job_id=procs.environ_job_id(pid),  # bounded read
            **kw,
        )

    # GPU memory
    if backend is not None:
        try:
            frac = float(leaks_cfg["gpu_memory_fraction"])
            for g in backend.gpus():
                for gp in backend.processes(g.index):
                    if g.memory_total_mib and gp.used_mib > frac * g.memory_total_mib:
                        consider(
                            gp.pid,
                            "gpu",
                            f"GPU {g.index}: {gp.used_mib:.0f} of {g.memory_total_mib:.0f} MiB "
                            f"(> {frac:.0%})",
                            gpu=g.index,
                            used_mib=gp.used_mib,
                        )
        except Exception as exc:  # GPU side unavailable: host side still runs
            out.gpu_error = f"{type(exc).__name__}: {exc}"
    # host memory
    from slurmkit.health.checks.host import meminfo

    total_kb = meminfo().get("MemTotal", 0) / 1024
    hfrac = float(leaks_cfg["host_memory_fraction"])
    for p in table.values():
        if total_kb and p.rss_kb > hfrac * total_kb:
            consider(
                p.pid,
                "host",
                f"RSS {p.rss_kb / 1024:.0f} MiB of {total_kb / 1024:.0f} MiB (> {hfrac:.0%})",
                rss_mib=p.rss_kb / 1024,
            )
    out.leaks = sorted(found.values(), key=lambda lk: lk.pid)
    out.judged = {lk.pid: table[lk.pid] for lk in out.leaks}
    return out


def kill_leaks(
    health: Dict[str, Any],
    paths: Dict[str, Any],
    node: str,
    *,
    dry_run: bool,
    running: Union[Set[str], Dict[str, Optional[int]], None] = None,
    backend=None,
) -> Dict[str, Any]:
    """Scan, then (unless ``dry_run``) kill; audit every candidate and action. Returns a report."""
    from slurmkit.verdict.record import append_jsonl

    if running is None:
        running = running_job_ids()
    result = scan(health, node, running, backend)
    audit = health["leaks"].get("audit_log") or os.path.join(paths["log_dir"], "kill-leaks.jsonl")
    outcome: Dict[str, List[int]] = {
        "terminated": [],
        "killed": [],
        "survivors": [],
        "gone": [],
        "refused": [],
    }
    if result.leaks and not dry_run:
        outcome = procs.kill_with_grace(
            [result.judged[lk.pid] for lk in result.leaks], float(health["kill_grace"])
        )
        state = {pid: name for name in outcome for pid in outcome[name]}
        for leak in result.leaks:
            leak.outcome = {
                "terminated": "terminated",
                "killed": "killed",
                "survivors": "survived",
                "gone": "gone",
                "refused": "refused (pid reused)",
            }.get(state.get(leak.pid, ""), "unknown")
    elif dry_run:
        for leak in result.leaks:
            leak.outcome = "dry_run"
    now = time.time()
    for leak in result.leaks:
        append_jsonl(
            audit, {"time": now, "node": node, "dry_run": dry_run, "action": leak.outcome, **leak.to_dict()}
        )
    return {
        "node": node,
        "dry_run": dry_run,
        "leaks": [lk.to_dict() for lk in result.leaks],
        "spared": [asdict(s) for s in result.spared if s.why != "gone"],
        "gpu_error": result.gpu_error,
        "outcome": outcome,
        "audit_log": audit,
    }


def exit_code(report: Dict[str, Any]) -> int:
    """Nagios: 0 nothing found; 1 leaks found (listed or killed); 2 a leak survived SIGKILL."""
    if report["outcome"].get("survivors"):
        return 2
    return 1 if report["leaks"] else 0


def write_metrics(paths: Dict[str, Any], report: Dict[str, Any]) -> None:
    from slurmkit.metrics import Sample, file_name, write_textfile

    labels = {"node": report["node"]}
    samples = [
        Sample(
            "slurmkit_kill_leaks_candidates",
            "Leaked processes found by the last run.",
            labels,
            len(report["leaks"]),
        ),
        Sample(
            "slurmkit_kill_leaks_killed",
            "Leaked processes the last run ended.",
            labels,
            0
            if report["dry_run"]
            else len(report["outcome"]["terminated"]) + len(report["outcome"]["killed"]),
        ),
        Sample(
            "slurmkit_kill_leaks_survivors",
            "Leaked processes that survived SIGKILL.",
            labels,
            len(report["outcome"]["survivors"]),
        ),
        Sample(
            "slurmkit_kill_leaks_last_run_timestamp_seconds", "When kill-leaks last ran.", labels, time.time()
        ),
    ]
    write_textfile(
        os.path.join(paths["metrics_dir"], file_name("slurmkit_kill_leaks", report["node"])), samples
    )
