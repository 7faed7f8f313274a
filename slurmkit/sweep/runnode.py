"""What one sweep job does on its node: ``slurmkit sweep run-node``.

1. Run the heavy tier of the health catalog (``slurmkit.health``) and the sweep's
   own checkpoint-storage probe.
2. Judge each numeric probe against the node's peers (same GPU model) from the
   store: the fleet-relative outlier rule (:mod:`slurmkit.sweep.outliers`).
3. Drain on a fail verdict with the ``slurmkit:<CODE> <check>: <detail>`` reason, before
   anything is written: a full or locked store must not keep a failing node in service.
   The drain is the guarded one (:func:`slurmkit.slurm.drain.guarded_drain`): an admin's
   drain reason is kept, never overwritten.
4. Record everything in the verdict store in one locked write (a complete pass); a
   failure is logged and reported (``record_error``), never raised past the drain.
   Resume a slurmkit-drained node whose pass is clean, through the health gate's
   guarded resume (which never touches an admin's drain).
5. Notify (de-duplicated) and write the node's textfile metrics.

A preempted job never reaches step 3, so it leaves no trace in the store: the pass
counts as not done, exactly as the planner assumes.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional

from slurmkit.slurm.drain import guarded_drain, is_drained, is_slurmkit_reason
from slurmkit.sweep import outliers as outlier_rule
from slurmkit.sweep.probes import storage_checks
from slurmkit.verdict.base import CheckResult, Status, first_failure, worst
from slurmkit.verdict.store import HISTORY_LEN, VerdictStore

log = logging.getLogger("slurmkit.sweep.run")


def open_store(site_cfg) -> VerdictStore:
    from slurmkit.verdict.store import for_paths

    return for_paths(site_cfg.section("paths"))


@dataclass
class NodeRun:
    node: str
    run_id: str
    gpu_model: Optional[str]
    results: List[CheckResult] = field(default_factory=list)
    status: Status = Status.OK
    drained: Optional[str] = None
    drain_note: str = ""
    resumed: Optional[bool] = None
    resume_message: str = ""
    notified: Optional[str] = None
    metrics_file: Optional[str] = None
    seconds: float = 0.0
    outliers_skipped: List[str] = field(default_factory=list)
    record_error: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return {
            "node": self.node,
            "run_id": self.run_id,
            "gpu_model": self.gpu_model,
            "status": self.status.value,
            "drained": self.drained,
            "drain_note": self.drain_note,
            "resumed": self.resumed,
            "resume_message": self.resume_message,
            "notified": self.notified,
            "metrics_file": self.metrics_file,
            "seconds": round(self.seconds, 3),
            "outliers_skipped": self.outliers_skipped,
            "record_error": self.record_error,
            "results": [r.to_dict() for r in self.results],
        }


def heavy_tier(site_cfg, node: str, checks: Optional[List[str]]) -> List[CheckResult]:
    """The health catalog's heavy tier on this node, through the health gate's own engine
    (per-check deadlines, hung-probe handling, error classification)."""
    from slurmkit.health.engine import run_selected
    from slurmkit.verdict.base import Tier

    return run_selected(
        site_cfg.section("health"),
        site_cfg.section("paths"),
        tier=Tier.HEAVY,
        names=list(checks) if checks else None,
        node=node,
    )


def annotate_references(
    results: List[CheckResult], health_cfg: Mapping[str, Any], gpu_model: Optional[str]
) -> None:
    """Give the all_reduce result the figure it was judged against (the model's expected
    busbw), so the metrics can carry it and the 90%-of-theoretical alert can compare."""
    if not gpu_model:
        return
    try:
        from slurmkit.health.thresholds import thresholds_for

        th = thresholds_for(dict(health_cfg), gpu_model)
    except Exception:  # an older health package: no reference, no harm
        return
    for r in results:
        if (
            r.check == "allreduce_busbw"
            and isinstance(r.details, dict)
            and r.details.get("backend") != "gloo"
        ):
            r.details.setdefault("expected_gbps", th.get("allreduce_busbw_gbps"))


def with_new_values(doc: Mapping[str, Any], results: List[CheckResult], run_id: str) -> Dict[str, Any]:
    """A copy of a store document with this pass's values appended to its history,
    so the outlier rule sees the pass before it is written (one write per pass)."""
    out = copy.deepcopy(dict(doc))
    hist = out.setdefault("history", {})
    for r in results:
        if isinstance(r.value, (int, float)) and not isinstance(r.value, bool):
            h = hist.setdefault(r.check, [])
            h.append([r.timestamp, float(r.value), run_id])
            del h[:-HISTORY_LEN]
    return out


def judge_outliers(
    store: VerdictStore,
    node: str,
    results: List[CheckResult],
    run_id: str,
    gpu_model: Optional[str],
    cfg: Mapping[str, Any],
    now: float,
) -> List[CheckResult]:
    documents = store.documents()
    mine = documents.get(node) or {"history": {}, "meta": {}}
    mine = with_new_values(mine, results, run_id)
    if gpu_model:
        mine.setdefault("meta", {})["gpu_model"] = gpu_model
    documents[node] = mine
    measured = [
        r.check
        for r in results
        if isinstance(r.value, (int, float))
        and not isinstance(r.value, bool)
        and r.status is not Status.UNKNOWN
    ]
    wanted = cfg.get("checks")
    excluded = set(cfg.get("exclude") or ())
    names = [c for c in measured if (wanted is None or c in wanted) and c not in excluded]
    return outlier_rule.judge(
        node,
        documents,
        now=now,
        k=cfg["k"],
        window_s=cfg["window_s"],
        min_peers=cfg["min_peers"],
        mad_floor_fraction=cfg["mad_floor_fraction"],
        action=cfg["action"],
        checks=names,
        lower_is_better=cfg.get("lower_is_better") or [],
        gpu_model=gpu_model,
    )


def default_resume(site_cfg, node: str, results: List[CheckResult]) -> tuple:
    """Resume through the health gate's guarded resume (``slurmkit node resume``'s
    logic: only a ``slurmkit:`` drain, reason re-read right before resuming), handing
    it this pass's results as the re-check, since they were measured on the node.
    Returns ``(resumed, message)``."""
    from slurmkit.hooks.nodeops import guarded_resume

    report = guarded_resume(node, site_cfg.section("health"), site_cfg.section("paths"), results=results)
    return report.get("action") == "resumed", str(report.get("message", ""))


def run_node(
    site_cfg,
    node: str,
    run_id: str,
    gpu_model: Optional[str] = None,
    *,
    heavy: Optional[Callable[[Any, str, Optional[List[str]]], List[CheckResult]]] = None,
    resume: Optional[Callable[[Any, str, List[CheckResult]], tuple]] = None,
    now: Optional[float] = None,
) -> NodeRun:
    """Run one node's pass; see the module docstring. ``heavy`` and ``resume`` are the
    health gate's functions, injectable so the unit tests can drive this function with
    fixture results."""
    from slurmkit.core import trust
    from slurmkit.slurm import client

    started = time.monotonic()
    rejected_before = len(trust.REJECTED)  # files this pass refuses to believe (forged verdicts)
    sweep = site_cfg.section("sweep")
    store = open_store(site_cfg)
    if not gpu_model:
        gpu_model = (store.read(node).get("meta") or {}).get("gpu_model")
    gpu_model = gpu_model.lower() if gpu_model else None
    run = NodeRun(node, run_id, gpu_model)

    results: List[CheckResult] = []
    try:
        results.extend((heavy or heavy_tier)(site_cfg, node, sweep.get("checks")))
    except Exception as exc:  # the heavy tier could not run at all: unknown, never a drain
        log.error("heavy tier could not run on %s: %s: %s", node, type(exc).__name__, exc)
        results.append(
            CheckResult(
                "heavy_tier", Status.UNKNOWN, "HEAVY_TIER_ERROR", f"{type(exc).__name__}: {exc}"[:300]
            )
        )
    annotate_references(results, site_cfg.section("health"), gpu_model)
    results.extend(
        storage_checks(
            sweep["storage"], deadline_s=float(site_cfg.section("health").get("heavy_check_timeout", 300.0))
        )
    )
    now = time.time() if now is None else now
    out_cfg = sweep["outliers"]
    if out_cfg["enabled"]:
        judged = judge_outliers(store, node, results, run_id, gpu_model, out_cfg, now)
        for r in judged:
            if r.code == "OUTLIER_FEW_PEERS":
                run.outliers_skipped.append(f"{r.check}: {r.reason}")
            else:
                results.append(r)
    run.results = results
    run.status = worst(results)

    # The verdict is decided: drain first, then record (a full or locked store must not
    # leave a failing node in service), each best effort.
    culprit = first_failure(results)
    if culprit is not None and sweep["drain_on_fail"]:
        reason = culprit.drain_reason()
        drained, run.drain_note = guarded_drain(node, reason)
        if drained:
            run.drained = reason
        else:
            log.error("did not drain %s with %r: %s", node, reason, run.drain_note)
    try:
        if gpu_model:
            store.set_meta(node, gpu_model=gpu_model)
        store.record(node, results, sweep["valid_for_s"], tier="heavy", run_id=run_id)
    except Exception as exc:
        run.record_error = f"{type(exc).__name__}: {exc}"
        log.error("could not record %s's pass in the verdict store: %s", node, run.record_error)
    if culprit is None and sweep["resume_on_pass"]:
        info = None
        try:
            info = client.show_node(node)
        except Exception as exc:
            log.warning("could not read %s's state: %s", node, exc)
        if is_drained((info or {}).get("State", "")) and is_slurmkit_reason((info or {}).get("Reason")):
            try:
                run.resumed, run.resume_message = (resume or default_resume)(site_cfg, node, results)
            except Exception as exc:
                run.resumed, run.resume_message = False, f"{type(exc).__name__}: {exc}"
                log.error("guarded resume of %s failed: %s", node, run.resume_message)

    # notifications and metrics never fail the pass
    try:
        from slurmkit.sweep.notify import Notifier

        extra = f"drained: {run.drained}" if run.drained else ("resumed" if run.resumed else "")
        note = Notifier(store, sweep["notify"]).observe(node, results, extra=extra)
        run.notified = note.kind if note else None
    except Exception as exc:
        log.error("notification failed: %s: %s", type(exc).__name__, exc)
    if sweep["write_metrics"]:
        try:
            from slurmkit.sweep.metrics import write_node_metrics

            run.metrics_file = write_node_metrics(
                site_cfg.section("paths")["metrics_dir"],
                node,
                results,
                gpu_model=gpu_model,
                finished_at=time.time(),
                untrusted_files=len({path for path, _ in trust.REJECTED[rejected_before:]}),
            )
        except Exception as exc:
            log.error("metrics failed: %s: %s", type(exc).__name__, exc)
    run.seconds = time.monotonic() - started
    return run
