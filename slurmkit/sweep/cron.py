"""One cron run of the sweep: read Slurm and the verdict store, plan, submit; and the
per-node status the ``status`` command shows.

The click commands in :mod:`slurmkit.cli.sweep` only parse options and print what these
functions return, so a site (or a test) can drive a sweep run from Python.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import os
import time
from typing import Any, Dict, List, Optional

from slurmkit.errors import ConfigError, SlurmCommandError, UsageError
from slurmkit.slurm import client
from slurmkit.slurm.jobenv import is_node_name
from slurmkit.slurm.parse import gpus_from_gres
from slurmkit.sweep import jobscript, pairs, planner
from slurmkit.sweep.metrics import write_controller_metrics
from slurmkit.sweep.runnode import open_store
from slurmkit.verdict.store import check_node_name, still_valid

log = logging.getLogger("slurmkit.sweep")


def iso_time(ts: Optional[float]) -> str:
    """A UTC timestamp as ISO 8601 (``never`` for none)."""
    if not isinstance(ts, (int, float)):
        return "never"
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _submit_or_show(
    entry: Dict[str, Any], script: str, args: List[str], dry_run: bool, errors: List[str], label: str
) -> None:
    """Submit one sweep job and note its id in ``entry``; with ``dry_run`` note the
    script instead. A failed sbatch is recorded (entry and ``errors``), not raised, so
    one bad node does not stop the rest of the run."""
    if dry_run:
        entry["script"] = script
        return
    try:
        entry["job_id"] = client.submit(script, args)
    except SlurmCommandError as exc:
        entry["error"] = str(exc)
        errors.append(f"{label}: {exc}")
        log.error("sbatch for %s failed: %s", label, exc)


def _age(seconds: Optional[float]) -> str:
    if seconds is None:
        return "never"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def new_run_id(now: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)) + f"-{os.getpid()}"


def _sweep_cfg(site_cfg, max_nodes: Optional[int]) -> Dict[str, Any]:
    cfg = dict(site_cfg.section("sweep"))
    if max_nodes is not None:
        if max_nodes < 0:
            raise UsageError(f"--max-nodes must be >= 0, got {max_nodes}")
        cfg["max_nodes"] = max_nodes
    return cfg


def plan_and_submit(
    site_cfg,
    *,
    config_path: Optional[str],
    dry_run: bool,
    max_nodes: Optional[int],
    now: Optional[float] = None,
) -> Dict[str, Any]:
    """One cron run: read Slurm and the store, plan, submit. Returns the report."""
    cfg = _sweep_cfg(site_cfg, max_nodes)
    paths = site_cfg.section("paths")
    now = time.time() if now is None else now
    run_id = new_run_id(now)
    store = open_store(site_cfg)

    rows = client.nodes(partition=cfg.get("partition"))
    if not rows:
        where = f"partition {cfg.get('partition')!r} has" if cfg.get("partition") else "the cluster has"
        raise ConfigError(
            f"{where} no nodes (sinfo returned none); check the partition name",
            path=site_cfg.path,
            key="sweep.partition",
        )
    bad = [r["name"] for r in rows if not _valid_name(r["name"])]
    rows = [r for r in rows if _valid_name(r["name"])]
    for name in bad:
        log.warning("skipping node with an unusable name %r", name)
    sweep_jobs = planner.sweep_job_nodes(client.jobs(), cfg["job_name"])
    summary = store.summary()  # one file, not one per node: planning stays fast at 10,000 nodes
    last = {
        n: (e.get("last_pass") if isinstance(e.get("last_pass"), (int, float)) else None)
        for n, e in summary.items()
    }
    p = planner.plan(
        rows,
        last,
        sweep_jobs.keys(),
        now,
        running_jobs=len(set(sweep_jobs.values())),
        max_nodes=cfg["max_nodes"],
        max_concurrent=cfg["max_concurrent"],
        period_s=cfg["period_s"],
        min_interval_s=cfg["min_interval_s"],
        cron_interval_s=cfg["cron_interval_s"],
        revalidate=[n for n, e in summary.items() if e.get("status") == "fail"],
    )
    output = cfg.get("output") or os.path.join(paths["log_dir"], "sweep-%j.out")
    jobs: List[Dict[str, Any]] = []
    errors: List[str] = []
    if not dry_run and (p.selected or cfg["pairs"]["enabled"]):
        # Slurm fails a job whose --output directory is missing (exit 0:53, no log at all)
        try:
            os.makedirs(os.path.dirname(output) or ".", exist_ok=True)
        except OSError as exc:
            log.warning("cannot create %s: %s", os.path.dirname(output), exc.strerror)
    for cand in p.selected:
        node = check_node_name(cand.node)
        model = planner.gpu_model_from_gres(cand.gres)
        args = jobscript.sbatch_args(node, cfg, run_id, output)
        argv = jobscript.run_node_argv(
            node, run_id, python=cfg.get("python"), config_path=site_cfg.path or config_path, gpu_model=model
        )
        script = jobscript.render_script(node, run_id, argv)
        entry: Dict[str, Any] = {
            "node": node,
            "gpu_model": model,
            "last_pass": cand.last_pass,
            "overdue": cand.overdue,
            "revalidate": cand.revalidate,
            "sbatch": args,
        }
        _submit_or_show(entry, script, args, dry_run, errors, node)
        jobs.append(entry)
    pair_jobs = _submit_pairs(
        site_cfg,
        cfg,
        store,
        rows,
        sweep_jobs,
        p,
        run_id,
        output,
        config_path=site_cfg.path or config_path,
        dry_run=dry_run,
        errors=errors,
    )
    submitted = sum(1 for j in jobs + pair_jobs if j.get("job_id"))
    if not dry_run and cfg["write_metrics"]:
        try:
            write_controller_metrics(
                paths["metrics_dir"],
                summary=summary,
                fleet_nodes=[r["name"] for r in rows],
                run_at=now,
                submitted=submitted,
                running=p.running + submitted,
                overdue=len(p.overdue),
                period_s=cfg["period_s"],
            )
        except Exception as exc:  # metrics never fail a sweep
            log.error("metrics failed: %s: %s", type(exc).__name__, exc)
    if not p.meets_period:
        log.warning(
            "max_nodes=%d cannot cover %d nodes within period_s=%gs at one run every %gs; need %d per run",
            cfg["max_nodes"],
            p.total_nodes,
            cfg["period_s"],
            cfg["cron_interval_s"],
            p.required_per_run,
        )
    report = {
        "run_id": run_id,
        "dry_run": dry_run,
        "plan": p.to_dict(),
        "jobs": jobs,
        "pair_jobs": pair_jobs,
        "errors": errors,
        "running_sweep_jobs": sweep_jobs,
    }
    if errors and not submitted:
        raise SlurmCommandError(["sbatch"], f"every sweep submission failed; first: {errors[0]}")
    return report


def _submit_pairs(
    site_cfg, cfg, store, rows, sweep_jobs, p, run_id, output, *, config_path, dry_run, errors
) -> List[Dict[str, Any]]:
    """Pairwise 2-node all_reduce jobs on idle nodes the single-node plan left free."""
    if not cfg["pairs"]["enabled"]:
        return []
    taken = {c.node for c in p.selected} | set(sweep_jobs)
    gres = {}
    idle = []
    for r in rows:
        if r["state"].strip().lower() == "idle" and r["name"] not in taken and r["name"] not in gres:
            idle.append(r["name"])
        gres.setdefault(r["name"], r.get("gres", ""))
    out: List[Dict[str, Any]] = []
    # pair jobs share the concurrency cap with single-node jobs, not max_nodes
    for a, b in pairs.plan_pairs(store, idle, cfg, cfg["max_concurrent"] - p.running - len(p.selected)):
        tasks = 1
        if cfg["pairs"]["backend"] in ("auto", "nccl"):
            tasks = sum(gpus_from_gres(gres.get(a, "")).values()) or 1
        args = pairs.pair_sbatch_args(a, b, cfg, run_id, output, tasks)
        argv = pairs.pair_argv(
            a, b, run_id, python=cfg.get("python"), config_path=config_path, tasks=2 * tasks
        )
        script = jobscript.render_script(a, run_id, argv)
        entry: Dict[str, Any] = {
            "nodes": [a, b],
            "sbatch": args,
            "gpu_model": planner.gpu_model_from_gres(gres.get(a)),
        }
        _submit_or_show(entry, script, args, dry_run, errors, f"{a}+{b}")
        out.append(entry)
    return out


def _valid_name(name: str) -> bool:
    return is_node_name(name)


def status_rows(site_cfg, now: float, node_states: Optional[Dict[str, str]] = None) -> List[Dict[str, Any]]:
    """Per node of the store (and of ``node_states``): last pass, verdict, validity, problems."""

    store = open_store(site_cfg)
    cfg = site_cfg.section("sweep")
    documents = store.documents()
    names = sorted(set(documents) | set(node_states or {}))
    rows = []
    for name in names:
        doc = documents.get(name) or {}
        checks = doc.get("checks") or {}
        heavy = {c: e for c, e in checks.items() if e.get("tier") == "heavy"}
        # the one validity rule (verdict.store.still_valid): the node's pass is valid while every
        # heavy verdict is; a missing, non-numeric or infinite valid_until has expired
        valid = bool(heavy) and all(still_valid(e, now) for e in heavy.values())
        valid_until = min(
            (e["valid_until"] for e in heavy.values() if still_valid(e, -math.inf)),
            default=None,
        )
        bad = sorted(f"{c}:{e.get('code')}" for c, e in heavy.items() if e.get("status") not in ("ok", None))
        lp = doc.get("last_pass")
        age = now - lp if isinstance(lp, (int, float)) else None
        rows.append(
            {
                "node": name,
                "state": (node_states or {}).get(name, ""),
                "gpu_model": (doc.get("meta") or {}).get("gpu_model"),
                "last_pass": lp,
                "last_pass_iso": iso_time(lp),
                "age": _age(age),
                "verdict": doc.get("last_pass_status") or "never",
                "valid_until": valid_until,
                "valid_until_iso": iso_time(valid_until) if valid_until else "",
                "valid": valid,
                "overdue": age is None or age > cfg["period_s"],
                "problems": bad,
            }
        )
    return rows


def fleet_status(site_cfg, now: float, ask_slurm: bool = True) -> List[Dict[str, Any]]:
    """:func:`status_rows` with each node's Slurm state, when sinfo answers (else the store only)."""
    states: Optional[Dict[str, str]] = None
    if ask_slurm:
        try:
            states = client.node_states(site_cfg.section("sweep").get("partition"))
        except SlurmCommandError as exc:
            log.warning("node states unavailable (%s); showing the store only", exc)
    return status_rows(site_cfg, now, states)


def invalidate(
    site_cfg, nodes: List[str], checks: Optional[List[str]], dry_run: bool
) -> Dict[str, List[str]]:
    """End the validity of ``nodes``' verdicts (``checks`` only, or all) now; returns, per node,
    the verdicts that were still valid. With ``dry_run`` nothing is written."""
    store = open_store(site_cfg)
    ended: Dict[str, List[str]] = {}
    for node in nodes:
        check_node_name(node)
        wanted = set(checks) if checks else None
        ended[node] = sorted(c for c in store.valid(node) if wanted is None or c in wanted)
        if not dry_run:
            store.invalidate(node, checks or None)
    return ended
