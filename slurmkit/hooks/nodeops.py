"""``slurmkit node status|resume``: guarded resume of nodes slurmkit drained.

Rules (NHC's, made strict):

* only a node whose drain reason starts with ``slurmkit:`` is ever resumed; an admin's
  drain (any other reason) is refused, always;
* the checks are re-run first and the node is resumed only if none fails;
* the reason is read again right before ``scontrol update State=RESUME``, so an admin
  who drains the node while the re-check runs is not overridden;
* a resume clears the node's sticky Xid failures (every hook fails on them until then)
  before the re-check, so the re-check judges only what happens from now on.

Where the re-check runs: the checks read this machine's GPUs and filesystems, so they
must run on the node. ``resume`` runs them locally when this machine *is* the node
(:func:`slurmkit.slurm.jobenv.is_this_node`: ``SLURMD_NODENAME`` when set, else the
full or short hostname) or when the GPU backend is the
simulated one (each node's fixture is a file, readable from anywhere; the devcluster
case). Anywhere else it refuses with exit 3 and says to run it on the node
(``ssh NODE slurmkit node resume NODE``): a drained node accepts no ``srun``, so there
is no Slurm-native way to get there.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Optional

from slurmkit.errors import UsageError
from slurmkit.slurm.drain import DRAIN_REASON_PREFIX, is_drained, is_slurmkit_reason
from slurmkit.slurm.jobenv import is_this_node
from slurmkit.verdict.base import CheckResult, Tier

# exit codes of `slurmkit node resume`
RESUMED = 0  # resumed, or nothing to do (node not drained)
REFUSED = 1  # drained by someone else: never touched
RECHECK_FAILED = 2  # the re-check failed: the node stays drained
CANNOT_CHECK = 3  # the checks cannot run from here, or could not run (unknown)


class NotHere(UsageError):
    exit_code = CANNOT_CHECK


def can_check_locally(node: str, health: Dict[str, Any]) -> bool:
    if health.get("backend") == "simulated":
        return True
    return is_this_node(node)


def node_info(node: str) -> Dict[str, str]:
    from slurmkit.slurm import client

    rec = client.show_node(node)
    if rec is None:
        raise UsageError(f"unknown node {node!r} (scontrol show node found nothing)")
    return rec


def run_recheck(
    node: str,
    health: Dict[str, Any],
    paths: Dict[str, Any],
    tier: Tier = Tier.FAST,
    names: Optional[List[str]] = None,
) -> List[CheckResult]:
    from slurmkit.health.engine import run_selected

    return run_selected(
        health,
        paths,
        tier=tier,
        names=names,
        node=node,
        env={k: v for k, v in os.environ.items() if not k.startswith("SLURM_JOB")},
        # A resume re-check is about the node, not a cached sweep verdict about it.
        skip=("heavy_cache",),
        deadline=time.monotonic() + max(30.0, float(health["prolog_deadline"]) * 4),
    )


def _clear_sticky_xids(node: str, paths: Dict[str, Any], report: Dict[str, Any]) -> None:
    """A resume is the admin's word that the node was repaired: forget the sticky Xid
    failures that every hook has been failing on (then re-check from a clean slate)."""
    from slurmkit.health.checks import xid

    try:
        report["xid_cleared"] = xid.clear_sticky(paths["state_dir"], node)
    except OSError as exc:
        report["xid_cleared"] = f"not cleared: {exc.strerror}"


def guarded_resume(
    node: str,
    health: Dict[str, Any],
    paths: Dict[str, Any],
    *,
    dry_run: bool = False,
    results: Optional[List[CheckResult]] = None,
    recheck: Optional[Callable[[], List[CheckResult]]] = None,
) -> Dict[str, Any]:
    """Resume ``node`` if slurmkit drained it and the re-check passes.

    ``results`` lets a caller that already re-checked the node on the node itself (a
    sweep job) pass its results instead of re-running them here. Returns a report
    dict with ``exit_code`` (:data:`RESUMED` ... :data:`CANNOT_CHECK`) and ``message``.
    """
    from slurmkit.health.engine import internal_problems
    from slurmkit.slurm import client
    from slurmkit.verdict.base import first_failure

    info = node_info(node)
    state, reason = info.get("State", ""), info.get("Reason", "")
    report: Dict[str, Any] = {"node": node, "state": state, "reason": reason, "results": []}
    if not is_drained(state):
        report.update(
            exit_code=RESUMED, action="none", message=f"{node} is not drained ({state}); nothing to do"
        )
        return report
    if not is_slurmkit_reason(reason):
        report.update(
            exit_code=REFUSED,
            action="refused",
            message=f"{node} was drained by someone else (reason {reason!r}); slurmkit only resumes "
            f"its own '{DRAIN_REASON_PREFIX}' drains",
        )
        return report
    if not dry_run:
        _clear_sticky_xids(node, paths, report)
    if results is None:
        if recheck is not None:
            results = recheck()
        else:
            if not can_check_locally(node, health):
                raise NotHere(
                    f"the checks must run on {node}: run `ssh {node} slurmkit node resume {node}` "
                    "(a drained node accepts no srun)"
                )
            results = run_recheck(node, health, paths)
    report["results"] = [r.to_dict() for r in results]
    fail = first_failure(results)
    if fail is not None:
        report.update(
            exit_code=RECHECK_FAILED, action="kept", message=f"{node} still fails: {fail.drain_reason()}"
        )
        return report
    internal = internal_problems(results)
    if internal:
        report.update(
            exit_code=CANNOT_CHECK,
            action="kept",
            message=f"{node}: re-check incomplete ({internal[0].check}: {internal[0].reason}); not resumed",
        )
        return report
    if dry_run:
        report.update(
            exit_code=RESUMED, action="would_resume", message=f"{node}: re-check passed; would resume"
        )
        return report
    # read the reason again: an admin may have drained it while we were checking
    now = node_info(node)
    if not is_slurmkit_reason(now.get("Reason")) or not is_drained(now.get("State", "")):
        report.update(
            exit_code=REFUSED,
            action="refused",
            message=f"{node}: drain reason changed during the re-check ({now.get('Reason')!r}); not resumed",
        )
        return report
    client.resume_node(node)
    report.update(exit_code=RESUMED, action="resumed", message=f"{node}: re-check passed; resumed")
    return report


def node_status(node: str, health: Dict[str, Any], paths: Dict[str, Any]) -> Dict[str, Any]:
    from slurmkit.verdict import record

    info = node_info(node)
    reason = info.get("Reason", "")
    last = record.read_jsonl(os.path.join(paths["log_dir"], record.HEALTH_LOG), node=node, limit=1)
    out: Dict[str, Any] = {
        "node": node,
        "state": info.get("State", ""),
        "reason": reason or None,
        "slurmkit_drain": is_slurmkit_reason(reason),
        "last_verdict": None,
        "heavy_verdicts": {},
    }
    if last:
        rec = last[0]
        out["last_verdict"] = {k: rec.get(k) for k in ("time", "hook", "job_id", "status", "drain_reason")}
        out["last_verdict"]["failing"] = [
            f"{r['check']}: {r['code']} {r['reason']}"
            for r in rec.get("results", [])
            if r.get("status") in ("fail", "warn")
        ]
    try:
        from slurmkit.verdict.store import for_paths

        out["heavy_verdicts"] = for_paths(paths).node(node) or {}
    except Exception:
        pass
    return out
